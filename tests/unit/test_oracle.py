"""The oracle's parts on their own: the virtual loop's clock, the engine run on it (exact where the timing
model has a closed form), the arrival patterns as bench sends them, the steady-state rule, and the query
parser. The oracle against the served engine: tests/integration/test_explain_vs_served.py."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import given
from hypothesis import settings as settings_
from hypothesis import strategies as st

from specwatch.probe.schedule import make_pacer
from specwatch.sim import model, oracle, pattern, virtual
from specwatch.sim.engine import EngineSettings
from specwatch.sim.pattern import Pattern
from specwatch.sim.steady import Steady, full_at, steady, steady_set

SEED = model.PROFILES["seed"]


def settings(steps: int, profile: model.Profile = SEED, **kw) -> EngineSettings:
    spec = model.SpecConfig.from_flags("EAGLE3" if steps else None, steps or None, 1, None)
    return EngineSettings(profile=profile, spec=spec, seed=kw.pop("seed", 7), **kw)


def test_the_virtual_clock_jumps_to_each_timer_and_never_waits():
    loop = virtual.VirtualLoop()
    try:
        async def sleeper() -> list[int]:
            seen = []
            for s in (3600.0, 0.25, 1e-6):
                await asyncio.sleep(s)
                seen.append(loop.clock())
            return seen

        assert loop.run_until_complete(sleeper()) == [3_600_000_000_000, 3_600_250_000_000, 3_600_250_001_000]

        async def forever() -> None:
            await asyncio.Event().wait()

        with pytest.raises(virtual.VirtualStall):
            loop.run_until_complete(forever())
    finally:
        loop.close()


@pytest.mark.parametrize("profile", ["seed", "mixed", "fast"])
def test_one_stream_of_plain_decoding_is_the_timing_model_exactly(profile):
    p = model.PROFILES[profile]
    s = oracle.figures(settings(0, p), Pattern(streams=1, prompt_tokens=64, output_tokens=100, send_ms=0))
    cycle, prefill = model.cycle_ms(p, model.SpecConfig()), model.prefill_ms(p, 64)
    assert s.decode_tokens_per_second == pytest.approx(1000 / cycle, rel=1e-6)
    assert s.tokens_per_second == pytest.approx(100_000 / (prefill + 99 * cycle), rel=1e-6)
    assert s.ttft_ms == pytest.approx(prefill, rel=1e-6) and s.mean_in_flight == pytest.approx(1.0)
    assert s.accept_length is None


def test_the_seed_story_at_one_stream():
    best = oracle.best_steps(settings(1), Pattern(streams=1, output_tokens=256), 10)
    assert best.best_steps == 2
    rates = best.tokens_per_second
    assert rates[0] == pytest.approx(90.0, rel=1e-6)
    assert rates[2] == pytest.approx(93.0, rel=0.02) and rates[5] == pytest.approx(72.0, rel=0.02)
    assert rates[10] == pytest.approx(61.0, rel=0.02)


def test_a_run_is_reproducible_and_a_requests_draws_do_not_depend_on_its_company():
    pat = Pattern(streams=4, output_tokens=64, requests=24)
    a, b = virtual.run(settings(3), pat), virtual.run(settings(3), pat)
    assert a.requests == b.requests and a.rounds == b.rounds
    other = virtual.run(settings(3, seed=8), pat)
    assert [r["verify_ct"] for r in other.requests] != [r["verify_ct"] for r in a.requests]
    alone = virtual.run(settings(3), Pattern(streams=1, output_tokens=64, requests=24))
    rounds = {r["rid"]: (r["verify_ct"], r["accepted_drafts"]) for r in a.requests}
    assert {r["rid"]: (r["verify_ct"], r["accepted_drafts"]) for r in alone.requests} == rounds


def test_closed_loop_streams_stay_in_flight_and_bench_prompts_are_sent_in_order():
    r = virtual.run(settings(2), Pattern(streams=8, output_tokens=64, requests=64, warmup=2))
    assert len(r.requests) == 66
    texts = [t for t, _ in pattern.builtin_prompts()]
    by_arrival = sorted(r.requests, key=lambda q: q["arrival_ns"])
    assert [q["prompt_tokens"] for q in by_arrival[:10]] == [n for _, n in pattern.builtin_prompts()[:10]]
    assert len(texts) == 50
    s = steady(r.requests, r.rounds, r.prefills, 2, 8)
    assert s is not None and s.mean_in_flight == pytest.approx(8, rel=0.01)


def test_a_wave_sent_slower_than_a_prefill_splits_and_the_steady_state_counts_its_batches():
    """Plain decoding at 8 streams: each wave's first request is prefilled alone and the other 7 together while
    the sends are quick; sends 20 ms apart outlast that first prefill (80 ms), and the rest split in two: the
    steady window holds more prefills, each stalling the decoding streams (the oracle test's disturbed cell)."""
    def run(send_ms: float) -> tuple[list[int], Steady]:
        r = virtual.run(settings(0), Pattern(streams=8, output_tokens=64, requests=40, warmup=1, send_ms=send_ms))
        s = steady(r.requests, r.rounds, r.prefills, 1, 8)
        assert s is not None
        return [n for _, n, _ in r.prefills], s

    quick, slow = run(0.2), run(20.0)
    assert quick[0][1:] == [1, 7] * 5 and slow[0][1:] == [1, 4, 3] * 5  # after the warm-up
    assert quick[1].prefill_batches == 10 and slow[1].prefill_batches == 14
    assert slow[1].decode_tokens_per_second < quick[1].decode_tokens_per_second * 0.96


@settings_(max_examples=12, deadline=None)
@given(st.integers(1, 6), st.integers(0, 2),
       st.lists(st.floats(0, 40, allow_nan=False).map(lambda x: round(x, 3)), min_size=30, max_size=30))
def test_a_closed_loops_sends_read_back_from_its_requests_are_the_ones_it_was_told(streams, warmup, sends):
    """``sends_seen`` is the virtual client's rule read backwards: a run told each send's delay gives them back
    from its requests alone, whatever the wave's spread does to the ends (the first send's delay has no
    reference: 0)."""
    told = (0.0, *sends[1:])
    r = virtual.run(settings(0), Pattern(streams=streams, output_tokens=16, requests=30 - warmup, warmup=warmup,
                                         sends_ms=told))
    assert pattern.sends_seen(r.requests, streams, warmup) == pytest.approx(told, abs=1e-6)


def test_each_send_takes_its_own_delay_and_send_ms_after_the_last():
    pat = Pattern(send_ms=0.5, sends_ms=(0.0, 3.0, 1.25))
    assert [pat.send_ns(k) for k in range(5)] == [0, 3_000_000, 1_250_000, 500_000, 500_000]
    waves = virtual.run(settings(0), Pattern(streams=4, output_tokens=16, requests=4, warmup=0, sends_ms=(0, 0, 90)))
    arrivals = sorted(q["arrival_ns"] for q in waves.requests)
    assert arrivals == [0, 0, 90_000_000, 90_200_000]  # the fourth at the default send_ms, 0.2 ms


def rq(arrival_ms: float, last_ms: float | None) -> dict:
    return {"arrival_ns": int(arrival_ms * 1e6), "last_token_ns": None if last_ms is None else int(last_ms * 1e6)}


@pytest.mark.parametrize(("requests", "streams", "warmup", "sends"), [
    # a warm-up ending at 10, a wave of two sent 1 and 2 ms after it, each freeing a send
    ([rq(0, 10), rq(11, 30), rq(12, 31), rq(33, 50), rq(35, 51)], 2, 1, (0, 1, 1, 3, 2)),
    # the second end (31) comes before the third send: that send waits on the client (34), not on the end
    ([rq(0, 10), rq(11, 30), rq(12, 31), rq(32, 50), rq(34, 51)], 2, 1, (0, 1, 1, 2, 2)),
    # no warm-up: the first wave after the first send
    ([rq(5, 20), rq(6, 21), rq(22, 40)], 2, 0, (0, 1, 2)),
    # a measured request lost its end: no send after the first wave can be paired; a warm-up's, none after it
    ([rq(0, 10), rq(11, None), rq(40, 60)], 1, 1, (0, 1)),
    ([rq(0, None), rq(11, 20)], 1, 1, (0,)),
    ([], 4, 1, ()),
])
def test_the_sends_a_served_run_shows(requests, streams, warmup, sends):
    assert pattern.sends_seen(requests, streams, warmup) == pytest.approx(sends)


@pytest.mark.parametrize("poisson", [False, True])
def test_open_loop_arrivals_are_benchs_schedule(poisson):
    pat = Pattern(arrival="poisson" if poisson else "constant", rate_per_s=5.0, output_tokens=32, requests=30,
                  warmup=0, send_ms=0)
    r = virtual.run(settings(2), pat)
    arrivals = sorted(q["arrival_ns"] for q in r.requests)
    pacer = make_pacer(5.0, poisson, 0)
    assert [t - arrivals[0] for t in arrivals] == [pacer.offset_ns(i) - pacer.offset_ns(0) for i in range(30)]


def test_staggered_streams_start_apart():
    r = virtual.run(settings(0), Pattern(streams=3, arrival="staggered", stagger_ms=500, output_tokens=128,
                                         requests=3, warmup=0, send_ms=0))
    assert sorted(q["arrival_ns"] for q in r.requests) == [0, 500_000_000, 1_000_000_000]


def rec(arrival: int, last: int, outcome: str = "finished") -> dict:
    return {"arrival_ns": arrival, "first_token_ns": arrival + 1, "last_token_ns": last, "outcome": outcome,
            "completion_tokens": 10, "verify_ct": 0}


@pytest.mark.parametrize(("records", "warmup", "streams", "kept"), [
    # warm-up (0-10), then two streams: the ramp ends when both are in flight (at 20); drain: ends after the
    # first end (70) after the last arrival (60)
    ([rec(0, 10), rec(11, 30), rec(20, 40), rec(31, 50), rec(41, 70), rec(51, 80), rec(60, 90)], 1, 2,
     [(20, 40), (31, 50), (41, 70)]),
    # an aborted request is not a finished one; one stream has no drain
    ([rec(0, 10), rec(5, 30, "aborted"), rec(11, 30), rec(20, 40), rec(41, 50)], 0, 1,
     [(0, 10), (11, 30), (20, 40), (41, 50)]),
    # never two in flight: no steady state
    ([rec(0, 10), rec(11, 20)], 0, 2, []),
])
def test_the_steady_set(records, warmup, streams, kept):
    assert [(r["arrival_ns"], r["last_token_ns"]) for r in steady_set(records, warmup, streams)] == kept


def test_in_flight_counts_a_request_that_ends_as_another_arrives_apart():
    assert full_at([rec(0, 10), rec(10, 20)], 2) is None
    assert full_at([rec(0, 10), rec(9, 20)], 2) == 9


@pytest.mark.parametrize(("query", "message"), [
    ({"arrival": "burst"}, "arrival: 'burst' is not one of"),
    ({"arrival": "poisson"}, "rate_per_s: give it with arrival=constant or poisson"),
    ({"rate_per_s": "3"}, "rate_per_s: give it with arrival=constant or poisson"),
    ({"arrival": "poisson", "rate_per_s": "nan"}, "rate_per_s: must be from"),
    ({"output_tokens": "1"}, "output_tokens: must be from 2"),
    ({"prompt_tokens": "x"}, "prompt_tokens: 'x' is not an integer"),
    ({"ignore_eos": "maybe"}, "ignore_eos: must be true or false"),
    ({"send_ms": "-1"}, "send_ms: must be from 0"),
    ({"sends_ms": "0.5,,1"}, "sends_ms: '' is not a number"),
    ({"sends_ms": "0.5,1e9"}, "sends_ms: must be from 0"),
    ({"sends_ms": ",".join(["1"] * (pattern.MAX_SENDS + 1))}, "sends_ms: at most 10000 numbers"),
])
def test_a_bad_pattern_is_refused_with_its_name(query, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(")):
        pattern.parse(query)


def test_the_default_pattern_is_what_bench_sends():
    p = pattern.parse({}, streams=16)
    assert (p.output_tokens, p.ignore_eos, p.warmup, p.temperature) == (500, True, 1, 0.0)
    assert p.measured == 96 and p.prompt_list() == pattern.builtin_prompts()
    assert p.describe()["arrival"] == "16 closed-loop streams started together (bench --concurrency 16)"
    q = pattern.parse({"arrival": "poisson", "rate_per_s": "2.5", "prompt_tokens": "64", "requests": "10"})
    assert (q.rate_per_s, q.poisson, q.measured, q.prompt_list()[0][1]) == (2.5, True, 10, 64)


@given(st.dictionaries(st.sampled_from(["arrival", "rate_per_s", "stagger_ms", "prompt_tokens", "output_tokens",
                                        "requests", "warmup", "seed", "temperature", "ignore_eos", "send_ms",
                                        "sends_ms"]),
                       st.text(max_size=12)))
def test_any_query_parses_or_is_refused_with_a_value_error(query):
    try:
        pattern.parse(query)
    except ValueError as exc:
        assert str(exc).split(":")[0] in query or "rate_per_s" in str(exc)


def test_by_load_gives_the_crossover_between_its_loads_by_the_sweeps_rule():
    s = settings(5, model.PROFILES["mixed"], max_running_requests=64)
    rows, cross = oracle.by_load(s, Pattern(output_tokens=128, prompt_tokens=64), [1, 8, 32])
    sp = [r.speedup for r in rows]
    assert sp[0] > 1 > sp[-1]
    assert cross is not None and 1 < cross < 32
    assert all(r.served.accept_length and r.plain.accept_length is None for r in rows)

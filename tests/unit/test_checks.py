"""The honesty checks (analysis/checks.py): each trips on figures made to trip it and stays quiet on clean ones,
and says "not measured" when it lacks the data; bench's figures from records (analysis/bench_checks.py)."""

from __future__ import annotations

import dataclasses

import pytest

from specwatch import codec
from specwatch.analysis import checks
from specwatch.analysis.bench_checks import Asked, bench_checks, identity_figures, rates
from specwatch.analysis.bench_results import analyse
from specwatch.export.check_lines import lines
from specwatch.records import Outcome, RequestRecord, RunInfo, SpecStats
from specwatch.results import CHECKS, Check, ConfigResult, LevelResult
from specwatch.server.scrape import QUEUED_GAUGES, running_from_text

MS = 1_000_000


@pytest.mark.parametrize(("offered", "achieved", "ok", "measured"), [
    (10.0, 10.0, True, True), (10.0, 9.6, True, True), (10.0, 9.4, False, True), (200.0, 7.0, False, True),
    (None, 5.0, True, False), (10.0, None, True, False)])
def test_achieved_rate(offered, achieved, ok, measured):
    c = checks.achieved_rate(offered, achieved)
    assert (c.name, c.ok, c.measured) == ("achieved_rate", ok, measured)


@pytest.mark.parametrize(("repeats", "ok", "measured"), [
    ([100.0, 104.0], True, True), ([100.0, 106.0], False, True), ([100.0, 100.0, 94.0], False, True),
    ([100.0, None], True, False), ([100.0], True, False)])
def test_repeat_spread(repeats, ok, measured):
    c = checks.repeat_spread(repeats)
    assert (c.ok, c.measured) == (ok, measured)


@pytest.mark.parametrize(("cached", "prompt", "ok", "measured"), [
    (0, 1000, True, True), (100, 1000, True, True), (101, 1000, False, True), (900, 1000, False, True),
    (None, 1000, True, False), (0, 0, True, False)])
def test_prefix_cache(cached, prompt, ok, measured):
    c = checks.prefix_cache(cached, prompt)
    assert (c.ok, c.measured) == (ok, measured)


@pytest.mark.parametrize(("queued", "running", "ttft", "tpot", "ok", "measured"), [
    ([0, 0, 0], [2, 2], 5.0, 1.0, True, True),  # the server's own metric wins over the TTFT heuristic
    ([0, 3, 3], [2, 2, 2], 1.0, 1.0, False, True),  # a closed loop of 5 on 2 slots
    ([0, 1, 0, 1, 0], [2, 2], 1.0, 1.0, True, True),  # requests waiting for the next step, now and then
    ([2, 3, 2], [256, 250], 1.0, 1.0, True, True),  # a busy server's few arrivals between steps
    ([20, 28, 30], [2, 2, 2], 1.0, 1.0, False, True),  # an open loop far above its pace
    ([1, 1, 1], [], 1.0, 1.0, False, True),  # waiting while nothing ran
    ([], [], 1.1, 1.0, True, True), ([], [], 2.5, 1.0, False, True),
    ([], [], 2.5, 2.0, True, True),  # TTFT rose with the decoding: a heavier batch, not a queue
    ([], [], None, None, True, False)])
def test_server_queueing(queued, running, ttft, tpot, ok, measured):
    c = checks.server_queueing(queued, running, ttft, tpot)
    assert (c.ok, c.measured) == (ok, measured)


@pytest.mark.parametrize(("al", "positions", "ok", "measured"), [
    (2.80, (0.8, 0.6, 0.4), True, True), (2.815, (0.8, 0.6, 0.4), True, True),
    (2.83, (0.8, 0.6, 0.4), False, True),
    (2.80, (0.4, 0.3, 0.2), False, True),  # a data-parallel server's positions counted on one rank of two
    (None, (0.8,), True, False), (2.0, (), True, False)])
def test_acceptance_identity(al, positions, ok, measured):
    c = checks.acceptance_identity(al, positions)
    assert (c.ok, c.measured) == (ok, measured)


@pytest.mark.parametrize(("ignore_eos", "outputs", "ok", "measured"), [
    (True, [64, 64, 64], True, True), (True, [64, 63, 64], False, True), (False, [1, 2], True, False),
    (True, [], True, False)])
def test_output_length(ignore_eos, outputs, ok, measured):
    c = checks.output_length(ignore_eos, 64, outputs)
    assert (c.ok, c.measured) == (ok, measured)


@pytest.mark.parametrize(("requests", "distinct", "random", "ok", "measured"), [
    (20, 20, 0, True, True), (20, 1, None, False, True), (20, 1, 0, False, True), (20, 10, 6, False, True),
    (20, 10, 5, True, True), (20, 20, None, True, True), (1, 1, 0, True, False)])
def test_synthetic_prompts(requests, distinct, random, ok, measured):
    c = checks.synthetic_prompts(requests, distinct, random)
    assert (c.ok, c.measured) == (ok, measured)


PROSE = ("Write a short story about a lighthouse keeper who finds a message in a bottle, and explain what the "
         "keeper does with it in the morning when the tide is out.")
RANDOM = ("ertain Cosmetic ordsorf leuk Utc renown setVisible ijk piece vernac mkdir quantum zeug arrang slope "
          "Kartof ungle xtrem phant gebru boost ilter ormal reduct parsed")


@pytest.mark.parametrize(("text", "random"), [(PROSE, False), (RANDOM, True), ("short words only", False)])
def test_random_like(text, random):
    assert checks.random_like(text) is random


def test_a_check_is_written_and_read_by_the_codec():
    c = Check("prefix_cache", False, "900 of 1000")
    assert codec.from_json(Check, codec.orjson.loads(codec.dumps(c)), "") == c
    assert codec.orjson.loads(codec.dumps(c)) == {"name": "prefix_cache", "ok": False, "detail": "900 of 1000",
                                                  "measured": True}


def test_merged_fails_where_any_result_failed_and_names_it():
    ok = checks.output_length(True, 4, [4, 4])
    bad = checks.output_length(True, 4, [4, 2])
    out = {c.name: c for c in checks.merged({"k=3 c=1": [ok], "k=3 c=4": [bad], "plain c=1": []})}
    assert set(out) == set(CHECKS)
    assert not out["output_length"].ok and out["output_length"].detail.startswith("k=3 c=4: 1 of 2")
    assert out["prefix_cache"].ok and not out["prefix_cache"].measured


def test_unreliable_names_the_failed_checks_the_verdict_uses():
    got = checks.unreliable([checks.acceptance_identity(2.8, (0.4,)), checks.prefix_cache(900, 1000),
                             checks.output_length(True, 4, [4])])
    assert got == ("acceptance_identity (accept length)",)


# ---- bench's figures from records ------------------------------------------------------------------------

def rec(i: int, *, intended_ms: float, done_ms: float, sent_ms: float | None = None, ttft_ms: float = 50.0,
        tokens: int = 64, tpot_ms: float = 10.0, cached: int | None = 0, prompt: str = "p", ok: bool = True,
        hist: tuple[int, ...] = (), verify: int = 0) -> RequestRecord:
    """Request ``i``; ``prompt`` "p" gives it its own prompt (p0, p1, ...), any other is its prompt id."""
    sent = (intended_ms if sent_ms is None else sent_ms) * MS
    first = int(sent + ttft_ms * MS)
    chunk_ns = [first + int(k * tpot_ms * MS) for k in range(tokens)]
    return RequestRecord(api="sglang", target="spec", prompt_id=f"{prompt}{i}" if prompt == "p" else prompt,
                         domain="chat", warmup=False, intended_ns=int(intended_ms * MS), sent_ns=int(sent),
                         done_ns=int(done_ms * MS), chunk_ns=chunk_ns, chunk_tokens=[1] * tokens, tokens_exact=True,
                         prompt_tokens=100, output_tokens=tokens, outcome=Outcome.OK if ok else Outcome.TIMEOUT,
                         cached_tokens=cached, spec=SpecStats(verify, histogram=hist) if verify else None)


def clean(n: int = 12, gap_ms: float = 100.0) -> list[RequestRecord]:
    """An open loop at 10 req/s that the server keeps up with: every request 700 ms, no queue."""
    return [rec(i, intended_ms=i * gap_ms, done_ms=i * gap_ms + 700) for i in range(n)]


OPEN = Asked(open_loop=True, max_tokens=64, ignore_eos=True)


def by_name(cs: tuple[Check, ...]) -> dict[str, Check]:
    assert tuple(c.name for c in cs) == CHECKS
    return {c.name: c for c in cs}


def test_a_clean_open_loop_run_passes_every_check():
    got = by_name(bench_checks(again(), OPEN, texts={f"q{i}": PROSE for i in range(6)}))
    assert [c.name for c in got.values() if c.failed] == []
    assert all(c.measured for n, c in got.items() if n != "acceptance_identity")


def test_rates_of_a_server_that_keeps_up_and_one_that_does_not():
    offered, achieved = rates(clean())
    assert offered == pytest.approx(10.0) and achieved == pytest.approx(10.0)
    # each request waits for the one before: the server finishes one every 500 ms while 10 a second arrive
    slow = [rec(i, intended_ms=i * 100, done_ms=700 + i * 500) for i in range(12)]
    offered, achieved = rates(slow)
    assert offered == pytest.approx(10.0) and achieved < 0.5 * offered
    assert not by_name(bench_checks(slow, OPEN))["achieved_rate"].ok


def test_a_closed_loop_has_no_offered_rate():
    c = by_name(bench_checks(clean(), dataclasses.replace(OPEN, open_loop=False)))["achieved_rate"]
    assert c.ok and not c.measured and c.detail.startswith("not measured: a closed loop")


def again(n: int = 12, slower_second: float = 1.0) -> list[RequestRecord]:
    """Six prompts sent twice each, in order; the second sendings' TPOT times ``slower_second``."""
    return [rec(i, intended_ms=i * 100, done_ms=i * 100 + 700, prompt=f"q{i % 6}",
                tpot_ms=10.0 * (slower_second if i >= 6 else 1.0)) for i in range(n)]


@pytest.mark.parametrize(("slower", "ok"), [(1.0, True), (1.04, True), (1.1, False), (0.9, False)])
def test_repeats_of_the_same_prompts_far_apart_trip_repeat_spread(slower, ok):
    c = by_name(bench_checks(again(slower_second=slower), OPEN))["repeat_spread"]
    assert (c.ok, c.measured) == (ok, True)


def test_without_a_prompt_sent_twice_repeat_spread_is_not_measured():
    # wildly different rates, but over different prompts: content, not reproducibility
    recs = [rec(i, intended_ms=i * 100, done_ms=i * 100 + 700, tpot_ms=10.0 if i % 2 else 15.0) for i in range(12)]
    c = by_name(bench_checks(recs, OPEN))["repeat_spread"]
    assert c.ok and not c.measured


def test_cached_prompts_trip_prefix_cache_and_no_report_is_not_measured():
    recs = [dataclasses.replace(r, cached_tokens=90) for r in clean()]
    assert not by_name(bench_checks(recs, OPEN))["prefix_cache"].ok
    none = by_name(bench_checks([dataclasses.replace(r, cached_tokens=None) for r in clean()], OPEN))
    assert not none["prefix_cache"].measured


def test_ttft_rising_with_flat_tpot_trips_server_queueing_and_the_metric_wins():
    recs = [rec(i, intended_ms=i * 100, done_ms=i * 100 + 700 + 200 * i, ttft_ms=50 + 200 * i) for i in range(12)]
    assert not by_name(bench_checks(recs, OPEN))["server_queueing"].ok
    quiet = dataclasses.replace(OPEN, server_running=(2, 2), server_queued=(0, 0))
    assert by_name(bench_checks(recs, quiet))["server_queueing"].ok
    queue = dataclasses.replace(OPEN, server_running=(2, 2), server_queued=(2, 3))
    assert not by_name(bench_checks(clean(), queue))["server_queueing"].ok


def test_short_outputs_under_ignore_eos_trip_output_length():
    recs = clean()
    recs[3] = rec(3, intended_ms=300, done_ms=1000, tokens=40)
    assert not by_name(bench_checks(recs, OPEN))["output_length"].ok


def test_one_prompt_and_random_prompts_trip_synthetic_prompts():
    one = [rec(i, intended_ms=i * 100, done_ms=i * 100 + 700, prompt="same") for i in range(12)]
    assert not by_name(bench_checks(one, OPEN))["synthetic_prompts"].ok
    texts = {f"p{i}": RANDOM for i in range(12)}
    assert not by_name(bench_checks(clean(), OPEN, texts=texts))["synthetic_prompts"].ok


def test_identity_restores_a_cut_last_round_and_trips_on_undercounted_positions():
    # 17 rounds, k = 3: histogram (rounds by accepted drafts) 2, 3, 4, 8 = 2*0+3*1+4*2+8*3 = 35 accepted, so
    # 52 tokens from the rounds; the output holds 50 after the first (max_tokens cut the last round by 2)
    cut = [rec(i, intended_ms=i * 100, done_ms=i * 100 + 700, tokens=51, hist=(2, 3, 4, 8), verify=17)
           for i in range(12)]
    al, positions = identity_figures(cut)
    assert al == pytest.approx(52 / 17) and 1 + sum(positions) == pytest.approx(52 / 17)
    assert by_name(bench_checks(cut, OPEN))["acceptance_identity"].ok
    # the histogram counts fewer accepted drafts than the tokens show (positions under-counted)
    under = [rec(i, intended_ms=i * 100, done_ms=i * 100 + 700, tokens=51, hist=(8, 4, 3, 2), verify=17)
             for i in range(12)]
    assert not by_name(bench_checks(under, OPEN))["acceptance_identity"].ok


def test_a_sweep_merges_its_levels_checks_and_names_the_level_that_failed():
    result = analyse(RunInfo("http://127.0.0.1:1", "sglang", "m"), clean()).doc.results

    def level(outputs: list[int]) -> LevelResult:
        return LevelResult(result, (), checks=(checks.output_length(True, 4, outputs),))

    cfg = ConfigResult("steps=3", {}, 0.0, status="ok", results=result,
                       by_concurrency={1: level([4, 4]), 4: level([4, 1])})
    got = {c.name: c for c in checks.of_sweep([cfg])}
    assert got["output_length"].detail == "steps=3 at 4 stream(s): 1 of 2 request(s) ended short of max_tokens=4 " \
                                          "(the shortest at 1)"


def test_the_terminal_prints_a_line_per_failed_check_and_names_the_unmeasured():
    cs = bench_checks(again(), dataclasses.replace(OPEN, open_loop=False))
    bad = (Check("prefix_cache", False, "900 of 1000 prompt tokens"), *cs[3:])
    assert lines((cs[0], cs[1], *bad)) == [
        "  CHECK FAILED:  prefix_cache: 900 of 1000 prompt tokens",
        "  Checks:        4 passed, 1 failed, not measured: achieved_rate, acceptance_identity (details in --json)"]
    assert lines(()) == []


def test_bench_reads_the_waiting_requests_from_either_engines_metrics():
    text = ('sglang:num_queue_reqs{model_name="m",tp_rank="0"} 3.0\n'
            'sglang:num_queue_reqs_total_fake 9\n'
            'vllm:num_requests_waiting{engine="0",model_name="m"} 2.0\n'
            'vllm:num_requests_running{engine="0",model_name="m"} 5.0\n')
    assert running_from_text(text, QUEUED_GAUGES) == [3, 2]
    assert running_from_text(text) == [5]


def test_a_records_file_keeps_the_waiting_requests_and_reads_one_without_them():
    info = RunInfo("http://127.0.0.1:1", "sglang", "m", server_queued=(0, 2, 1))
    assert codec.decode(codec.encode(info)) == info
    old = codec.orjson.loads(codec.encode(info))
    del old["server_queued"]
    assert codec.decode(codec.orjson.dumps(old)).server_queued == ()

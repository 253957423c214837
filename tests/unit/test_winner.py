"""The one rule for a winner (``analysis.winner``) as a sweep prints it (``comparisons.bands``): at least three
requests per cell, the highest lower 95% bound over plain decoding (not the best mean), a tie (within the noise
or 1%) to the fewer draft steps, each pick against plain decoding and against what is running; and the schedule
it gives ends at the largest load measured, saying so in the printed schedule and the engine flags."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from specwatch.analysis import comparisons, engine_flags, load_sweep, winner
from specwatch.analysis.compare import Margin, margin
from specwatch.analysis.engine_flags import ServerSetup
from specwatch.results import BenchResult, ConfigResult, LevelResult, RunResult, Spread

PLAIN = [100.0, 101.0, 99.0, 100.0, 100.0]
TIGHT_6 = [106.0, 105.5, 106.5, 106.0, 106.0]  # +6%, repeats close together
FAR_APART = [60.0, 250.0, 140.0, 100.0, 200.0]  # +50% on average, repeats far apart


def run(tps: float) -> RunResult:
    return RunResult("p", "chat", "ok", 200, "", 100, 10, 1.0, 1.0, 0.0, 0.1, 50, tps, None, None, None, True)


def config(label: str, steps: int, by_load: dict[int, list[float]]) -> ConfigResult:
    lv = {}
    for c, reqs in by_load.items():
        mean = sum(reqs) / len(reqs)
        res = BenchResult(len(reqs), len(reqs), mean, mean, mean, mean, mean, {}, Spread(), 1.0 + steps * 0.5, None,
                          None, 0, (), {"ok": len(reqs)}, {}, 0, None)
        lv[c] = LevelResult(res, tuple(run(t) for t in reqs))
    low = lv[min(lv)]
    return ConfigResult(label, {}, 0.0, "ok", steps=steps, draft_tokens=steps + 1, results=low.results,
                        runs=low.runs, by_concurrency=lv)


def one_load(cells: dict[str, tuple[int, list[float]]], running: str | None = None) -> comparisons.Band:
    results = [config(label, steps, {1: reqs}) for label, (steps, reqs) in cells.items()]
    (band,) = comparisons.bands(results, running)
    return band


@pytest.mark.parametrize(("cells", "pick", "said"), [
    # repeats far apart: the best mean (+50%) is no winner; the tight +6% is
    ({"baseline": (0, PLAIN), "k=5": (5, FAR_APART), "k=2": (2, TIGHT_6)}, "k=2",
     "k=5 has the higher mean, +50.0%, but its 95% interval reaches lower"),
    # a tie with plain decoding, and the far-apart best mean named with why it did not win
    ({"baseline": (0, PLAIN), "k=1": (1, [100.5, 99.5, 100.0, 101.0, 99.0]), "k=5": (5, FAR_APART)}, "baseline",
     "a tie -> baseline (a tie goes to the fewer draft steps: plain decoding) (k=5 has the higher mean, +50.0%, but "
     "its 95% interval reaches lower, -44.7%)"),
    # alone, the far-apart cell ties plain decoding: plain decoding
    ({"baseline": (0, PLAIN), "k=5": (5, FAR_APART)}, "baseline",
     "a tie -> baseline (a tie goes to the fewer draft steps: plain decoding)"),
    # the same speed within the noise: the fewer steps, though k=5 scores a hair higher
    ({"baseline": (0, PLAIN), "k=5": (5, [110.6, 111.6, 109.6, 110.6, 110.6]), "k=2": (2, [110.0, 111.0, 109.0, 110.0,
                                                                                          110.0])},
     "k=2", "-> k=2 (a tie with k=5, -0.5% (95% interval -1.7% to +0.6%), with fewer draft steps; k=2: +10.0%"),
    # within 1% with no noise at all: still a tie, to the fewer steps
    ({"baseline": (0, [100.0] * 3), "k=5": (5, [120.9] * 3), "k=2": (2, [120.0] * 3)}, "k=2", "a tie with k=5"),
    ({"baseline": (0, [100.0] * 3), "k=2": (2, [100.9] * 3)}, "baseline", "a tie goes to the fewer draft steps"),
    # fewer than three requests: not crowned, and says why
    ({"baseline": (0, PLAIN), "k=5": (5, [200.0, 201.0]), "k=2": (2, TIGHT_6)}, "k=2",
     "; not crowned: k=5 (2 requests, 3 needed)"),
    # clearly slower: plain decoding
    ({"baseline": (0, PLAIN), "k=5": (5, [80.0, 81.0, 79.0])}, "baseline", "slower -> baseline (not faster than plain"),
])
def test_the_pick(cells, pick, said):
    band = one_load(cells)
    assert band.winner == pick and band.steps == cells[pick][0]
    assert said in band.sentence(), band.sentence()


def test_the_highest_lower_bound_wins_not_the_best_mean():
    band = one_load({"baseline": (0, PLAIN), "k=5": (5, FAR_APART), "k=2": (2, TIGHT_6)})
    far, tight = margin(FAR_APART, PLAIN), margin(TIGHT_6, PLAIN)
    assert far is not None and tight is not None
    assert far.ratio > tight.ratio and far.low < 0 < tight.low and not tight.tie and far.tie
    assert (band.fastest, band.winner, band.best) == ("k=5", "k=2", "k=2")
    assert band.sentence().startswith(f"k=2 at {sum(TIGHT_6) / 5:.1f} tok/s per stream (decode): "
                                      f"{tight.interval_text()} vs plain decoding, faster -> k=2")


def test_a_plain_cell_with_too_few_requests_crowns_nothing():
    band = one_load({"baseline": (0, [100.0, 101.0]), "k=2": (2, TIGHT_6)})
    assert band.winner == "" and band.sentence() == ("no pick: baseline has 2 requests, 3 needed at this load, and "
                                                     "every configuration is scored against it")
    assert load_sweep.schedule([band]) == []


def test_without_plain_decoding_the_fewest_steps_measured_is_the_reference():
    band = one_load({"k=2": (2, PLAIN), "k=5": (5, TIGHT_6)})
    assert (band.winner, band.reference, band.plain) == ("k=5", "k=2", False)
    assert "vs k=2 (no plain decoding measured: the fewest steps), faster -> k=5" in band.sentence()
    alone = one_load({"k=2": (2, PLAIN)})
    assert alone.winner == "k=2" and alone.sentence().endswith("-> k=2 (nothing else measured to compare with)")


def test_every_pick_is_printed_against_what_is_running():
    cells = {"baseline": (0, PLAIN), "k=5": (5, [101.0, 102.0, 100.0]), "k=2": (2, TIGHT_6)}
    band = one_load(cells, running="k=5")
    vs = margin(TIGHT_6, cells["k=5"][1])
    assert vs is not None and band.vs_running == vs
    assert band.sentence().endswith(f"; vs k=5 (running): {vs.interval_text()}")
    assert one_load(cells, running="k=2").sentence().endswith("; k=2 is what is running")
    assert "running" not in one_load(cells, running="k=9").sentence()  # not measured here: omitted
    # sweep.json's picks carry the same sentence
    results = [config(label, steps, {1: reqs}) for label, (steps, reqs) in cells.items()]
    _, picks = comparisons.records(results, "k=5")
    assert [(p.pick, p.sentence) for p in picks] == [("k=2", band.sentence())]


def sweep_over_load() -> list[ConfigResult]:
    def spread(x: float) -> list[float]:
        return [x * f for f in (0.99, 1.0, 1.01, 1.0)]

    return [config("baseline", 0, {1: spread(100), 4: spread(90), 16: spread(60), 24: spread(50)}),
            config("k=3", 3, {1: spread(150), 4: spread(120), 16: spread(50), 24: spread(30)})]


def test_no_schedule_range_extends_past_the_largest_load_measured_and_it_says_so():
    results = sweep_over_load()
    ranges = load_sweep.schedule(comparisons.bands(results))
    assert ranges == [(1, 8, 3), (9, 24, 0)]
    text = load_sweep.report(results, None, range(0), load_sweep.engine_advice(results))
    assert "Schedule (batch sizes lo-hi: k draft steps, 0 = plain decoding): 1-8: 3, 9-24: 0 (measured up to 24)" \
        in text
    vllm = engine_flags.vllm_advice(ranges, ServerSetup("vllm", "0.32.0", {"method": "eagle3", "model": "d",
                                                                           "num_speculative_tokens": 3}))
    assert '"num_speculative_tokens_per_batch_size": [[1, 8, 3], [9, 24, 0]]' in vllm.flags
    assert ("measured up to 24 running requests: above 24 vLLM keeps the last range's k (0), which no measurement "
            "supports") in vllm.notes
    sg = engine_flags.sglang_advice(ranges, ServerSetup("sglang", "0.5.23", algorithm="EAGLE3", topk=1), "")
    assert ("measured up to 24 running requests: above 24 SGLang keeps the last slot's steps (0), which no "
            "measurement supports") in sg.notes


@given(st.lists(st.tuples(st.integers(1, 512), st.integers(0, 10)), min_size=1, max_size=8, unique_by=lambda x: x[0]))
def test_any_picks_give_contiguous_ranges_from_one_to_the_largest_load(picks):
    picks = sorted(picks)
    ranges = load_sweep.schedule_of(picks)
    assert ranges[0][0] == 1 and ranges[-1][1] == picks[-1][0]
    assert all(b[0] == a[1] + 1 and a[2] != b[2] for a, b in itertools.pairwise(ranges))


@pytest.mark.parametrize(("m", "tie"), [
    (Margin(0.005, 0.004, 0.006), True),  # within 1%, the interval clear of zero
    (Margin(-0.01, -0.011, -0.009), True),
    (Margin(0.02, -0.01, 0.05), True),  # within the noise
    (Margin(0.02, 0.015, 0.025), False),
    (Margin(0.02, None, None), False),  # no interval: only the 1% makes a tie
])
def test_a_tie_is_within_the_noise_or_within_one_percent(m, tie):
    assert m.tie is tie and winner.TIE_WITHIN == 0.01
    assert ("a tie" in m.text()) is tie


def test_the_rule_itself_on_candidates():
    def versus(a: winner.Candidate, b: winner.Candidate) -> Margin:
        return Margin(0.0, -0.02, 0.02) if {a.name, b.name} == {"2", "5"} else Margin(0.1, 0.05, 0.15)

    cands = [winner.Candidate("0", 0, winner.EXACT), winner.Candidate("2", 2, Margin(0.10, 0.04, 0.16)),
             winner.Candidate("5", 5, Margin(0.11, 0.06, 0.16)),
             winner.Candidate("7", 7, Margin(0.5, 0.4, 0.6), "2 requests, 3 needed")]
    p = winner.pick(cands, versus)
    assert (p.chosen, p.best) == (cands[1], cands[2]) and p.tie == Margin(0.0, -0.02, 0.02)
    assert p.not_crowned == (cands[3],)
    assert winner.pick(cands[3:], versus).chosen is None
    assert winner.repeats_reason(1) == "1 request, 3 needed" and winner.repeats_reason(3) == ""

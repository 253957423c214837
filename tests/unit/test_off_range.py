"""A schedule's 0 range priced: the schedule against plain decoding and the best single configuration."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from specwatch.analysis import off_range
from specwatch.analysis.off_range import LoadRates, OffCost, weigh

COST = OffCost(0.066, "test", measured=False)


def cells(*rows: tuple[int, float, dict[int, float]]) -> list[LoadRates]:
    return [LoadRates(load, plain, tuple(by.items())) for load, plain, by in rows]


# plain 100 per stream at every load; steps=2 wins low, loses high
SWEEP = cells((1, 100.0, {2: 130.0}), (8, 100.0, {2: 110.0}), (32, 100.0, {2: 80.0}))


@pytest.mark.parametrize(("ranges", "cost", "want_advise", "single", "loses"), [
    # the schedule: 1.30, 1.10, then 1/1.066 at 32: beats steps=2 everywhere (1.067) and plain (1.0)
    ([(1, 16, 2), (17, 32, 0)], COST, True, 2, (32,)),
    # an off range that costs 2x (vllm-ascend's step at the speculating cost): 1.30, 1.10, 0.5 = 0.967 < steps=2's
    ([(1, 16, 2), (17, 32, 0)], OffCost(1.0, "x", False), False, 2, (32,)),
    # free off: never slower than plain
    ([(1, 16, 2), (17, 32, 0)], OffCost(0.0, "x", False), True, 2, ()),
    # off from 2 on: 1.30, 1/1.066 twice = 1.059 against steps=2's 1.067: the single configuration wins
    ([(1, 1, 2), (2, 32, 0)], COST, False, 2, (8, 32)),
])
def test_the_schedule_is_weighed_with_its_off_range_priced(ranges, cost, want_advise, single, loses):
    w = weigh(ranges, SWEEP, cost)
    assert w is not None
    assert (w.advise_schedule, w.single_steps, w.loses_to_plain) == (want_advise, single, loses)
    text = "\n".join(w.lines())
    assert cost.text() in text and ("the schedule is advised" in text) == want_advise
    assert ("steps=2 at every load is advised" in text) == (not want_advise)


def test_plain_decoding_is_a_single_configuration_and_wins_a_tie():
    # steps=3 barely helps at one load and loses elsewhere: plain decoding at every load is the best single one
    c = cells((1, 100.0, {3: 104.0}), (16, 100.0, {3: 90.0}))
    w = weigh([(1, 4, 3), (5, 16, 0)], c, COST)
    assert w is not None and w.single_steps == 0 and w.single_mean == 1.0
    # the schedule: (1.04 + 1/1.066) / 2 = 0.989 < 1: plain decoding is advised
    assert not w.advise_schedule and "plain decoding is advised" in "\n".join(w.lines())


def test_a_load_distribution_weighs_the_loads():
    ranges = [(1, 16, 2), (17, 32, 0)]
    assert weigh(ranges, SWEEP, COST).advise_schedule  # equal weight: 1.113 against steps=2's 1.067
    w = weigh(ranges, SWEEP, COST, {1: 0.05, 8: 0.05, 32: 0.9})  # mostly at 32, where the schedule is off
    assert w is not None and w.observed and w.weights == pytest.approx((0.05, 0.05, 0.9))
    assert w.schedule_mean == pytest.approx(0.05 * 1.3 + 0.05 * 1.1 + 0.9 / 1.066)  # 0.964
    assert (w.single_steps, w.advise_schedule) == (0, False)  # plain decoding at every load: 1.0
    assert "observed load distribution" in "\n".join(w.lines())


@pytest.mark.parametrize("ranges", [[(1, 32, 2)], [(1, 32, 0)], [(1, 8, 3), (9, 32, 2)]])
def test_a_schedule_without_an_off_range_is_not_weighed(ranges):
    assert weigh(ranges, SWEEP, COST) is None


@pytest.mark.parametrize(("load", "k"), [(1, 2), (16, 2), (17, 0), (32, 0), (64, 0)])
def test_k_at_a_load(load, k):
    assert off_range.k_at([(1, 16, 2), (17, 32, 0)], load) == k


def test_the_note_names_the_off_ranges_and_the_cost():
    n = off_range.note([(1, 8, 3), (9, 22, 1), (23, 32, 0)])
    assert "23-32 running requests" in n and "+6.6%" in n and "modelled" in n
    assert "measured: x" in off_range.note([(1, 8, 3), (9, 32, 0)], OffCost(0.5, "x", True))


def test_nothing_is_weighed_without_a_load_on_each_side_of_the_off_range():
    ranges = [(1, 16, 2), (17, 32, 0)]
    assert weigh(ranges, cells((32, 100.0, {2: 80.0})), COST) is None  # only the off side
    assert weigh(ranges, cells((1, 0.0, {2: 80.0}), (32, 100.0, {})), COST) is None  # no plain rate at 1
    assert weigh(ranges, cells((1, 100.0, {}), (32, 100.0, {})), COST) is None  # the schedule's k=2 unmeasured


def live(rates: dict[int, dict[int, float]], best: dict[int, int], requests: dict[int, int]):
    """The live advisor's advice over buckets: per bucket its predicted per-stream rate by step count."""
    from specwatch.analysis import live_advisor as la

    def pred(s: int, v: float) -> la.StepPrediction:
        return la.StepPrediction(s, la.Estimate(v, v * 0.98, v * 1.02), 1.0, s == 0)

    est = la.Estimate(1.1, 1.05, 1.15)
    rows = tuple(la.BucketAdvice(b, float(b), requests[b], "ok", tuple(pred(s, v) for s, v in by.items()), best[b],
                                 est, est) for b, by in rates.items())
    return la.Advice(5, 10, None, None, rows, None)


@pytest.mark.parametrize(("requests", "schedule"), [({1: 50, 32: 50}, True), ({1: 5, 32: 95}, False)])
def test_the_live_advice_weighs_the_off_range_over_the_load_it_saw(requests, schedule):
    from specwatch.analysis import live_advisor as la
    from specwatch.analysis.engine_flags import ServerSetup

    # 2 steps: +40% at one running request, -20% at 32; plain decoding 100 tok/s per stream at both
    a = live({1: {0: 100.0, 2: 140.0}, 32: {0: 100.0, 2: 80.0}}, {1: 2, 32: 0}, requests)
    engine = la.with_flags(a, ServerSetup("vllm", "0.32.0")).engine
    text = "\n".join(e.text() for e in engine)
    assert ("num_speculative_tokens_per_batch_size" in text) == schedule
    if schedule:  # (1.40 + 1/1.066) / 2 = 1.169 against 2 steps' 1.10: the schedule, its 0 range priced
        assert "+6.6% time per output token" in text
    else:  # mostly at 32: 0.05 x 1.40 + 0.95 / 1.066 = 0.961 < plain decoding's 1.0
        assert "plain decoding wins" in text and "once its 0 range is priced" in text


def sweep(k3: dict[int, float]) -> list:
    """A sweep over load: plain decoding and k=3, four requests a cell within 1% of the rate given."""
    from specwatch.results import BenchResult, ConfigResult, LevelResult, RunResult, Spread

    def config(label: str, steps: int, rates: dict[int, float]) -> ConfigResult:
        lv = {}
        for c, x in rates.items():
            reqs = [x * f for f in (0.99, 1.0, 1.01, 1.0)]
            res = BenchResult(4, 4, x, x, x, x, x, {}, Spread(), 1.0 + steps * 0.5, None, None, 0, (), {"ok": 4}, {},
                              0, None)
            lv[c] = LevelResult(res, tuple(RunResult("p", "chat", "ok", 200, "", 100, 10, 1.0, 1.0, 0.0, 0.1, 50, t,
                                                     None, None, None, True) for t in reqs))
        return ConfigResult(label, {}, 0.0, "ok", steps=steps, draft_tokens=steps + 1, results=lv[1].results,
                            runs=lv[1].runs, by_concurrency=lv)

    return [config("baseline", 0, {1: 100.0, 4: 90.0, 16: 60.0, 24: 50.0}), config("k=3", 3, k3)]


@pytest.mark.parametrize(("k3", "advised"), [
    # +50%, +33% below the crossover: the schedule, its 0 range priced, 1.18x against k=3's 1.07x
    ({1: 150.0, 4: 120.0, 16: 50.0, 24: 30.0}, "schedule"),
    # +4% below it: (1.04 + 1.04 + 2 / 1.066) / 4 = 0.989x, under plain decoding's 1.0x
    ({1: 104.0, 4: 93.6, 16: 50.0, 24: 30.0}, "plain"),
])
def test_the_sweep_advises_what_wins_once_the_off_range_is_priced(k3, advised):
    from specwatch.analysis import load_sweep

    results = sweep(k3)
    advice = load_sweep.engine_advice(results)
    text = load_sweep.report(results, None, range(0), advice)
    assert "1-8: 3, 9-24: 0 (measured up to 24)" in text and "Off range (k=0 at load 16, 24)" in text
    if advised == "schedule":
        assert "the schedule is advised" in text and all("+6.6% time per output token" in a.text() for a in advice)
    else:
        assert "plain decoding is advised" in text
        assert [a.headline for a in advice] == [
            "vLLM: plain decoding wins: launch without --speculative-config (the schedule does not beat plain "
            "decoding once its 0 range is priced)",
            "SGLang: plain decoding wins: launch without --speculative-algorithm (the schedule does not beat plain "
            "decoding once its 0 range is priced)"]


@pytest.mark.parametrize(("accept", "want"), [  # verify rounds per decode token at 1 and at 16 running requests
    # drafts at 1 running request, none at 16: the 0 range's cost there, against the curve (100 / 80 - 1)
    ((0.5, None), (None, 0.25)),
    # a few rounds at 16 (probes that straddled the change of load): still off
    ((0.5, 0.05), (None, 0.25)),
    # drafts nowhere: a plain server, or one whose probes report no verify rounds: no off range to price
    ((None, None), (None, None)),
    # drafts everywhere: none
    ((0.5, 0.45), (None, None)),
])
def test_the_daemon_prices_a_bucket_where_the_server_drafts_nothing(accept, want):
    from specwatch.analysis.baseline import BaselineCurve, CurvePoint
    from specwatch.analysis.by_load import by_load
    from specwatch.export.page import _off_range
    from specwatch.export.prometheus import Exporter
    from specwatch.recorder.load import LoadBucket

    curve = BaselineCurve((CurvePoint(1.0, 100.0), CurvePoint(16.0, 100.0)))
    buckets = [LoadBucket(1, 8, 1.0, 150.0, 0.02, accept[0] and 2.0, accept[0] or 0.0),
               LoadBucket(16, 8, 16.0, 80.0, 0.02, accept[1] and 2.0, accept[1] or 0.0)]
    lv = by_load(buckets, curve, 4, 16.0)
    assert tuple(r.off_range_cost for r in lv.buckets) == pytest.approx(want)
    e = Exporter(("spec",), (60,))
    e.set_load(lv)
    assert ('specwatch_off_range_cost_ratio{load_bucket="16"} 0.25' in e.render().decode()) == (want[1] is not None)
    page = _off_range(SimpleNamespace(by_load=lv))  # the page reads the snapshot's by-load verdict alone
    assert ("at 16 running requests the server drafts nothing (a schedule's 0 range): +25.0% time per token" in page) \
        == (want[1] is not None)


def test_the_off_range_series_goes_when_the_bucket_drafts_again():
    from specwatch.analysis.baseline import BaselineCurve, CurvePoint
    from specwatch.analysis.by_load import by_load
    from specwatch.export.prometheus import Exporter
    from specwatch.recorder.load import LoadBucket

    curve = BaselineCurve((CurvePoint(1.0, 100.0), CurvePoint(16.0, 100.0)))
    e = Exporter(("spec",), (60,))
    for at16, shown in ((None, True), (0.45, False)):
        e.set_load(by_load([LoadBucket(1, 8, 1.0, 150.0, 0.02, 2.0, 0.5),
                            LoadBucket(16, 8, 16.0, 80.0, 0.02, at16 and 2.0, at16 or 0.0)], curve, 4, 16.0))
        assert ('specwatch_off_range_cost_ratio{load_bucket="16"}' in e.render().decode()) == shown


def test_a_schedule_no_knob_runs_is_followed_by_the_best_single_settings_flags():
    """SGLang NGRAM has no per-load knob: the sweep says so, then gives the flags of the best single setting over
    the loads measured (k=3: 1.5, 1.33, 0.83, 0.6 against plain decoding, 1.07 on the mean)."""
    from dataclasses import replace

    from specwatch.analysis import load_sweep

    info = {"speculative_algorithm": "NGRAM", "speculative_eagle_topk": 1, "version": "0.5.23"}
    results = [replace(c, server_info=info) for c in sweep({1: 150.0, 4: 120.0, 16: 50.0, 24: 30.0})]
    advice = load_sweep.engine_advice(results)
    assert [a.headline for a in advice] == [
        "SGLang: no engine knob for this schedule: --speculative-adaptive works for EAGLE and EAGLE3 only (this "
        "server: NGRAM)",
        "SGLang: no knob runs the schedule, so the best single setting over the loads measured: launch NGRAM with 3 "
        "draft tokens (the rest unchanged):"]
    assert [a.flags for a in advice] == ["", "--speculative-algorithm NGRAM --speculative-num-draft-tokens 3"]

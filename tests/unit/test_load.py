"""Load-aware pieces, pure: the baseline curve (values, limits, file errors naming the field), the load
tracker (staleness), the by-load buckets and crossover, the sweep's bands, schedule and batch fit, and the
simulator's crossover against its own cycle costs."""

from __future__ import annotations

import json
import math

import pytest

from specwatch.analysis import baseline as bl
from specwatch.analysis import load_sweep
from specwatch.analysis.by_load import by_load
from specwatch.analysis.verdict import Judge, VerdictInputs
from specwatch.errors import ConfigError
from specwatch.recorder.load import LoadCurve, LoadTracker, bucket_of
from specwatch.records import Outcome, RequestRecord, ServerSample
from specwatch.results import BenchResult, ConfigResult, LevelResult, RunResult, Spread
from specwatch.sim import model

CURVE = bl.BaselineCurve((bl.CurvePoint(1, 100.0), bl.CurvePoint(4, 80.0), bl.CurvePoint(16, 40.0)))


def test_curve_interpolates_in_log_load_and_extrapolates_only_so_far():
    assert CURVE.at(4).tokens_per_second == 80.0 and CURVE.at(4).status == "measured"
    assert CURVE.at(2).tokens_per_second == pytest.approx(90.0) and CURVE.at(2).status == "interpolated"
    assert CURVE.at(8).tokens_per_second == pytest.approx(60.0)
    at = CURVE.at(20)  # within 1.5 x the last point: the last segment continued, said so
    assert at.status == "extrapolated"
    assert at.tokens_per_second == pytest.approx(40 - 40 * math.log(20 / 16) / math.log(4))
    assert CURVE.at(25) == bl.BaselineAt(None, "outside", 25)  # beyond: unknown, never a guess
    assert CURVE.at(0.5).status == "held"


def test_a_fixed_baseline_is_a_one_point_curve_valid_at_low_load():
    fixed = bl.BaselineCurve.fixed(90.0)
    assert fixed.at(1.0).tokens_per_second == 90.0 and fixed.at(2.0).status == "measured"
    assert fixed.at(3.0).tokens_per_second is None and fixed.at(3.0).status == "outside"


def test_judge_forgets_its_state_when_the_baseline_is_unknown_at_this_load():
    j = Judge(min_requests=3)
    v = j.update(VerdictInputs(50.0, 2.0, 100.0, 10, 0.01, 8.0, "interpolated", 8.0))
    assert v.below_baseline is True and v.load_known and v.load == 8.0
    v = j.update(VerdictInputs(50.0, 2.0, None, 10, 0.01, 40.0, "outside", 40.0))
    assert v.below_baseline is None and v.speedup is None and v.baseline_status == "outside"


@pytest.mark.parametrize(("doc", "field"), [
    ({"kind": "other"}, "kind"),
    ({"kind": bl.KIND, "version": 2, "points": []}, "version"),
    ({"kind": bl.KIND, "version": 1, "unit": "tokens_per_second", "points": [{"running": 1, "tokens_per_second": 1}]},
     "unit"),
    ({"kind": bl.KIND, "version": 1, "points": []}, "points"),
    ({"kind": bl.KIND, "version": 1, "points": [{"running": 0, "tokens_per_second": 9}]}, "points[0].running"),
    ({"kind": bl.KIND, "version": 1, "points": [{"running": 1, "tokens_per_second": "9"}]},
     "points[0].tokens_per_second"),
    ({"kind": bl.KIND, "version": 1, "points": [{"running": 1, "tokens_per_second": 1e300}]},
     "points[0].tokens_per_second"),
    ({"kind": bl.KIND, "version": 1, "points": [{"running": 2, "tokens_per_second": 9},
                                                {"running": 2.0, "tokens_per_second": 8}]}, "same running load"),
])
def test_a_wrong_curve_file_is_refused_naming_the_field(tmp_path, doc, field):
    path = tmp_path / "curve.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(ConfigError, match=re_field(field)):
        bl.read(str(path))


def re_field(field: str) -> str:
    return field.replace("[", r"\[").replace("]", r"\]").replace(".", r"\.")


def test_curve_file_round_trips(tmp_path):
    bl.save(tmp_path / "c.json", CURVE)
    assert bl.read(str(tmp_path / "c.json")).points == CURVE.points


def sample(running: int) -> ServerSample:
    return ServerSample(source="sglang_decode", running=running)


def test_tracker_means_the_counts_during_a_probe_and_says_unknown_when_they_stop():
    t = LoadTracker(stale_s=5)
    for i, n in enumerate((4, 6, 8)):
        t.add(sample(n), i * 10**9)
    assert t.during(0, 2 * 10**9) == 6.0
    assert t.during(int(2.5e9), int(3e9)) == 8.0  # none inside: the last one, still fresh
    assert t.during(int(9e9), int(10e9)) is None  # the source stopped reporting: unknown
    t.add(ServerSample(source="sglang_prefill", running=99), int(3e9))  # a prefill line's count is not the batch
    assert t.during(int(3e9), int(3e9)) == 8.0  # the decode line's 8, not the prefill line's 99


def rec(tokens_per_second: float, n: int = 11) -> RequestRecord:
    step = int(1e9 / tokens_per_second)
    return RequestRecord(api="sglang", target="spec", prompt_id="p", domain="chat", warmup=False, intended_ns=0,
                         sent_ns=0, done_ns=n * step, chunk_ns=tuple(i * step for i in range(1, n + 1)),
                         chunk_tokens=(1,) * n, tokens_exact=True, prompt_tokens=5, output_tokens=n,
                         outcome=Outcome.OK)


def test_by_load_speedup_and_crossover_from_buckets():
    assert [bucket_of(x) for x in (0.5, 1, 1.4, 1.5, 3, 22, 23, 31.5, 45, 1e6)] == [1, 1, 1, 2, 4, 16, 32, 32, 32, 256]
    lc = LoadCurve(3600)
    for load, tps in ((1, 150.0), (4, 100.0), (16, 30.0)):
        for _ in range(5):
            lc.add(rec(tps), load, 0)
    v = by_load(lc.buckets(), CURVE, 3, current_load=12.0)
    sp = {b.bucket: b.speedup for b in v.buckets}
    assert sp[1] == pytest.approx(1.5, rel=0.01) and sp[4] == pytest.approx(1.25, rel=0.01)
    assert sp[16] == pytest.approx(0.75, rel=0.01)
    # 1.25 at 4, 0.75 at 16: below 1 halfway in log(load), at 8
    assert v.crossover == pytest.approx(8.0, rel=0.01) and v.past_crossover is True
    lc.expire(3601 * 10**9)
    assert lc.buckets() == []


def test_the_rounds_crossover_is_where_its_two_cycle_costs_meet():
    prof, cfg = model.PROFILES["mixed"], model.SpecConfig.from_flags("EAGLE3", 5, 1, None)
    n = model.round_crossover(prof, cfg)
    assert n is not None
    al = model.expected_accept_length(model.conditional_probs(prof, cfg, model.acceptance_factor(prof, "chat", 0)))
    assert al / model.cycle_ms(prof, cfg, n) == pytest.approx(1 / model.cycle_ms(prof, model.SpecConfig(), n))
    assert al / model.cycle_ms(prof, cfg, math.floor(n)) > 1 / model.cycle_ms(prof, model.SpecConfig(), math.floor(n))
    assert al / model.cycle_ms(prof, cfg, math.ceil(n)) < 1 / model.cycle_ms(prof, model.SpecConfig(), math.ceil(n))
    seed = model.PROFILES["seed"]
    assert model.round_crossover(seed, model.SpecConfig.from_flags("EAGLE3", 5, 1, None)) == 1.0  # loses at one
    assert model.explain(seed, model.SpecConfig.from_flags("EAGLE3", 2, 1, None), 1).tokens_per_second == \
        pytest.approx(92.9, abs=0.1)  # the seed table holds at one stream


def bench_result(decode_tps: float, accept_length: float) -> BenchResult:
    return BenchResult(3, 3, decode_tps, decode_tps, decode_tps, decode_tps, decode_tps, {}, Spread(),
                       accept_length, None, None, 0, (), {"ok": 3}, {}, 0, None)


def run(decode_tps: float) -> RunResult:
    return RunResult("p", "chat", "ok", 200, "", 100, 10, 1.0, 1.0, 0.0, 0.1, 50, decode_tps, None, None, None, True)


def result(label: str, steps: int, rates: dict[int, float]) -> ConfigResult:
    by_c = {c: LevelResult(bench_result(r, 1.0 + steps * 0.5), tuple(run(r * f) for f in (0.97, 1.0, 1.03)))
            for c, r in rates.items()}
    lowest = by_c[min(by_c)]
    return ConfigResult(label, {}, 0.0, "ok", steps=steps, draft_tokens=steps + 1, results=lowest.results,
                        runs=lowest.runs, by_concurrency=by_c)


def test_sweep_bands_schedule_and_crossovers():
    results = [result("baseline", 0, {1: 100, 4: 90, 16: 60, 32: 40}),
               result("k=5", 5, {1: 200, 4: 150, 16: 58, 32: 30}),
               result("k=2", 2, {1: 150, 4: 120, 16: 70, 32: 41})]
    bands = load_sweep.bands(results)
    assert [(b.concurrency, b.winner) for b in bands] == [(1, "k=5"), (4, "k=5"), (16, "k=2"), (32, "baseline")]
    # 41 vs 40 within the noise: plain is the pick (a tie goes to the fewer steps)
    assert bands[3].fastest == "k=2" and bands[3].head.label == "k=2" and bands[3].head_score.tie
    assert bands[3].margin is None and "a tie goes to the fewer draft steps: plain decoding" in bands[3].sentence()
    # no range past the largest load measured (32), and the schedule says so
    assert load_sweep.schedule(bands) == [(1, 8, 5), (9, 22, 2), (23, 32, 0)]
    assert load_sweep.schedule_text(load_sweep.schedule(bands)).endswith("23-32: 0 (measured up to 32)")
    cross = load_sweep.crossovers(results)
    assert 4 < cross["k=5"] < 16 and cross["k=2"] is None
    curve = load_sweep.baseline_curve(results, "test")
    assert [(p.running, p.tokens_per_second) for p in curve.points] == [(1, 100), (4, 90), (16, 60), (32, 40)]


def test_the_baseline_curve_stands_at_the_servers_measured_load_when_every_level_has_one():
    plain = result("baseline", 0, {1: 100, 4: 90, 16: 60})
    measured = {1: 1.0, 4: 3.5, 16: 14.0}
    lv = {c: LevelResult(lvl.results, lvl.runs, measured[c], "log") for c, lvl in plain.by_concurrency.items()}
    curve = load_sweep.baseline_curve([ConfigResult("baseline", {}, 0.0, "ok", results=plain.results,
                                                    by_concurrency=lv)], "t")
    assert curve.load_measured and [(p.running, p.streams) for p in curve.points] == [(1.0, 1), (3.5, 4), (14.0, 16)]
    doc = curve.to_doc()
    assert doc["load_measured"] is True and bl.from_doc(json.loads(json.dumps(doc))) == curve
    assert "measured on the server" in curve.describe()
    # one level without a load, or loads that do not rise with the streams (a batch cap): nominal, and it says so
    for bad in ({1: 1.0, 4: None, 16: 14.0}, {1: 1.0, 4: 8.0, 16: 8.0}):
        lv = {c: LevelResult(lvl.results, lvl.runs, bad[c], "log") for c, lvl in plain.by_concurrency.items()}
        curve = load_sweep.baseline_curve([ConfigResult("baseline", {}, 0.0, "ok", results=plain.results,
                                                        by_concurrency=lv)], "t")
        assert not curve.load_measured and [p.running for p in curve.points] == [1.0, 4.0, 16.0]
        assert "nominal" in curve.describe()
    old = {k: v for k, v in doc.items() if k != "load_measured"}  # a file from before the field: nominal
    assert bl.from_doc(old).load_measured is False
    with pytest.raises(ConfigError, match="load_measured: expected true or false"):
        bl.from_doc(doc | {"load_measured": "yes"})
    with pytest.raises(ConfigError, match=r"points\[0\].streams"):
        bl.from_doc(doc | {"points": [{"running": 1, "tokens_per_second": 5, "streams": 0}]})


def test_a_levels_load_comes_from_the_log_then_the_scrape():
    from specwatch.analysis.server_log import level_load

    log = [ServerSample("sglang_decode", running=8), ServerSample("sglang_prefill", running=2),
           ServerSample("sglang_decode", running=7), ServerSample("sglang_decode", running=8),
           ServerSample("sglang_decode", running=0)]
    assert level_load(log, (3, 3)) == (8.0, "log")  # prefill lines and idle ones are no load
    assert level_load([], (3, 4, 4)) == (4.0, "scrape")
    assert level_load([], ()) == (None, "")

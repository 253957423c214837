"""The Pareto view of a sweep: which points are on the frontier, the schedule's line (each load's pick), and
the chart drawn from them (the PNG's axes, the report's SVG and its words)."""

from __future__ import annotations

import re

import matplotlib.pyplot as plt
import pytest

from specwatch.analysis.by_load import LoadSpeedup, LoadVerdict
from specwatch.export import sweep_plots, sweep_report
from specwatch.export.page import LOAD_PARETO, load_pareto_chart
from specwatch.export.pareto import ParetoPoint, frontier, pareto
from specwatch.results import BenchResult, ConfigResult, LevelResult, RunResult, Spread


def bench(user: float, agg: float) -> BenchResult:
    return BenchResult(3, 3, agg, user, user, user, user, {}, Spread(), None, None, None, 0, (), {"ok": 3}, {}, 0,
                       None)


def run(decode_tps: float) -> RunResult:
    return RunResult("p", "chat", "ok", 200, "", 100, 10, 1.0, 1.0, 0.0, 0.1, 50, decode_tps, None, None, None, True)


def result(label: str, steps: int, cells: dict[int, tuple[float, float]]) -> ConfigResult:
    """``cells``: per concurrency, (per-stream decode tok/s, aggregate tok/s); three requests 3% apart each."""
    by_c = {c: LevelResult(bench(u, a), tuple(run(u * f) for f in (0.97, 1.0, 1.03))) for c, (u, a) in cells.items()}
    low = by_c[min(by_c)]
    return ConfigResult(label, {}, 0.0, "ok", steps=steps, draft_tokens=steps + 1, results=low.results, runs=low.runs,
                        by_concurrency=by_c)


# speculation wins at 1 and 4 streams, k=2 alone at 16, nothing at 32 (41 vs 40 is within the noise)
RESULTS = [result("baseline", 0, {1: (100, 98), 4: (90, 350), 16: (60, 900), 32: (40, 1200)}),
           result("k=5", 5, {1: (200, 190), 4: (150, 560), 16: (58, 860), 32: (30, 900)}),
           result("k=2", 2, {1: (150, 145), 4: (120, 460), 16: (70, 1050), 32: (41, 1180)})]


def pt(u: float, a: float, label: str = "x", c: int = 1) -> ParetoPoint:
    return ParetoPoint(label, c, u, a)


@pytest.mark.parametrize(("points", "optimal"), [
    ([(1, 1)], [(1, 1)]),
    ([(1, 1), (2, 2)], [(2, 2)]),  # better on both: the other is dominated
    ([(1, 3), (3, 1), (2, 2)], [(1, 3), (2, 2), (3, 1)]),  # a trade-off: all three
    ([(1, 3), (3, 1), (1.5, 1.5)], [(1, 3), (1.5, 1.5), (3, 1)]),  # below their chord, yet neither beats it on both
    ([(1, 3), (3, 1), (1, 1)], [(1, 3), (3, 1)]),  # beaten by each
    ([(2, 2), (2, 2)], [(2, 2), (2, 2)]),  # the same point twice: neither beats the other
    ([(2, 2), (2, 3)], [(2, 3)]),  # equal on one axis, better on the other
    ([(5, 1), (1, 5), (4, 4), (3, 3)], [(1, 5), (4, 4), (5, 1)]),
])
def test_the_frontier_is_every_point_nothing_beats_on_both_axes(points, optimal):
    got = frontier([pt(u, a) for u, a in points])
    assert [(p.per_user_tps, p.aggregate_tps) for p in got] == optimal


def test_a_line_per_configuration_the_schedules_line_and_the_frontier():
    p = pareto(RESULTS)
    assert [(line.name, line.plain, len(line.points)) for line in p.lines] == [
        ("baseline", True, 4), ("k=5", False, 4), ("k=2", False, 4)]
    assert [(q.label, q.concurrency, q.per_user_tps, q.aggregate_tps) for q in p.schedule.points] == [
        ("k=5", 1, 200, 190), ("k=5", 4, 150, 560), ("k=2", 16, 70, 1050), ("baseline", 32, 40, 1200)]
    assert [(q.label, q.concurrency) for q in p.frontier] == [
        ("baseline", 32), ("k=2", 32), ("k=2", 16), ("k=5", 4), ("k=5", 1)]
    assert all(p.on_frontier(q) for q in p.schedule.points)


def test_a_failed_configuration_draws_no_line_and_a_load_without_a_pick_no_schedule_point():
    failed = ConfigResult("k=9", {}, 0.0, "failed", error="boom")
    p = pareto([*RESULTS, failed])
    assert [line.name for line in p.lines] == ["baseline", "k=5", "k=2"] and len(p.schedule.points) == 4
    empty = pareto([failed])
    assert empty.lines == () and empty.schedule.points == () and empty.frontier == ()


def test_the_pareto_png_says_which_tok_s_each_axis_is_and_ticks_them_1_2_5(monkeypatch, tmp_path):
    seen = []
    monkeypatch.setattr(sweep_plots, "_save", lambda fig, _plt, _path, title, legend, columns: seen.append(
        (fig, title, legend)))
    assert sweep_plots.plot_pareto(tmp_path / "p.png", RESULTS) == f"pareto plot: {tmp_path / 'p.png'}"
    (fig, title, legend), = seen
    (ax,) = fig.axes
    xs = [t.get_text() for t in ax.get_xticklabels()]
    ys = [t.get_text() for t in ax.get_yticklabels()]
    plt.close(fig)
    assert xs == ["0", "50", "100", "150", "200", "250"] and ys == ["0", "200", "400", "600", "800", "1000", "1200",
                                                                  "1400"]
    assert ax.get_xlabel() == "per-user tok/s (per-stream decode)"
    assert ax.get_ylabel() == "aggregate output tok/s (all streams)"
    assert "per-stream decode" in title and "aggregate output tok/s" in title and legend == "outside lower center"
    names = [h.get_label() for h in ax.get_legend_handles_labels()[0]]
    assert names == ["schedule: each load's pick (numbers: streams in flight)", "baseline (plain decoding)", "k=5",
                     "k=2", "Pareto-optimal"]
    assert [a.get_text() for a in ax.texts] == ["1", "4", "16", "32"]  # the schedule's points: streams in flight


def test_the_reports_pareto_chart_draws_every_point_the_schedule_and_rings_the_frontier():
    svg = sweep_plots.pareto_chart(RESULTS)
    assert sweep_plots.PARETO_TITLE in svg and svg.count('class="pt"') == 12  # 3 configurations x 4 loads
    assert svg.count('class="opt"') == 5 and svg.count("<polyline") == 4  # 3 lines and the schedule's
    assert 'stroke-width="9"' in svg and "schedule: each load&#x27;s pick (numbers: streams in flight)" in svg
    assert re.findall(r'class="tag"[^>]*>([^<]*)<', svg) == ["1", "4", "16", "32"]
    note = re.search(r'<p class="note" id="pareto-note">(.*?)</p>', svg)
    assert note is not None and "the schedule&#x27;s points on it: 4 of 4" in note.group(1)
    assert "k=5 at 1 stream (200.0 per user, 190.0 aggregate)" in note.group(1)
    assert svg.index('stroke-width="9"') < svg.index('class="pt"')  # the schedule's wide line beneath the points
    assert sweep_plots.PARETO_TITLE in sweep_report.html(RESULTS, None, 98.0)  # report.html draws it


def test_the_pages_chart_puts_each_load_buckets_point_beside_plain_decodings_at_that_load():
    rows = (LoadSpeedup(1, 8, 1.0, 150.0, 100.0, "measured", 1.5, 0.02),
            LoadSpeedup(4, 8, 3.6, 100.0, 80.0, "interpolated", 1.25, 0.02),
            LoadSpeedup(16, 3, 15.0, 30.0, None, "outside", None, None))  # past the curve: no baseline there
    svg = load_pareto_chart(LoadVerdict(rows, None, None))
    assert LOAD_PARETO in svg and svg.count('class="pt"') == 5  # 3 buckets and 2 baseline points
    assert svg.count("<polyline") == 2 and re.findall(r'class="tag"[^>]*>([^<]*)<', svg) == ["1", "3.6", "15"]
    assert "plain decoding at the same loads (baseline curve)" in svg and "stroke-dasharray" in svg
    assert ticks(svg, "y") == ["0", "100", "200", "300", "400", "500"]  # 150 .. 450 = 15 x 30 and 3.6 x 100
    assert "no data yet" in load_pareto_chart(None)
    assert "no baseline curve at these loads" in load_pareto_chart(LoadVerdict(rows[2:], None, None))


def ticks(svg: str, axis: str) -> list[str]:
    return re.findall(rf'class="{axis}tick">([^<]*)<', svg)

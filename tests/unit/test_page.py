"""The sweep winner's confidence (a table of margins) and the SVG charts (every point drawn, ticks a person
can read: several, 1-2-5 steps, the y range fitted to the data and said so)."""

import itertools
import re

import pytest

from specwatch.analysis.compare import margin
from specwatch.export.svg import Series, bar_chart, line_chart


def ticks(svg: str, axis: str) -> list[str]:
    return re.findall(rf'class="{axis}tick">([^<]*)<', svg)


def nice(labels: list[str]) -> bool:
    """Evenly spaced by 1, 2 or 5 times a power of ten, with no float noise."""
    vals = [float(v) for v in labels]
    steps = {round(b - a, 9) for a, b in itertools.pairwise(vals)}
    return len(steps) == 1 and f"{steps.pop():e}"[0] in "125" and all(len(v) < 10 for v in labels)


@pytest.mark.parametrize(("a", "b", "ratio", "tie"), [
    ([94, 95, 93, 94, 96], [90, 91, 89, 90, 90], 94.4 / 90 - 1, False),  # 5% ahead, tight: a real win
    ([94, 80, 105, 90, 101], [90, 99, 82, 95, 84], 94.0 / 90 - 1, True),  # 4% ahead inside the noise: a tie
    ([94], [90], 94 / 90 - 1, False),  # one request each: no interval, so never called a tie
])
def test_margin_and_tie(a, b, ratio, tie):
    m = margin(a, b)
    assert m is not None and m.ratio == pytest.approx(ratio) and m.tie is tie
    assert ("a tie" in m.text()) is tie
    if len(a) > 1:
        assert m.low < m.ratio < m.high


def test_line_chart_draws_every_finite_point_and_reference_lines_without_points():
    svg = line_chart("t", [Series("a", [(0, 1.0), (1, 2.0), (2, float("nan")), (3, 4.0)]),
                           Series("base", [(0, 3.0), (3, 3.0)], dashed=True)], "x", "y")
    assert svg.count('class="pt"') == 3 and svg.count("<polyline") == 2 and "stroke-dasharray" in svg
    assert line_chart("t", [Series("a", [])], "x", "y").count("no data yet") == 1


def test_bar_chart_clamps_to_its_range():
    svg = bar_chart("p", ["1", "2"], [0.5, 1.7])
    heights = [float(h) for h in re.findall(r'<rect [^>]*height="([\d.]+)"', svg)]
    assert len(heights) == 2 and heights[1] == pytest.approx(2 * heights[0])
    assert ticks(svg, "y") == ["0.0", "0.2", "0.4", "0.6", "0.8", "1.0"]


def test_line_chart_ticks_are_several_and_nice_and_the_y_range_fits_the_data():
    """Issue 35's page: tok/s at 67-92 over 4-30 s of uptime was labelled 0 and 50, and 0.0667 … 0.503 min."""
    svg = line_chart("t", [Series("spec", [(4.0, 67.0), (17.0, 80.0), (30.18, 92.0)]),
                           Series("base", [(4.0, 75.0), (30.18, 75.0)], dashed=True)], "time since start", "tok/s",
                     "time")
    assert ticks(svg, "y") == ["65", "70", "75", "80", "85", "90", "95"]
    assert ticks(svg, "x") == ["0", "5", "10", "15", "20", "25", "30", "35"] and "time since start (s)" in svg
    assert "axis from 65 to 95, not from 0" in svg  # said, in the legend row above the plot
    near_zero = line_chart("t", [Series("a", [(0.0, 10.0), (600.0, 92.0)])], "time since start", "y", "time")
    assert ticks(near_zero, "y")[0] == "0" and "not from 0" not in near_zero
    assert ticks(near_zero, "x") == ["0", "2", "4", "6", "8", "10"] and "(min)" in near_zero
    steps = line_chart("t", [Series("a", [(1.0, 2.0), (2.0, 3.0), (5.0, 2.5)])], "draft steps", "y", "whole")
    assert ticks(steps, "x") == ["1", "2", "3", "4", "5"]
    for chart in (svg, near_zero, steps):
        assert len(ticks(chart, "x")) > 2 and len(ticks(chart, "y")) > 2
        assert nice(ticks(chart, "x")) and nice(ticks(chart, "y"))


def test_line_chart_puts_the_legend_above_the_plot():
    svg = line_chart("t", [Series("spec", [(0.0, 1.0), (1.0, 2.0)])], "x", "y")
    assert svg.index('class="legend"') < svg.index("<svg") and "spec" not in svg[svg.index("<svg"):].split("<title>")[0]

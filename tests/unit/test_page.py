"""The sweep winner's confidence (a table of margins) and the SVG charts (every point drawn)."""

import re

import pytest

from specwatch.analysis.compare import margin
from specwatch.export.svg import Series, bar_chart, line_chart


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

"""Charts as inline SVG, drawn here: no chart library, nothing fetched, so a page opens from disk or behind a
firewall. Exporter stage; pure (numbers in, markup out). Every data point is a ``<circle class="pt">`` so a
test can count what was drawn."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from html import escape

from .ticks import Ticks, data_ticks, nice_ticks, time_ticks

COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b")


@dataclass(frozen=True, slots=True)
class Series:
    name: str
    points: Sequence[tuple[float, float]]  # (x, y); non-finite y values are skipped
    dashed: bool = False  # a reference line (baseline, break-even)
    colour: str = ""  # a fixed colour (default: COLOURS by the series' place)
    marks: str = ""  # "dot" (class pt), "none" or "ring" (open rings, class opt, no line); default: dot unless dashed
    wide: bool = False  # drawn wide and pale beneath the other series: a path that runs across them
    tags: Sequence[str] = ()  # a short text by each point, above and right of it (the streams of a Pareto point)

    @property
    def mark(self) -> str:
        return self.marks or ("none" if self.dashed else "dot")

    def key(self) -> str:
        return "○ " if self.mark == "ring" else "▬▬ " if self.wide else "╌╌ " if self.dashed else "━━ "


X_KINDS = ("number", "whole", "time")  # time: x in seconds, shown in s, min or h by the span
WIDTH, HEIGHT = 560, 250
LEFT, RIGHT, TOP, BOTTOM, INSET = 56, 16, 10, 42, 6


def _fmt(v: float) -> str:
    return f"{v:.0f}" if abs(v) >= 100 else f"{v:.3g}"


def _empty(title: str) -> str:
    return f'<figure class="chart"><figcaption>{escape(title)}</figcaption><p class="empty">no data yet</p></figure>'


def _x_axis(lo: float, hi: float, kind: str, label: str) -> tuple[Ticks, float, str]:
    """The x ticks, the divisor placing an x value on them, and the axis label with its unit."""
    if kind == "time":
        t = time_ticks(lo, hi)
        return t.ticks, t.seconds, f"{label} ({t.unit})"
    return nice_ticks(lo, hi, min_step=1.0 if kind == "whole" else 0.0), 1.0, label


def _colour(s: Series, i: int) -> str:
    return s.colour or COLOURS[i % len(COLOURS)]


def _legend(series: Sequence[Series], note: str) -> str:
    keys = " ".join(f'<span style="color:{_colour(s, i)}">{s.key()}{escape(s.name)}</span>'
                    for i, s in enumerate(series))
    return f'<div class="legend">{keys}{f" <span class=note>· y {escape(note)}</span>" if note else ""}</div>'


def _draw(s: Series, colour: str, sx: Callable[[float], float], sy: Callable[[float], float]) -> list[str]:
    """One series' line, marks and tags (its non-finite points left out)."""
    good = [(x, y) for x, y in s.points if math.isfinite(y) and math.isfinite(x)]
    if not good:
        return []
    out = []
    if s.mark != "ring":
        path = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in good)
        dash = ' stroke-dasharray="6 4"' if s.dashed else ""
        width = ' stroke-width="9" stroke-opacity="0.3" stroke-linecap="round" stroke-linejoin="round"' if s.wide \
            else ' stroke-width="2"'
        out.append(f'<polyline points="{path}" fill="none" stroke="{colour}"{width}{dash}/>')
    if s.mark == "dot":
        out += [f'<circle class="pt" cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="3" fill="{colour}">'
                f'<title>{escape(s.name)}: {_fmt(y)}</title></circle>' for x, y in good]
    elif s.mark == "ring":
        out += [f'<circle class="opt" cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="7" fill="none" stroke="{colour}" '
                f'stroke-width="1.5"><title>{escape(s.name)}</title></circle>' for x, y in good]
    out += [f'<text class="tag" x="{sx(x) + 9:.1f}" y="{sy(y) - 8:.1f}">{escape(t)}</text>'
            for (x, y), t in zip(s.points, s.tags, strict=False) if math.isfinite(x) and math.isfinite(y)]
    return out


def line_chart(title: str, series: Sequence[Series], x_label: str, y_label: str, x_kind: str = "number") -> str:
    """Ticks from ``ticks`` on both axes; the y range fitted to the data (``data_ticks``), said in the legend
    when it leaves zero out; the legend above the plot, clear of the data."""
    pts = [(x, y) for s in series for x, y in s.points if math.isfinite(y) and math.isfinite(x)]
    if not pts:
        return _empty(title)
    xt, x_div, x_text = _x_axis(min(p[0] for p in pts), max(p[0] for p in pts), x_kind, x_label)
    yt = data_ticks(min(p[1] for p in pts), max(p[1] for p in pts))
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM

    def sx(x: float) -> float:  # the data inset by INSET from the frame, so end points are not cut in half
        return LEFT + INSET + (x / x_div - xt.lo) / (xt.hi - xt.lo) * (plot_w - 2 * INSET)

    def sy(y: float) -> float:
        return HEIGHT - BOTTOM - (y - yt.lo) / (yt.hi - yt.lo) * plot_h

    out = [f'<figure class="chart"><figcaption>{escape(title)}</figcaption>{_legend(series, yt.note())}'
           f'<svg viewBox="0 0 {WIDTH} {HEIGHT}" width="{WIDTH}" height="{HEIGHT}" role="img" '
           f'aria-label="{escape(title)}">']
    for v, text in zip(yt.values, yt.labels, strict=True):
        y = sy(v)
        out.append(f'<line x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{y:.1f}" y2="{y:.1f}" class="grid"/>'
                   f'<text x="{LEFT - 6}" y="{y + 4:.1f}" text-anchor="end" class="ytick">{text}</text>')
    for v, text in zip(xt.values, xt.labels, strict=True):
        x = sx(v * x_div)
        out.append(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{TOP}" y2="{HEIGHT - BOTTOM}" class="grid"/>'
                   f'<text x="{x:.1f}" y="{HEIGHT - BOTTOM + 16}" text-anchor="middle" class="xtick">{text}</text>')
    mid_y = (TOP + HEIGHT - BOTTOM) / 2
    out.append(f'<text x="{LEFT + plot_w / 2}" y="{HEIGHT - 6}" text-anchor="middle" class="label">'
               f'{escape(x_text)}</text><text x="14" y="{mid_y}" class="label" '
               f'transform="rotate(-90 14 {mid_y})" text-anchor="middle">{escape(y_label)}</text>')
    for i, s in sorted(enumerate(series), key=lambda e: not e[1].wide):  # the wide ones first, beneath
        out += _draw(s, _colour(s, i), sx, sy)
    out.append("</svg></figure>")
    return "".join(out)


def bar_chart(title: str, labels: Sequence[str], values: Sequence[float], y_max: float = 1.0) -> str:
    """Bars from 0 to ``y_max`` (values beyond it clamped), y ticks from ``nice_ticks``."""
    if not values:
        return _empty(title)
    width, height, left, bottom, top = WIDTH, 200, 40, 28, 10
    slot = (width - left) / len(values)
    out = [f'<figure class="chart"><figcaption>{escape(title)}</figcaption>'
           f'<svg viewBox="0 0 {width} {height}" width="{width}" height="{height}" role="img" '
           f'aria-label="{escape(title)}">']
    yt = nice_ticks(0.0, y_max)
    y_max = yt.hi
    for t, text in zip(yt.values, yt.labels, strict=True):
        y = height - bottom - t / y_max * (height - top - bottom)
        out.append(f'<line x1="{left}" x2="{width}" y1="{y:.1f}" y2="{y:.1f}" class="grid"/>'
                   f'<text x="{left - 6}" y="{y + 4:.1f}" text-anchor="end" class="ytick">{text}</text>')
    for i, (label, v) in enumerate(zip(labels, values, strict=True)):
        h = max(0.0, min(v, y_max)) / y_max * (height - top - bottom)
        x = left + i * slot + slot * 0.15
        out.append(f'<rect x="{x:.1f}" y="{height - bottom - h:.1f}" width="{slot * 0.7:.1f}" height="{h:.1f}" '
                   f'fill="{COLOURS[0]}"><title>{escape(label)}: {_fmt(v)}</title></rect>'
                   f'<circle class="pt" cx="{x + slot * 0.35:.1f}" cy="{height - bottom - h:.1f}" r="2" '
                   f'fill="{COLOURS[0]}"/>'
                   f'<text x="{x + slot * 0.35:.1f}" y="{height - 10}" text-anchor="middle">{escape(label)}</text>')
    out.append("</svg></figure>")
    return "".join(out)

"""Charts as inline SVG, drawn here: no chart library, nothing fetched, so a page opens from disk or behind a
firewall. Exporter stage; pure (numbers in, markup out). Every data point is a ``<circle class="pt">`` so a
test can count what was drawn."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from html import escape

COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b")


@dataclass(frozen=True, slots=True)
class Series:
    name: str
    points: Sequence[tuple[float, float]]  # (x, y); non-finite y values are skipped
    dashed: bool = False  # a reference line (baseline, break-even)


def _ticks(lo: float, hi: float, n: int = 4) -> list[float]:
    if hi <= lo:
        return [lo]
    step = 10 ** math.floor(math.log10((hi - lo) / n))
    for m in (1, 2, 5, 10):
        if (hi - lo) / (step * m) <= n:
            step *= m
            break
    first = math.ceil(lo / step) * step
    return [first + i * step for i in range(int((hi - first) / step) + 1)]


def _fmt(v: float) -> str:
    return f"{v:.0f}" if abs(v) >= 100 else f"{v:.3g}"


def line_chart(title: str, series: Sequence[Series], x_label: str, y_label: str, width: int = 560,
               height: int = 240, x_text: Sequence[tuple[float, str]] | None = None) -> str:
    pts = [(x, y) for s in series for x, y in s.points if math.isfinite(y) and math.isfinite(x)]
    if not pts:
        return (f'<figure class="chart"><figcaption>{escape(title)}</figcaption>'
                f'<p class="empty">no data yet</p></figure>')
    left, right, top, bottom = 56, 12, 10, 40
    x0, x1 = min(p[0] for p in pts), max(p[0] for p in pts)
    y0, y1 = min(0.0, min(p[1] for p in pts)), max(p[1] for p in pts) * 1.1 or 1.0
    x1 = x1 if x1 > x0 else x0 + 1

    def sx(x: float) -> float:
        return left + (x - x0) / (x1 - x0) * (width - left - right)

    def sy(y: float) -> float:
        return height - bottom - (y - y0) / (y1 - y0) * (height - top - bottom)

    legend = " ".join(f'<span style="color:{COLOURS[i % len(COLOURS)]}">{"- - " if s.dashed else "— "}'
                      f'{escape(s.name)}</span>' for i, s in enumerate(series))
    out = [f'<figure class="chart"><figcaption>{escape(title)}</figcaption><div class="legend">{legend}</div>'
           f'<svg viewBox="0 0 {width} {height}" width="{width}" height="{height}" role="img" '
           f'aria-label="{escape(title)}">']
    for t in _ticks(y0, y1):
        out.append(f'<line x1="{left}" x2="{width - right}" y1="{sy(t):.1f}" y2="{sy(t):.1f}" class="grid"/>'
                   f'<text x="{left - 6}" y="{sy(t) + 4:.1f}" text-anchor="end">{_fmt(t)}</text>')
    for x, text in x_text or [(x0, _fmt(x0)), (x1, _fmt(x1))]:
        anchor = "start" if x == x0 and len(x_text or ()) != 1 else "end" if x == x1 else "middle"
        out.append(f'<text x="{sx(x):.1f}" y="{height - bottom + 16}" text-anchor="{anchor}">{escape(text)}</text>')
    mid_y = (top + height - bottom) / 2
    out.append(f'<text x="{(left + width - right) / 2}" y="{height - 4}" text-anchor="middle" class="label">'
               f'{escape(x_label)}</text><text x="12" y="{mid_y}" class="label" '
               f'transform="rotate(-90 12 {mid_y})" text-anchor="middle">{escape(y_label)}</text>')
    for i, s in enumerate(series):
        colour = COLOURS[i % len(COLOURS)]
        good = [(x, y) for x, y in s.points if math.isfinite(y) and math.isfinite(x)]
        if not good:
            continue
        path = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in good)
        dash = ' stroke-dasharray="6 4"' if s.dashed else ""
        out.append(f'<polyline points="{path}" fill="none" stroke="{colour}" stroke-width="2"{dash}/>')
        if not s.dashed:
            out += [f'<circle class="pt" cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="3" fill="{colour}">'
                    f'<title>{escape(s.name)}: {_fmt(y)}</title></circle>' for x, y in good]
    out.append("</svg></figure>")
    return "".join(out)


def bar_chart(title: str, labels: Sequence[str], values: Sequence[float], y_max: float = 1.0, width: int = 560,
              height: int = 200) -> str:
    if not values:
        return (f'<figure class="chart"><figcaption>{escape(title)}</figcaption>'
                f'<p class="empty">no data yet</p></figure>')
    left, bottom, top = 40, 28, 10
    slot = (width - left) / len(values)
    out = [f'<figure class="chart"><figcaption>{escape(title)}</figcaption>'
           f'<svg viewBox="0 0 {width} {height}" width="{width}" height="{height}" role="img" '
           f'aria-label="{escape(title)}">']
    for t in (0.0, y_max / 2, y_max):
        y = height - bottom - t / y_max * (height - top - bottom)
        out.append(f'<line x1="{left}" x2="{width}" y1="{y:.1f}" y2="{y:.1f}" class="grid"/>'
                   f'<text x="{left - 6}" y="{y + 4:.1f}" text-anchor="end">{_fmt(t)}</text>')
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

"""A finished sweep's charts: ``sweep.png`` (aggregate tok/s and accept length by draft steps),
``sweep-load.png`` (per-stream decode tok/s by concurrency), ``sweep-pareto.png`` (per-user against aggregate
tok/s, ``pareto``'s data) and the report's inline SVG of the first and the last. Exporter stage; pure but for
the files it writes. The PNGs and the SVGs take their ticks from ``ticks``, and every title and axis says which
tok/s it plots: aggregate (every stream's output tokens ÷ wall time) or per-stream decode (one stream's tokens
after its first ÷ its decode time)."""

from __future__ import annotations

from collections.abc import Sequence
from html import escape
from pathlib import Path
from typing import Any

from ..results import ConfigResult, levels, plain_of
from .pareto import AGGREGATE as PARETO_Y
from .pareto import PER_USER, Pareto, frontier_text, pareto
from .pareto import SCHEDULE as PARETO_SCHEDULE
from .svg import Series, line_chart
from .ticks import data_ticks, nice_ticks

AGGREGATE = "aggregate output tok/s"
STEPS_TITLE = "Aggregate output tok/s (all streams) by draft steps"
PARETO_TITLE = "Per-user vs aggregate tok/s, a line per configuration over its loads"
PARETO_AXES = ("x: per-user tok/s = per-stream decode (one stream's tokens after its first ÷ its decode time); "
               "y: aggregate output tok/s (all streams' tokens ÷ wall time)")
CONFIG_COLOURS = ("#1f77b4", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf", "#bcbd22")
PLAIN_COLOUR, SCHEDULE_COLOUR, FRONTIER_COLOUR = "#d62728", "#7f7f7f", "#111111"
STREAMS_NOTE = " (numbers: streams in flight)"
NO_PLOT = "install the plot extra (pip install 'specwatch[plot]')"


def _pyplot() -> Any:
    """matplotlib's pyplot on its file-only backend, or None without the plot extra."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    return plt


def _set_y(ax: Any, values: Sequence[float], label: str) -> None:
    """The y range and ticks from ``data_ticks``; the label says so when the axis leaves zero out."""
    t = data_ticks(min(values), max(values))
    ax.set_ylim(t.lo, t.hi)
    ax.set_yticks(t.values, t.labels)
    ax.set_ylabel(label + (f"\n({t.note()})" if t.note() else ""))


def _set_steps(ax: Any, steps: Sequence[float]) -> None:
    t = nice_ticks(min(steps), max(steps), min_step=1.0)  # draft steps are whole numbers
    pad = 0.04 * (t.hi - t.lo)  # so the end points are not cut in half by the frame
    ax.set_xlim(t.lo - pad, t.hi + pad)
    ax.set_xticks(t.values, t.labels)
    ax.set_xlabel("draft steps")


def _save(fig: Any, plt: Any, path: Path, title: str, legend: str, columns: int = 1) -> None:
    """Title, the legend outside the plot area (``legend``: a matplotlib 'outside …' location), the file."""
    fig.suptitle(title, fontsize=11)
    fig.legend(loc=legend, frameon=False, fontsize=9, ncols=columns)
    fig.savefig(path)
    plt.close(fig)


def _by_steps(results: Sequence[ConfigResult]) -> list[tuple[int, float, float | None]]:
    """(draft steps, aggregate tok/s, accept length) of each finished speculative configuration."""
    return sorted((r.steps, r.tokens_per_second or 0.0, r.accept_length) for r in results if r.ok and r.steps)


def plot(path: Path, results: Sequence[ConfigResult], base_tps: float | None) -> str:
    """sweep.png, at the lowest concurrency, with plain decoding's aggregate as a dashed line."""
    plt = _pyplot()
    if plt is None:
        return f"plot skipped: {NO_PLOT}"
    pts = _by_steps(results)
    if not pts:
        return "plot skipped: no speculative configuration finished"
    steps, tps = [float(p[0]) for p in pts], [p[1] for p in pts]
    fig, ax = plt.subplots(figsize=(7.5, 4.8), dpi=110, layout="constrained")
    ax.plot(steps, tps, "o-", color="tab:blue", label=AGGREGATE)
    if base_tps:
        ax.axhline(base_tps, color="tab:red", ls="--", label=f"plain decoding, {base_tps:.1f} aggregate tok/s")
    ax.grid(axis="y", color="#e4e4e4")
    _set_steps(ax, steps)
    _set_y(ax, tps + ([base_tps] if base_tps else []), f"{AGGREGATE} (all streams)")
    accept = [(float(s), al) for s, _, al in pts if al is not None]
    if accept:
        ax2 = ax.twinx()
        ax2.plot([a[0] for a in accept], [a[1] for a in accept], "s:", color="tab:green", label="accept length")
        _set_y(ax2, [a[1] for a in accept], "accept length (tokens / verify round)")
    cs = levels(results)
    at = f", {cs[0]} stream{'s' if cs[0] > 1 else ''} in flight" if cs else ""
    _save(fig, plt, path, f"Aggregate output tok/s (all streams{at}) and accept length by draft steps",
          "outside lower center")
    return f"plot: {path}"


def _powers_of_two(cs: Sequence[int]) -> list[int]:
    """The levels measured and every power of two between them: the log2 axis's ticks."""
    return sorted(set(cs) | {2**k for k in range(max(cs).bit_length()) if min(cs) <= 2**k <= max(cs)})


def plot_load(path: Path, results: Sequence[ConfigResult]) -> str:
    """sweep-load.png: a line per configuration (plain decoding dashed), concurrency on a log2 axis."""
    plt = _pyplot()
    if plt is None:
        return f"load plot skipped: {NO_PLOT}"
    cs, plain = levels(results), plain_of(results)
    fig, ax = plt.subplots(figsize=(7.5, 4.8), dpi=110, layout="constrained")
    ys: list[float] = []
    for r in results:
        if not r.ok:
            continue
        pts = [(c, t) for c in cs if (t := r.stream_tps(c))]
        ys += [p[1] for p in pts]
        ax.plot([p[0] for p in pts], [p[1] for p in pts], "--" if r is plain else "o-",
                color="tab:red" if r is plain else None, label=r.label + (" (plain)" if r is plain else ""))
    if cs:
        ax.set_xscale("log", base=2)
        ax.set_xticks(_powers_of_two(cs), [str(c) for c in _powers_of_two(cs)])
        ax.minorticks_off()
    ax.set_xlabel("concurrency (streams in flight)")
    ax.grid(axis="y", color="#e4e4e4")
    if ys:
        _set_y(ax, ys, "per-stream decode tok/s")
    _save(fig, plt, path, "Per-stream decode tok/s by concurrency\n(one stream's tokens after its first ÷ its "
          "decode time)", "outside right upper")
    return f"load plot: {path}"


def steps_chart(results: Sequence[ConfigResult], base_tps: float | None) -> str:
    """report.html's inline SVG of sweep.png's tok/s line."""
    pts = _by_steps(results)
    series = [Series(AGGREGATE, [(float(s), t) for s, t, _ in pts])]
    if base_tps and pts:
        series.append(Series(f"plain decoding {base_tps:.1f}", [(float(pts[0][0]), base_tps),
                                                               (float(pts[-1][0]), base_tps)], dashed=True))
    return line_chart(STEPS_TITLE, series, "draft steps", AGGREGATE, "whole")


def _colours(p: Pareto) -> list[str]:
    """Plain decoding red (as in sweep-load.png), the others from a palette without red."""
    out, i = [], 0
    for line in p.lines:
        out.append(PLAIN_COLOUR if line.plain else CONFIG_COLOURS[i % len(CONFIG_COLOURS)])
        i += not line.plain
    return out


def _set_x(ax: Any, values: Sequence[float], label: str) -> None:
    """As ``_set_y``, for the x axis."""
    t = data_ticks(min(values), max(values))
    ax.set_xlim(t.lo, t.hi)
    ax.set_xticks(t.values, t.labels)
    ax.set_xlabel(label + (f" ({t.note()})" if t.note() else ""))


def plot_pareto(path: Path, results: Sequence[ConfigResult]) -> str:
    """sweep-pareto.png: a line per configuration (plain decoding dashed), the schedule's line wide and grey
    beneath them with each point's streams in flight, the Pareto-optimal points ringed."""
    plt = _pyplot()
    if plt is None:
        return f"pareto plot skipped: {NO_PLOT}"
    p = pareto(results)
    pts = [q for line in p.lines for q in line.points]
    if not pts:
        return "pareto plot skipped: no configuration finished"
    fig, ax = plt.subplots(figsize=(8.5, 5.2), dpi=110, layout="constrained")
    sched = p.schedule.points
    if sched:
        ax.plot([q.per_user_tps for q in sched], [q.aggregate_tps for q in sched], "-", color=SCHEDULE_COLOUR,
                lw=9, alpha=0.35, solid_capstyle="round", zorder=1, label=PARETO_SCHEDULE + STREAMS_NOTE)
        for q in sched:
            # above and right of the point: where nothing is drawn when the point is on the frontier
            ax.annotate(str(q.concurrency), (q.per_user_tps, q.aggregate_tps), textcoords="offset points",
                        xytext=(7, 5), fontsize=8, color="#444")
    for line, colour in zip(p.lines, _colours(p), strict=True):
        ax.plot([q.per_user_tps for q in line.points], [q.aggregate_tps for q in line.points],
                "o--" if line.plain else "o-", color=colour, ms=4, zorder=3,
                label=line.name + (" (plain decoding)" if line.plain else ""))
    ax.scatter([q.per_user_tps for q in p.frontier], [q.aggregate_tps for q in p.frontier], s=140,
               facecolors="none", edgecolors=FRONTIER_COLOUR, linewidths=1.3, zorder=4, label="Pareto-optimal")
    ax.grid(color="#e4e4e4")
    _set_x(ax, [q.per_user_tps for q in pts], PER_USER)
    _set_y(ax, [q.aggregate_tps for q in pts], PARETO_Y)
    # the legend below the plot, in rows: beside it, it would run into the three-line title
    _save(fig, plt, path, f"{PARETO_TITLE} (up and right is better)\n{PARETO_AXES.replace('; ', chr(10))}",
          "outside lower center", min(3, len(p.lines) + 2))
    return f"pareto plot: {path}"


def pareto_chart(results: Sequence[ConfigResult]) -> str:
    """report.html's inline SVG of sweep-pareto.png, and the frontier in words beneath it."""
    p = pareto(results)
    series = [Series(line.name + (" (plain)" if line.plain else ""),
                     [(q.per_user_tps, q.aggregate_tps) for q in line.points], dashed=line.plain, colour=colour,
                     marks="dot") for line, colour in zip(p.lines, _colours(p), strict=True)]
    sched = p.schedule.points
    if sched:
        series.append(Series(PARETO_SCHEDULE + STREAMS_NOTE, [(q.per_user_tps, q.aggregate_tps) for q in sched],
                             colour=SCHEDULE_COLOUR, marks="none", wide=True, tags=[str(q.concurrency) for q in sched]))
    series.append(Series("Pareto-optimal", [(q.per_user_tps, q.aggregate_tps) for q in p.frontier],
                         colour=FRONTIER_COLOUR, marks="ring"))
    chart = line_chart(PARETO_TITLE, series, PER_USER, AGGREGATE)  # the short name: the SVG is 250 px high
    text = frontier_text(p)
    note = f'<p class="note" id="pareto-note">{escape(PARETO_AXES)}. {escape(text)}</p>' if text else ""
    return f'<section id="pareto">{chart}{note}</section>'  # report.html#pareto opens at the chart

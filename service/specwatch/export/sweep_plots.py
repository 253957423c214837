"""A finished sweep's charts: ``sweep.png`` (aggregate tok/s and accept length by draft steps),
``sweep-load.png`` (per-stream decode tok/s by concurrency) and the report's inline SVG of the first. Exporter
stage; pure but for the files it writes. Both the PNGs and the SVG take their ticks from ``ticks``, and every
title and axis says which tok/s it plots: aggregate (every stream's output tokens ÷ wall time) or per-stream
decode (one stream's tokens after its first ÷ its decode time)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..results import ConfigResult, levels, plain_of
from .svg import Series, line_chart
from .ticks import data_ticks, nice_ticks

AGGREGATE = "aggregate output tok/s"
STEPS_TITLE = "Aggregate output tok/s (all streams) by draft steps"
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


def _save(fig: Any, plt: Any, path: Path, title: str, legend: str) -> None:
    """Title, the legend outside the plot area (``legend``: a matplotlib 'outside …' location), the file."""
    fig.suptitle(title, fontsize=11)
    fig.legend(loc=legend, frameon=False, fontsize=9)
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

"""Sweep reports: the HTML report and the PNGs of a finished sweep, and the files its engine advice names
(the terminal's tables and the CSV: ``sweep_tables``). Exporter stage; pure but for the files it writes."""

from __future__ import annotations

from collections.abc import Sequence
from html import escape
from pathlib import Path

from ..analysis.comparisons import MEASURE, Band, comparisons
from ..analysis.engine_flags import EngineAdvice
from ..results import ConfigResult, levels, plain_of
from .format import fmt
from .svg import Series, line_chart


def write_advice_files(out: Path, advice: Sequence[EngineAdvice]) -> None:
    """The files the printed flags name (SGLang's adaptive config), in ``out``, where the flags say they are."""
    for a in advice:
        for name, content in a.files:
            (out / name).write_text(content + "\n", encoding="utf-8")


def baseline_tps(results: Sequence[ConfigResult]) -> float | None:
    plain = plain_of(results)
    return plain.tokens_per_second if plain is not None else None


def plot(path: Path, results: Sequence[ConfigResult], base_tps: float | None) -> str:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "plot skipped: install the plot extra (pip install 'specwatch[plot]')"
    pts = sorted((r.steps, r.tokens_per_second or 0.0, r.accept_length) for r in results if r.ok and r.steps)
    if not pts:
        return "plot skipped: no speculative configuration finished"
    fig, ax = plt.subplots(figsize=(7, 4.2), dpi=110)
    ax.plot([p[0] for p in pts], [p[1] for p in pts], "o-", color="tab:blue", label="tok/s")
    if base_tps:
        ax.axhline(base_tps, color="tab:red", ls="--", label=f"baseline {base_tps:.1f} tok/s")
    ax.set_xlabel("draft steps")
    ax.set_xticks([p[0] for p in pts])
    ax.set_ylabel("tok/s")
    ax2 = ax.twinx()
    ax2.plot([p[0] for p in pts], [p[2] or 1.0 for p in pts], "s:", color="tab:green", label="accept length")
    ax2.set_ylabel("accept length")
    handles = ax.get_legend_handles_labels()[0] + ax2.get_legend_handles_labels()[0]
    ax.legend(handles, [str(h.get_label()) for h in handles], loc="upper right")
    ax.set_title("specwatch sweep: tok/s and accept length by draft steps")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return f"plot: {path}"


def plot_load(path: Path, results: Sequence[ConfigResult]) -> str:
    """Per-stream decode tok/s against concurrency, a line per configuration (plain decoding dashed)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "load plot skipped: install the plot extra (pip install 'specwatch[plot]')"
    cs = levels(results)
    plain = plain_of(results)
    fig, ax = plt.subplots(figsize=(7, 4.2), dpi=110)
    for r in results:
        if not r.ok:
            continue
        pts = [(c, t) for c in cs if (t := r.stream_tps(c))]
        ax.plot([p[0] for p in pts], [p[1] for p in pts], "--" if r is plain else "o-",
                color="tab:red" if r is plain else None, label=r.label + (" (plain)" if r is plain else ""))
    ax.set_xscale("log", base=2)
    ax.set_xticks(cs, [str(c) for c in cs])
    ax.set_xlabel("concurrency (streams in flight)")
    ax.set_ylabel("per-stream decode tok/s")
    ax.legend(loc="upper right")
    ax.set_title("specwatch sweep: tok/s by concurrency")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return f"load plot: {path}"


CSS = """body{font:14px/1.4 system-ui,sans-serif;margin:24px;color:#222;max-width:1100px}
table{border-collapse:collapse}td,th{padding:3px 10px;border-bottom:1px solid #eee;text-align:right}
th:first-child,td:first-child{text-align:left}.win{background:#e3f6e3}.fail{color:#b00}
svg text{font-size:11px;fill:#444}svg .label{font-size:12px}svg .grid{stroke:#ddd}figcaption{font-weight:600}
.legend{font-size:12px}
pre{background:#f6f6f6;padding:12px;overflow:auto}"""


def html(results: Sequence[ConfigResult], band: Band | None, base_tps: float | None, advice: str = "") -> str:
    """``report.html``: the pick with its margin, the table, the plot and the advisor, self-contained; every
    margin is ``comparisons``' own, as the terminal prints it."""
    c0 = band.concurrency if band is not None else (levels(results) or [1])[0]
    cmp = comparisons(results)
    rows = []
    for r in results:
        if not r.ok:
            rows.append(f'<tr class="fail"><td>{escape(r.label)}</td><td colspan="6">FAILED: '
                        f'{escape((r.error.splitlines() or [""])[0])}</td></tr>')
            continue
        res, vs = r.at(c0).results, cmp.get((r.label, c0))
        rows.append(f'<tr class="{"win" if band and r.label == band.winner else ""}"><td>{escape(r.label)}</td>'
                    f'<td>{fmt(res.decode_tokens_per_second if res else None, ".1f")}</td>'
                    f'<td>{fmt(res.avg_tokens_per_second if res else None, ".1f")}</td>'
                    f'<td>{fmt(res.overall_tokens_per_second if res else None, ".1f")}</td>'
                    f'<td>{fmt(r.at(c0).accept_length, ".2f")}</td><td>{res.ok if res else 0}</td>'
                    f'<td>{escape(vs.short() if vs else "-")}</td></tr>')
    where = f" (at {c0} stream{'s' if c0 > 1 else ''}, the lowest load)" if len(levels(results)) > 1 else ""
    verdict = "no configuration finished" if band is None else f"winner: {escape(band.sentence())}{where}"
    pts = sorted((r.steps, r.tokens_per_second or 0.0) for r in results if r.ok and r.steps)
    series = [Series("tok/s", [(float(s), t) for s, t in pts])]
    if base_tps and pts:
        series.append(Series(f"baseline {base_tps:.1f}", [(float(pts[0][0]), base_tps), (float(pts[-1][0]),
                                                                                         base_tps)], dashed=True))
    plot = line_chart("tok/s by draft steps", series, "draft steps", "tok/s",
                      x_text=[(float(s), str(s)) for s, _ in pts])
    return f"""<!doctype html><html lang="en"><head><meta charset="utf-8"><title>specwatch sweep</title>
<style>{CSS}</style></head><body><h1>specwatch sweep</h1><p id="winner">{verdict}</p>
<table><tr><th>configuration</th><th>decode tok/s per stream</th><th>tok/s per request</th><th>aggregate tok/s</th>
<th>accept length</th><th>requests</th><th>vs plain ({MEASURE}, 95% interval)</th></tr>{"".join(rows)}</table>{plot}
{f"<h2>Advisor</h2><pre>{escape(advice)}</pre>" if advice else ""}</body></html>"""

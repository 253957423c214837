"""Sweep reports: the comparison table, CSV and PNG of a finished sweep, and the files its engine advice
names. Exporter stage; pure but for the files it writes."""

from __future__ import annotations

import csv
from collections.abc import Sequence
from html import escape
from pathlib import Path

from ..analysis.compare import Margin, margin
from ..analysis.engine_flags import EngineAdvice
from ..results import ConfigResult, levels, plain_of
from .format import fmt
from .svg import Series, line_chart


def write_advice_files(out: Path, advice: Sequence[EngineAdvice]) -> None:
    """The files the printed flags name (SGLang's adaptive config), in ``out``, where the flags say they are."""
    for a in advice:
        for name, content in a.files:
            (out / name).write_text(content + "\n", encoding="utf-8")


def winner_of(results: Sequence[ConfigResult]) -> ConfigResult | None:
    """The finished configuration with the highest tok/s (the seed's measure)."""
    return max((r for r in results if r.ok), key=lambda r: r.tokens_per_second or 0.0, default=None)


def baseline_tps(results: Sequence[ConfigResult]) -> float | None:
    plain = plain_of(results)
    return plain.tokens_per_second if plain is not None else None


def vs_baseline(r: ConfigResult, base_tps: float | None) -> str:
    tps = r.tokens_per_second
    return f"{100 * (tps / base_tps - 1):+.1f}%" if base_tps and tps is not None else "-"


def table(results: Sequence[ConfigResult]) -> str:
    """Accept length and cycle time by ``ConfigResult``'s one rule; ``log acc`` is the log's own value."""
    base_tps = baseline_tps(results)
    lines = [f"{'configuration':<24}{'tok/s':>8}{'decode':>8}{'accept':>8}{'log acc':>9}{'cycle ms':>10}"
             f"{'vs baseline':>13}"]
    for r in results:
        if not r.ok:
            lines.append(f"{r.label:<24}  FAILED: {(r.error.splitlines() or [''])[0]}")
            continue
        cyc = r.cycle_s
        lines.append(f"{r.label:<24}{fmt(r.tokens_per_second, '.1f'):>8}{fmt(r.decode_tokens_per_second, '.1f'):>8}"
                     f"{fmt(r.accept_length):>8}{fmt(r.log_accept_length):>9}"
                     f"{fmt(None if cyc is None else cyc * 1e3):>10}{vs_baseline(r, base_tps):>13}")
    return "\n".join(lines)


def write_csv(path: Path, results: Sequence[ConfigResult]) -> None:
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["configuration", "status", "tokens_per_second", "decode_tokens_per_second", "accept_length",
                    "log_accept_length", "ttft_p50_s", "itl_mean_s", "error"])
        for r in results:
            lat = r.results.latency_seconds if r.results else {}
            w.writerow([r.label, r.status, r.tokens_per_second, r.decode_tokens_per_second,
                        r.accept_length if r.ok else None, r.log_accept_length,
                        lat["ttft"].p50 if "ttft" in lat else None, lat["itl"].mean if "itl" in lat else None,
                        r.error])


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


def winner_margin(results: Sequence[ConfigResult], winner: ConfigResult | None
                  ) -> tuple[ConfigResult | None, Margin | None]:
    """The runner-up and the winner's margin over it (per-request tok/s), with its 95% interval."""
    if winner is None:
        return None, None
    runner = winner_of([r for r in results if r is not winner])
    return runner, (margin(winner.per_request_service(), runner.per_request_service()) if runner else None)


CSS = """body{font:14px/1.4 system-ui,sans-serif;margin:24px;color:#222;max-width:1100px}
table{border-collapse:collapse}td,th{padding:3px 10px;border-bottom:1px solid #eee;text-align:right}
th:first-child,td:first-child{text-align:left}.win{background:#e3f6e3}.fail{color:#b00}
svg text{font-size:11px;fill:#444}svg .label{font-size:12px}svg .grid{stroke:#ddd}figcaption{font-weight:600}
.legend{font-size:12px}
pre{background:#f6f6f6;padding:12px;overflow:auto}"""


def html(results: Sequence[ConfigResult], winner: ConfigResult | None, base_tps: float | None,
         advice: str = "") -> str:
    """``report.html``: the table, the winner with its confidence, the plot and the advisor, self-contained."""
    rows = []
    for r in results:
        if not r.ok:
            rows.append(f'<tr class="fail"><td>{escape(r.label)}</td><td colspan="5">FAILED: '
                        f'{escape((r.error.splitlines() or [""])[0])}</td></tr>')
            continue
        rows.append(f'<tr class="{"win" if r is winner else ""}"><td>{escape(r.label)}</td>'
                    f'<td>{fmt(r.tokens_per_second, ".1f")}</td><td>{fmt(r.decode_tokens_per_second, ".1f")}</td>'
                    f'<td>{fmt(r.accept_length, ".2f")}</td><td>{r.results.ok if r.results else 0}</td>'
                    f'<td>{vs_baseline(r, base_tps)}</td></tr>')
    runner, m = winner_margin(results, winner)
    if winner is None:
        verdict = "no configuration finished"
    else:
        verdict = (f"winner: <b>{escape(winner.label)}</b> at {fmt(winner.tokens_per_second, '.1f')} tok/s"
                   + (f", per-request tok/s {escape(m.text())} against {escape(runner.label)}" if m and runner
                      else ""))
    pts = sorted((r.steps, r.tokens_per_second or 0.0) for r in results if r.ok and r.steps)
    series = [Series("tok/s", [(float(s), t) for s, t in pts])]
    if base_tps and pts:
        series.append(Series(f"baseline {base_tps:.1f}", [(float(pts[0][0]), base_tps), (float(pts[-1][0]),
                                                                                         base_tps)], dashed=True))
    plot = line_chart("tok/s by draft steps", series, "draft steps", "tok/s",
                      x_text=[(float(s), str(s)) for s, _ in pts])
    return f"""<!doctype html><html lang="en"><head><meta charset="utf-8"><title>specwatch sweep</title>
<style>{CSS}</style></head><body><h1>specwatch sweep</h1><p id="winner">{verdict}</p>
<table><tr><th>configuration</th><th>tok/s</th><th>decode tok/s</th><th>accept length</th><th>requests</th>
<th>vs baseline</th></tr>{"".join(rows)}</table>{plot}
{f"<h2>Advisor</h2><pre>{escape(advice)}</pre>" if advice else ""}</body></html>"""

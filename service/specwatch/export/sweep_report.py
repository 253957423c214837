"""Sweep reports: the comparison table, CSV and PNG of a finished sweep. Exporter stage; pure but for the
files it writes."""

from __future__ import annotations

import csv
from html import escape
from pathlib import Path
from typing import Any

from ..analysis.compare import Margin, margin
from .svg import Series, line_chart


def table(results: list[dict[str, Any]]) -> tuple[str, dict[str, Any] | None, float | None]:
    ok = [r for r in results if r["status"] == "ok"]
    # the launched baseline, or (with --targets) the target that does not speculate
    base = next((r for r in ok if r["label"] == "baseline"), None) or next((r for r in ok if r.get("steps") == 0),
                                                                          None)
    base_tps = base["results"]["overall_tokens_per_second"] if base else None
    lines = [f"{'configuration':<24}{'tok/s':>8}{'decode':>8}{'accept':>8}{'log acc':>9}{'cycle ms':>10}"
             f"{'vs baseline':>13}"]
    for r in results:
        if r["status"] != "ok":
            lines.append(f"{r['label']:<24}  FAILED: {r['error'].splitlines()[0]}")
            continue
        res = r["results"]
        al = res.get("accept_length_client") or 1.0
        cyc = al / res["decode_tokens_per_second"] * 1e3
        vs = f"{100 * (res['overall_tokens_per_second'] / base_tps - 1):+.1f}%" if base_tps else "-"
        log_al = f"{r['log_accept_length']:.2f}" if r.get("log_accept_length") else "-"
        lines.append(f"{r['label']:<24}{res['overall_tokens_per_second']:>8.1f}{res['decode_tokens_per_second']:>8.1f}"
                     f"{al:>8.2f}{log_al:>9}{cyc:>10.2f}{vs:>13}")
    winner = max(ok, key=lambda r: r["results"]["overall_tokens_per_second"], default=None)
    return "\n".join(lines), winner, base_tps


def write_csv(path: Path, results: list[dict[str, Any]]) -> None:
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["configuration", "status", "tokens_per_second", "decode_tokens_per_second", "accept_length",
                    "log_accept_length", "ttft_p50_s", "itl_mean_s", "error"])
        for r in results:
            res = r.get("results") or {}
            lat = res.get("latency_seconds", {})
            w.writerow([r["label"], r["status"], res.get("overall_tokens_per_second"),
                        res.get("decode_tokens_per_second"), res.get("accept_length_client"),
                        r.get("log_accept_length"), lat.get("ttft", {}).get("p50"), lat.get("itl", {}).get("mean"),
                        r.get("error", "")])


def plot(path: Path, results: list[dict[str, Any]], base_tps: float | None) -> str:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "plot skipped: install the plot extra (pip install 'specwatch[plot]')"
    pts = sorted((r["steps"], r["results"]["overall_tokens_per_second"], r["results"].get("accept_length_client"))
                 for r in results if r["status"] == "ok" and r.get("steps"))
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


def plot_load(path: Path, results: list[dict[str, Any]]) -> str:
    """Per-stream decode tok/s against concurrency, a line per configuration (plain decoding dashed)."""
    from ..analysis import load_sweep

    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "load plot skipped: install the plot extra (pip install 'specwatch[plot]')"
    levels = load_sweep.levels(results)
    plain = load_sweep.plain_of(results)
    fig, ax = plt.subplots(figsize=(7, 4.2), dpi=110)
    for r in results:
        if r.get("status") != "ok":
            continue
        pts = [(c, t) for c in levels if (t := load_sweep.stream_tps(r, c))]
        ax.plot([p[0] for p in pts], [p[1] for p in pts], "--" if r is plain else "o-",
                color="tab:red" if r is plain else None, label=r["label"] + (" (plain)" if r is plain else ""))
    ax.set_xscale("log", base=2)
    ax.set_xticks(levels, [str(c) for c in levels])
    ax.set_xlabel("concurrency (streams in flight)")
    ax.set_ylabel("per-stream decode tok/s")
    ax.legend(loc="upper right")
    ax.set_title("specwatch sweep: tok/s by concurrency")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return f"load plot: {path}"


def per_request_tps(r: dict[str, Any]) -> list[float]:
    """The seed's per-request tok/s (output tokens / request time) of a finished configuration's runs."""
    return [x["output_tokens"] / x["service_s"] for x in r.get("runs", [])
            if x.get("outcome") == "ok" and x.get("service_s")]


def winner_margin(results: list[dict[str, Any]], winner: dict[str, Any] | None
                  ) -> tuple[dict[str, Any] | None, Margin | None]:
    """The runner-up and the winner's margin over it, with its 95% interval."""
    if winner is None:
        return None, None
    others = [r for r in results if r["status"] == "ok" and r is not winner]
    runner = max(others, key=lambda r: r["results"]["overall_tokens_per_second"], default=None)
    return runner, (margin(per_request_tps(winner), per_request_tps(runner)) if runner else None)


CSS = """body{font:14px/1.4 system-ui,sans-serif;margin:24px;color:#222;max-width:1100px}
table{border-collapse:collapse}td,th{padding:3px 10px;border-bottom:1px solid #eee;text-align:right}
th:first-child,td:first-child{text-align:left}.win{background:#e3f6e3}.fail{color:#b00}
svg text{font-size:11px;fill:#444}svg .label{font-size:12px}svg .grid{stroke:#ddd}figcaption{font-weight:600}
.legend{font-size:12px}
pre{background:#f6f6f6;padding:12px;overflow:auto}"""


def html(results: list[dict[str, Any]], winner: dict[str, Any] | None, base_tps: float | None,
         advice: str = "") -> str:
    """``report.html``: the table, the winner with its confidence, the plot and the advisor, self-contained."""
    rows = []
    for r in results:
        if r["status"] != "ok":
            rows.append(f'<tr class="fail"><td>{escape(r["label"])}</td><td colspan="5">FAILED: '
                        f'{escape(r.get("error", "").splitlines()[0] if r.get("error") else "")}</td></tr>')
            continue
        res = r["results"]
        vs = f"{100 * (res['overall_tokens_per_second'] / base_tps - 1):+.1f}%" if base_tps else "-"
        al = res.get("accept_length_client")
        rows.append(f'<tr class="{"win" if r is winner else ""}"><td>{escape(r["label"])}</td>'
                    f'<td>{res["overall_tokens_per_second"]:.1f}</td><td>{res["decode_tokens_per_second"]:.1f}</td>'
                    f'<td>{"-" if al is None else f"{al:.2f}"}</td><td>{res["ok"]}</td><td>{vs}</td></tr>')
    runner, m = winner_margin(results, winner)
    if winner is None:
        verdict = "no configuration finished"
    else:
        verdict = (f"winner: <b>{escape(winner['label'])}</b> at "
                   f"{winner['results']['overall_tokens_per_second']:.1f} tok/s"
                   + (f", per-request tok/s {escape(m.text())} against {escape(runner['label'])}" if m and runner
                      else ""))
    pts = sorted((r["steps"], r["results"]["overall_tokens_per_second"]) for r in results
                 if r["status"] == "ok" and r.get("steps"))
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

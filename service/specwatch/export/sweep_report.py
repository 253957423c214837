"""Sweep reports: the comparison table, CSV and PNG of a finished sweep. Exporter stage; pure but for the
files it writes."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any


def table(results: list[dict[str, Any]]) -> tuple[str, dict[str, Any] | None, float | None]:
    ok = [r for r in results if r["status"] == "ok"]
    base = next((r for r in ok if r["label"] == "baseline"), None)
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

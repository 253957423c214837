"""Sweep reports: the HTML report of a finished sweep, and the files its engine advice names (its charts and
PNGs: ``sweep_plots``; the terminal's tables and the CSV: ``sweep_tables``). Exporter stage; pure but for the
files it writes."""

from __future__ import annotations

from collections.abc import Sequence
from html import escape
from pathlib import Path

from ..analysis.comparisons import MEASURE, Band, comparisons
from ..analysis.engine_flags import EngineAdvice
from ..results import ConfigResult, levels, plain_of
from .format import fmt
from .sweep_plots import pareto_chart, steps_chart


def write_advice_files(out: Path, advice: Sequence[EngineAdvice]) -> None:
    """The files the printed flags name (SGLang's adaptive config), in ``out``, where the flags say they are."""
    for a in advice:
        for name, content in a.files:
            (out / name).write_text(content + "\n", encoding="utf-8")


def baseline_tps(results: Sequence[ConfigResult]) -> float | None:
    plain = plain_of(results)
    return plain.tokens_per_second if plain is not None else None


CSS = """body{font:14px/1.4 system-ui,sans-serif;margin:24px;color:#222;max-width:1100px}
table{border-collapse:collapse}td,th{padding:3px 10px;border-bottom:1px solid #eee;text-align:right}
th:first-child,td:first-child{text-align:left}.win{background:#e3f6e3}.fail{color:#b00}
svg text{font-size:11px;fill:#444}svg .label{font-size:12px}svg .grid{stroke:#e4e4e4}figcaption{font-weight:600}
.legend{font-size:12px}.legend span{white-space:nowrap}svg .tag{font-size:10px;fill:#555}.note{color:#666}
figure.chart{margin:16px 0}
pre{background:#f6f6f6;padding:12px;overflow:auto}"""


def html(results: Sequence[ConfigResult], band: Band | None, base_tps: float | None, advice: str = "") -> str:
    """``report.html``: the pick with its margin, the table, the plots (by draft steps; the Pareto view) and the
    advisor, self-contained; every margin is ``comparisons``' own, as the terminal prints it."""
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
                    f'<td>{fmt(res.stream_decode_tps if res else None, ".1f")}</td>'
                    f'<td>{fmt(res.request_tps if res else None, ".1f")}</td>'
                    f'<td>{fmt(res.aggregate_tps if res else None, ".1f")}</td>'
                    f'<td>{fmt(r.at(c0).accept_length, ".2f")}</td><td>{res.ok if res else 0}</td>'
                    f'<td>{escape(vs.short() if vs else "-")}</td></tr>')
    where = f" (at {c0} stream{'s' if c0 > 1 else ''}, the lowest load)" if len(levels(results)) > 1 else ""
    verdict = "no configuration finished" if band is None else f"winner: {escape(band.sentence())}{where}"
    plot = steps_chart(results, base_tps) + pareto_chart(results)
    return f"""<!doctype html><html lang="en"><head><meta charset="utf-8"><title>specwatch sweep</title>
<style>{CSS}</style></head><body><h1>specwatch sweep</h1><p id="winner">{verdict}</p>
<table><tr><th>configuration</th><th>decode tok/s per stream</th><th>tok/s per request</th><th>aggregate tok/s</th>
<th>accept length</th><th>requests</th><th>vs plain ({MEASURE}, 95% interval)</th></tr>{"".join(rows)}</table>{plot}
{f"<h2>Advisor</h2><pre>{escape(advice)}</pre>" if advice else ""}</body></html>"""

"""The daemon's own page (``GET /``): the verdict in words and in pictures, rendered from the tick's
``Snapshot`` and a bounded history of past ticks. Exporter stage; self-contained HTML (inline CSS, inline SVG,
a few lines of inline script), nothing fetched from anywhere. It reloads itself every interval."""

from __future__ import annotations

import collections
from dataclasses import dataclass
from html import escape

from ..analysis.by_load import LoadVerdict
from ..analysis.live_advisor import describe
from ..records import LATENCY_METRICS
from .format import fmt, ms
from .snapshot import Snapshot
from .svg import Series, bar_chart, line_chart
from .view import verdict_text

HISTORY_POINTS = 360  # ticks kept for the charts: an hour at the default 10 s interval


@dataclass(frozen=True, slots=True)
class Point:
    uptime_s: float
    tokens_per_second: float | None
    baseline_tps: float | None
    accept_length: float | None
    breakeven_accept_length: float | None


class History:
    def __init__(self, points: int = HISTORY_POINTS) -> None:
        self.points: collections.deque[Point] = collections.deque(maxlen=points)

    def add(self, s: Snapshot) -> None:
        spec = s.probe.get("spec")
        v = s.verdict
        self.points.append(Point(s.uptime_s, spec.tokens_per_second if spec else None, v.baseline_tps,
                                 v.accept_length, v.breakeven_accept_length))


def _xy(points: collections.deque[Point], attr: str) -> list[tuple[float, float]]:
    return [(p.uptime_s, float(v)) for p in points if (v := getattr(p, attr)) is not None]


CSS = """
body{font:14px/1.4 system-ui,sans-serif;margin:24px;color:#222;max-width:1200px}
h1{font-size:20px;margin:0 0 4px} .sub{color:#666;margin-bottom:16px}
.verdict{font-size:22px;padding:12px 16px;border-radius:6px;margin:12px 0;background:#eef}
.verdict.slower{background:#fde2e2;color:#8b0000} .verdict.paying{background:#e3f6e3;color:#14532d}
.grid2{display:grid;grid-template-columns:repeat(auto-fit,minmax(560px,1fr));gap:16px}
figure.chart{margin:0} figcaption{font-weight:600;margin-bottom:4px} .legend{font-size:12px}
svg text{font-size:11px;fill:#444} svg .label{font-size:12px} svg .grid{stroke:#e4e4e4} .note{color:#666}
svg .tag{font-size:10px;fill:#555} .legend span{white-space:nowrap}
table{border-collapse:collapse} td,th{padding:3px 10px;border-bottom:1px solid #eee;text-align:right}
th:first-child,td:first-child{text-align:left} .down{color:#b00;font-weight:600} .empty{color:#888}
"""


LOAD_PARETO = "Per-stream vs aggregate tok/s by load bucket, against plain decoding"
LOAD_PARETO_Y = "≈ aggregate tok/s"  # load × per-stream: said in the legend, the axis is 200 px high


def load_pareto_chart(v: LoadVerdict | None) -> str:
    """The sweep's Pareto view, live: each load bucket's per-stream decode tok/s against load × per-stream
    (≈ aggregate tok/s), beside plain decoding's at the same loads (the baseline curve; none with an A/B
    baseline); each point tagged with its mean running requests."""
    rows = v.buckets if v is not None else ()
    spec = [(b.tokens_per_second, b.mean_load * b.tokens_per_second) for b in rows]
    base = [(t, b.mean_load * t) for b in rows if (t := b.baseline_tps)]
    plain = "plain decoding at the same loads (baseline curve)" if base else \
        "plain decoding: no baseline curve at these loads (--baseline-curve)"
    return line_chart(LOAD_PARETO, [
        Series("speculative (numbers: running requests; y = load × per-stream)", spec,
               tags=[f"{b.mean_load:.3g}" for b in rows]),
        Series(plain, base, dashed=True, marks="dot")], "per-stream decode tok/s", LOAD_PARETO_Y)


def _latency_table(s: Snapshot) -> str:
    rows = []
    for tg, p in s.probe.items():
        for m in LATENCY_METRICS:
            q = p.latency_s[m]
            rows.append(f"<tr><td>{escape(tg)} {m}</td><td>{ms(q.p50, '.1f')}</td><td>{ms(q.p90, '.1f')}</td>"
                        f"<td>{ms(q.p99, '.1f')}</td><td>{q.count}</td></tr>")
    return ("<table><tr><th>latency (ms)</th><th>p50</th><th>p90</th><th>p99</th><th>samples</th></tr>"
            + "".join(rows) + "</table>")


def _health(s: Snapshot) -> str:
    items = [f"<li>target {escape(tg)}: {'up' if st.up else '<span class=down>DOWN</span>'}</li>"
             for tg, st in s.targets.items()]
    lg = s.log
    if lg.source:
        state = "up" if lg.up else f"<span class=down>DOWN</span> ({escape(lg.error)})"
        items.append(f"<li>log {escape(lg.source)}: {state}; parsed {lg.lines.get('parsed', 0)}, ignored "
                     f"{lg.lines.get('ignored', 0)}, malformed {lg.lines.get('malformed', 0)}; last sample "
                     f"{fmt(lg.last_sample_age_s, '.0f', ' s ago')}</li>")
    else:
        items.append("<li>no server log configured</li>")
    return "<ul>" + "".join(items) + "</ul>"


def _checks(s: Snapshot) -> str:
    """The failed honesty checks, one item each; the ones not measured named in one line."""
    bad = "".join(f'<li class="down">{escape(c.name)}: {escape(c.detail)}</li>' for c in s.checks if c.failed)
    unmeasured = ", ".join(c.name for c in s.checks if not c.measured)
    return (f'<h3>Checks</h3><ul id="checks">{bad or "<li>none failed</li>"}</ul>'
            + (f'<div class="sub">not measured here: {escape(unmeasured)}</div>' if unmeasured else ""))


def _off_range(s: Snapshot) -> str:
    """A line per load bucket where the server drafts nothing while it drafts at other loads: the off range's
    measured cost against the baseline curve."""
    rows = [r for r in s.by_load.buckets if r.off_range_cost is not None] if s.by_load else []
    items = "".join(f"<li>at {r.mean_load:.3g} running requests the server drafts nothing (a schedule's 0 range): "
                    f"{100 * (r.off_range_cost or 0.0):+.1f}% time per token against plain decoding at that load "
                    f"(measured, against the baseline curve; {r.requests} probes)</li>" for r in rows)
    return f'<ul id="off-range">{items}</ul>' if items else ""


def render(s: Snapshot, history: History, refresh_s: float) -> str:
    v = s.verdict
    cls = "slower" if v.below_baseline else "paying" if v.below_baseline is False else ""
    spec = s.probe.get("spec")
    pts = history.points
    tps = line_chart("Decode tok/s per stream vs the baseline", [
        Series("speculative", _xy(pts, "tokens_per_second")),
        Series("baseline", _xy(pts, "baseline_tps"), dashed=True)], "time since start", "decode tok/s per stream",
        "time")
    accept = line_chart("Accept length vs break-even", [
        Series("accept length", _xy(pts, "accept_length")),
        Series("break-even", _xy(pts, "breakeven_accept_length"), dashed=True)], "time since start",
        "tokens / verify round", "time")
    probe_pos = spec.position_acceptance if spec else ()
    server_pos: tuple[float, ...] = ()
    for sample in s.server.last.values():
        server_pos = sample.position_acceptance or server_pos
    positions = probe_pos or server_pos
    pos = bar_chart("Per-position draft acceptance" + (" (server log)" if positions is server_pos and positions
                                                       else ""), [str(i) for i in range(1, len(positions) + 1)],
                    list(positions))
    numbers = (f"speedup {fmt(v.speedup, '.2f', 'x')} · tok/s {fmt(spec.tokens_per_second if spec else None, '.1f')}"
               f" vs baseline {fmt(v.baseline_tps, '.1f')} · accept length {fmt(v.accept_length)} (break-even "
               f"{fmt(v.breakeven_accept_length)}) · requests in window {spec.ok if spec else 0}")
    tps += load_pareto_chart(s.by_load)  # beside it: the same rates by load
    advice = s.advisor
    rows = "".join(f"<li>{escape(describe(b, advice.running_steps))}</li>" for b in advice.buckets) if advice else ""
    prior = advice.notes() if advice else "no --advisor-prior: the cost shape over step counts is a range"
    advisor = (f'<h3>Advisor: which step count would win</h3><ul id="advisor">{rows or "<li>no load bucket yet</li>"}'
               f'</ul><div class="sub">{escape(prior)}</div>')
    return f"""<!doctype html><html lang="en"><head><meta charset="utf-8">
<meta http-equiv="refresh" content="{max(1, round(refresh_s))}">
<title>specwatch: {escape(verdict_text(v))}</title><style>{CSS}</style></head><body>
<h1>specwatch · {escape(s.server_url)} ({escape(s.api or '?')})</h1>
<div class="sub">window {escape(s.window)} · {escape(s.time)} · up {s.uptime_s:.0f} s ·
<span id="age">updated just now</span> · <a href="/metrics">/metrics</a> · <a href="/api/summary">/api/summary</a></div>
<div class="verdict {cls}" id="verdict">{escape(verdict_text(v))}</div>
<div class="sub">{numbers}</div>
{advisor}
{_off_range(s)}
{_checks(s)}
<div class="grid2">{tps}{accept}{pos}<div><h3>Latency</h3>{_latency_table(s)}<h3>Health</h3>{_health(s)}</div></div>
<script>
const t0 = Date.now();
setInterval(() => {{ document.getElementById("age").textContent =
  "updated " + Math.round((Date.now() - t0) / 1000) + " s ago"; }}, 1000);
</script></body></html>"""

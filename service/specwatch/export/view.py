"""Terminal view of the daemon's ``Snapshot``: a compact live table on a TTY, otherwise one logfmt line per
update. Exporter stage."""

from __future__ import annotations

import sys
from typing import IO

from ..analysis.verdict import Verdict
from .format import fmt, ms
from .snapshot import Snapshot


def verdict_text(v: Verdict) -> str:
    """The verdict in words, and, when a failed honesty check touches a figure it uses, that it is unreliable."""
    words = _verdict_words(v)
    return words + (f" (UNRELIABLE: check {', '.join(v.unreliable)} failed)" if v.unreliable else "")


def _verdict_words(v: Verdict) -> str:
    if v.baseline_tps is None:
        return "no baseline configured (--baseline-tps or --baseline-url)"
    if v.below_baseline is None:
        return "collecting data"
    need, have = v.breakeven_accept_length, v.accept_length
    if v.below_baseline:
        return f"SLOWER than baseline: needs accept length {fmt(need)}, gets {fmt(have)}"
    return f"paying off: {fmt(v.speedup)}x baseline (break-even accept length {fmt(need)})"


def table(s: Snapshot) -> str:
    lines = [f"specwatch {s.server_url} ({s.api or '?'})   window {s.window}   {s.time}",
             f"{'target':<10}{'up':>4}{'tok/s':>9}{'speedup':>9}{'accept':>8}{'srv acc':>9}{'tok/chunk':>10}"
             f"{'TTFT p50/p99 ms':>18}{'ITL p50/p99 ms':>17}{'errors':>8}"]
    srv_w = s.server.windows.get(s.window)
    srv = srv_w.accept_length if srv_w else None
    for tg, p in s.probe.items():
        spec = tg == "spec"
        ttft, itl = p.latency_s["ttft"], p.latency_s["itl"]
        lines.append(
            f"{tg:<10}{'yes' if s.targets[tg].up else 'NO':>4}{fmt(p.tokens_per_second, '.1f'):>9}"
            f"{fmt(s.verdict.speedup if spec else None, '.2f', 'x'):>9}{fmt(p.accept_length):>8}"
            f"{fmt(srv if spec else None):>9}{fmt(p.tokens_per_chunk):>10}"
            f"{ms(ttft.p50, '.1f') + '/' + ms(ttft.p99, '.1f'):>18}{ms(itl.p50, '.1f') + '/' + ms(itl.p99, '.1f'):>17}"
            f"{p.errors:>8}")
    v = s.verdict
    if v.baseline_tps is not None and "baseline" not in s.probe:
        lines.append(f"{'baseline':<10}{'':>4}{fmt(v.baseline_tps, '.1f'):>9}   (fixed)")
    lines.append("verdict: " + verdict_text(v))
    lg = s.log
    if lg.source:
        lines.append(f"log: {lg.source} {'up' if lg.up else 'DOWN'}; parsed {lg.lines.get('parsed', 0)}, "
                     f"ignored {lg.lines.get('ignored', 0)}, malformed {lg.lines.get('malformed', 0)}"
                     + (f"; {lg.error}" if lg.error and not lg.up else ""))
    lines.append(f"metrics: {s.metrics_url}")
    return "\n".join(lines)


def logfmt(s: Snapshot) -> str:
    p = s.probe.get("spec")
    v = s.verdict
    srv_w = s.server.windows.get(s.window)
    lat = p.latency_s if p else {}
    fields = {"ts": s.time, "msg": "summary", "window": s.window,
              "tps": fmt(p.tokens_per_second if p else None, ".1f"), "baseline_tps": fmt(v.baseline_tps, ".1f"),
              "speedup": fmt(v.speedup, ".3f"), "below_baseline": {None: "-", True: 1, False: 0}[v.below_baseline],
              "accept_client": fmt(p.accept_length if p else None),
              "accept_server": fmt(srv_w.accept_length if srv_w else None),
              "breakeven": fmt(v.breakeven_accept_length),
              "ttft_p99_ms": ms(lat["ttft"].p99 if lat else None, ".1f"),
              "itl_p99_ms": ms(lat["itl"].p99 if lat else None, ".1f"), "errors": p.errors if p else 0}
    return " ".join(f"{k}={v}" for k, v in fields.items())


class View:
    def __init__(self, mode: str, out: IO[str] | None = None) -> None:
        self.out = out or sys.stdout
        self.tty = mode == "table" or (mode == "auto" and self.out.isatty())

    def show(self, snap: Snapshot) -> None:
        if self.tty:
            self.out.write("\x1b[H\x1b[2J" + table(snap) + "\n")
        else:
            self.out.write(logfmt(snap) + "\n")
        self.out.flush()

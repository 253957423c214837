"""Terminal view: a compact live table on a TTY, otherwise one logfmt line per update. Exporter stage."""

from __future__ import annotations

import sys
from typing import IO, Any


def _f(v: Any, spec: str = ".2f", unit: str = "") -> str:
    return "-" if v is None else format(v, spec) + unit


def _ms(v: Any) -> str:
    return "-" if v is None else f"{v * 1000:.1f}"


def verdict_text(v: dict[str, Any]) -> str:
    below = v.get("below_baseline")
    if v.get("baseline_tps") is None:
        return "no baseline configured (--baseline-tps or --baseline-url)"
    if below is None:
        return "collecting data"
    need, have = v.get("breakeven_accept_length"), v.get("accept_length")
    if below:
        return f"SLOWER than baseline: needs accept length {_f(need)}, gets {_f(have)}"
    return f"paying off: {_f(v.get('speedup'), '.2f')}x baseline (break-even accept length {_f(need)})"


def table(s: dict[str, Any]) -> str:
    w = s["window"]
    lines = [f"specwatch {s['server_url']} ({s.get('api') or '?'})   window {w}   {s['time']}",
             f"{'target':<10}{'up':>4}{'tok/s':>9}{'speedup':>9}{'accept':>8}{'srv acc':>9}{'tok/chunk':>10}"
             f"{'TTFT p50/p99 ms':>18}{'ITL p50/p99 ms':>17}{'errors':>8}"]
    srv = s["server"]["windows"].get(w, {}).get("accept_length")
    for tg, p in s["probe"].items():
        speed = s["verdict"]["speedup"] if tg == "spec" else None
        lines.append(
            f"{tg:<10}{'yes' if s['targets'][tg]['up'] else 'NO':>4}{_f(p['tokens_per_second'], '.1f'):>9}"
            f"{_f(speed, '.2f', 'x'):>9}{_f(p['accept_length']):>8}{_f(srv if tg == 'spec' else None):>9}"
            f"{_f(p['tokens_per_chunk']):>10}"
            f"{_ms(p['ttft_p50_s']) + '/' + _ms(p['ttft_p99_s']):>18}"
            f"{_ms(p['itl_p50_s']) + '/' + _ms(p['itl_p99_s']):>17}"
            f"{p['errors']:>8}")
    v = s["verdict"]
    if v.get("baseline_tps") is not None and "baseline" not in s["probe"]:
        lines.append(f"{'baseline':<10}{'':>4}{_f(v['baseline_tps'], '.1f'):>9}   (fixed)")
    lines.append("verdict: " + verdict_text(v))
    lg = s["log"]
    if lg["source"]:
        lines.append(f"log: {lg['source']} {'up' if lg['up'] else 'DOWN'}; parsed {lg['lines']['parsed']}, "
                     f"ignored {lg['lines']['ignored']}, malformed {lg['lines']['malformed']}"
                     + (f"; {lg['error']}" if lg.get("error") and not lg["up"] else ""))
    lines.append(f"metrics: {s['metrics_url']}")
    return "\n".join(lines)


def logfmt(s: dict[str, Any]) -> str:
    p = s["probe"].get("spec", {})
    v = s["verdict"]
    srv = s["server"]["windows"].get(s["window"], {}).get("accept_length")
    fields = {"ts": s["time"], "msg": "summary", "window": s["window"], "tps": _f(p.get("tokens_per_second"), ".1f"),
              "baseline_tps": _f(v.get("baseline_tps"), ".1f"), "speedup": _f(v.get("speedup"), ".3f"),
              "below_baseline": {None: "-", True: 1, False: 0}[v.get("below_baseline")],
              "accept_client": _f(p.get("accept_length")), "accept_server": _f(srv),
              "breakeven": _f(v.get("breakeven_accept_length")), "ttft_p99_ms": _ms(p.get("ttft_p99_s")),
              "itl_p99_ms": _ms(p.get("itl_p99_s")), "errors": p.get("errors", 0)}
    return " ".join(f"{k}={v}" for k, v in fields.items())


class View:
    def __init__(self, mode: str, out: IO[str] | None = None) -> None:
        self.out = out or sys.stdout
        self.tty = mode == "table" or (mode == "auto" and self.out.isatty())

    def show(self, summary: dict[str, Any]) -> None:
        if self.tty:
            self.out.write("\x1b[H\x1b[2J" + table(summary) + "\n")
        else:
            self.out.write(logfmt(summary) + "\n")
        self.out.flush()

"""A finished sweep's tables: the terminal's table at one load and ``sweep.csv`` (a row per configuration and
load). Every margin over plain decoding is ``analysis.comparisons``' own, printed as it is. Exporter stage;
pure but for the file it writes."""

from __future__ import annotations

import csv
from collections.abc import Sequence
from pathlib import Path

from ..analysis.comparisons import MEASURE, comparisons
from ..results import ConfigResult, levels
from .format import fmt

HEADER = (f"{'configuration':<24}{'decode/stream':>14}{'tok/s/req':>10}{'aggregate':>10}{'accept':>8}{'log acc':>9}"
          f"{'cycle ms':>10}  vs plain ({MEASURE}, 95% interval)")


def table(results: Sequence[ConfigResult], c: int) -> str:
    """At concurrency ``c``: per-stream decode tok/s, the seed's per-request tok/s (output tokens ÷ request
    time), aggregate tok/s (every stream), accept length and cycle time by ``ConfigResult``'s one rule, the log's
    own accept length, and the margin over plain decoding."""
    cmp = comparisons(results)
    lines = [HEADER]
    for r in results:
        if not r.ok:
            lines.append(f"{r.label:<24}  FAILED: {(r.error.splitlines() or [''])[0]}")
            continue
        at = r.at(c)
        res, cyc, vs = at.results, at.cycle_s, cmp.get((r.label, c))
        if c not in r.by_concurrency or res is None:
            lines.append(f"{r.label:<24}  not measured at {c} streams")
            continue
        lines.append(f"{r.label:<24}{fmt(res.stream_decode_tps, '.1f'):>14}"
                     f"{fmt(res.request_tps, '.1f'):>10}{fmt(res.aggregate_tps, '.1f'):>10}"
                     f"{fmt(at.accept_length):>8}{fmt(r.log_accept_length):>9}"
                     f"{fmt(None if cyc is None else cyc * 1e3):>10}  {vs.short() if vs else '-'}")
    windowed = [r.by_concurrency[c].results.steady.steady for r in results if r.ok and c in r.by_concurrency]
    if c > 1 and windowed:
        lines.append(f"(at {c} streams: each configuration's steady window, all {c} streams in flight, where it has "
                     f"one: {sum(windowed)} of {len(windowed)}; ramp-up and drain recorded apart)")
    return "\n".join(lines)


CSV_COLUMNS = ("configuration", "concurrency", "status", "decode_tokens_per_second_per_stream",
               "tokens_per_second_per_request", "aggregate_tokens_per_second", "request_throughput",
               "accept_length", "log_accept_length", "ttft_p50_s", "itl_mean_s", "vs_plain_ratio", "vs_plain_low",
               "vs_plain_high", "vs_plain_outcome", "completed", "failed", "error")


def write_csv(path: Path, results: Sequence[ConfigResult]) -> None:
    """A row per configuration and concurrency (a failed configuration: one row, no concurrency)."""
    cmp = comparisons(results)
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(CSV_COLUMNS)
        for r in results:
            if not r.ok:
                w.writerow([r.label, None, r.status, *[None] * 14, r.error])
                continue
            for c in levels([r]):
                at, vs = r.at(c), cmp.get((r.label, c))
                res = at.results
                assert res is not None
                lat = res.latency_seconds
                m = vs.margin if vs else None
                w.writerow([r.label, c, r.status, res.stream_decode_tps, res.request_tps,
                            res.aggregate_tps, request_throughput(at), at.accept_length,
                            r.log_accept_length, lat["ttft"].p50 if "ttft" in lat else None,
                            lat["itl"].mean if "itl" in lat else None, m.ratio if m else None,
                            m.low if m else None, m.high if m else None, vs.outcome if vs else None,
                            res.ok, res.requests - res.ok, ""])


def request_throughput(r: ConfigResult) -> float | None:
    """Completed requests per second of the level's wall time (first send to last completion)."""
    runs = [x for x in r.runs if x.ok]
    if not runs or r.results is None or not r.results.overall_tokens_per_second:
        return None
    wall_s = sum(x.output_tokens for x in runs) / r.results.overall_tokens_per_second
    return len(runs) / wall_s if wall_s > 0 else None

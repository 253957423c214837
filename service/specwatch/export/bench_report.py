"""The bench report: the text ``bench`` and ``report`` print and the files they write. Exporter stage.

Built from the results document (``analysis.bench_results``) plus the measured records (the last error of each
kind), so a replay of a records file prints exactly what the run printed.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from .. import codec
from ..analysis.bench_results import Analysis
from ..records import RequestRecord, RunInfo
from ..results import LAG_SHARE, BenchDoc, ClientLag
from . import steady_report
from .check_lines import lines as check_lines
from .format import fmt, ms
from .hlog import HlogWriter


def write_outputs(a: Analysis, info: RunInfo, records: Sequence[RequestRecord], json_path: str | None,
                  records_path: str | None, hlog_path: str | None) -> None:
    if records_path:
        codec.write(records_path, [info, *records])
    if json_path:
        with open(json_path, "wb") as f:
            f.write(codec.dumps(a.doc))
    if hlog_path:
        with open(hlog_path, "w", encoding="utf-8") as f:
            HlogWriter(f, info.start_wall_s if info.start_wall_s is not None else time.time(),
                       a.interval.start_ns).write(a.interval)


def text(doc: BenchDoc, records: Sequence[RequestRecord]) -> str:
    """Every number with its unit and its scope: *aggregate* (all streams together, over the run's duration),
    *per stream* (one stream's rate) or *per request*."""
    s = doc.results
    lat = s.latency_seconds
    out = ["", "  ========== Results ==========",
           f"  Requests:      {doc.completed} completed, {doc.failed} failed ({traffic(doc)})",
           f"  Duration:      {doc.duration:.2f} s  (first request's intended start to the last one's end)",
           f"  Requests/s:    {doc.request_throughput:.2f} req/s  (aggregate: completed / duration)",
           f"  Overall tok/s: {fmt(s.overall_tokens_per_second, '.1f')}  (aggregate, all streams: output tokens / "
           "first send to last end)",
           f"  Avg tok/s:     {fmt(s.avg_tokens_per_second, '.1f')}  (per request: output tokens / its send to end, "
           "TTFT included)",
           f"  Min tok/s:     {fmt(s.min_tokens_per_second, '.1f')}  (per request)",
           f"  Max tok/s:     {fmt(s.max_tokens_per_second, '.1f')}  (per request)",
           f"  Decode tok/s:  {fmt(s.decode_tokens_per_second, '.1f')}  (per stream: tokens after the first chunk / "
           "decode time)",
           *steady_report.lines(s.steady),
           f"  TTFT:          p50 {ms(lat['ttft'].p50, unit=' ms')}, p99 {ms(lat['ttft'].p99, unit=' ms')}  "
           "(per request, from its send)",
           f"  TPOT:          mean {doc.mean_tpot_ms:.2f} ms, median {doc.median_tpot_ms:.2f} ms, p99 "
           f"{doc.p99_tpot_ms:.2f} ms  (per request: decode time / (output tokens - 1))",
           f"  ITL per token: p50 {ms(lat['itl'].p50, unit=' ms')}, p90 {ms(lat['itl'].p90, unit=' ms')}, "
           f"p99 {ms(lat['itl'].p99, unit=' ms')}, mean {ms(lat['itl'].mean, unit=' ms')}  (per stream)",
           f"  Inter-chunk:   p50 {ms(lat['inter_chunk'].p50, unit=' ms')}, "
           f"p99 {ms(lat['inter_chunk'].p99, unit=' ms')}  (per stream)",
           f"  Tokens/chunk:  mean {fmt(s.tokens_per_chunk.mean)}",
           accept_line(doc)]
    if (lat["schedule_lag"].p99 or 0) > 0.001:
        out.append(f"  Schedule lag:  p99 {ms(lat['schedule_lag'].p99, unit=' ms')}  (latency is measured from "
                   "the intended start)")
    out += failures(doc, records)
    out += check_lines(doc.checks)
    if s.approximated_token_counts:
        out.append(f"  Approximated:  {s.approximated_token_counts} request(s) had no per-chunk usage and their "
                   "split could not be made exact: tokens per chunk were apportioned by text length; each chunk "
                   f"held 1..{s.tokens_per_chunk_bound} tokens, so a chunk's per-token ITL lies in "
                   "[gap / that, gap] (pass --tokenizer for exact counts)")
    if s.event_loop_lag.distorts:
        out.append(lag_warning(s.event_loop_lag))
    if doc.by_domain:
        out += ["", "  By domain:      requests  decode tok/s  accept length"]
        out += [f"    {dom:<12} {d.ok:>8}  {fmt(d.decode_tokens_per_second, '>12.1f')}  "
                f"{fmt(d.accept_length, '>13.2f')}" for dom, d in doc.by_domain.items()]
    return "\n".join(out)


def traffic(doc: BenchDoc) -> str:
    if doc.request_rate == "inf":
        return f"closed loop, {doc.max_concurrency} stream(s)" if doc.max_concurrency else "closed loop"
    shape = {"inf": "constant", 1.0: "Poisson"}.get(doc.burstiness, f"gamma, burstiness {doc.burstiness}")
    return f"open loop, {doc.request_rate:g} req/s {shape}, at most {doc.max_concurrency} in flight"


def lag_warning(lag: ClientLag) -> str:
    """The lag moved a figure beyond its bound: by how much, which requests, and what would help on this machine."""
    busy = f"{100 * lag.distorted_cpu_share:.0f}%" if lag.distorted_cpu_share is not None else "?"
    if not lag.cpu_bound:
        advice = (f"the process was on a CPU only {busy} of that time, so it waited for a core other processes "
                  "held (or was paused): free the machine; more --workers would not help")
    elif lag.cpus > lag.workers:
        advice = f"the process was CPU-bound ({busy} busy): try --workers {min(lag.cpus, 2 * lag.workers)}"
    else:
        advice = (f"the probe was CPU-bound ({busy} busy) on every core it may use ({lag.cpus}): fewer streams, or "
                  "a machine with more cores")
    return (f"  WARNING:       specwatch's own event loop lagged {fmt(lag.worst_interval_p99_ms, '.2f')} ms at p99 "
            f"(worst interval), over the {fmt(lag.bound_ms, '.2f')} ms within which the latencies hold "
            f"({100 * LAG_SHARE:g}% of the shortest median interval); {lag.requests_in_distorted_intervals} "
            "request(s) ran in the "
            f"{lag.distorted_intervals} of {lag.intervals} interval(s) over {lag.threshold_ms:g} ms and their "
            f"latencies include the client's delay: {advice}")


def accept_line(doc: BenchDoc) -> str:
    s = doc.results
    server = s.accept_length_server_per_request or s.accept_length_server_lifetime
    scope = " (per request: the mean of its per-request ratios, first token counted)" \
        if s.accept_length_server_per_request else " (server lifetime)"
    pooled = f" (per step, pooled: {s.accept_length_client:.4f}; the server's per-request figures pooled " \
        f"alike: {s.accept_length_server_pooled:.4f})" \
        if s.accept_length_server_pooled is not None and s.accept_length_client is not None else \
        " (per step, pooled)" if s.accept_length_client is not None else ""
    return (f"  Accept length: client {fmt(s.accept_length_client)}{pooled}"
            + (f", server {server:.2f}{scope}" if server is not None else "")
            + ("" if s.accept_length_client is not None else "  (the server reports no verify rounds per request)"))


def failures(doc: BenchDoc, records: Sequence[RequestRecord]) -> list[str]:
    s = doc.results
    failed = {k: v for k, v in s.outcomes.items() if k != "ok" and v}
    out = []
    if failed:
        last = {r.outcome.value: r.error for r in records if not r.ok and not r.warmup}
        out.append("  Failures:      " + ", ".join(f"{k}={v}" for k, v in failed.items()))
        out += [f"    last {k}: {err}" for k, err in last.items()]
    else:
        out.append("  Failures:      none")
    if s.out_of_range:
        out.append("  Out of range:  " + ", ".join(f"{k}={v}" for k, v in s.out_of_range.items())
                   + " (values outside the HDR histograms' range, counted and left out)")
    return out

"""The bench report: the results document and the text ``bench`` and ``report`` print. Exporter stage.

Built from the recorder's cumulative ``Stats`` plus the measured records (for the seed script's per-request
tok/s), so a replay of a records file prints exactly what the run printed.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from ..probe.lag import overlapping
from ..recorder.stats import Stats
from ..records import OUTCOMES, RequestRecord
from .format import fmt, ms

REPORTED = ("ttft", "itl", "inter_chunk", "e2e", "service", "schedule_lag", "tokens_per_chunk")


def wall_seconds(records: Sequence[RequestRecord]) -> float:
    """From the first measured send to the last measured completion."""
    if not records:
        return 0.0
    return (max(r.done_ns for r in records) - min(r.sent_ns for r in records)) / 1e9


def results(stats: Stats, records: Sequence[RequestRecord], lifetime_accept_length: float | None,
            loop_lag: Mapping[str, Any] | None = None) -> dict[str, Any]:
    ok = [r for r in records if r.ok and r.service_ns > 0]
    per = [r.output_tokens / (r.service_ns / 1e9) for r in ok]
    wall_s = wall_seconds(records)
    q = {}
    for name in REPORTED:
        qs = stats.quantiles(name)  # every quantile in one pass
        q[name] = {f"p{int(x * 100)}": v for x, v in qs.items()} | {"mean": stats.mean(name)}
    return {
        "requests": len(records), "ok": len(ok),
        "overall_tokens_per_second": sum(r.output_tokens for r in ok) / wall_s if wall_s > 0 else None,
        "avg_tokens_per_second": statistics.fmean(per) if per else None,
        "min_tokens_per_second": min(per) if per else None,
        "max_tokens_per_second": max(per) if per else None,
        "decode_tokens_per_second": stats.decode_tokens_per_second,
        "latency_seconds": {k: v for k, v in q.items() if k != "tokens_per_chunk"},
        "tokens_per_chunk": q["tokens_per_chunk"],
        "accept_length_client": stats.accept_length,
        "accept_length_server_per_request": stats.server_accept_length,
        "accept_length_server_lifetime": lifetime_accept_length,
        "verify_rounds": stats.verify_ct,
        "position_acceptance": list(stats.position_acceptance),
        "outcomes": {o: stats.outcomes.get(o, 0) for o in OUTCOMES},
        "out_of_range": dict(stats.out_of_range),
        "approximated_token_counts": stats.approx_requests,
        "tokens_per_chunk_bound": max((r.chunk_tokens_max for r in records if r.chunk_tokens_max), default=None),
        "event_loop_lag": client_lag(loop_lag or {}, records),
    }


def client_lag(lag: Mapping[str, Any], records: Sequence[RequestRecord]) -> dict[str, Any]:
    """The client's own loop lag, and the requests that ran while it was distorted (flagged, not hidden)."""
    spans = lag.get("distorted_spans_ns", [])
    hit = sum(1 for r in records if overlapping(spans, r.sent_ns, r.done_ns)) if spans else 0
    return {k: v for k, v in lag.items() if k != "distorted_spans_ns"} | {"requests_in_distorted_intervals": hit}


def by_domain(per_domain: Mapping[str, Stats]) -> dict[str, dict[str, Any]]:
    return {d: {"ok": st.outcomes.get("ok", 0), "decode_tokens_per_second": st.decode_tokens_per_second,
                "accept_length": st.accept_length} for d, st in sorted(per_domain.items())}


def run_doc(r: RequestRecord) -> dict[str, Any]:
    return {"prompt_id": r.prompt_id, "domain": r.domain, "outcome": r.outcome.value, "status": r.http_status,
            "error": r.error, "output_tokens": r.output_tokens, "prompt_tokens": r.prompt_tokens,
            "service_s": r.service_ns / 1e9, "e2e_s": r.e2e_ns / 1e9, "schedule_lag_s": r.schedule_lag_ns / 1e9,
            "ttft_s": None if r.ttft_ns is None else r.ttft_ns / 1e9, "chunks": len(r.chunk_ns),
            "decode_tokens_per_second": r.decode_tokens_per_second, "accept_length": r.accept_length,
            "server_accept_length": r.spec.accept_length if r.spec else None,
            "verify_ct": r.spec.verify_ct if r.spec else None, "tokens_exact": r.tokens_exact}


def text(s: Mapping[str, Any], domains: Mapping[str, Mapping[str, Any]], records: Sequence[RequestRecord]) -> str:
    lat = s["latency_seconds"]
    out = ["", "  ========== Results ==========",
           f"  Overall tok/s: {fmt(s['overall_tokens_per_second'], '.1f')}",
           f"  Avg tok/s:     {fmt(s['avg_tokens_per_second'], '.1f')}",
           f"  Min tok/s:     {fmt(s['min_tokens_per_second'], '.1f')}",
           f"  Max tok/s:     {fmt(s['max_tokens_per_second'], '.1f')}",
           f"  Decode tok/s:  {fmt(s['decode_tokens_per_second'], '.1f')}  (tokens after the first chunk / "
           "decode time)",
           f"  TTFT:          p50 {ms(lat['ttft']['p50'], unit=' ms')}, p99 {ms(lat['ttft']['p99'], unit=' ms')}",
           f"  ITL per token: p50 {ms(lat['itl']['p50'], unit=' ms')}, p90 {ms(lat['itl']['p90'], unit=' ms')}, "
           f"p99 {ms(lat['itl']['p99'], unit=' ms')}, mean {ms(lat['itl']['mean'], unit=' ms')}",
           f"  Inter-chunk:   p50 {ms(lat['inter_chunk']['p50'], unit=' ms')}, "
           f"p99 {ms(lat['inter_chunk']['p99'], unit=' ms')}",
           f"  Tokens/chunk:  mean {fmt(s['tokens_per_chunk']['mean'])}"]
    server = s["accept_length_server_per_request"] or s["accept_length_server_lifetime"]
    scope = " (per request)" if s["accept_length_server_per_request"] else " (server lifetime)"
    out.append(f"  Accept length: client {fmt(s['accept_length_client'])}"
               + (f", server {server:.2f}{scope}" if server is not None else "")
               + ("" if s["accept_length_client"] is not None else "  (the server reports no verify rounds per "
                                                                   "request)"))
    if (lat["schedule_lag"]["p99"] or 0) > 0.001:
        out.append(f"  Schedule lag:  p99 {ms(lat['schedule_lag']['p99'], unit=' ms')}  (latency is measured from "
                   "the intended start)")
    failed = {k: v for k, v in s["outcomes"].items() if k != "ok" and v}
    if failed:
        last = {r.outcome.value: r.error for r in records if not r.ok}
        out.append("  Failures:      " + ", ".join(f"{k}={v}" for k, v in failed.items()))
        out += [f"    last {k}: {err}" for k, err in last.items()]
    else:
        out.append("  Failures:      none")
    if s["out_of_range"]:
        out.append("  Out of range:  " + ", ".join(f"{k}={v}" for k, v in s["out_of_range"].items())
                   + " (values outside the HDR histograms' range, counted and left out)")
    if s["approximated_token_counts"]:
        out.append(f"  Approximated:  {s['approximated_token_counts']} request(s) had no per-chunk usage and their "
                   "split could not be made exact: tokens per chunk were apportioned by text length; each chunk "
                   f"held 1..{s['tokens_per_chunk_bound']} tokens, so a chunk's per-token ITL lies in "
                   "[gap / that, gap] (pass --tokenizer for exact counts)")
    lag = s["event_loop_lag"]
    if lag.get("distorted_intervals"):
        out.append(f"  WARNING:       specwatch's own event loop lagged over {lag['threshold_ms']:g} ms at p99 in "
                   f"{lag['distorted_intervals']} of {lag['intervals']} interval(s) (worst p99 "
                   f"{fmt(lag['worst_interval_p99_ms'], '.2f')} ms); {lag['requests_in_distorted_intervals']} "
                   "request(s) ran then and their latencies include the client's delay (try --workers)")
    if domains:
        out += ["", "  By domain:      requests  decode tok/s  accept length"]
        out += [f"    {dom:<12} {d['ok']:>8}  {fmt(d['decode_tokens_per_second'], '>12.1f')}  "
                f"{fmt(d['accept_length'], '>13.2f')}" for dom, d in domains.items()]
    return "\n".join(out)

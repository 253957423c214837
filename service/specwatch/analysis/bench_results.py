"""Records → recorder → results: the one path from a run's records to its numbers, for ``bench``, ``report``
and ``sweep``. Analysis stage; pure (records in, a ``BenchDoc`` and the run as one interval out).

Warm-up requests are left out. The figures are the whole measured phase's, ramp-up and drain included (as
vLLM's keys are); ``results.steady`` holds the steady window's (``steady_window``: all the streams in flight),
and each run says where it ran against it. Requests are recorded once per domain and the overall view is their
merge, so a replay of a records file gives the run's numbers exactly.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields, replace

from ..recorder.stats import Stats
from ..recorder.windows import Interval
from ..records import OUTCOMES, LoopLag, RequestRecord, RunInfo
from ..results import BenchDoc, BenchResult, ClientLag, DomainResult, RunResult, ServeMetrics, Spread
from . import steady_window
from .bench_checks import Asked, bench_checks
from .serve_metrics import serve_metrics

REPORTED = ("ttft", "itl", "inter_chunk", "e2e", "service", "schedule_lag")


@dataclass(frozen=True, slots=True)
class Analysis:
    doc: BenchDoc  # the results document (--json)
    interval: Interval  # the whole measured phase as one interval (--hlog)


def analyse(info: RunInfo, records: Sequence[RequestRecord], texts: Mapping[str, str] | None = None) -> Analysis:
    """``texts``: prompt id to text where the prompts are at hand, for the random-token check."""
    measured = [r for r in records if not r.warmup]
    domains: dict[str, Stats] = {}
    for rec in measured:
        domains.setdefault(rec.domain, Stats()).add(rec)
    overall = Stats()
    for st in domains.values():
        overall.merge(st)
    start = min((r.sent_ns for r in measured), default=0)
    interval = Interval(start, max((r.done_ns for r in measured), default=start), {"spec": overall})
    serve = serve_metrics(measured, info.schedule)
    steady, split = steady_window.of_run(measured, info.schedule, info.server_running)
    doc = BenchDoc(**{f.name: getattr(serve, f.name) for f in fields(ServeMetrics)},
                   server_url=info.server_url, api=info.api, model=info.model, server_info=info.server_info,
                   config=info.settings,
                   results=replace(summarise(overall, measured, info.lifetime_accept_length, info.loop_lag),
                                   steady=steady),
                   by_domain=by_domain(domains),
                   runs=tuple(replace(RunResult.of(r), phase=split.phase_of(r)) for r in measured))
    doc = replace(doc, checks=bench_checks(measured, Asked.of(info), texts))
    return Analysis(doc, interval)


def wall_seconds(records: Sequence[RequestRecord]) -> float:
    """From the first measured send to the last measured completion."""
    if not records:
        return 0.0
    return (max(r.done_ns for r in records) - min(r.sent_ns for r in records)) / 1e9


def spread(stats: Stats, name: str) -> Spread:
    qs = stats.quantiles(name)  # every quantile in one pass
    return Spread(qs.get(0.5), qs.get(0.9), qs.get(0.99), stats.mean(name))


def summarise(stats: Stats, records: Sequence[RequestRecord], lifetime_accept_length: float | None,
              loop_lag: LoopLag) -> BenchResult:
    ok = [r for r in records if r.ok and r.service_ns > 0]
    per = [t for r in ok if (t := r.service_tokens_per_second) is not None]
    wall_s = wall_seconds(records)
    latency = {name: spread(stats, name) for name in REPORTED}
    medians = [m for name in ("inter_chunk", "ttft") if (m := latency[name].p50)]
    return BenchResult(
        requests=len(records), ok=len(ok),
        overall_tokens_per_second=sum(r.output_tokens for r in ok) / wall_s if wall_s > 0 else None,
        avg_tokens_per_second=statistics.fmean(per) if per else None,
        min_tokens_per_second=min(per) if per else None,
        max_tokens_per_second=max(per) if per else None,
        decode_tokens_per_second=stats.decode_tokens_per_second,
        latency_seconds=latency,
        tokens_per_chunk=spread(stats, "tokens_per_chunk"),
        accept_length_client=stats.spec.accept_length,
        accept_length_server_per_request=stats.spec.server_accept_length,
        accept_length_server_lifetime=lifetime_accept_length,
        accept_length_server_pooled=stats.spec.server_pooled_accept_length,
        verify_rounds=stats.spec.verify_ct,
        position_acceptance=tuple(stats.spec.position_acceptance),
        outcomes={o: stats.outcomes.get(o, 0) for o in OUTCOMES},
        out_of_range=dict(stats.out_of_range),
        approximated_token_counts=stats.approx_requests,
        tokens_per_chunk_bound=max((r.chunk_tokens_max for r in records if r.chunk_tokens_max), default=None),
        event_loop_lag=ClientLag.of(loop_lag, records, min(medians, default=None)))


def by_domain(per_domain: Mapping[str, Stats]) -> dict[str, DomainResult]:
    return {d: DomainResult(st.outcomes.get("ok", 0), st.decode_tokens_per_second, st.spec.accept_length)
            for d, st in sorted(per_domain.items())}

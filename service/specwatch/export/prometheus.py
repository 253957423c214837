"""Prometheus exporter: the public metric contract (``specwatch_*``).

Exporter stage. Probe counters and histograms are updated per record (a request's chunks in one vectorised
pass, as the recorder records them); windowed gauges and HDR-exact quantiles are copied from the recorder's
``ProbeWindow``s on the interval tick; log-source counters are read from the sources at scrape time
(``SourceCollector``), so they are kept in one place only. Every label value comes from a closed set
(targets from config, outcomes, windows, quantiles, positions up to ``max_positions``) and every label
combination is initialised at start-up.
"""

from __future__ import annotations

import contextlib
import platform
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, Gauge, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from .. import __version__
from ..analysis.baseline import STATUSES as BASELINE_STATUSES
from ..analysis.by_load import LoadVerdict
from ..analysis.live_advisor import Advice
from ..analysis.verdict import Verdict
from ..probe.lag import LagInterval
from ..recorder.load import LOAD_BUCKETS
from ..recorder.observations import Observations
from ..recorder.stats import HDR_METRICS
from ..recorder.vector import prom_observe
from ..records import (
    LATENCY_METRICS,
    LOG_RESULTS,
    OUTCOMES,
    QUANTILES,
    SAMPLE_CHANNELS,
    SKIP_REASONS,
    ProbeWindow,
    Quantiles,
    RequestRecord,
    ServerSample,
    SourceHealth,
)
from ..results import Check
from ..server.scrape import dp_label
from .advisor_series import AdvisorSeries
from .families import AdvisorFamily, ProbeFamily, SelfFamily, ServerFamily, VerdictFamily
from .positions import PositionSeries


def window_label(seconds: float | None) -> str:
    """``1m``, ``5m``, ``90s``, ``2.5s``: whole minutes in minutes, anything else in seconds."""
    if seconds is None:
        return "cumulative"
    return f"{seconds // 60:.0f}m" if seconds % 60 == 0 else f"{seconds:.15g}s"


class Exporter:
    """The contract's one writer: typed methods per event (a record, a sample), per tick (windows, verdict,
    by load, lag) and per state change (target up, scrape up); nothing outside ``export/`` touches a metric."""

    def __init__(self, targets: tuple[str, ...], windows_s: tuple[float, ...], max_positions: int = 16) -> None:
        self.registry = r = CollectorRegistry()
        self.targets = targets
        self.positions = PositionSeries(max_positions)
        self.probe = ProbeFamily(r)  # registration order is the exposition's order
        self.quantiles = QuantileCollector()
        r.register(self.quantiles)
        self.sources = SourceCollector()
        r.register(self.sources)
        self.server = ServerFamily(r)
        self.verdict = VerdictFamily(r)
        self.advisor = AdvisorSeries(AdvisorFamily(r))
        self.own = SelfFamily(r)
        self._init()

    def _init(self) -> None:
        p = self.probe
        for tg in self.targets:
            for o in OUTCOMES:
                p.requests.labels(tg, o)
            p.tokens.labels(tg)
            for h in p.histograms:
                h.labels(tg)
            self.own.target_up.labels(tg).set(0)
        for src in SAMPLE_CHANNELS:
            self.server.samples.labels(src)
        self.own.build.labels(__version__, platform.python_version()).set(1)
        v = self.verdict
        for g in (v.baseline, v.speedup, v.speedup_se, v.breakeven, v.below, v.cycle, self.server.metrics_up):
            g.set(float("nan"))

    def set_health_source(self, health: Callable[[], SourceHealth]) -> None:
        """Where the log source's, the scrape's and the recorder's self-health is read at scrape time."""
        self.sources.health = health

    # ---- event time --------------------------------------------------------------------------
    def observe_record(self, rec: RequestRecord, obs: Observations | None) -> None:
        if rec.warmup:
            return
        tg, p = rec.target, self.probe
        p.requests.labels(tg, rec.outcome.value).inc()
        if obs is None:
            return
        p.tokens.labels(tg).inc(rec.output_tokens)
        if obs.ttft_ns is not None:
            p.ttft.labels(tg).observe(obs.ttft_ns / 1e9)
        p.e2e.labels(tg).observe(obs.e2e_ns / 1e9)
        if len(obs.gaps_ns):
            prom_observe(p.inter_chunk.labels(tg), obs.gaps_ns / 1e9)
            itl_ns, n = obs.itl()
            prom_observe(p.itl.labels(tg), itl_ns / 1e9, n)
            prom_observe(p.per_chunk.labels(tg), n.astype(float))

    def observe_sample(self, s: ServerSample, channel: str) -> None:
        f = self.server
        f.samples.labels(channel).inc()
        dp = dp_label(s.dp_rank or "0")
        for gauge, value in ((f.accept, s.accept_length), (f.rate, s.accept_rate), (f.gen, s.gen_throughput),
                             (f.running, s.running if s.is_decode else None), (f.queued, s.queued),
                             (f.steps, s.speculative_steps)):
            if value is not None:
                gauge.labels(channel, dp).set(value)
        if s.position_acceptance:
            self.positions.set(f.positions, (channel,), s.position_acceptance)

    # ---- tick time ---------------------------------------------------------------------------
    def update_windows(self, label: str, per_target: Mapping[str, ProbeWindow]) -> None:
        p = self.probe
        for tg, w in per_target.items():
            _set(p.tps.labels(tg, label), w.tokens_per_second)
            _set(p.accept.labels(tg, label), w.accept_length)
            _set(p.accept_server.labels(tg, label), w.server_reported_accept_length)
            _set(p.chunk_mean.labels(tg, label), w.tokens_per_chunk)
            self.positions.set(p.positions, (tg, label), w.position_acceptance)
            for metric in LATENCY_METRICS:
                self.quantiles.values[(tg, label, metric)] = w.latency_s[metric]

    def set_load(self, lv: LoadVerdict) -> None:
        v = self.verdict
        shown = {r.bucket for r in lv.buckets}
        for r in lv.buckets:
            _set(v.by_load.labels(str(r.bucket)), r.speedup)
            v.by_load_requests.labels(str(r.bucket)).set(r.requests)
        off = {r.bucket: r.off_range_cost for r in lv.buckets if r.off_range_cost is not None}
        for b, cost in off.items():
            v.off_range_cost.labels(str(b)).set(cost)
        for b in LOAD_BUCKETS:
            if b not in off:
                with contextlib.suppress(KeyError):
                    v.off_range_cost.remove(str(b))
            if b not in shown:
                with contextlib.suppress(KeyError):
                    v.by_load.remove(str(b))
                    v.by_load_requests.remove(str(b))
        _set(v.crossover, lv.crossover)
        _set(v.past_crossover, None if lv.past_crossover is None else float(lv.past_crossover))

    def set_checks(self, checks: Sequence[Check]) -> None:
        for c in checks:
            self.verdict.check_failed.labels(c.name).set(1 if c.failed else 0)

    def set_advice(self, a: Advice) -> None:
        self.advisor.set(a)

    def set_verdict(self, v: Verdict) -> None:
        f = self.verdict
        _set(f.load, v.load)
        f.load_known.set(1 if v.load_known else 0)
        _set(f.baseline_load, v.baseline_load)
        for st in BASELINE_STATUSES:
            f.baseline_status.labels(st).set(1 if st == v.baseline_status else 0)
        for gauge, value in ((f.baseline, v.baseline_tps), (f.speedup, v.speedup),
                             (f.speedup_se, v.relative_stderr), (f.cycle, v.cycle_s),
                             (f.breakeven, v.breakeven_accept_length),
                             (f.below, None if v.below_baseline is None else float(v.below_baseline))):
            _set(gauge, value)

    # ---- state changes -----------------------------------------------------------------------
    def set_target_up(self, target: str, up: bool) -> None:
        self.own.target_up.labels(target).set(1 if up else 0)

    def set_metrics_up(self, up: bool) -> None:
        self.server.metrics_up.set(1 if up else 0)

    def set_fixed_baseline(self, tokens_per_second: float | None) -> None:
        _set(self.verdict.baseline, tokens_per_second)

    def set_lag(self, iv: LagInterval) -> None:
        o = self.own
        o.loop_lag.set(iv.max_s or 0.0)
        o.loop_lag_p99.set(iv.p99_s or 0.0)
        o.distorted.set(1 if iv.distorted else 0)
        if iv.distorted:
            o.distorted_intervals.inc()

    def count_hlog_error(self) -> None:
        self.own.hlog_errors.inc()

    def set_tick_seconds(self, seconds: float) -> None:
        self.own.tick_seconds.set(seconds)

    def render(self) -> bytes:
        return generate_latest(self.registry)


class QuantileCollector(Collector):
    """``specwatch_probe_latency_quantile_seconds{target,window,metric,quantile}``: HDR-exact quantiles per
    window, exposed as a summary (the only type whose ``quantile`` label promtool accepts), with the
    window's sample count and sum."""

    NAME = "specwatch_probe_latency_quantile_seconds"

    def __init__(self) -> None:
        self.values: dict[tuple[str, str, str], Quantiles] = {}

    def collect(self) -> Iterator[Metric]:
        m = Metric(self.NAME, "HDR-exact latency quantiles per window (ttft, itl, inter_chunk, e2e, service, "
                              "schedule_lag).", "summary")
        for (target, window, metric), q in sorted(self.values.items()):
            labels = {"target": target, "window": window, "metric": metric}
            for quantile, v in zip(QUANTILES, (q.p50, q.p90, q.p99), strict=True):
                m.add_sample(self.NAME, labels | {"quantile": str(quantile)}, float("nan") if v is None else v)
            m.add_sample(self.NAME + "_count", labels, float(q.count))
            m.add_sample(self.NAME + "_sum", labels, q.sum)
        yield m


@dataclass(slots=True, eq=False)  # registered by identity
class SourceCollector(Collector):
    """Log-source, scrape and recorder self-health, read at scrape time through ``health`` (a frozen
    ``SourceHealth`` from where it is kept, no second copy): lines by parse result, lines skipped, reopenings,
    source up/configured, last sample time, values refused, and HDR values out of range."""

    health: Callable[[], SourceHealth] = SourceHealth
    created: float = field(default_factory=time.time)  # exposed as each counter's _created, as Counter does

    def _counter(self, name: str, doc: str, label: str, keys: tuple[str, ...], got: Mapping[str, int]
                 ) -> CounterMetricFamily:
        m = CounterMetricFamily(name, doc, labels=[label])
        for k in keys:
            m.add_metric([k], got.get(k, 0), created=self.created)
        return m

    def collect(self) -> Iterator[Metric]:
        h = self.health()
        yield self._counter("specwatch_log_lines", "Server log lines by parse result.", "result", LOG_RESULTS,
                            h.lines)
        yield self._counter("specwatch_log_lines_skipped", "Log lines skipped before parsing.", "reason",
                            SKIP_REASONS, h.skipped)
        reopens = CounterMetricFamily("specwatch_log_source_reopens", "Log file reopenings or command restarts.")
        reopens.add_metric([], h.restarts, created=self.created)
        yield reopens
        yield GaugeMetricFamily("specwatch_log_source_up", "1 while the log source is open and readable.",
                                value=1 if h.up else 0)
        yield GaugeMetricFamily("specwatch_log_source_configured", "1 if a log source (file, command or stdin) "
                                "is configured.", value=1 if h.configured else 0)
        yield GaugeMetricFamily("specwatch_log_last_sample_timestamp_seconds",
                                "Unix time of the last parsed log sample.", value=h.last_sample_unix_s)
        yield self._counter("specwatch_hdr_out_of_range", "Values outside an HDR histogram's range.", "metric",
                            HDR_METRICS, h.out_of_range)
        rejected = CounterMetricFamily("specwatch_server_metrics_rejected_values",
                                       "Values in the server's /metrics refused: not finite, out of range, or an "
                                       "unknown position label.")
        rejected.add_metric([], h.scrape_rejected, created=self.created)
        yield rejected


def _set(g: Gauge, v: float | None) -> None:
    g.set(float("nan") if v is None else v)

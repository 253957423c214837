"""``Stats``: a mergeable aggregate of request records (one interval, a window, or a whole run) in HDR
histograms, with exact sums for means. Recorder stage.

``add`` records one request: four scalar ``record_value`` calls and one vectorised pass per per-chunk series
(``vector.hdr_record``), no percentile work; it runs off the hot path (after a bench run, on the daemon's
tick). ``describe`` is the read side, run once per window per tick: every quantile in one pass per histogram.
"""

from __future__ import annotations

import collections
import math
import weakref
from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np
from hdrh.histogram import HdrHistogram

from ..hdr import hdr_quantiles
from ..records import LATENCY_METRICS, OUTCOMES, QUANTILES, ProbeWindow, Quantiles, RequestRecord
from .accept import AcceptCounts
from .observations import Observations, observe
from .vector import hdr_record

# Stored integers: latencies in µs; other metrics multiplied by their scale (milli-units keep 3 decimals).
SCALED_METRICS = {"tokens_per_chunk": 1.0, "decode_tps": 1000.0, "accept_length": 1000.0}
HDR_METRICS = (*LATENCY_METRICS, *SCALED_METRICS)
HIGHEST_US = 3_600_000_000  # one hour


def unit(name: str) -> float:
    """Divisor from the stored integer to seconds (latencies) or the natural unit (others)."""
    return 1e6 if name in LATENCY_METRICS else SCALED_METRICS[name]


def new_histogram(name: str, digits: int) -> HdrHistogram:
    h = HdrHistogram(1, HIGHEST_US if name in LATENCY_METRICS else 100_000_000, digits)
    # hdrh's histogram and its encoder reference each other; the cycle keeps ~190 KB of counts alive until
    # a full GC pass, which under steady load is rare enough for memory to grow by hundreds of MB.
    h.encoder.histogram = weakref.proxy(h)
    return h


@dataclass(slots=True)
class Stats:
    digits: int = 3  # HDR significant digits: 3 keeps values within 0.1%, 2 within 1% at ~1/8 the memory
    hists: dict[str, HdrHistogram] = field(default_factory=dict)
    sums: dict[str, float] = field(default_factory=lambda: collections.defaultdict(float))  # exact, for means
    outcomes: collections.Counter[str] = field(default_factory=collections.Counter)
    out_of_range: collections.Counter[str] = field(default_factory=collections.Counter)
    output_tokens: int = 0
    decode_tokens: int = 0
    decode_ns: int = 0
    approx_requests: int = 0  # per-chunk token counts were apportioned, not reported
    spec: AcceptCounts = field(default_factory=AcceptCounts)  # accept length and per-position acceptance

    def _hist(self, name: str) -> HdrHistogram:
        h = self.hists.get(name)
        if h is None:
            h = self.hists[name] = new_histogram(name, self.digits)
        return h

    def _put(self, name: str, value: float, count: int = 1) -> None:
        if self._hist(name).record_value(int(value), count):
            self.sums[name] += value * count
        else:
            self.out_of_range[name] += count

    def _put_many(self, name: str, values: np.ndarray, counts: np.ndarray | None = None) -> None:
        """``_put`` for a whole array (float values in the stored unit; truncated as ``int()`` would)."""
        w = counts if counts is not None else np.ones(len(values), dtype=np.int64)
        dropped = hdr_record(self._hist(name), values.astype(np.int64), w)
        if dropped is None:
            self.sums[name] += float((values * w).sum())
            return
        keep = ~dropped
        self.sums[name] += float((values[keep] * w[keep]).sum())
        self.out_of_range[name] += int(w[dropped].sum())

    def add(self, rec: RequestRecord, obs: Observations | None = None) -> None:
        self.outcomes[rec.outcome.value] += 1
        obs = obs if obs is not None else observe(rec)
        if obs is None:
            return
        self.output_tokens += rec.output_tokens
        if not rec.tokens_exact:
            self.approx_requests += 1
        if obs.ttft_ns is not None:
            self._put("ttft", obs.ttft_ns / 1000)
        self._put("e2e", obs.e2e_ns / 1000)
        self._put("service", obs.service_ns / 1000)
        self._put("schedule_lag", obs.schedule_lag_ns / 1000)
        if len(obs.gaps_ns):
            self._put_many("inter_chunk", obs.gaps_ns / 1000)
            itl_ns, n = obs.itl()
            self._put_many("itl", itl_ns / 1000, n)
            self._put_many("tokens_per_chunk", n.astype(np.float64))
        tps = obs.decode_tokens_per_second
        if tps is not None:
            self._put("decode_tps", tps * 1000)
            self.sums["decode_tps_sq"] += tps * tps
            self.decode_tokens += rec.decode_tokens
            self.decode_ns += rec.decode_ns
        al = rec.accept_length
        if al is not None and rec.spec is not None:
            self._put("accept_length", al * 1000)
            self.spec.add(rec)

    def merge(self, other: Stats) -> None:
        if not self.hists:
            self.digits = other.digits
        for name, h in other.hists.items():
            self._hist(name).add(h)
        for name, v in other.sums.items():
            self.sums[name] += v
        self.outcomes.update(other.outcomes)
        self.out_of_range.update(other.out_of_range)
        self.spec.merge(other.spec)
        for f in ("output_tokens", "decode_tokens", "decode_ns", "approx_requests"):
            setattr(self, f, getattr(self, f) + getattr(other, f))

    # ---- read side (tick time only) ----------------------------------------------------------
    def quantiles(self, name: str, qs: Iterable[float] = QUANTILES) -> dict[float, float | None]:
        """Several quantiles in one pass over the counts (``hdr.hdr_quantiles``), in the metric's unit."""
        h = self.hists.get(name)
        qs = tuple(qs)
        if h is None:
            return dict.fromkeys(qs)
        return {q: None if v is None else v / unit(name) for q, v in zip(qs, hdr_quantiles(h, qs), strict=True)}

    def mean(self, name: str) -> float | None:
        n = self.count(name)
        return self.sums.get(name, 0.0) / n / unit(name) if n else None

    def count(self, name: str) -> int:
        h = self.hists.get(name)
        return 0 if h is None else int(h.get_total_count())

    def quantiles_of(self, name: str) -> Quantiles:
        q = self.quantiles(name)
        return Quantiles(p50=q[0.5], p90=q[0.9], p99=q[0.99], mean=self.mean(name), count=self.count(name),
                         sum=self.sums.get(name, 0.0) / unit(name))

    def describe(self) -> ProbeWindow:
        ok = self.outcomes.get("ok", 0)
        return ProbeWindow(
            requests=self.requests, ok=ok, errors=self.requests - ok,
            outcomes={o: self.outcomes.get(o, 0) for o in OUTCOMES},
            tokens_per_second=self.decode_tokens_per_second,
            tokens_per_second_relative_stderr=self.decode_tps_relative_stderr,
            accept_length=self.spec.accept_length, server_reported_accept_length=self.spec.server_accept_length,
            tokens_per_chunk=self.mean("tokens_per_chunk"), position_acceptance=self.spec.position_acceptance,
            approximated_requests=self.approx_requests,
            latency_s={m: self.quantiles_of(m) for m in LATENCY_METRICS},
            position_rounds=sum(self.spec.rounds_by_accepted))

    @property
    def decode_tokens_per_second(self) -> float | None:
        """Token-weighted decode rate: sum(decode tokens) / sum(last chunk - first chunk)."""
        return self.decode_tokens * 1e9 / self.decode_ns if self.decode_ns else None

    @property
    def decode_tps_relative_stderr(self) -> float | None:
        """Standard error of the mean per-request decode tok/s, relative to that mean."""
        return relative_stderr(self.count("decode_tps"), self.sums["decode_tps"] / 1000, self.sums["decode_tps_sq"])

    @property
    def requests(self) -> int:
        return sum(self.outcomes.values())


def relative_stderr(n: int, total: float, sum_sq: float) -> float | None:
    """Standard error of a mean, relative to the mean, from ``n`` values' sum and sum of squares (sample
    variance); None below two values or for a mean that is not positive."""
    if n < 2:
        return None
    mean = total / n
    var = max(0.0, (sum_sq - n * mean * mean) / (n - 1))
    return math.sqrt(var / n) / mean if mean > 0 else None

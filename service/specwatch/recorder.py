"""Recorder: HDR histograms per interval, the interval swap, rolling windows and the cumulative view.

Recorder stage. ``record`` is the per-request hot path (a few ``record_value`` calls, no percentile work);
``tick`` closes the interval, writes the interval log and recomputes windowed summaries.

Per-token ITL: a chunk of ``n`` tokens that arrived ``g`` after the previous chunk contributes ``n``
samples of ``g / n`` (what SGLang's bench_serving does for its native backend): with speculative decoding
a chunk carries a whole verify round, so one sample per chunk would overstate per-token latency by the
accept length. The raw gap goes to ``inter_chunk``. The first chunk (the prefill's token) is TTFT, not ITL,
and is left out of tokens-per-chunk.
"""

from __future__ import annotations

import bisect
import collections
import functools
import itertools
import math
import time
import weakref
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import IO

from hdrh.histogram import HdrHistogram

from .records import OUTCOMES, RequestRecord, ServerSample

# name -> (highest trackable value, unit divisor applied to turn the stored integer into the public unit)
LATENCY_METRICS = ("ttft", "itl", "inter_chunk", "e2e", "service", "schedule_lag")  # stored in µs
SCALED_METRICS = {"tokens_per_chunk": 1.0, "decode_tps": 1000.0, "accept_length": 1000.0}
HIGHEST_US = 3_600_000_000  # one hour
QUANTILES = (0.5, 0.9, 0.99)


def _new_hist(name: str, digits: int) -> HdrHistogram:
    h = HdrHistogram(1, HIGHEST_US if name in LATENCY_METRICS else 100_000_000, digits)
    # hdrh's histogram and its encoder reference each other; the cycle keeps ~190 KB of counts alive until
    # a full GC pass, which under steady load is rare enough for memory to grow by hundreds of MB.
    h.encoder.histogram = weakref.proxy(h)
    return h


@dataclass(slots=True)
class Stats:
    """A mergeable aggregate of records: one interval, a window, or the whole run."""

    digits: int = 3  # HDR significant digits: 3 keeps values within 0.1%, 2 within 1% at ~1/8 the memory
    hists: dict[str, HdrHistogram] = field(default_factory=dict)
    sums: dict[str, float] = field(default_factory=lambda: collections.defaultdict(float))  # exact, for means
    outcomes: collections.Counter[str] = field(default_factory=collections.Counter)
    out_of_range: collections.Counter[str] = field(default_factory=collections.Counter)
    output_tokens: int = 0
    decode_tokens: int = 0
    decode_ns: int = 0
    spec_tokens: int = 0  # sum of (completion_tokens - 1) over requests with a verify count
    verify_ct: int = 0
    server_accept_sum: float = 0.0
    server_accept_n: int = 0
    approx_requests: int = 0  # per-chunk token counts were apportioned, not reported
    rounds_by_accepted: list[int] = field(default_factory=list)  # verify rounds by accepted drafts (server hist)

    def _hist(self, name: str) -> HdrHistogram:
        h = self.hists.get(name)
        if h is None:
            h = self.hists[name] = _new_hist(name, self.digits)
        return h

    def _put(self, name: str, value: float, count: int = 1) -> None:
        if self._hist(name).record_value(int(value), count):
            self.sums[name] += value * count
        else:
            self.out_of_range[name] += count

    def add(self, rec: RequestRecord) -> None:
        self.outcomes[rec.outcome.value] += 1
        if not rec.ok or not rec.chunk_ns:
            return  # failures are counted, never fed to latency histograms
        self.output_tokens += rec.output_tokens
        if not rec.tokens_exact:
            self.approx_requests += 1
        ttft = rec.ttft_ns
        if ttft is not None:
            self._put("ttft", ttft / 1000)
        self._put("e2e", rec.e2e_ns / 1000)
        self._put("service", rec.service_ns / 1000)
        self._put("schedule_lag", rec.schedule_lag_ns / 1000)
        prev = rec.chunk_ns[0]
        for t, n in zip(rec.chunk_ns[1:], rec.chunk_tokens[1:], strict=True):
            gap_us = (t - prev) / 1000
            prev = t
            self._put("inter_chunk", gap_us)
            if n > 0:
                self._put("itl", gap_us / n, n)
                self._put("tokens_per_chunk", n)
        tps = rec.decode_tokens_per_second
        if tps is not None:
            self._put("decode_tps", tps * 1000)
            self.sums["decode_tps_sq"] += tps * tps
            self.decode_tokens += rec.output_tokens - rec.chunk_tokens[0]
            self.decode_ns += rec.decode_ns
        al = rec.accept_length
        if al is not None and rec.spec is not None:
            self._put("accept_length", al * 1000)
            self.spec_tokens += rec.output_tokens - 1
            self.verify_ct += rec.spec.verify_ct
            if rec.spec.accept_length is not None:
                self.server_accept_sum += rec.spec.accept_length
                self.server_accept_n += 1
            _add_into(self.rounds_by_accepted, rec.spec.histogram)

    def merge(self, other: Stats) -> None:
        if not self.hists:
            self.digits = other.digits
        for name, h in other.hists.items():
            self._hist(name).add(h)
        for name, v in other.sums.items():
            self.sums[name] += v
        self.outcomes.update(other.outcomes)
        self.out_of_range.update(other.out_of_range)
        _add_into(self.rounds_by_accepted, other.rounds_by_accepted)
        for f in ("output_tokens", "decode_tokens", "decode_ns", "spec_tokens", "verify_ct", "server_accept_sum",
                  "server_accept_n", "approx_requests"):
            setattr(self, f, getattr(self, f) + getattr(other, f))

    # ---- read side (tick time only) ----------------------------------------------------------
    def quantile(self, name: str, q: float) -> float | None:
        return self.quantiles(name, (q,))[q]

    def quantiles(self, name: str, qs: Iterable[float]) -> dict[float, float | None]:
        """Several quantiles in one C-speed pass over the counts (hdrh's own query walks them in Python)."""
        h = self.hists.get(name)
        total = 0 if h is None else h.get_total_count()
        if h is None or total == 0:
            return dict.fromkeys(qs)
        end = h._counts_index_for(h.get_max_value()) + 1  # nothing is recorded above the max
        cum = list(itertools.accumulate(memoryview(h.counts).cast("B").cast("Q")[:end]))
        out: dict[float, float | None] = {}
        for q in qs:
            target = max(1, int(min(q, 1.0) * total + 0.5))  # hdrh's get_target_count_at_percentile
            idx = bisect.bisect_left(cum, target)
            out[q] = h.get_highest_equivalent_value(h.get_value_from_index(idx)) / _unit(name)
        return out

    def mean(self, name: str) -> float | None:
        n = self.count(name)
        return self.sums.get(name, 0.0) / n / _unit(name) if n else None

    def count(self, name: str) -> int:
        h = self.hists.get(name)
        return 0 if h is None else int(h.get_total_count())

    @property
    def decode_tokens_per_second(self) -> float | None:
        """Token-weighted decode rate: sum(tokens - 1) / sum(last chunk - first chunk)."""
        return self.decode_tokens * 1e9 / self.decode_ns if self.decode_ns else None

    @property
    def decode_tps_relative_stderr(self) -> float | None:
        """Standard error of the mean per-request decode tok/s, relative to that mean."""
        n = self.count("decode_tps")
        if n < 2:
            return None
        mean = self.sums["decode_tps"] / 1000 / n
        var = max(0.0, (self.sums["decode_tps_sq"] - n * mean * mean) / (n - 1))
        return math.sqrt(var / n) / mean if mean > 0 else None

    @property
    def accept_length(self) -> float | None:
        return self.spec_tokens / self.verify_ct if self.verify_ct else None

    @property
    def position_acceptance(self) -> tuple[float, ...]:
        """Share of verify rounds whose draft position i (1-based) was accepted, from the server's per-request
        histogram of accepted drafts per round (SGLang's spec_correct_drafts_histogram)."""
        rounds = sum(self.rounds_by_accepted)
        if not rounds:
            return ()
        tail = list(itertools.accumulate(reversed(self.rounds_by_accepted)))[::-1]  # rounds with >= i accepted
        return tuple(t / rounds for t in tail[1:])

    @property
    def server_accept_length(self) -> float | None:
        return self.server_accept_sum / self.server_accept_n if self.server_accept_n else None

    @property
    def requests(self) -> int:
        return sum(self.outcomes.values())


def _add_into(acc: list[int], counts: Iterable[int]) -> None:
    for i, c in enumerate(counts):
        if i < len(acc):
            acc[i] += c
        else:
            acc.append(c)


def _unit(name: str) -> float:
    """Divisor from the stored integer to seconds (latencies) or the natural unit (others)."""
    return 1e6 if name in LATENCY_METRICS else SCALED_METRICS[name]


class HlogWriter:
    """HdrHistogram interval log (one tagged line per metric per interval), readable by
    ``hdrh.log.HistogramLogReader``. Values are microseconds (latencies) or milli-units."""

    def __init__(self, stream: IO[str], start_wall_s: float) -> None:
        self.stream = stream
        self.start = start_wall_s
        stream.write("#[specwatch interval log: latencies in microseconds; decode_tps and accept_length in "
                     "thousandths]\n")
        stream.write(f"#[StartTime: {start_wall_s:.3f} (seconds since epoch)]\n")
        stream.write('"StartTimestamp","Interval_Length","Interval_Max","Interval_Compressed_Histogram"\n')

    def write(self, stats: Stats, start_s: float, end_s: float, prefix: str = "") -> None:
        for name in sorted(stats.hists):
            h = stats.hists[name]
            if h.get_total_count() == 0:
                continue
            payload = h.encode().decode()
            self.stream.write(f"Tag={prefix}{name},{start_s - self.start:.3f},{end_s - start_s:.3f},"
                              f"{h.get_max_value() / _unit(name) * (1e3 if name in LATENCY_METRICS else 1):.3f},"
                              f"{payload}\n")
        self.stream.flush()


Part = dict[str, Stats]  # per target


def _merge_into(dst: Part, src: Part) -> None:
    for target, st in src.items():
        dst.setdefault(target, Stats(st.digits)).merge(st)


class Recorder:
    """Per-target interval stats, rolling windows over the last closed intervals, and cumulative stats.

    A window of ``k`` intervals is rebuilt on each tick from pre-merged blocks of ``B ~ sqrt(k)``
    intervals plus a few single intervals, so a tick costs about ``2 * sqrt(k)`` histogram merges rather
    than ``k`` (HDR histograms cannot be subtracted, so windows cannot slide incrementally).
    """

    def __init__(self, interval_s: float = 10.0, windows_s: Iterable[int] = (60, 300),
                 hlog: HlogWriter | None = None, digits: int = 3) -> None:
        self.interval_s = interval_s
        self._new = functools.partial(Stats, digits)
        self.windows_s = tuple(sorted(windows_s))
        self._k = {w: max(1, round(w / interval_s)) for w in self.windows_s}
        keep = max(self._k.values(), default=1)
        self._block = max(1, math.isqrt(keep))
        self.ring: collections.deque[Part] = collections.deque(maxlen=keep)
        self.blocks: collections.deque[Part] = collections.deque(maxlen=keep // self._block + 1)
        self._pending: Part = {}  # intervals closed since the last block boundary, merged
        self._closed = 0
        self.current: dict[str, Stats] = collections.defaultdict(self._new)
        self.cumulative: dict[str, Stats] = collections.defaultdict(self._new)
        self.by_domain: dict[str, Stats] = collections.defaultdict(self._new)
        self.warmup_requests = 0
        self.hlog = hlog
        self.interval_start = time.time()
        self.windows: dict[int, Part] = {}

    def record(self, rec: RequestRecord) -> None:
        if rec.warmup:
            self.warmup_requests += 1
            return
        self.current[rec.target].add(rec)

    def tick(self) -> None:
        """Close the interval: fold it into cumulative, log it, and rebuild the rolling windows."""
        now = time.time()
        closed: Part = dict(self.current)
        self.current = collections.defaultdict(self._new)
        _merge_into(self.cumulative, closed)
        if self.hlog is not None:
            for target, st in closed.items():
                self.hlog.write(st, self.interval_start, now, prefix=f"{target}.")
        self.interval_start = now
        self.ring.append(closed)
        _merge_into(self._pending, closed)
        self._closed += 1
        if self._closed % self._block == 0:
            self.blocks.append(self._pending)
            self._pending = {}
        self.windows = {w: self._window(min(k, len(self.ring))) for w, k in self._k.items()}

    def _window(self, k: int) -> Part:
        """Merge the ``k`` most recent intervals: the open block, whole blocks, then single intervals."""
        out: Part = {}
        partial = self._closed % self._block  # intervals in the open block (newest)
        take = min(partial, k)
        if take == partial and partial:
            _merge_into(out, self._pending)
        else:
            for part in list(self.ring)[len(self.ring) - take:]:
                _merge_into(out, part)
        rest = k - take
        whole = min(rest // self._block, len(self.blocks))
        for block in list(self.blocks)[len(self.blocks) - whole:] if whole else ():
            _merge_into(out, block)
        singles = rest - whole * self._block
        end = len(self.ring) - take - whole * self._block
        for part in list(self.ring)[max(0, end - singles):end]:
            _merge_into(out, part)
        return out

    def record_domain(self, rec: RequestRecord) -> None:
        """Bench only: per-domain breakdown of the measured phase."""
        if not rec.warmup:
            self.by_domain[rec.domain].add(rec)


def outcome_counts(stats: Stats) -> dict[str, int]:
    return {o: stats.outcomes.get(o, 0) for o in OUTCOMES}


class SampleWindows:
    """Server samples (log lines, scrapes) kept for the longest window, averaged per window on the tick."""

    def __init__(self, windows_s: Iterable[int]) -> None:
        self.windows_s = tuple(sorted(windows_s))
        self._keep_s = max(self.windows_s, default=60)
        self._samples: collections.deque[tuple[float, ServerSample]] = collections.deque()
        self.last: dict[str, ServerSample] = {}  # per source
        self.averages: dict[int, dict[str, float | None]] = {}

    def record(self, sample: ServerSample, now_s: float) -> None:
        self.last[sample.source] = sample
        if sample.accept_length is not None or sample.gen_throughput is not None:
            self._samples.append((now_s, sample))

    def tick(self, now_s: float) -> None:
        while self._samples and now_s - self._samples[0][0] > self._keep_s:
            self._samples.popleft()
        self.averages = {}
        for w in self.windows_s:
            recent = [s for t, s in self._samples if now_s - t <= w]
            self.averages[w] = {
                "accept_length": _avg(s.accept_length for s in recent),
                "accept_rate": _avg(s.accept_rate for s in recent),
                "gen_throughput": _avg(s.gen_throughput for s in recent if s.source != "sglang_prefill"),
                "samples": float(len(recent)),
            }


def _avg(values: Iterable[float | None]) -> float | None:
    xs = [v for v in values if v is not None]
    return sum(xs) / len(xs) if xs else None

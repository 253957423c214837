"""The client's own event-loop lag, so a busy client is flagged instead of being reported as a slow server.

Source stage: a sampling task and its per-interval histogram. Every ``period_s`` (10 ms) it measures two delays:
- how long one pass of the loop takes to come back to a task that is ready now (``await asyncio.sleep(0)``):
  the time every stream's bytes can wait in the socket before ``data_received`` stamps them; sub-millisecond
  resolution, and
- how late its timer fired beyond the timer's own granularity (libuv timers are milliseconds): a stall
  longer than a pass (a long callback, a GC pause).
The larger of the two is one sample. ``close`` ends an interval: its samples' p50, p99 and max, and whether
the interval is *distorted* (p99 over ``threshold_s``): latencies measured then hold the client's delay.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

from hdrh.histogram import HdrHistogram

from ..hdr import hdr_quantiles
from ..records import LoopLag

PERIOD_S = 0.01
THRESHOLD_S = 0.001  # lag above this at p99 can distort a millisecond-scale ITL
TIMER_SLACK_NS = 1_000_000  # a libuv timer may fire up to a millisecond late by design
HIGHEST_US = 600_000_000


@dataclass(frozen=True, slots=True)
class LagInterval:
    start_ns: int
    end_ns: int
    samples: int
    p50_s: float | None
    p99_s: float | None
    max_s: float | None
    distorted: bool


class LagMonitor:
    def __init__(self, period_s: float = PERIOD_S, threshold_s: float = THRESHOLD_S,
                 interval_s: float | None = None, keep: bool = True) -> None:
        """``interval_s``: close intervals by itself that often (bench); None: the caller closes them (the
        daemon, on its tick). ``keep``: keep every closed interval in ``intervals`` (bench; the daemon does
        not, it runs for months)."""
        self.period_s = period_s
        self.interval_s = interval_s
        self.threshold_s = threshold_s
        self._hist = HdrHistogram(1, HIGHEST_US, 2)  # µs, within 1%
        self._start_ns = time.monotonic_ns()
        self.intervals: list[LagInterval] = []
        self.keep = keep

    def record_ns(self, lag_ns: int) -> None:
        self._hist.record_value(min(max(1, lag_ns // 1000), HIGHEST_US))

    async def run(self) -> None:
        period_ns = int(self.period_s * 1e9)
        while True:
            t0 = time.perf_counter_ns()
            await asyncio.sleep(self.period_s)
            t1 = time.perf_counter_ns()
            await asyncio.sleep(0)
            t2 = time.perf_counter_ns()
            self.record_ns(max(t2 - t1, t1 - t0 - period_ns - TIMER_SLACK_NS))
            if self.interval_s is not None and time.monotonic_ns() - self._start_ns >= self.interval_s * 1e9:
                self.close()

    def close(self, now_ns: int | None = None) -> LagInterval:
        now_ns = time.monotonic_ns() if now_ns is None else now_ns
        h = self._hist
        n = h.get_total_count()
        p50, p99, top = (None if v is None else v / 1e6 for v in hdr_quantiles(h, (0.5, 0.99, 1.0)))
        iv = LagInterval(self._start_ns, now_ns, n, p50, p99, top, p99 is not None and p99 > self.threshold_s)
        h.reset()
        self._start_ns = now_ns
        if self.keep:
            self.intervals.append(iv)
        return iv


def loop_lag(intervals: list[LagInterval], threshold_s: float = THRESHOLD_S) -> LoopLag:
    """The run's lag as the results document reports it (``event_loop_lag``): the worst interval's p99, the
    largest sample, and how many intervals were distorted (with ``--workers``, every worker's intervals)."""
    p99 = [iv.p99_s for iv in intervals if iv.p99_s is not None]
    mx = [iv.max_s for iv in intervals if iv.max_s is not None]
    bad = [iv for iv in intervals if iv.distorted]
    return LoopLag(threshold_ms=threshold_s * 1e3, intervals=len(intervals), distorted_intervals=len(bad),
                   worst_interval_p99_ms=max(p99) * 1e3 if p99 else None, max_ms=max(mx) * 1e3 if mx else None,
                   samples=sum(iv.samples for iv in intervals),
                   distorted_spans_ns=tuple((iv.start_ns, iv.end_ns) for iv in bad))

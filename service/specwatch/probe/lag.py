"""The client's own event-loop lag, so a busy client is flagged instead of being reported as a slow server.

Source stage: a sampling task and its per-interval histogram. Every ``period_s`` (10 ms) it measures two delays:
- how long one pass of the loop takes to come back to a task that is ready now (``await asyncio.sleep(0)``):
  the time every stream's bytes can wait in the socket before ``data_received`` stamps them; sub-millisecond
  resolution, and
- how late its timer fired beyond the timer's own granularity (libuv timers are milliseconds): a stall
  longer than a pass (a long callback, a GC pause).
The larger of the two is one sample. ``close`` ends an interval: its samples' p50, p99 and max, whether
the interval is *distorted* (p99 over ``threshold_s``): latencies measured then hold the client's delay, and
how much of it the process spent on a CPU (``cpu_share``): near 1, the loop itself was the bottleneck (more
processes, ``--workers``, would help); well below, the process waited for a core another process held, or was
paused, and more processes of its own would not help.
"""

from __future__ import annotations

import asyncio
import os
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
    cpu_share: float | None = None  # the process's CPU time / the interval's length (every thread)


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
        self._cpu_ns = time.process_time_ns()
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
        cpu_ns = time.process_time_ns()
        share = (cpu_ns - self._cpu_ns) / (now_ns - self._start_ns) if now_ns > self._start_ns else None
        iv = LagInterval(self._start_ns, now_ns, n, p50, p99, top, p99 is not None and p99 > self.threshold_s, share)
        h.reset()
        self._start_ns, self._cpu_ns = now_ns, cpu_ns
        if self.keep:
            self.intervals.append(iv)
        return iv


def usable_cpus() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def loop_lag(intervals: list[LagInterval], threshold_s: float = THRESHOLD_S, workers: int = 1) -> LoopLag:
    """The run's lag as the results document reports it (``event_loop_lag``): the worst interval's p99, the
    largest sample, how many intervals were distorted (with ``--workers``, every worker's intervals), how busy
    the process was in the distorted ones, and the cores it could have used."""
    p99 = [iv.p99_s for iv in intervals if iv.p99_s is not None]
    mx = [iv.max_s for iv in intervals if iv.max_s is not None]
    bad = [iv for iv in intervals if iv.distorted]
    busy = [iv.cpu_share for iv in bad if iv.cpu_share is not None]
    return LoopLag(threshold_ms=threshold_s * 1e3, intervals=len(intervals), distorted_intervals=len(bad),
                   worst_interval_p99_ms=max(p99) * 1e3 if p99 else None, max_ms=max(mx) * 1e3 if mx else None,
                   samples=sum(iv.samples for iv in intervals),
                   distorted_spans_ns=tuple((iv.start_ns, iv.end_ns) for iv in bad),
                   distorted_cpu_share=sum(busy) / len(busy) if busy else None, cpus=usable_cpus(), workers=workers)

"""``SampleWindows``: server samples (log lines, scrapes) averaged per window. Recorder stage.

Samples are summed into the open interval as they arrive (O(1) per sample, nothing kept per sample); the
tick closes the interval, and a window's averages are the sums over the intervals it spans. Memory is
bounded by (longest window / interval) intervals however fast the server logs, and each sample weighs the
same as in a plain mean over the window's samples.
"""

from __future__ import annotations

import collections
from collections.abc import Iterable
from dataclasses import dataclass, field

from ..records import ServerSample, ServerWindow

FIELDS = ("accept_length", "accept_rate", "gen_throughput")


@dataclass(slots=True)
class _Sums:
    sums: dict[str, float] = field(default_factory=lambda: dict.fromkeys(FIELDS, 0.0))
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(FIELDS, 0))
    samples: int = 0

    def add(self, s: ServerSample) -> None:
        self.samples += 1
        for name in FIELDS:
            v = getattr(s, name)
            if v is not None and not (name == "gen_throughput" and s.source == "sglang_prefill"):
                self.sums[name] += v
                self.counts[name] += 1


class SampleWindows:
    def __init__(self, windows_s: Iterable[int]) -> None:
        self.windows_s = tuple(sorted(windows_s))
        self._keep_s = max(self.windows_s, default=60)
        self._open = _Sums()
        self._closed: collections.deque[tuple[float, _Sums]] = collections.deque()  # (close time, sums)
        self.last: dict[str, ServerSample] = {}  # per ServerSample.source
        self.windows: dict[int, ServerWindow] = {}

    def record(self, sample: ServerSample) -> None:
        self.last[sample.source] = sample
        if sample.accept_length is not None or sample.gen_throughput is not None:
            self._open.add(sample)

    def tick(self, now_s: float) -> None:
        self._closed.append((now_s, self._open))
        self._open = _Sums()
        while self._closed and now_s - self._closed[0][0] > self._keep_s:
            self._closed.popleft()
        self.windows = {}
        for w in self.windows_s:
            total = _Sums()
            for t, part in self._closed:
                if now_s - t <= w:
                    total.samples += part.samples
                    for name in FIELDS:
                        total.sums[name] += part.sums[name]
                        total.counts[name] += part.counts[name]
            avg = {n: total.sums[n] / total.counts[n] if total.counts[n] else None for n in FIELDS}
            self.windows[w] = ServerWindow(accept_length=avg["accept_length"], accept_rate=avg["accept_rate"],
                                           gen_throughput=avg["gen_throughput"], samples=total.samples)

"""``SampleWindows``: server samples (log lines, scrapes) kept for the longest window and averaged per window
on the tick. Recorder stage."""

from __future__ import annotations

import collections
from collections.abc import Iterable

from ..records import ServerSample, ServerWindow


class SampleWindows:
    def __init__(self, windows_s: Iterable[int]) -> None:
        self.windows_s = tuple(sorted(windows_s))
        self._keep_s = max(self.windows_s, default=60)
        self._samples: collections.deque[tuple[float, ServerSample]] = collections.deque()
        self.last: dict[str, ServerSample] = {}  # per ServerSample.source
        self.windows: dict[int, ServerWindow] = {}

    def record(self, sample: ServerSample, now_s: float) -> None:
        self.last[sample.source] = sample
        if sample.accept_length is not None or sample.gen_throughput is not None:
            self._samples.append((now_s, sample))

    def tick(self, now_s: float) -> None:
        while self._samples and now_s - self._samples[0][0] > self._keep_s:
            self._samples.popleft()
        self.windows = {}
        for w in self.windows_s:
            recent = [s for t, s in self._samples if now_s - t <= w]
            self.windows[w] = ServerWindow(
                accept_length=_avg(s.accept_length for s in recent),
                accept_rate=_avg(s.accept_rate for s in recent),
                gen_throughput=_avg(s.gen_throughput for s in recent if s.source != "sglang_prefill"),
                samples=len(recent),
            )


def _avg(values: Iterable[float | None]) -> float | None:
    xs = [v for v in values if v is not None]
    return sum(xs) / len(xs) if xs else None

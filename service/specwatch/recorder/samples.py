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
    positions: list[float] = field(default_factory=list)  # per position: sum of the samples' rates
    position_samples: int = 0  # samples that reported positions (their mean is positions / this)

    def add(self, s: ServerSample) -> None:
        self.samples += 1
        if s.position_acceptance:
            self.merge_positions(s.position_acceptance, 1)
        for name in FIELDS:
            v = getattr(s, name)
            if v is not None and not (name == "gen_throughput" and s.source == "sglang_prefill"):
                self.sums[name] += v
                self.counts[name] += 1


    def merge_positions(self, values: Iterable[float], samples: int) -> None:
        """A sample whose chain is longer than the ones before it (k went up) starts its extra positions at 0
        for the earlier samples: a rate is the share of *all* drafts, and those drafted none there."""
        for i, v in enumerate(values):
            if i < len(self.positions):
                self.positions[i] += v
            else:
                self.positions.append(v)
        self.position_samples += samples


class SampleWindows:
    def __init__(self, windows_s: Iterable[float]) -> None:
        self.windows_s = tuple(sorted(windows_s))
        self._keep_s = max(self.windows_s, default=60)
        self._open = _Sums()
        self._closed: collections.deque[tuple[float, _Sums]] = collections.deque()  # (close time, sums)
        self.last: dict[str, ServerSample] = {}  # per ServerSample.source
        self.windows: dict[float, ServerWindow] = {}  # by window length in seconds

    def record(self, sample: ServerSample) -> None:
        self.last[sample.source] = sample
        if sample.accept_length is not None or sample.gen_throughput is not None or sample.position_acceptance:
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
                    total.merge_positions(part.positions, part.position_samples)
            avg = {n: total.sums[n] / total.counts[n] if total.counts[n] else None for n in FIELDS}
            pos = tuple(v / total.position_samples for v in total.positions) if total.position_samples else ()
            self.windows[w] = ServerWindow(accept_length=avg["accept_length"], accept_rate=avg["accept_rate"],
                                           gen_throughput=avg["gen_throughput"], samples=total.samples,
                                           position_acceptance=pos)

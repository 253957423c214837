"""``Recorder``: per-target interval stats, the interval swap, rolling windows and the cumulative view.

Recorder stage. ``record`` adds one request to the open interval; ``tick`` closes it and rebuilds the
windows. A window of ``k`` intervals is rebuilt from pre-merged blocks of ``B ~ sqrt(k)`` intervals plus a
few single intervals, so a tick costs about ``2 * sqrt(k)`` histogram merges rather than ``k`` (HDR
histograms cannot be subtracted, so windows cannot slide incrementally). Interval bounds are monotonic;
the wall clock only labels output (the .hlog writer converts).
"""

from __future__ import annotations

import collections
import functools
import math
import time
from collections.abc import Iterable
from dataclasses import dataclass

from ..records import RequestRecord
from .observations import Observations
from .stats import Stats

Part = dict[str, Stats]  # per target


@dataclass(frozen=True, slots=True)
class Interval:
    start_ns: int  # monotonic
    end_ns: int
    parts: Part


def merge_into(dst: Part, src: Part) -> None:
    for target, st in src.items():
        dst.setdefault(target, Stats(st.digits)).merge(st)


class Recorder:
    def __init__(self, interval_s: float = 10.0, windows_s: Iterable[float] = (60, 300), digits: int = 3) -> None:
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
        self.interval_start_ns = time.monotonic_ns()
        self.windows: dict[float, Part] = {}  # by window length in seconds

    def out_of_range(self) -> dict[str, int]:
        """Values outside the HDR range so far, by metric, over every target."""
        oor: dict[str, int] = {}
        for stats in self.cumulative.values():
            for name, n in stats.out_of_range.items():
                oor[name] = oor.get(name, 0) + n
        return oor

    def record(self, rec: RequestRecord, obs: Observations | None = None) -> None:
        if rec.warmup:  # recorded apart by the probe (its record says so) and discarded here
            return
        self.current[rec.target].add(rec, obs)

    def tick(self, now_ns: int | None = None) -> Interval:
        """Close the interval: fold it into cumulative and rebuild the rolling windows. Returns it."""
        now_ns = time.monotonic_ns() if now_ns is None else now_ns
        closed = Interval(self.interval_start_ns, now_ns, dict(self.current))
        self.current = collections.defaultdict(self._new)
        self.interval_start_ns = now_ns
        merge_into(self.cumulative, closed.parts)
        self.ring.append(closed.parts)
        merge_into(self._pending, closed.parts)
        self._closed += 1
        if self._closed % self._block == 0:
            self.blocks.append(self._pending)
            self._pending = {}
        self.windows = {w: self._window(min(k, len(self.ring))) for w, k in self._k.items()}
        return closed

    def _window(self, k: int) -> Part:
        """Merge the ``k`` most recent intervals: the open block, whole blocks, then single intervals."""
        out: Part = {}
        partial = self._closed % self._block  # intervals in the open block (newest)
        take = min(partial, k)
        if take == partial and partial:
            merge_into(out, self._pending)
        else:
            for part in list(self.ring)[len(self.ring) - take:]:
                merge_into(out, part)
        rest = k - take
        whole = min(rest // self._block, len(self.blocks))
        for block in list(self.blocks)[len(self.blocks) - whole:] if whole else ():
            merge_into(out, block)
        singles = rest - whole * self._block
        end = len(self.ring) - take - whole * self._block
        for part in list(self.ring)[max(0, end - singles):end]:
            merge_into(out, part)
        return out

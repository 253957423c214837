"""Speedup by load and the crossover: where speculation stops paying off. Analysis stage; pure.

Each load bucket's probe decode rate is divided by the baseline at the bucket's mean load (the curve's
value there, ``analysis/baseline``); buckets with fewer than ``min_requests`` probes or no baseline at their
load have no speedup. The crossover is where the speedup falls below 1 walking up the buckets: interpolated
in log(load) between the last bucket at or above 1 and the first below; if the lowest measured bucket is
already below 1, it is that bucket's mean load (speculation loses from there on, maybe earlier). The server
is past the crossover when its current load is at or above it.

A bucket whose probes saw (almost) no verify round while another bucket's drafted is a load where the server
drafts nothing though it speculates elsewhere (a schedule's 0 range, an adaptive slot at 0): its verify rounds
per token are under ``OFF_SHARE`` of the most drafting bucket's (probes that straddle a change of load carry a
few rounds in). There the speedup's inverse, less one, is the off range's measured cost against plain decoding
(``off_range_cost``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..recorder.load import LoadBucket
from ..records import BaselineStatus
from .baseline import BaselineCurve

OFF_SHARE = 0.2  # a bucket drafting under this share of the most drafting bucket's rounds per token is "off"


@dataclass(frozen=True, slots=True)
class LoadSpeedup:
    bucket: int
    requests: int
    mean_load: float
    tokens_per_second: float
    baseline_tps: float | None
    baseline_status: BaselineStatus
    speedup: float | None
    relative_stderr: float | None
    # time per output token over the baseline's, where the server drafts nothing at this load while it drafts
    # at others (a schedule's 0 range, ``off_range``): 0.066 = 6.6% slower than plain decoding; None elsewhere
    off_range_cost: float | None = None


@dataclass(frozen=True, slots=True)
class LoadVerdict:
    buckets: tuple[LoadSpeedup, ...]
    crossover: float | None  # running requests; None: not seen (yet)
    past_crossover: bool | None  # None: load or crossover unknown


def by_load(buckets: list[LoadBucket], curve: BaselineCurve | None, min_requests: int,
            current_load: float | None) -> LoadVerdict:
    rows = []
    most = max((b.rounds_per_token for b in buckets), default=0.0)  # the most drafting bucket's
    for b in buckets:
        at = curve.at(b.mean_load) if curve is not None else None
        base = at.tokens_per_second if at is not None else None
        ok = base is not None and base > 0 and b.requests >= min_requests
        sp = b.tokens_per_second / base if ok and base else None
        off = 1.0 / sp - 1.0 if sp and most > 0 and b.rounds_per_token < OFF_SHARE * most else None
        rows.append(LoadSpeedup(b.bucket, b.requests, b.mean_load, b.tokens_per_second, base,
                                at.status if at is not None else "none", sp, b.relative_stderr, off))
    cross = crossover([(r.mean_load, r.speedup) for r in rows if r.speedup is not None])
    past = None if cross is None or current_load is None else current_load >= cross
    return LoadVerdict(tuple(rows), cross, past)


def crossover(points: list[tuple[float, float]]) -> float | None:
    """The load where speedup falls below 1 walking up ``(load, speedup)`` points: interpolated in log(load)
    between the last point at or above 1 and the first below; the lowest load if that is already below 1;
    None if no point is. The one rule for the daemon's buckets and the sweep's concurrency levels."""
    prev: tuple[float, float] | None = None
    for load, sp in sorted(points):
        if sp < 1.0:
            if prev is None:
                return float(load)
            load0, sp0 = prev
            f = (sp0 - 1.0) / (sp0 - sp) if sp0 != sp else 0.0
            return math.exp(math.log(load0) + f * (math.log(load) - math.log(load0)))
        prev = (load, sp)
    return None

"""Is speculation paying off? Pure arithmetic plus a hysteresis state. No I/O.

- speedup = probe decode tok/s / baseline decode tok/s
- cycle time = accept length / tok/s  (seconds per verify round, as the client sees it)
- break-even accept length = cycle time * baseline tok/s: with this cycle time, speculation matches plain
  decoding only if each round yields that many tokens.
- below-baseline enters only when speculation is *confidently* slower: the speedup's upper bound,
  speedup * (1 + z * relative standard error), is below 1 (z = 2; the error combines the per-request
  spread of the probe's and, when measured, the baseline's tok/s). It clears when the speedup exceeds
  1 + hysteresis. A 3% win measured over a handful of requests therefore never pages anyone, and a
  speedup hovering around 1.0 does not flap.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Verdict:
    baseline_tps: float | None
    speedup: float | None
    cycle_s: float | None
    breakeven_accept_length: float | None
    below_baseline: bool | None  # None until enough data
    relative_stderr: float | None = None


def speedup(tps: float | None, baseline: float | None) -> float | None:
    if tps is None or baseline is None or baseline <= 0:
        return None
    return tps / baseline


def cycle_seconds(accept_length: float | None, tps: float | None) -> float | None:
    if accept_length is None or tps is None or tps <= 0:
        return None
    return accept_length / tps


def breakeven(cycle_s: float | None, baseline: float | None) -> float | None:
    if cycle_s is None or baseline is None:
        return None
    return cycle_s * baseline


class Judge:
    def __init__(self, hysteresis: float = 0.03, min_requests: int = 3, z: float = 2.0) -> None:
        self.hysteresis = hysteresis
        self.min_requests = min_requests
        self.z = z
        self.below: bool | None = None

    def update(self, tps: float | None, accept_length: float | None, baseline: float | None,
               requests: int, relative_stderr: float | None = None) -> Verdict:
        ratio = speedup(tps, baseline)
        cyc = cycle_seconds(accept_length, tps)
        se = relative_stderr or 0.0
        if ratio is not None and requests >= self.min_requests:
            confidently_below = ratio * (1.0 + self.z * se) < 1.0
            if self.below is None:
                self.below = confidently_below
            elif self.below and ratio > 1.0 + self.hysteresis:
                self.below = False
            elif not self.below and confidently_below:
                self.below = True
        return Verdict(baseline, ratio, cyc, breakeven(cyc, baseline), self.below, relative_stderr)

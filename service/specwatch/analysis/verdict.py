"""Is speculation paying off? Analysis stage: pure arithmetic plus a hysteresis state. No I/O.

- the inputs come from one window: the probe's tok/s and accept length (the server's, from its logs, when
  the probes carry none), the baseline (fixed, or the A/B target's tok/s in the same window) and the
  per-request spread of both (``verdict_inputs``)
- speedup = probe decode tok/s / baseline decode tok/s, both at the load the server is under: the baseline
  is the baseline curve's value at the window's load (``analysis/baseline``); when the load is unknown the
  comparison is the idle one and the verdict says so (``load_known``); outside the curve it is unknown
- cycle time = accept length / tok/s  (seconds per verify round, as the client sees it)
- break-even accept length = cycle time * baseline tok/s: with this cycle time, speculation matches plain
  decoding only if each round yields that many tokens.
- below-baseline enters only when speculation is *confidently* slower: the speedup's upper bound,
  speedup * (1 + t * relative standard error), is below 1 (t: Student's 95% critical value for the number
  of requests; the error combines the per-request spread of the probe's and, when measured, the
  baseline's tok/s). It clears when the speedup exceeds
  1 + hysteresis. A 3% win measured over a handful of requests therefore never pages anyone, and a
  speedup hovering around 1.0 does not flap.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, replace

from ..records import BaselineStatus, ProbeWindow
from ..results import Check
from .checks import unreliable


@dataclass(frozen=True, slots=True)
class VerdictInputs:
    tokens_per_second: float | None
    accept_length: float | None
    baseline_tps: float | None
    requests: int  # successful probes in the window
    relative_stderr: float | None  # of the speedup
    load: float | None = None  # the server's running requests over the window; None: unknown
    baseline_status: BaselineStatus = "none"  # how the baseline at that load was had
    baseline_load: float | None = None  # the load the baseline value stands for


@dataclass(frozen=True, slots=True)
class Verdict:
    baseline_tps: float | None
    speedup: float | None
    cycle_s: float | None
    breakeven_accept_length: float | None
    below_baseline: bool | None  # None until enough data
    relative_stderr: float | None = None
    accept_length: float | None = None
    load: float | None = None  # running requests the comparison is at (None: unknown, compared as idle)
    load_known: bool = False
    baseline_status: BaselineStatus = "none"
    baseline_load: float | None = None
    unreliable: tuple[str, ...] = ()  # failed honesty checks on a figure it uses, as "check (figure)"


def with_checks(v: Verdict, checks: Iterable[Check]) -> Verdict:
    """The verdict, saying which failed checks make it unreliable (``analysis.checks.VERDICT_FIGURES``)."""
    return replace(v, unreliable=unreliable(checks))


def verdict_inputs(spec: ProbeWindow, baseline: ProbeWindow | None, baseline_tps: float | None,
                   server_accept_length: float | None, load: float | None = None,
                   baseline_status: BaselineStatus = "none", baseline_load: float | None = None) -> VerdictInputs:
    """``baseline`` is the A/B target's window (then its tok/s is the baseline), else ``baseline_tps`` (the
    baseline curve's value at ``load``, or a fixed value)."""
    se = spec.tokens_per_second_relative_stderr
    if baseline is not None:
        baseline_tps = baseline.tokens_per_second
        se_b = baseline.tokens_per_second_relative_stderr
        se = None if se is None or se_b is None else math.hypot(se, se_b)
    accept = spec.accept_length if spec.accept_length is not None else server_accept_length
    return VerdictInputs(spec.tokens_per_second, accept, baseline_tps, spec.ok, se, load, baseline_status,
                         baseline_load)


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


# Student's t, two-sided 95%, by degrees of freedom 1..30; beyond that 2.0. With a handful of requests the
# sample spread is itself uncertain, and a normal z would page on noise.
T_975 = (12.71, 4.30, 3.18, 2.78, 2.57, 2.45, 2.36, 2.31, 2.26, 2.23, 2.20, 2.18, 2.16, 2.14, 2.13, 2.12, 2.11,
         2.10, 2.09, 2.09, 2.08, 2.07, 2.07, 2.06, 2.06, 2.06, 2.05, 2.05, 2.05, 2.04)


def t_critical(requests: int) -> float:
    df = requests - 1
    return T_975[df - 1] if 1 <= df <= len(T_975) else (2.0 if df > 0 else math.inf)


class Judge:
    def __init__(self, hysteresis: float = 0.03, min_requests: int = 3) -> None:
        self.hysteresis = hysteresis
        self.min_requests = min_requests
        self.below: bool | None = None

    def update(self, x: VerdictInputs) -> Verdict:
        baseline = x.baseline_tps
        ratio = speedup(x.tokens_per_second, baseline)
        cyc = cycle_seconds(x.accept_length, x.tokens_per_second)
        se = x.relative_stderr or 0.0
        if x.baseline_status == "outside":
            self.below = None  # no baseline at this load: the verdict is unknown, not the last one
        if ratio is not None and x.requests >= self.min_requests:
            confidently_below = ratio * (1.0 + t_critical(x.requests) * se) < 1.0
            if self.below is None:
                self.below = confidently_below
            elif self.below and ratio > 1.0 + self.hysteresis:
                self.below = False
            elif not self.below and confidently_below:
                self.below = True
        return Verdict(baseline, ratio, cyc, breakeven(cyc, baseline), self.below, x.relative_stderr, x.accept_length,
                       x.load, x.load is not None, x.baseline_status, x.baseline_load)

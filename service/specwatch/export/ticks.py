"""Axis ticks a person can read, for the SVG charts and the matplotlib PNGs alike: steps of 1, 2 or 5 times a
power of ten, several of them, labels without float noise, times in seconds, minutes or hours chosen by the
span, and a value range fitted to the data (from zero only when the data come near it). Exporter stage; pure.

Each tick is an integer multiple of the step, ``k·m·10^e``, computed as an exact integer quotient so that
``0.1 + 0.2`` never shows up as ``0.30000000000000004``: a label has exactly as many decimals as the step."""

from __future__ import annotations

import math
from dataclasses import dataclass

MOST_TICKS = 8  # a step 2.5x coarser than one giving 9+ ticks still gives at least 4 (3 with a whole-number floor)
MARGIN = 0.05  # of the data's span, each side, so no point sits on the plot's edge
TIME_UNITS = (("s", "seconds", 1.0), ("min", "minutes", 60.0), ("h", "hours", 3600.0))


@dataclass(frozen=True, slots=True)
class Ticks:
    values: tuple[float, ...]  # ascending, evenly spaced by step; the first and last bound the axis
    labels: tuple[str, ...]
    step: float

    @property
    def lo(self) -> float:
        return self.values[0]

    @property
    def hi(self) -> float:
        return self.values[-1]

    def note(self) -> str:
        """What a reader must be told when the axis leaves zero out ('' when it does not)."""
        if self.lo > 0 or self.hi < 0:
            return f"axis from {self.labels[0]} to {self.labels[-1]}, not from 0"
        return ""


@dataclass(frozen=True, slots=True)
class TimeTicks:
    ticks: Ticks  # in unit
    unit: str  # "s", "min" or "h"
    unit_name: str  # "seconds", "minutes" or "hours"
    seconds: float  # one unit in seconds: divide a time in seconds by it to place it on the axis


def _multiples(lo: float, hi: float, m: int, e: int) -> tuple[int, int]:
    step = m * 10.0**e  # the slack keeps 0.3 / 0.1 = 2.9999999999999996 from adding a tick below 0.3
    return math.floor(lo / step + 1e-9), math.ceil(hi / step - 1e-9)


def _make(k0: int, k1: int, m: int, e: int) -> Ticks:
    decimals = max(0, -e)
    if e >= 0:
        values = tuple(float(k * m * 10**e) for k in range(k0, k1 + 1))
    else:  # int / int is correctly rounded: the float nearest the decimal, so repr and labels stay clean
        values = tuple(k * m / 10**-e for k in range(k0, k1 + 1))
    return Ticks(values, tuple(f"{v:.{decimals}f}" for v in values), m / 10**-e if e < 0 else float(m * 10**e))


def nice_ticks(lo: float, hi: float, min_step: float = 0.0) -> Ticks:
    """The finest 1-2-5 step (at least ``min_step``) whose multiples covering [lo, hi] number at most
    MOST_TICKS; the first tick is at or one step below ``lo``, the last at or one step above ``hi``."""
    if not (math.isfinite(lo) and math.isfinite(hi)):
        raise ValueError(f"ticks need a finite range, not {lo}..{hi}")
    lo, hi = min(lo, hi), max(lo, hi)
    if hi - lo <= 1e-12 * max(abs(lo), abs(hi), 1e-300):  # one value: a range around it
        pad = abs(lo) * 0.1 or 1.0
        lo, hi = lo - pad, hi + pad
    e = math.floor(math.log10((hi - lo) / MOST_TICKS))
    while True:
        for m in (1, 2, 5):
            if m * 10.0**e < min_step:
                continue
            k0, k1 = _multiples(lo, hi, m, e)
            if k1 - k0 + 1 <= MOST_TICKS:
                return _make(k0, k1, m, e)
        e += 1


def data_ticks(lo: float, hi: float) -> Ticks:
    """Ticks for data spanning [lo, hi]: from zero when the data come near it (the gap to zero no larger
    than the data's own span), else a nice range around the data; a MARGIN of the span pads the far sides."""
    lo, hi = min(lo, hi), max(lo, hi)
    if lo == hi == 0:
        hi = 1.0
    gap = lo if lo > 0 else -hi if hi < 0 else 0.0
    span = hi - lo
    if gap <= span:
        lo, hi = min(lo, 0.0), max(hi, 0.0)
    pad = MARGIN * (hi - lo)
    return nice_ticks(lo if lo == 0 else lo - pad, hi if hi == 0 else hi + pad)


def time_ticks(lo_s: float, hi_s: float) -> TimeTicks:
    """Ticks for times in seconds: seconds up to a 3-minute span, minutes up to 3 hours, then hours (a span
    just past 2 units would leave a third of the plot empty past the last whole tick); whole numbers of the
    unit except for spans under two seconds."""
    span = abs(hi_s - lo_s)
    if span < 1e-9:  # one sample: a second from it
        hi_s, span = lo_s + 1.0, 1.0
    tol = 1 - 1e-9  # 2.05 - 0.05 is 1.9999999999999998
    unit, name, size = next((u for u in reversed(TIME_UNITS) if span >= 3 * tol * u[2]), TIME_UNITS[0])
    whole = 1.0 if span >= 2 * tol * size else 0.0
    return TimeTicks(nice_ticks(lo_s / size, hi_s / size, min_step=whole), unit, name, size)

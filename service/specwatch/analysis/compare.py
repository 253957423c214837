"""How sure a winner is: the margin between two configurations with its 95% interval from the per-request
spread, or (``sweep --interleave``) paired over the rounds, so that the machine's drift between rounds cancels.
Analysis stage; pure. A margin whose interval includes zero is a tie, and so is one within
``TIE_WITHIN`` (1%) whatever its interval (``winner``'s rule)."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from .verdict import t_critical

TIE_WITHIN = 0.01  # a difference this small (a ratio, 1%) is a tie whatever the interval


@dataclass(frozen=True, slots=True)
class Margin:
    ratio: float  # mean(a) / mean(b) - 1
    low: float | None  # 95% interval of the ratio; None with fewer than two requests on a side
    high: float | None
    rounds: int = 0  # > 0: paired over this many rounds (``paired_margin``), else Welch's over the requests

    @property
    def noise(self) -> bool:
        """The interval holds zero."""
        return self.low is not None and self.high is not None and self.low <= 0.0 <= self.high

    @property
    def tie(self) -> bool:
        """Within the noise, or within 1%."""
        return self.noise or abs(self.ratio) <= TIE_WITHIN

    def interval_text(self) -> str:
        """``+1.7% (95% interval -4.6% to +8.0%)``: the margin without its verdict."""
        paired = f", paired over {self.rounds} rounds" if self.rounds else ""
        ci = " (no interval: too few requests)" if self.low is None or self.high is None else \
            f" (95% interval {100 * self.low:+.1f}% to {100 * self.high:+.1f}%{paired})"
        return f"{100 * self.ratio:+.1f}%{ci}"

    def text(self) -> str:
        why = "within the noise" if self.noise else "within 1%"
        return self.interval_text() + (f": a tie, {why}" if self.tie else "")


def margin(a: Sequence[float], b: Sequence[float]) -> Margin | None:
    """``a`` against ``b`` (per-request tok/s): Welch's difference of means over ``mean(b)``."""
    if not a or not b or statistics.fmean(b) <= 0:
        return None
    ma, mb = statistics.fmean(a), statistics.fmean(b)
    ratio = ma / mb - 1
    if len(a) < 2 or len(b) < 2:
        return Margin(ratio, None, None)
    se = math.sqrt(statistics.variance(a) / len(a) + statistics.variance(b) / len(b))
    half = t_critical(min(len(a), len(b))) * se / mb
    return Margin(ratio, ratio - half, ratio + half)


def paired_margin(a: Sequence[Sequence[float]], b: Sequence[Sequence[float]]) -> Margin | None:
    """``a`` against ``b`` measured in the same rounds (``a[i]`` and ``b[i]``: round ``i``'s per-request tok/s):
    the mean over the rounds of ``mean(a[i]) / mean(b[i]) - 1``, with a t interval over the rounds. A drift that
    moves both alike between rounds cancels in each round's ratio. None unless every round has both."""
    if len(a) != len(b) or not a or any(not x or not y or statistics.fmean(y) <= 0 for x, y in zip(a, b, strict=True)):
        return None
    ratios = [statistics.fmean(x) / statistics.fmean(y) - 1 for x, y in zip(a, b, strict=True)]
    ratio = statistics.fmean(ratios)
    if len(ratios) < 2:
        return Margin(ratio, None, None, len(ratios))
    half = t_critical(len(ratios)) * statistics.stdev(ratios) / math.sqrt(len(ratios))
    return Margin(ratio, ratio - half, ratio + half, len(ratios))


def margin_of(a: Sequence[float], b: Sequence[float], a_rounds: Sequence[Sequence[float]] = (),
              b_rounds: Sequence[Sequence[float]] = ()) -> Margin | None:
    """The one rule's margin: paired over the rounds when both were measured in the same two or more rounds
    (``sweep --interleave``), else Welch's over the requests."""
    if len(a_rounds) >= 2 and len(a_rounds) == len(b_rounds):
        paired = paired_margin(a_rounds, b_rounds)
        if paired is not None:
            return paired
    return margin(a, b)

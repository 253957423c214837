"""The one rule for picking a winner, used by ``sweep``'s per-load picks (``comparisons.bands``), the schedule
they give (``load_sweep``), ``tune`` and the live advisor (``live_advisor.advise_bucket``). Analysis stage; pure.

1. **Repeats.** A configuration is a candidate only with a stated 95% interval against plain decoding from
   within-run variation (paired over the rounds for configurations measured interleaved, ``sweep --interleave``:
   ``compare.margin_of``): in a sweep, at least ``MIN_REPEATS`` requests in its cell (and in plain decoding's);
   the live advisor's buckets have their own ``--min-requests``. One with fewer is not crowned, and says why.
2. **A conservative score.** Each candidate is scored by the lower end of its 95% interval against plain
   decoding (plain decoding itself: exactly 0). The best is the highest lower bound, not the best mean: a cell
   whose repeats are far apart has a wide interval and scores low, however high its mean.
3. **Ties go to the cheaper.** Every candidate that ties the best — their own comparison's interval holds zero
   (within the noise), or they are within ``TIE_WITHIN`` (1%) — is as good as it; the pick is the one of them
   with the fewest draft steps (plain decoding, 0 steps, the fewest of all). A tie is judged against the best
   alone, never along a chain of ties.

The schedule built from the picks ends at the largest load measured (``load_sweep.schedule_of``); every pick
is printed against plain decoding and against what is running, where that is known.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from .compare import TIE_WITHIN, Margin

__all__ = ["EXACT", "MIN_REPEATS", "TIE_WITHIN", "Candidate", "Pick", "pick", "repeats_reason"]

MIN_REPEATS = 3  # requests per cell before a sweep's configuration can be crowned
EXACT = Margin(0.0, 0.0, 0.0)  # the reference against itself


@dataclass(frozen=True, slots=True)
class Candidate:
    name: str
    steps: int  # draft steps (0: plain decoding)
    score: Margin | None  # against plain decoding, with its 95% interval
    why_not: str = ""  # not "": not crowned, and why ("2 requests, 3 needed")

    @property
    def low(self) -> float:
        return self.score.low if self.score is not None and self.score.low is not None else float("-inf")


@dataclass(frozen=True, slots=True)
class Pick:
    chosen: Candidate | None  # None: nothing could be crowned
    best: Candidate | None  # the highest lower bound
    tie: Margin | None  # the pick against the best, when the pick is not the best (a tie it won on steps)
    not_crowned: tuple[Candidate, ...] = ()


def repeats_reason(requests: int, minimum: int = MIN_REPEATS) -> str:
    """Why a cell of ``requests`` repeats cannot be crowned; "" when it can."""
    if requests >= minimum:
        return ""
    return f"{requests} request{'' if requests == 1 else 's'}, {minimum} needed"


def pick(candidates: Sequence[Candidate], versus: Callable[[Candidate, Candidate], Margin | None]) -> Pick:
    """The rule (module docstring). ``versus(a, b)``: ``a`` against ``b``, with its interval."""
    ok = [c for c in candidates if not c.why_not and c.score is not None and c.score.low is not None]
    out = tuple(c for c in candidates if c not in ok)
    if not ok:
        return Pick(None, None, None, out)
    best = max(ok, key=lambda c: (c.low, -c.steps))
    ties = [c for c in ok if c is best or _tied(versus(c, best))]
    chosen = min(ties, key=lambda c: (c.steps, -c.low))
    return Pick(chosen, best, None if chosen is best else versus(chosen, best), out)


def _tied(m: Margin | None) -> bool:
    return m is not None and m.tie

"""The off range's price: a per-load schedule's 0 range (vLLM's ``num_speculative_tokens_per_batch_size`` with
K = 0, an SGLang adaptive slot of ``[0]``) runs inside a server launched with speculation, and that is not
plain decoding. vLLM 0.32 still runs the drafter's first forward pass at K = 0 to keep its KV cache in step
(``v1/spec_decode/llm_base_proposer.py:617-627``), and the target still hands it hidden states; published:
+6.6% time per output token at 2 streams, +21.6% at 189 (vllm-project/vllm#49548), about 2x on another
backend (vllm-project/vllm-ascend#16638). Analysis stage; pure.

``weigh`` asks of a schedule with a 0 range, its off range priced, over the loads measured (equal weights, or
a load distribution's): does it beat plain decoding at every load, and does it beat the best single
configuration (one step count at every load, plain decoding included)? When it does not beat that one by more
than a tie (``winner.TIE_WITHIN``), the single configuration is the advice: it needs no schedule and pays no
off range.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from .compare import TIE_WITHIN

Range = tuple[int, int, int]  # [lo, hi, k] of batch size


@dataclass(frozen=True, slots=True)
class OffCost:
    """A zero-draft range's time per output token over a server launched without speculation."""

    tax: float  # fraction: 0.066 = 6.6% slower per token than plain decoding
    source: str  # where the figure comes from
    measured: bool  # measured on this server (else modelled from a published or another engine's figure)

    @property
    def label(self) -> str:
        return "measured" if self.measured else "modelled"

    def text(self) -> str:
        return f"+{100 * self.tax:.1f}% time per output token against plain decoding ({self.label}: {self.source})"


PUBLISHED = OffCost(0.066, "vLLM #49548's K = 0 range at 2 streams, +21.6% at 189; about 2x on vllm-ascend "
                           "#16638", measured=False)


@dataclass(frozen=True, slots=True)
class LoadRates:
    """One load measured: plain decoding's per-stream rate and each speculative step count's."""

    load: int
    plain: float
    by_steps: tuple[tuple[int, float], ...]  # (draft steps, per-stream rate)

    def ratio(self, steps: int) -> float | None:
        if steps == 0:
            return 1.0
        rate = dict(self.by_steps).get(steps)
        return rate / self.plain if rate is not None and self.plain > 0 else None


@dataclass(frozen=True, slots=True)
class Weighed:
    cost: OffCost
    by_load: tuple[tuple[int, int, float], ...]  # (load, the schedule's k there, its rate over plain, priced)
    weights: tuple[float, ...]  # per load, summing to 1
    schedule_mean: float  # the schedule's rate over plain decoding, weighted over the loads
    single_steps: int  # the best single configuration (0: plain decoding)
    single_mean: float
    observed: bool  # weights from a load distribution, not equal per load measured

    @property
    def loses_to_plain(self) -> tuple[int, ...]:
        return tuple(load for load, _, r in self.by_load if r < 1.0)

    @property
    def advise_schedule(self) -> bool:
        """The schedule beats the best single configuration by more than a tie."""
        return self.schedule_mean > self.single_mean * (1.0 + TIE_WITHIN)

    def single_name(self) -> str:
        return "plain decoding" if self.single_steps == 0 else f"steps={self.single_steps} at every load"

    def lines(self) -> list[str]:
        off = [load for load, k, _ in self.by_load if k == 0]
        how = "the observed load distribution" if self.observed else "equal weight"
        loads = ", ".join(str(load) for load, _, _ in self.by_load)
        lose = ", ".join(f"{load} ({100 * (r - 1):+.1f}%)" for load, _, r in self.by_load if r < 1.0)
        head = (f"Off range (k=0 at load {', '.join(map(str, off))}): a speculating server there is not plain "
                f"decoding: expected {self.cost.text()}")
        weigh = (f"Weighed over the loads measured ({loads}; {how}), its off range priced: the schedule "
                 f"{self.schedule_mean:.3f}x plain decoding"
                 + (f", slower than plain at {lose}" if lose else ", at least plain's speed at every load")
                 + f"; the best single configuration, {self.single_name()}, {self.single_mean:.3f}x")
        if self.advise_schedule:
            verdict = "the schedule is advised: it beats every single configuration with its off range's cost"
        else:
            verdict = (f"{self.single_name()} is advised: the schedule does not beat it once its off range is "
                       f"priced (within {100 * TIE_WITHIN:.0f}% is a tie, and a tie goes to the simpler launch)")
        return [head, weigh, verdict]


def k_at(ranges: Sequence[Range], load: int) -> int:
    """The schedule's k at ``load`` running requests (above the last range, the last range's k)."""
    for lo, hi, k in ranges:
        if lo <= load <= hi:
            return k
    return ranges[-1][2] if load > ranges[-1][1] else ranges[0][2]


def has_off_range(ranges: Sequence[Range]) -> bool:
    """A schedule that turns speculation off somewhere and on somewhere else."""
    ks = {k for _, _, k in ranges}
    return 0 in ks and len(ks) > 1


def weigh(ranges: Sequence[Range], cells: Sequence[LoadRates], cost: OffCost = PUBLISHED,
          weights: Mapping[int, float] | None = None) -> Weighed | None:
    """The schedule against plain decoding and the best single configuration (module docstring), over the
    loads where the schedule's rate is known; None for a schedule without an off range or nothing to weigh."""
    if not has_off_range(ranges):
        return None
    rows = []
    for c in cells:
        k = k_at(ranges, c.load)
        r = c.ratio(k) if c.plain > 0 else None
        if r is not None:
            rows.append((c, k, r / (1.0 + cost.tax) if k == 0 else r))
    w = [float((weights or {}).get(c.load, 0.0 if weights else 1.0)) for c, _, _ in rows]
    if sum(w) <= 0 or {k == 0 for _, k, _ in rows} != {True, False}:
        return None  # nothing to weigh unless a load on each side of the off range was measured
    w = [x / sum(w) for x in w]
    steps = sorted({s for c, _, _ in rows for s, _ in c.by_steps} | {0})
    singles = []
    for s in steps:
        ratios = [c.ratio(s) for c, _, _ in rows]
        if all(x is not None for x in ratios):
            singles.append((sum(wi * x for wi, x in zip(w, ratios, strict=True) if x is not None), s))
    best = max(singles, key=lambda t: (t[0], -t[1]))
    # a tie with the best goes to the fewer steps, as winner's rule does
    mean, s = min((t for t in singles if t[0] * (1.0 + TIE_WITHIN) >= best[0]), key=lambda t: t[1])
    return Weighed(cost, tuple((c.load, k, r) for c, k, r in rows), tuple(w),
                   sum(wi * r for wi, (_, _, r) in zip(w, rows, strict=True)), s, mean, weights is not None)


def note(ranges: Sequence[Range], cost: OffCost = PUBLISHED) -> str:
    """The line every printed schedule with a 0 range carries: that range's expected cost."""
    off = ", ".join(f"{lo}-{hi}" for lo, hi, k in ranges if k == 0)
    return (f"the 0 range ({off} running requests) runs inside a speculating server, not a plain one: expect "
            f"{cost.text()}")

"""Pacers: when request number ``i`` should start, as a pure function of its index. No I/O, no clock.

Open-loop latency is measured from these intended times, so a stalled server (or a stalled client) shows
up as latency and schedule lag instead of silently lowering the request rate (coordinated omission).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field


@dataclass(slots=True)
class ConstantPacer:
    rate_per_s: float

    def offset_ns(self, i: int) -> int:
        return int(i * 1e9 / self.rate_per_s)


@dataclass(slots=True)
class PoissonPacer:
    """Exponential inter-arrival gaps with mean 1/rate; reproducible for a given seed."""

    rate_per_s: float
    seed: int = 0
    _offsets: list[int] = field(default_factory=lambda: [0])
    _rng: random.Random = field(init=False)

    def __post_init__(self) -> None:
        self._rng = random.Random(self.seed)

    def offset_ns(self, i: int) -> int:
        while len(self._offsets) <= i:
            self._offsets.append(self._offsets[-1] + int(self._rng.expovariate(self.rate_per_s) * 1e9))
        return self._offsets[i]


Pacer = ConstantPacer | PoissonPacer


def make_pacer(rate_per_s: float, poisson: bool, seed: int = 0) -> Pacer:
    if not rate_per_s > 0:
        raise ValueError(f"rate must be > 0, got {rate_per_s}")
    return PoissonPacer(rate_per_s, seed) if poisson else ConstantPacer(rate_per_s)

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


@dataclass(slots=True)
class GammaPacer:
    """``vllm bench serve --burstiness``: gamma-distributed gaps of shape ``burstiness`` and mean 1/rate (1: a
    Poisson process; below 1 burstier, above 1 more even; the coefficient of variation is 1/sqrt(burstiness)).
    As vLLM does, request ``i`` waits ``i + 1`` gaps (the first one too), and with ``total`` (a bounded run) the
    offsets are rescaled so the ``total`` gaps sum to exactly ``total / rate``: vLLM's way of keeping the
    throughput of one seed comparable with another's. The scale needs every gap's draw, so a first pass sums them
    with the same seed and the offsets are then drawn again lazily; reproducible for a given seed."""

    rate_per_s: float
    burstiness: float
    seed: int = 0
    total: int | None = None
    _sums: list[float] = field(default_factory=lambda: [0.0])  # seconds, unscaled, _sums[k] = k gaps
    _rng: random.Random = field(init=False)
    _scale: float = field(init=False)

    def __post_init__(self) -> None:
        self._rng = random.Random(self.seed)
        self._scale = 1.0
        if self.total:
            rng, s = random.Random(self.seed), 0.0
            for _ in range(self.total):
                s += self._gap(rng)
            self._scale = self.total / self.rate_per_s / s if s > 0 else 1.0

    def _gap(self, rng: random.Random) -> float:
        return rng.gammavariate(self.burstiness, 1.0 / (self.rate_per_s * self.burstiness))

    def offset_ns(self, i: int) -> int:
        while len(self._sums) <= i + 1:
            self._sums.append(self._sums[-1] + self._gap(self._rng))
        return int(self._sums[i + 1] * self._scale * 1e9)


Pacer = ConstantPacer | PoissonPacer | GammaPacer


def make_pacer(rate_per_s: float, poisson: bool, seed: int = 0, burstiness: float | None = None,
               total: int | None = None) -> Pacer:
    """``burstiness`` (vLLM's arrivals) takes precedence over ``poisson``; ``total``: the requests of a bounded
    run, which vLLM's gamma arrivals are scaled to."""
    if not rate_per_s > 0:
        raise ValueError(f"rate must be > 0, got {rate_per_s}")
    if burstiness is not None:
        if not burstiness > 0:
            raise ValueError(f"burstiness must be > 0, got {burstiness}")
        return GammaPacer(rate_per_s, burstiness, seed, total)
    return PoissonPacer(rate_per_s, seed) if poisson else ConstantPacer(rate_per_s)

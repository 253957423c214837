"""Whose acceptance draws a simulated request gets: seeded by what it asks, not by when it arrives.

A request's draft acceptance comes from its own generator (``SimRequest.rng``). Its seed is the engine's seed,
the prompt, and how many times that prompt was asked before (since the engine started or was reseeded). The
order in which requests reach the engine does not change what each one draws: bench's N streams send their
first N requests together, and they arrive in any order; seeded by arrival, a request could draw what another
prompt drew in the virtual run (``/explain``), and with the mixed profile (acceptance by the prompt's domain)
that moved a served cell by up to 11% from the oracle's. Seeded by the prompt, the served engine and the
virtual one agree request by request whenever they are sent the same prompts the same number of times.
"""

from __future__ import annotations

import collections
import random
import zlib

MAX_PROMPTS = 100_000  # distinct prompts remembered; past it the counts restart (a bound, never reached by tests)


class DrawSeeds:
    def __init__(self, seed: int | None) -> None:
        self._seed = seed if seed is not None else random.getrandbits(64)
        self._asked: collections.Counter[int] = collections.Counter()

    def reseed(self, seed: int) -> None:
        """The next requests draw as a fresh engine's with ``seed`` would."""
        self._seed = seed
        self._asked.clear()

    def rng_for(self, prompt: str) -> random.Random:
        """The generator of the next request that asks ``prompt``."""
        key = zlib.crc32(prompt.encode())
        if key not in self._asked and len(self._asked) >= MAX_PROMPTS:
            self._asked.clear()
        n = self._asked[key]
        self._asked[key] += 1
        return random.Random(f"{self._seed}:{key}:{n}")

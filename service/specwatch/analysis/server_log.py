"""Pooling server samples over a stretch of log: the one rule for "the accept length of these lines", and
for "the load these lines (or scrapes) say the server was under". Analysis stage; pure.

vLLM prints one line per stats interval whose numbers cover every draft of that interval, so its lines are
weighted by drafted tokens (an idle interval with 10 drafts must not count like a busy one with 10,000).
SGLang prints a decode line every ``decode_log_interval`` rounds, so its lines weigh the same.
Per-position acceptance is pooled with the same weights.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

from ..recorder.load import LOAD_SOURCES
from ..records import ServerSample
from ..results import LoadSource


def weight(s: ServerSample) -> float:
    return float(s.drafted_tokens or 0) if s.source == "vllm_spec" else 1.0


@dataclass(slots=True)
class SamplePool:
    accepted: int = 0
    drafted: int = 0
    _len_sum: float = 0.0
    _len_weight: float = 0.0
    _pos_sums: list[float] = field(default_factory=list)
    _pos_weight: float = 0.0

    def add(self, s: ServerSample) -> None:
        if s.source == "sglang_prefill":
            return
        w = weight(s)
        if s.accept_length is not None:
            self._len_sum += s.accept_length * w
            self._len_weight += w
        if s.position_acceptance:
            self._pos_sums += [0.0] * (len(s.position_acceptance) - len(self._pos_sums))
            for i, a in enumerate(s.position_acceptance):
                self._pos_sums[i] += a * w
            self._pos_weight += w
        self.accepted += s.accepted_tokens or 0
        self.drafted += s.drafted_tokens or 0

    @property
    def accept_length(self) -> float | None:
        return self._len_sum / self._len_weight if self._len_weight else None

    @property
    def position_acceptance(self) -> list[float]:
        return [p / self._pos_weight for p in self._pos_sums] if self._pos_weight else []

    @property
    def draft_acceptance_rate(self) -> float | None:
        return self.accepted / self.drafted if self.drafted else None


def level_load(log: list[ServerSample], scraped: tuple[int, ...]) -> tuple[float | None, LoadSource]:
    """The load a level put on the server, from the reports the daemon takes load from (``LOAD_SOURCES``): the
    median running requests of its log lines while busy (the median, not the daemon's mean: a level's warm-up
    and ramp-down are not its load), else of its ``/metrics`` scrapes; (None, "") when the server said neither."""
    running = [s.running for s in log if s.source in LOAD_SOURCES and s.running]
    if running:
        return float(statistics.median(running)), "log"
    if scraped:
        return float(statistics.median(scraped)), "scrape"
    return None, ""

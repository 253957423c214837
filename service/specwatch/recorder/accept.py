"""The speculative counts of a set of requests (a window, a bench run): the client's accept length pooled over
verify rounds, the server's per-request figures both as reported (a mean of ratios) and pooled alike, and the
verify rounds by accepted drafts that give per-position acceptance. Recorder stage: ``Stats`` holds one."""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from dataclasses import dataclass, field

from ..records import RequestRecord


@dataclass(slots=True)
class AcceptCounts:
    spec_tokens: int = 0  # sum of (completion_tokens - 1) over requests with a verify count
    verify_ct: int = 0
    server_accept_sum: float = 0.0
    server_accept_n: int = 0
    server_tokens: float = 0.0  # Σ (the server's per-request accept length × its verify rounds − the first token)
    server_rounds: int = 0  # Σ verify rounds of the requests whose accept length the server gave
    rounds_by_accepted: list[int] = field(default_factory=list)  # verify rounds by accepted drafts (server hist)

    def add(self, rec: RequestRecord) -> None:
        """A measured request's counts (one with a verify count and an accept length: a speculative one)."""
        if rec.accept_length is None or rec.spec is None:
            return
        self.spec_tokens += rec.spec_tokens
        self.verify_ct += rec.spec.verify_ct
        if rec.spec.accept_length is not None:
            self.server_accept_sum += rec.spec.accept_length
            self.server_accept_n += 1
            self.server_tokens += rec.spec.accept_length * rec.spec.verify_ct - 1
            self.server_rounds += rec.spec.verify_ct
        _add_into(self.rounds_by_accepted, rec.spec.histogram)

    def merge(self, other: AcceptCounts) -> None:
        for f in ("spec_tokens", "verify_ct", "server_accept_sum", "server_accept_n", "server_tokens",
                  "server_rounds"):
            setattr(self, f, getattr(self, f) + getattr(other, f))
        _add_into(self.rounds_by_accepted, other.rounds_by_accepted)

    @property
    def accept_length(self) -> float | None:
        return self.spec_tokens / self.verify_ct if self.verify_ct else None

    @property
    def position_acceptance(self) -> tuple[float, ...]:
        return positions_of(self.rounds_by_accepted)

    @property
    def server_pooled_accept_length(self) -> float | None:
        """The server's per-request figures pooled as the client pools its own (tokens after the first over
        verify rounds): like with like, where ``server_accept_length`` is a mean of per-request ratios that count
        the first token (SGLang's completion ÷ verify count)."""
        return self.server_tokens / self.server_rounds if self.server_rounds else None

    @property
    def server_accept_length(self) -> float | None:
        return self.server_accept_sum / self.server_accept_n if self.server_accept_n else None


def positions_of(rounds_by_accepted: list[int]) -> tuple[float, ...]:
    """Share of verify rounds whose draft position i (index 0 = position 1) was accepted, from the server's
    per-request histogram of accepted drafts per round (SGLang's spec_correct_drafts_histogram, vLLM's
    metrics.speculative_decoding.acceptance_histogram: index j = rounds that accepted exactly j drafts)."""
    rounds = sum(rounds_by_accepted)
    if not rounds:
        return ()
    tail = list(itertools.accumulate(reversed(rounds_by_accepted)))[::-1]  # rounds with >= i accepted
    return tuple(t / rounds for t in tail[1:])


def _add_into(acc: list[int], counts: Iterable[int]) -> None:
    for i, c in enumerate(counts):
        if i < len(acc):
            acc[i] += c
        else:
            acc.append(c)

"""The daemon's last probes, for the honesty checks (``analysis.daemon_checks``): a bounded deque of the few
facts each check needs, fed per record by the intake (one append) and summarised on the tick. Recorder stage."""

from __future__ import annotations

import collections
from typing import NamedTuple

from ..records import RequestRecord
from ..results import RecentProbes
from .observations import Observations

KEEP = 200


class _Fact(NamedTuple):
    ok: bool
    output_tokens: int
    prompt_tokens: int
    cached_tokens: int | None
    prompt_id: str


class Recent:
    def __init__(self, keep: int = KEEP) -> None:
        self.facts: collections.deque[_Fact] = collections.deque(maxlen=keep)

    def observe(self, rec: RequestRecord, obs: Observations | None = None) -> None:
        """An intake observer: the speculative target's measured probes only."""
        if rec.target == "spec" and not rec.warmup:
            self.facts.append(_Fact(rec.ok, rec.output_tokens, rec.prompt_tokens, rec.cached_tokens, rec.prompt_id))

    def summary(self, random_ids: frozenset[str] | None = None) -> RecentProbes:
        """``random_ids``: the prompt set's prompts that read as random tokens (None: not known)."""
        told = [f for f in self.facts if f.cached_tokens is not None]
        used = {f.prompt_id for f in self.facts}
        return RecentProbes(requests=len(self.facts), ok_outputs=tuple(f.output_tokens for f in self.facts if f.ok),
                            distinct_prompts=len(used),
                            random_prompts=None if random_ids is None else len(used & random_ids),
                            cached_tokens=sum(f.cached_tokens or 0 for f in told) if told else None,
                            reported_prompt_tokens=sum(f.prompt_tokens for f in told),
                            cached_requests=sum(1 for f in told if f.cached_tokens))

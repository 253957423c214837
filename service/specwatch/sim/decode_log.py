"""SGLang's scheduler log for the simulator: the lines the engine's prefills and decode rounds print
(``SchedulerLog``), and their accounting (``DecodeLog``): interval accumulators reset at each "Decode batch"
line, the lifetime accept length, and the values SGLang's metrics show between lines. The counterpart of
vLLM's stats loop (``vllm_cli.StatsLogger``), which differences the engine's lifetime totals instead."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Protocol

from . import logfmt

if TYPE_CHECKING:
    from .engine import EngineSettings


class _Prompted(Protocol):
    prompt_tokens: int


class EngineState(Protocol):
    """What a log line reads from the engine."""

    @property
    def used_tokens(self) -> int: ...

    @property
    def waiting(self) -> Sequence[_Prompted]: ...

    @property
    def prefill_ct(self) -> int: ...

    @property
    def forward_ct_decode(self) -> int: ...


class DecodeLog:
    def __init__(self, family: str, log_ms: bool, emit: Callable[[str], None], enabled: bool = True,
                 start_ns: int = 0) -> None:
        self.family, self.log_ms, self.emit, self.enabled = family, log_ms, emit, enabled
        self._accept_tokens = self._forward = self._gen_tokens = 0  # this interval's
        self._start_ns = start_ns
        self.life_accept_tokens = 0
        self.life_forward = 0
        self.last_gen_throughput = 0.0
        self.last_accept_length = 0.0
        self.last_accept_rate = 0.0
        self._last_prefill_ns = 0

    @property
    def avg_spec_accept_length(self) -> float | None:
        return self.life_accept_tokens / self.life_forward if self.life_forward else None

    def flush_cache(self) -> None:
        self.life_accept_tokens = self.life_forward = 0

    def add_round(self, batch_size: int, accepted: int, produced: int) -> None:
        self._accept_tokens += accepted + batch_size
        self._forward += batch_size
        self._gen_tokens += produced

    def decode_line(self, now: int, stats: logfmt.DecodeStats) -> None:
        """Close the interval at ``now`` and log it: ``stats`` with this interval's accept tokens, forward count
        and generation throughput filled in."""
        elapsed = (now - self._start_ns) / 1e9
        self.last_gen_throughput = self._gen_tokens / elapsed if elapsed > 0 else 0.0
        stats = dataclasses.replace(stats, accept_tokens=self._accept_tokens, forward_ct=self._forward,
                                    gen_throughput=self.last_gen_throughput)
        if stats.speculative and self._forward:
            self.last_accept_length = self._accept_tokens / self._forward
            self.last_accept_rate = logfmt.accept_rate(self.family, stats)
            self.life_accept_tokens += self._accept_tokens
            self.life_forward += self._forward
        if self.enabled:
            self.emit(logfmt.decode_line(self.family, stats, time.time(), self.log_ms))
        self._accept_tokens = self._forward = self._gen_tokens = 0
        self._start_ns = now

    def prefill_elapsed_s(self, now: int) -> float:
        """Seconds since the previous prefill line (0 before the first), for its input throughput."""
        elapsed = (now - self._last_prefill_ns) / 1e9 if self._last_prefill_ns else 0.0
        self._last_prefill_ns = now
        return elapsed


class SchedulerLog:
    """The scheduler's lines: "Prefill batch" after each prefill (SGLang's flavour; vLLM's logs from its own stats
    loop) and "Decode batch" every ``decode_log_interval`` rounds."""

    def __init__(self, settings: EngineSettings, log: DecodeLog, emit: Callable[[str], None]) -> None:
        self.s, self.log, self.emit = settings, log, emit

    def prefill(self, now: int, new_seq: int, new_tokens: int, running_before: int, e: EngineState) -> None:
        if not self.s.log_prefill:
            return
        elapsed = self.log.prefill_elapsed_s(now)
        self.emit(logfmt.prefill_line(self.s.log_family, logfmt.PrefillStats(
            new_seq=new_seq, new_tokens=new_tokens, cached_tokens=0, used_tokens=e.used_tokens,
            token_usage=e.used_tokens / self.s.profile.max_total_tokens, running=running_before,
            queued=len(e.waiting), pending_tokens=sum(r.prompt_tokens for r in e.waiting),
            input_throughput=new_tokens / elapsed if elapsed > 0 else 0.0, iteration=e.prefill_ct,
        ), time.time(), self.s.log_ms))

    def decode(self, now: int, batch_size: int, e: EngineState) -> None:
        spec, used = self.s.spec, e.used_tokens
        self.log.decode_line(now, logfmt.DecodeStats(
            running=batch_size, used_tokens=used, token_usage=used / self.s.profile.max_total_tokens, accept_tokens=0,
            forward_ct=0, gen_throughput=0.0, queued=len(e.waiting), iteration=e.forward_ct_decode,
            num_steps=spec.num_steps, num_draft_tokens=spec.num_draft_tokens, speculative=spec.enabled))

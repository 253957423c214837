"""SGLang's scheduler log accounting for the simulator: interval accumulators reset at each "Decode batch"
line, the lifetime accept length, and the values SGLang's metrics show between lines. The counterpart of
vLLM's stats loop (``vllm_cli.StatsLogger``), which differences the engine's lifetime totals instead."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable

from . import logfmt


class DecodeLog:
    def __init__(self, family: str, log_ms: bool, emit: Callable[[str], None], enabled: bool = True) -> None:
        self.family, self.log_ms, self.emit, self.enabled = family, log_ms, emit, enabled
        self._accept_tokens = self._forward = self._gen_tokens = 0  # this interval's
        self._start_ns = time.monotonic_ns()
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

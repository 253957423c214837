"""vLLM's periodic stats lines ("Engine 000: …" and "SpecDecoding metrics: …"), per vLLM generation. Pure.

vLLM's API server logs one block every ``VLLM_LOG_STATS_INTERVAL`` seconds: the engine line, then the
speculative line if at least one draft was made in the interval. Every value covers the interval (reset
after each log), except V0's speculative counts, which were lifetime totals. The block is logged at INFO
unless the engine was idle for this interval and the one before (then at DEBUG: INFO logs go silent).
``GENERATIONS`` maps ``--log-format`` to the release range it stands for; the shapes are the reference's
verbatim lines (tests/integration/test_sim_vllm.py pins them).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

GENERATIONS: dict[str, str] = {
    "current": "V1 0.10-0.33: '(APIServer pid=N)' prefix, Mean acceptance length, throughputs, Avg Draft "
               "acceptance rate",
    "0.9": "V1 ~0.9: no process prefix; Draft acceptance rate, Mean acceptance length, Per-position",
    "0.8": "V1 ~0.8: no process prefix; Draft acceptance rate, Accepted, Drafted only",
    "v0": "V0 engine: 'Avg prompt throughput' with Swapped/Pending, 'Speculative metrics' with lifetime counts",
}
DEFAULT_GENERATION = "current"


@dataclass(frozen=True, slots=True)
class Interval:
    """What the engine did in one stats interval (counts are deltas), and its state at the end of it."""

    elapsed_s: float
    prompt_tokens: int
    generation_tokens: int
    running: int
    waiting: int
    kv_usage: float  # 0..1
    drafts: int
    draft_tokens: int
    accepted: int
    accepted_pos: tuple[int, ...]

    @property
    def prompt_tps(self) -> float:
        return self.prompt_tokens / self.elapsed_s if self.elapsed_s > 0 else 0.0

    @property
    def generation_tps(self) -> float:
        return self.generation_tokens / self.elapsed_s if self.elapsed_s > 0 else 0.0


@dataclass(frozen=True, slots=True)
class Lifetime:
    """Lifetime counts, for V0's speculative line."""

    draft_tokens: int
    accepted: int
    emitted: int  # accepted drafts plus one bonus token per verify round
    num_spec_tokens: int


def prefix(generation: str, wall_s: float, pid: int, where: str, level: str = "INFO") -> str:
    stamp = time.strftime("%m-%d %H:%M:%S", time.localtime(wall_s))
    if generation == "v0":
        return f"{level} {stamp} {where}] "
    proc = f"(APIServer pid={pid}) " if generation == "current" else ""
    return f"{proc}{level} {stamp} [{where}] "


def engine_line(generation: str, iv: Interval, wall_s: float, pid: int) -> str:
    head = f"Avg prompt throughput: {iv.prompt_tps:.1f} tokens/s, " \
           f"Avg generation throughput: {iv.generation_tps:.1f} tokens/s, "
    if generation == "v0":
        body = head + f"Running: {iv.running} reqs, Swapped: 0 reqs, Pending: {iv.waiting} reqs, " \
                      f"GPU KV cache usage: {100 * iv.kv_usage:.1f}%, CPU KV cache usage: 0.0%."
        return prefix(generation, wall_s, pid, "metrics.py:351") + body
    body = "Engine 000: " + head + f"Running: {iv.running} reqs, Waiting: {iv.waiting} reqs, " \
                                   f"GPU KV cache usage: {100 * iv.kv_usage:.1f}%, Prefix cache hit rate: 0.0%"
    return prefix(generation, wall_s, pid, "loggers.py:335") + body


def spec_line(generation: str, iv: Interval, life: Lifetime, wall_s: float, pid: int) -> str | None:
    """The speculative line, or None when vLLM prints none (no draft in the interval)."""
    if generation == "v0":
        if life.draft_tokens == 0:
            return None
        rate = life.accepted / life.draft_tokens
        rounds = life.draft_tokens / life.num_spec_tokens if life.num_spec_tokens else 0
        efficiency = life.emitted / (rounds * (life.num_spec_tokens + 1)) if rounds else 0.0
        body = (f"Speculative metrics: Draft acceptance rate: {rate:.3f}, System efficiency: {efficiency:.3f}, "
                f"Number of speculative tokens: {life.num_spec_tokens}, Number of accepted tokens: {life.accepted}, "
                f"Number of draft tokens: {life.draft_tokens}, Number of emitted tokens: {life.emitted}.")
        return prefix(generation, wall_s, pid, "metrics.py:467") + body
    if iv.drafts == 0:
        return None
    rate = 100.0 * iv.accepted / iv.draft_tokens if iv.draft_tokens else float("nan")
    mean = 1.0 + iv.accepted / iv.drafts
    per_pos = ", ".join(f"{a / iv.drafts:.3f}" for a in iv.accepted_pos)
    if generation == "0.8":
        body = f"SpecDecoding metrics: Draft acceptance rate: {rate:.1f}%, Accepted: {iv.accepted} tokens, " \
               f"Drafted: {iv.draft_tokens} tokens"
    elif generation == "0.9":
        body = (f"SpecDecoding metrics: Draft acceptance rate: {rate:.1f}%, Mean acceptance length: {mean:.2f}, "
                f"Accepted: {iv.accepted} tokens, Drafted: {iv.draft_tokens} tokens, "
                f"Per-position acceptance rate: {per_pos}")
    else:
        body = (f"SpecDecoding metrics: Mean acceptance length: {mean:.2f}, "
                f"Accepted throughput: {iv.accepted / iv.elapsed_s:.2f} tokens/s, "
                f"Drafted throughput: {iv.draft_tokens / iv.elapsed_s:.2f} tokens/s, "
                f"Accepted: {iv.accepted} tokens, Drafted: {iv.draft_tokens} tokens, "
                f"Per-position acceptance rate: {per_pos}, Avg Draft acceptance rate: {rate:.1f}%")
    return prefix(generation, wall_s, pid, "metrics.py:120") + body


def idle(iv: Interval) -> bool:
    return iv.prompt_tokens == 0 and iv.generation_tokens == 0

"""Per-engine-step draft counts: the engines' own load knobs, simulated with their released semantics.

- ``BatchSchedule``: vLLM's ``num_speculative_tokens_per_batch_size`` (0.24.0+). Validated with vLLM 0.32's
  own rules and messages (``v1/spec_decode/dynamic/utils.py``), expanded into the same dense lookup: gaps and
  the tail carry the previous K, every K is clamped to ``num_speculative_tokens``; the batch size is the
  number of requests in the step.
- ``AdaptiveSteps``: SGLang 0.5.23's ``--speculative-adaptive`` [``--speculative-adaptive-config FILE``].
  Slots keyed by batch size; a batch is padded up to the router's CUDA-graph batch sizes (``graphs.
  router_sizes``: only a given ``--cuda-graph-bs-decode`` list, so by default none) and uses the slot with the
  largest key at or below it, or the smallest key when none is (``speculative/adaptive_spec_params.py:342-358``).
  Inside a slot an EMA of accepted drafts per request moves the step among the
  slot's candidates after 10 warm-up batches, every 5 batches (hysteresis taken as 0): up when the EMA is
  above step − 0.5, down when it is at or below the lower candidate − 0.5 (0.5 for a drop to 0); at 0 it
  probes the smallest positive candidate at the next update. A 0 candidate runs no draft.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

# SGLang 0.5.23's built-in slots (adaptive_spec_params.py)
SGLANG_DEFAULT_SLOTS: dict[int, tuple[int, ...]] = {1: (1, 3, 5, 7), 8: (0, 1, 3), 32: (0, 1), 64: (0,)}
ADAPTIVE_ALGORITHMS = ("EAGLE", "EAGLE3")
WARMUP_BATCHES, UPDATE_EVERY, EMA_ALPHA = 10, 5, 0.2


class StepsConfigError(ValueError):
    pass


def batch_schedule(raw: object, max_batch: int, max_k: int) -> list[int]:
    """vLLM's dense batch size → K lookup (index 0 unused), or ``StepsConfigError`` with vLLM's message."""
    if not isinstance(raw, list):
        raise StepsConfigError("num_speculative_tokens_per_batch_size must be a non-empty list of "
                               "(range_start, range_end, num_speculative_tokens) entries.")
    if not raw:
        raise StepsConfigError("num_speculative_tokens_per_batch_size must not be empty.")
    entries = []
    for e in raw:
        if not isinstance(e, list) or len(e) != 3 or not all(isinstance(x, int) and not isinstance(x, bool)
                                                             for x in e):
            raise StepsConfigError("Each num_speculative_tokens_per_batch_size entry must be a 3-item sequence: "
                                   "(range_start, range_end, num_speculative_tokens).")
        lo, hi, k = e
        if lo <= 0 or hi <= 0:
            raise StepsConfigError(f"Batch-size range ({lo}, {hi}) must be positive.")
        if lo > hi:
            raise StepsConfigError(f"Batch-size range start must be <= end for ({lo}, {hi}, {k}).")
        if k < 0:
            raise StepsConfigError("num_speculative_tokens_per_batch_size values must be >= 0.")
        entries.append((lo, hi, k))
    entries.sort()
    prev_end = 0
    for lo, hi, _ in entries:
        if lo <= prev_end:
            raise StepsConfigError("Batch-size ranges must be non-overlapping and sorted.")
        prev_end = hi
    if entries[0][0] != 1:
        raise StepsConfigError("The first batch-size range must start at 1 so every runtime batch size has a "
                               "defined schedule.")
    dense = [0] * (max_batch + 1)
    nxt, last = 1, entries[0][2]
    for lo, hi, k in entries:
        for bs in range(nxt, min(lo, max_batch + 1)):  # a gap carries the previous K
            dense[bs] = min(max_k, last)
        for bs in range(max(lo, nxt), min(hi, max_batch) + 1):
            dense[bs] = min(max_k, k)
        nxt, last = max(nxt, hi + 1), k
        if nxt > max_batch:
            break
    for bs in range(nxt, max_batch + 1):  # the tail carries the last K
        dense[bs] = min(max_k, last)
    return dense


@dataclass(slots=True)
class BatchSchedule:
    dense: list[int]

    def steps_for(self, batch_size: int) -> int:
        return self.dense[min(max(batch_size, 1), len(self.dense) - 1)]

    def observe(self, batch_size: int, accepted_drafts: int, requests: int) -> None:
        pass


def adaptive_slots(path: str | None) -> dict[int, tuple[int, ...]]:
    """``--speculative-adaptive-config``: ``{"1": {"candidate_steps": [3]}, "16": {"candidate_steps": [0]}}``;
    None for SGLang's built-in slots. Read as ``_load_adaptive_config`` reads it (``adaptive_spec_params.py:
    103-139``): a key that is not a digit string is skipped, not refused, and no slot "1" is needed (a batch
    below the smallest key uses that key's slot)."""
    if path is None:
        return dict(SGLANG_DEFAULT_SLOTS)
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except OSError as exc:
        raise StepsConfigError(f"--speculative-adaptive-config {path}: {exc.strerror}") from None
    except ValueError as exc:
        raise StepsConfigError(f"--speculative-adaptive-config {path}: not JSON ({exc})") from None
    if not isinstance(doc, dict):
        raise StepsConfigError(f"--speculative-adaptive-config {path}: must be a JSON object of batch-size slots")
    slots: dict[int, tuple[int, ...]] = {}
    for key, v in doc.items():
        if not key.isdigit():
            continue
        cands = v.get("candidate_steps") if isinstance(v, dict) else None
        if not isinstance(cands, list) or not cands or not all(
                isinstance(c, int) and not isinstance(c, bool) and c >= 0 for c in cands):
            raise StepsConfigError(f"BS {key}: candidate_steps must be a list of non-negative ints, got {cands!r}")
        slots[int(key)] = tuple(sorted(set(cands)))
    if not slots:
        raise StepsConfigError("speculative_adaptive_config must contain at least one integer-string BS key, e.g. "
                               f'{{"1": {{"candidate_steps": [1,3,7]}}}}. Got keys: {list(doc)}')
    return slots


@dataclass(slots=True)
class Slot:
    candidates: tuple[int, ...]
    step: int
    ema: float | None = None
    batches: int = 0


@dataclass(slots=True)
class AdaptiveSteps:
    slots: dict[int, Slot]  # by batch-size key
    graphs: Sequence[int]  # sorted

    @classmethod
    def build(cls, slots: dict[int, tuple[int, ...]], start: int, graphs: Sequence[int]) -> AdaptiveSteps:
        """SGLang's start-up check: the launch step must be one of the candidates."""
        union = sorted({c for cands in slots.values() for c in cands})
        if start not in union:  # SGLang's refusal (arg_groups/speculative_hook.py:1416-1421)
            raise StepsConfigError(f"--speculative-num-steps={start} is not in the adaptive config candidate_steps "
                                   f"{union}. Pass one of those values.")
        built = {key: Slot(c, start if start in c else min(c, key=lambda x: (abs(x - start), x)))
                 for key, c in slots.items()}
        return cls(built, sorted(graphs))

    def _slot(self, batch_size: int) -> Slot:
        padded = next((g for g in self.graphs if g >= batch_size), batch_size)
        key = max((k for k in self.slots if k <= padded), default=min(self.slots))
        return self.slots[key]

    def steps_for(self, batch_size: int) -> int:
        return self._slot(batch_size).step

    def observe(self, batch_size: int, accepted_drafts: int, requests: int) -> None:
        s = self._slot(batch_size)
        s.batches += 1
        if s.step > 0 and requests > 0:
            x = accepted_drafts / requests
            s.ema = x if s.ema is None else (1 - EMA_ALPHA) * s.ema + EMA_ALPHA * x
        if s.batches <= WARMUP_BATCHES or s.batches % UPDATE_EVERY or len(s.candidates) == 1:
            return
        i = s.candidates.index(s.step)
        if s.step == 0:  # no acceptance is observed at 0: probe the smallest positive step again
            s.step, s.ema = next((c for c in s.candidates if c > 0), 0), None
        elif s.ema is not None and s.ema > s.step - 0.5 and i + 1 < len(s.candidates):
            s.step = s.candidates[i + 1]
        elif s.ema is not None and i > 0 and s.ema <= max(s.candidates[i - 1] - 0.5, 0.5):
            s.step = s.candidates[i - 1]

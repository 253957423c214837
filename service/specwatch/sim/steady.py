"""Steady-state figures of a run from what the engine did (``/truth``'s requests, rounds and prefills): the one
rule the oracle applies to its virtual runs and the tests apply to a served engine's truth. Pure.

The steady set leaves out the warm-up, the ramp-up (a closed loop's requests that arrived before all its
streams were first in flight together; an open loop's first tenth) and the drain (requests that ended after
the first end after the last arrival: from then on fewer streams were in flight; at one stream, none). The
profiler's ``analysis.steady_window`` applies the same rule to a client's records. Per stream it gives both
figures ``bench`` prints: tokens over the whole request (output tokens / (last token - arrival), the mean over
requests) and decode tok/s (tokens after the first / (last token - first token), token-weighted).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Steady:
    requests: int  # in the steady set
    window_s: float  # first steady arrival to last steady token
    mean_in_flight: float  # requests between arrival and last token, time-averaged over the window
    tokens_per_second: float  # per stream, over the whole request (bench's "tok/s")
    decode_tokens_per_second: float  # per stream, after the first token (bench's "Decode tok/s")
    aggregate_tokens_per_second: float  # every token the engine produced in the window, per second
    ttft_ms: float  # mean, arrival to first token
    accept_length: float | None  # tokens per verify round, pooled over the steady set (None without speculation)
    prefill_batches: int  # prefills that ended in the window: how the engine batched the pattern's arrivals


def steady_set(requests: Sequence[dict[str, Any]], warmup: int, streams: int | None) -> list[dict[str, Any]]:
    """The steady requests: finished ones in arrival order, less the warm-up, the ramp-up and the drain.
    ``streams``: the closed loop's stream count (ramp-up: until ``streams`` are first in flight at once, each
    stream's first request in flight); None for an open loop (ramp-up: its first tenth)."""
    done = sorted((r for r in requests if r.get("outcome") == "finished"), key=lambda r: r["arrival_ns"])[warmup:]
    if not done:
        return []
    if streams is None:
        ramp_ns = done[math.ceil(len(done) / 10) - 1]["arrival_ns"] + 1
    else:
        ramp_ns = full_at(done, streams)
        if ramp_ns is None:
            return []
    last_arrival = done[-1]["arrival_ns"]  # the drain: from the first end after it, fewer streams in flight
    closes = min((r["last_token_ns"] for r in done if r["last_token_ns"] > last_arrival), default=last_arrival)
    return [r for r in done if r["arrival_ns"] >= ramp_ns and r["last_token_ns"] <= closes]


def full_at(requests: Sequence[dict[str, Any]], streams: int) -> int | None:
    """The first moment ``streams`` requests are in flight together (None: never)."""
    events = sorted([(r["arrival_ns"], 1) for r in requests] + [(r["last_token_ns"], -1) for r in requests],
                    key=lambda e: (e[0], e[1]))  # a request that ends as another arrives is not in flight with it
    n = 0
    for t, step in events:
        n += step
        if n >= streams:
            return t
    return None


def in_flight(requests: Sequence[dict[str, Any]], start: int, end: int) -> float:
    """Time-averaged requests between their arrival and their last token over ``[start, end]``."""
    if end <= start:
        return 0.0
    total = sum(max(0, min(r["last_token_ns"], end) - max(r["arrival_ns"], start)) for r in requests)
    return total / (end - start)


def steady(requests: Sequence[dict[str, Any]], rounds: Sequence[tuple[int, int, int]],
           prefills: Sequence[tuple[int, int, int]], warmup: int, streams: int | None) -> Steady | None:
    """The run's steady-state figures; None when it has no steady request (too short to say)."""
    s = steady_set(requests, warmup, streams)
    if not s:
        return None
    start, end = min(r["arrival_ns"] for r in s), max(r["last_token_ns"] for r in s)
    made = sum(n for t, _, n in rounds if start < t <= end) + sum(n for t, n, _ in prefills if start < t <= end)
    decode_ns = sum(r["last_token_ns"] - r["first_token_ns"] for r in s)
    rounds_ct = sum(r["verify_ct"] for r in s)
    measured = sorted((r for r in requests if r.get("outcome") == "finished"), key=lambda r: r["arrival_ns"])
    return Steady(
        requests=len(s), window_s=(end - start) / 1e9, mean_in_flight=in_flight(measured[warmup:], start, end),
        tokens_per_second=sum(r["completion_tokens"] * 1e9 / (r["last_token_ns"] - r["arrival_ns"]) for r in s)
        / len(s),
        decode_tokens_per_second=sum(r["completion_tokens"] - 1 for r in s) * 1e9 / decode_ns if decode_ns else 0.0,
        aggregate_tokens_per_second=made * 1e9 / (end - start) if end > start else 0.0,
        ttft_ms=sum(r["first_token_ns"] - r["arrival_ns"] for r in s) / len(s) / 1e6,
        accept_length=sum(r["completion_tokens"] - 1 for r in s) / rounds_ct if rounds_ct else None,
        prefill_batches=sum(1 for t, _, _ in prefills if start < t <= end))

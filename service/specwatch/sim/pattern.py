"""The arrival pattern the simulator's oracle (``/explain``, ``sim --explain``) runs its engine on: what a
client sends, when, and how much. Parsed once here from ``/explain``'s query or the CLI's flags; a bad value
is refused with the parameter's name. The defaults are what ``specwatch bench --concurrency N`` sends with
its built-in prompts, with enough requests for a steady state."""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..options import default
from ..probe import prompts as prompt_sets
from .text import count_prompt_tokens

ARRIVALS = ("together", "staggered", "poisson", "constant")
MAX_SENDS = 10_000  # ``sends_ms``: a query's numbers at most
MIN_STEADY = 48  # measured requests at least, whatever the load (each stream sends at least 6)


@functools.cache
def builtin_prompts() -> tuple[tuple[str, int], ...]:
    """The built-in prompt set as the server sees it: text and its prompt token count."""
    return tuple((t, count_prompt_tokens(t)) for t in (p.as_text() for p in prompt_sets.builtin()))


def fixed_prompt(tokens: int) -> tuple[str, int]:
    """A chat prompt of exactly ``tokens`` tokens (BOS included)."""
    return " ".join(["hello"] * (tokens - 1)), tokens


@dataclass(frozen=True, slots=True)
class Pattern:
    streams: int = 1  # closed loop: streams in flight (the open loop's in-flight is what the rate gives)
    arrival: str = "together"  # together | staggered (stagger_ms apart) | constant | poisson (at rate_per_s)
    rate_per_s: float | None = None
    stagger_ms: float = 0.0
    prompt_tokens: int | None = None  # a fixed prompt length; None: the prompts' own
    prompts_file: str | None = None  # None: the built-in set
    output_tokens: int = default("max_tokens")
    ignore_eos: bool = default("ignore_eos")
    temperature: float = default("temperature")
    warmup: int = default("warmup")
    requests: int | None = None  # measured requests; None: enough for a steady state at this load
    seed: int = default("seed")
    # the client's time to send one request, one after another: requests that finished in the same round come
    # back this far apart, so an idle engine prefills the first alone and the rest together, as a served one
    # does with bench (a 16-stream wave arrives over ~2 ms on 2 cores: first to second 0.2-0.7 ms)
    send_ms: float = 0.2
    # each send's own delay, in order from the first (the warm-up's), as a served run's arrivals show them
    # (``sends_seen``); ``send_ms`` after the last: a client's pace is uneven within a wave, and how a wave
    # splits into prefills follows it
    sends_ms: tuple[float, ...] = ()

    @property
    def poisson(self) -> bool:
        return self.arrival == "poisson"

    @property
    def measured(self) -> int:
        if self.requests is not None:
            return self.requests
        return max(MIN_STEADY, 6 * self.streams, math.ceil(6 * (self.rate_per_s or 0)))

    def prompt_list(self) -> tuple[tuple[str, int], ...]:
        if self.prompt_tokens is not None:
            return (fixed_prompt(self.prompt_tokens),)
        if self.prompts_file is not None:
            texts = [p.as_text() for p in prompt_sets.read(self.prompts_file)]
            return tuple((t, count_prompt_tokens(t)) for t in texts)
        return builtin_prompts()

    def describe(self) -> dict[str, Any]:
        """What ``/explain`` says it assumed."""
        if self.rate_per_s is not None:
            load = f"open loop, {self.arrival} arrivals at {self.rate_per_s:g} requests/s"
        elif self.arrival == "staggered":
            load = f"{self.streams} closed-loop streams started {self.stagger_ms:g} ms apart"
        else:
            load = f"{self.streams} closed-loop streams started together (bench --concurrency {self.streams})"
        prompts = (f"{self.prompt_tokens}-token prompts" if self.prompt_tokens is not None
                   else f"prompts from {self.prompts_file}" if self.prompts_file else "the built-in prompts")
        return {"arrival": load, "prompts": prompts, "output_tokens": self.output_tokens,
                "ignore_eos": self.ignore_eos, "temperature": self.temperature, "warmup": self.warmup,
                "requests": self.measured, "seed": self.seed, "send_ms": self.send_ms,
                "sends_ms": list(self.sends_ms)}

    def send_ns(self, k: int) -> int:
        """The client's delay before its ``k``-th send (0: the first), in ns."""
        return round((self.sends_ms[k] if k < len(self.sends_ms) else self.send_ms) * 1e6)

    def at(self, streams: int) -> Pattern:
        return dataclasses.replace(self, streams=streams)


def number(raw: object, key: str, kind: type[int] | type[float], lo: float, hi: float) -> Any:
    """``raw`` as an int or a float from ``lo`` to ``hi``; ``ValueError`` names ``key``."""
    try:
        x = kind(str(raw))
    except ValueError:
        raise ValueError(f"{key}: {str(raw)[:40]!r} is not {'an integer' if kind is int else 'a number'}") from None
    if not (lo <= x <= hi and math.isfinite(x)):
        shown = "d" if kind is int else "g"
        raise ValueError(f"{key}: must be from {lo:{shown}} to {hi:{shown}}")
    return x


def _int(q: Mapping[str, str], key: str, lo: int, hi: int) -> int | None:
    return None if key not in q else int(number(q[key], key, int, lo, hi))


def _float(q: Mapping[str, str], key: str, lo: float, hi: float) -> float | None:
    return None if key not in q else float(number(q[key], key, float, lo, hi))


def _floats(q: Mapping[str, str], key: str, lo: float, hi: float, most: int) -> tuple[float, ...] | None:
    """A comma-separated list of numbers from ``lo`` to ``hi``, at most ``most`` of them."""
    if key not in q:
        return None
    items = q[key].split(",") if q[key] else []
    if len(items) > most:
        raise ValueError(f"{key}: at most {most} numbers")
    return tuple(float(number(x, key, float, lo, hi)) for x in items)


def sends_seen(requests: Sequence[Mapping[str, Any]], streams: int, warmup: int) -> tuple[float, ...]:
    """A closed loop's ``sends_ms`` as a served run shows them (``/truth``'s requests of one ``bench
    --concurrency streams --warmup warmup`` run): each arrival's delay after the later of the send before it
    and the end that freed its stream, the inverse of the oracle's client (``virtual``). The warm-ups go one
    at a time, each after the end of the one before (the first's delay is 0); each of the first wave's follows
    the last warm-up's end; after that the k-th end of a measured request frees the k-th later send: with
    ``streams`` in flight at most, that send cannot come before it. Stops where an end is missing (after the
    first wave, when any measured request lost its end)."""
    reqs = sorted(requests, key=lambda r: r["arrival_ns"])
    # a measured request that lost its end (an error) freed a send at a time unknown: then none are paired
    ends = [r["last_token_ns"] for r in reqs[warmup:]]
    ends = sorted(ends) if all(ends) else []
    delays = [0.0] if reqs else []
    for j in range(1, len(reqs)):
        k = j - warmup - streams
        if j <= warmup:  # a warm-up, or the first wave's first send: after the end of the request before it
            freed = reqs[j - 1]["last_token_ns"] or None
        elif k < 0:
            freed = (reqs[warmup - 1]["last_token_ns"] or None) if warmup else reqs[0]["arrival_ns"]
        else:
            freed = ends[k] if k < len(ends) else None
        if freed is None:
            break
        delays.append(max(0, reqs[j]["arrival_ns"] - max(freed, reqs[j - 1]["arrival_ns"])) / 1e6)
    return tuple(delays)


def parse(q: Mapping[str, str], streams: int = 1) -> Pattern:
    """A pattern from ``/explain``'s query (or the CLI's flags as such a mapping); ``ValueError`` names the bad
    parameter. ``rate_per_s`` makes it open loop (``arrival`` constant unless poisson)."""
    arrival = q.get("arrival", "together")
    if arrival not in ARRIVALS:
        raise ValueError(f"arrival: {arrival[:40]!r} is not one of {', '.join(ARRIVALS)}")
    rate = _float(q, "rate_per_s", 1e-3, 100_000)
    if (rate is None) != (arrival in ("together", "staggered")):
        raise ValueError("rate_per_s: give it with arrival=constant or poisson, and only then")
    stagger = _float(q, "stagger_ms", 0, 3_600_000) or 0.0
    ignore = q.get("ignore_eos", "true").lower()
    if ignore not in ("true", "false", "1", "0"):
        raise ValueError("ignore_eos: must be true or false")
    given: dict[str, Any] = {
        "output_tokens": _int(q, "output_tokens", 2, 1_000_000), "temperature": _float(q, "temperature", 0, 2),
        "warmup": _int(q, "warmup", 0, 10_000), "seed": _int(q, "seed", 0, 2**31),
        "send_ms": _float(q, "send_ms", 0, 1000), "sends_ms": _floats(q, "sends_ms", 0, 1000, MAX_SENDS)}
    return dataclasses.replace(
        Pattern(streams=streams, arrival=arrival, rate_per_s=rate, stagger_ms=stagger,
                prompt_tokens=_int(q, "prompt_tokens", 1, 1_000_000), ignore_eos=ignore in ("true", "1"),
                requests=_int(q, "requests", 1, 100_000)),
        **{k: v for k, v in given.items() if v is not None})

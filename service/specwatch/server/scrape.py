"""Server metrics scrape (``--server-metrics``): SGLang ``sglang:`` gauges (``sglang:spec_num_steps`` is the
step count in use: ``--speculative-adaptive`` moves it), vLLM's load gauges
(``vllm:num_requests_running``/``waiting``, ``kv_cache_usage_perc``) and its ``vllm:spec_decode_*`` and
``generation_tokens`` counters turned into ``ServerSample``s. Server side, source + parse stage;
``samples_from_text`` is pure.

vLLM's counters are turned into interval values from the delta between two scrapes:
accept length = 1 + Δaccepted / Δdrafts, per-position acceptance = Δaccepted_per_pos / Δdrafts, and the
step count in use = Δdraft tokens / Δdrafts (a per-batch-size schedule changes it; 0 when the server generated
without drafting).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import math
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from ..errors import ResponseTooLarge
from ..probe.client import get_text
from ..ratelog import RateLimited
from ..records import MAX_ACCEPT_LENGTH, ServerSample, vllm_accept_length

log = logging.getLogger("specwatch")
WARN_EVERY_S = 60.0

SGLANG_GAUGES = {
    "sglang:spec_accept_length": "accept_length",
    "sglang:spec_accept_rate": "accept_rate",
    "sglang:gen_throughput": "gen_throughput",
    "sglang:num_running_reqs": "running",
    "sglang:num_queue_reqs": "queued",
    "sglang:token_usage": "token_usage",
    "sglang:spec_num_steps": "speculative_steps",
}
VLLM_GAUGES = {  # the load: running and waiting requests, KV cache use (0..1; older releases: gpu_cache_usage_perc)
    "vllm:num_requests_running": "running",
    "vllm:num_requests_waiting": "queued",
    "vllm:kv_cache_usage_perc": "token_usage",
    "vllm:gpu_cache_usage_perc": "token_usage",
}
VLLM_GENERATION = "vllm:generation_tokens_total"
VLLM_COUNTERS = ("vllm:spec_decode_num_drafts", "vllm:spec_decode_num_draft_tokens",
                 "vllm:spec_decode_num_accepted_tokens")
VLLM_PER_POS = "vllm:spec_decode_num_accepted_tokens_per_pos"


RANGES = {"accept_length": (0.0, float(MAX_ACCEPT_LENGTH)), "accept_rate": (0.0, 1.0), "gen_throughput": (0.0, 1e12),
          "running": (0.0, 2.0**53), "queued": (0.0, 2.0**53), "token_usage": (0.0, 1.5),
          "speculative_steps": (0.0, float(MAX_ACCEPT_LENGTH))}
MAX_DP_RANKS = 64  # beyond that, one "other" series: a scrape cannot add unbounded series
MAX_POSITIONS = MAX_ACCEPT_LENGTH


@dataclass(slots=True)
class ScrapeState:
    """Previous vLLM counter values, to turn counters into interval rates; values refused, by count."""

    prev: dict[str, float] = field(default_factory=dict)
    prev_pos: dict[str, float] = field(default_factory=dict)
    prev_gen: dict[str, float] = field(default_factory=dict)  # vLLM generation tokens per engine
    prev_s: float | None = None
    rejected: int = 0  # non-finite or out-of-range values, unknown labels: counted, never exported


def dp_label(raw: str) -> str:
    """A dp_rank label value from a closed set: "0" … "63" (leading zeros dropped), else "other"."""
    return str(int(raw)) if raw.isascii() and raw.isdigit() and len(raw) <= 4 and int(raw) < MAX_DP_RANKS \
        else "other"


@dataclass(slots=True)
class _Scrape:
    """One scrape's values by family, validated: load gauges per dp rank, vLLM generation tokens per engine,
    the spec-decode counters and the per-position accepted-token counters."""

    gauges: dict[str, dict[str, float]] = field(default_factory=lambda: defaultdict(dict))
    generation: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    counters: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    per_pos: dict[str, float] = field(default_factory=lambda: defaultdict(float))


def _count(v: float) -> bool:
    return math.isfinite(v) and 0 <= v <= 2.0**53


def _read(text: str, state: ScrapeState) -> _Scrape:
    sc = _Scrape()
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            v, name = s.value, s.name
            if name in SGLANG_GAUGES or name in VLLM_GAUGES:
                key = SGLANG_GAUGES.get(name) or VLLM_GAUGES[name]
                lo, hi = RANGES[key]
                if math.isfinite(v) and lo <= v <= hi:
                    sc.gauges[dp_label(s.labels.get("dp_rank", s.labels.get("engine", "0")))][key] = v
                else:
                    state.rejected += 1
            elif name == VLLM_GENERATION:
                if _count(v):
                    sc.generation[dp_label(s.labels.get("engine", "0"))] += v
                else:
                    state.rejected += 1
            elif name == VLLM_PER_POS + "_total":
                pos = s.labels.get("position", "0")
                if _count(v) and pos.isascii() and pos.isdigit() and int(pos) < MAX_POSITIONS:
                    sc.per_pos[str(int(pos))] += v
                else:
                    state.rejected += 1
            elif name.endswith("_total") and name.removesuffix("_total") in VLLM_COUNTERS:
                if _count(v):
                    sc.counters[name.removesuffix("_total")] += v
                else:
                    state.rejected += 1
    return sc


def _generation_rates(sc: _Scrape, state: ScrapeState, now_s: float) -> None:
    """vLLM's generation counter as tok/s since the previous scrape, into each engine's gauges."""
    dt = now_s - state.prev_s if state.prev_s is not None else 0.0
    for dp, total in sc.generation.items():
        before = state.prev_gen.get(dp)
        if before is not None and dt > 0 and total >= before:  # a counter that went back: a new server
            sc.gauges[dp]["gen_throughput"] = (total - before) / dt
    state.prev_gen, state.prev_s = dict(sc.generation), now_s


def _spec(sc: _Scrape, state: ScrapeState, generated: bool) -> dict[str, Any] | None:
    """Speculation over the interval since the previous scrape, from vLLM's counters' deltas; None before the
    second scrape, after a restart, or for values no server can have (counted); without drafts, only the step
    count in use (0) when the server ``generated`` meanwhile."""
    d = {k: sc.counters[k] - state.prev.get(k, 0.0) for k in sc.counters}
    dpos = {p: sc.per_pos[p] - state.prev_pos.get(p, 0.0) for p in sc.per_pos}
    first = not state.prev
    state.prev, state.prev_pos = dict(sc.counters), dict(sc.per_pos)
    drafts = d.get("vllm:spec_decode_num_drafts", 0.0)
    if first or any(x < 0 for x in (*d.values(), *dpos.values())):  # went back: a new server
        return None
    if drafts <= 0:
        return {"speculative_steps": 0.0} if generated else None
    acc = d.get("vllm:spec_decode_num_accepted_tokens", 0.0)
    drafted = d.get("vllm:spec_decode_num_draft_tokens", 0.0)
    positions = tuple(dpos[p] / drafts for p in sorted(dpos, key=int))
    if any(p > 1.0 for p in positions) or acc / drafts > MAX_POSITIONS:
        state.rejected += 1
        return None
    return {"accept_length": vllm_accept_length(acc, drafts), "accept_rate": min(1.0, acc / drafted) if drafted
            else None, "accepted_tokens": int(acc), "drafted_tokens": int(drafted), "position_acceptance": positions,
            "speculative_steps": drafted / drafts if drafted / drafts <= MAX_POSITIONS else None}


RUNNING_GAUGES = tuple(name for name, key in (*SGLANG_GAUGES.items(), *VLLM_GAUGES.items()) if key == "running")
QUEUED_GAUGES = tuple(name for name, key in (*SGLANG_GAUGES.items(), *VLLM_GAUGES.items()) if key == "queued")


def running_from_text(text: str, gauges: tuple[str, ...] = RUNNING_GAUGES) -> list[int]:
    """Just the running-request gauges of one exposition (one value per dp rank / engine), the way
    ``samples_from_text`` reads them, without parsing the rest: a bench samples them every half second on the
    event loop its probes run on, where a full parse of vLLM's histograms costs milliseconds. ``gauges``:
    ``QUEUED_GAUGES`` for the waiting requests instead."""
    lo, hi = RANGES["running"]
    out = []
    for line in text.splitlines():
        if not line.startswith(gauges):
            continue
        name = line.split("{", 1)[0].split(" ", 1)[0]
        fields = line.rpartition("}")[2].split() if "{" in line else line.split()[1:]
        if name not in gauges or not fields:  # another family that starts alike
            continue
        try:
            v = float(fields[0])
        except ValueError:
            continue
        if math.isfinite(v) and lo <= v <= hi:
            out.append(int(v))
    return out


def samples_from_text(text: str, state: ScrapeState, now_s: float | None = None) -> list[ServerSample]:
    """Samples from one scrape. With ``now_s`` (the scrape's monotonic time) vLLM's generation counter is
    turned into tok/s over the time since the previous scrape."""
    sc = _read(text, state)
    generated = any(total > state.prev_gen.get(dp, total) for dp, total in sc.generation.items())
    if sc.generation and now_s is not None:
        _generation_rates(sc, state, now_s)
    out = []
    for dp, g in sorted(sc.gauges.items()):
        al = g.get("accept_length")
        out.append(ServerSample(
            source="scrape", dp_rank=dp, accept_length=al if al else None, accept_rate=g.get("accept_rate"),
            gen_throughput=g.get("gen_throughput"), running=int(g["running"]) if "running" in g else None,
            queued=int(g["queued"]) if "queued" in g else None, token_usage=g.get("token_usage"),
            speculative_steps=g.get("speculative_steps")))
    spec = _spec(sc, state, generated) if sc.counters else None
    if spec is not None:
        if len(out) == 1:  # one engine: its load and its speculation in one sample
            out[0] = dataclasses.replace(out[0], **spec)
        else:
            out.append(ServerSample(source="scrape", **spec))
    return out


async def scrape_forever(session: aiohttp.ClientSession, url: str, interval_s: float, state: ScrapeState,
                         on_sample: Callable[[ServerSample], None], on_up: Callable[[bool], None]) -> None:
    """Scrape ``url`` every ``interval_s``; each attempt reports up or down, a failure is logged at most once
    per ``WARN_EVERY_S`` (never raised: a failing server is data)."""
    warn = RateLimited(log, WARN_EVERY_S)
    while True:
        error = ""
        try:
            status, text = await get_text(session, url)
            error = "" if status == 200 else f"HTTP {status}"
            for s in samples_from_text(text, state, time.monotonic()):
                on_sample(s)
        except ResponseTooLarge as exc:  # a runaway exposition is refused whole
            error = str(exc)
        except (aiohttp.ClientError, TimeoutError, ValueError) as exc:  # ValueError: the exposition's parser
            error = str(exc) or type(exc).__name__
        on_up(not error)
        if error:
            warn.warning("scrape", "scraping the server's %s failed: %s", url, error)
        await asyncio.sleep(interval_s)

"""Server metrics scrape (``--server-metrics``): SGLang ``sglang:`` gauges, vLLM's load gauges
(``vllm:num_requests_running``/``waiting``, ``kv_cache_usage_perc``) and its ``vllm:spec_decode_*`` and
``generation_tokens`` counters turned into ``ServerSample``s. Server side, source + parse stage;
``samples_from_text`` is pure.

vLLM's counters are turned into interval values from the delta between two scrapes:
accept length = 1 + Δaccepted / Δdrafts, per-position acceptance = Δaccepted_per_pos / Δdrafts.
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

from ..ratelog import RateLimited
from ..records import ServerSample

log = logging.getLogger("specwatch")
WARN_EVERY_S = 60.0
MAX_SCRAPE_BYTES = 8 * 1024 * 1024  # vLLM's /metrics is ~650 lines; a runaway exposition is refused whole

SGLANG_GAUGES = {
    "sglang:spec_accept_length": "accept_length",
    "sglang:spec_accept_rate": "accept_rate",
    "sglang:gen_throughput": "gen_throughput",
    "sglang:num_running_reqs": "running",
    "sglang:num_queue_reqs": "queued",
    "sglang:token_usage": "token_usage",
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


RANGES = {"accept_length": (0.0, 64.0), "accept_rate": (0.0, 1.0), "gen_throughput": (0.0, 1e12),
          "running": (0.0, 2.0**53), "queued": (0.0, 2.0**53), "token_usage": (0.0, 1.5)}
MAX_DP_RANKS = 64  # beyond that, one "other" series: a scrape cannot add unbounded series
MAX_POSITIONS = 64


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


def samples_from_text(text: str, state: ScrapeState, now_s: float | None = None) -> list[ServerSample]:
    """Samples from one scrape. With ``now_s`` (the scrape's monotonic time) vLLM's generation counter is
    turned into tok/s over the time since the previous scrape."""
    sg: dict[str, dict[str, float]] = defaultdict(dict)
    counters: dict[str, float] = defaultdict(float)
    per_pos: dict[str, float] = defaultdict(float)
    gen: dict[str, float] = defaultdict(float)
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            v = s.value
            if s.name in SGLANG_GAUGES or s.name in VLLM_GAUGES:
                key = SGLANG_GAUGES.get(s.name) or VLLM_GAUGES[s.name]
                lo, hi = RANGES[key]
                rank = s.labels.get("dp_rank", s.labels.get("engine", "0"))
                if math.isfinite(v) and lo <= v <= hi:
                    sg[dp_label(rank)][key] = v
                else:
                    state.rejected += 1
            elif s.name == VLLM_GENERATION:
                if math.isfinite(v) and 0 <= v <= 2.0**53:
                    gen[dp_label(s.labels.get("engine", "0"))] += v
                else:
                    state.rejected += 1
            elif s.name.endswith("_total") and (s.name.removesuffix("_total") in VLLM_COUNTERS
                                                 or s.name == VLLM_PER_POS + "_total"):
                pos = s.labels.get("position", "0")
                if not (math.isfinite(v) and 0 <= v <= 2.0**53) or (
                        s.name == VLLM_PER_POS + "_total" and not (pos.isascii() and pos.isdigit()
                                                                   and int(pos) < MAX_POSITIONS)):
                    state.rejected += 1
                elif s.name == VLLM_PER_POS + "_total":
                    per_pos[str(int(pos))] += v
                else:
                    counters[s.name.removesuffix("_total")] += v
    if gen and now_s is not None:
        dt = now_s - state.prev_s if state.prev_s is not None else 0.0
        for dp, total in gen.items():
            before = state.prev_gen.get(dp)
            if before is not None and dt > 0 and total >= before:  # a counter that went back: a new server
                sg[dp]["gen_throughput"] = (total - before) / dt
        state.prev_gen, state.prev_s = dict(gen), now_s
    out = []
    for dp, g in sorted(sg.items()):
        al = g.get("accept_length")
        out.append(ServerSample(
            source="scrape", dp_rank=dp, accept_length=al if al else None, accept_rate=g.get("accept_rate"),
            gen_throughput=g.get("gen_throughput"),
            running=int(g["running"]) if "running" in g else None,
            queued=int(g["queued"]) if "queued" in g else None, token_usage=g.get("token_usage")))
    if counters:
        d = {k: counters[k] - state.prev.get(k, 0.0) for k in counters}
        dpos = {p: per_pos[p] - state.prev_pos.get(p, 0.0) for p in per_pos}
        drafts = d.get("vllm:spec_decode_num_drafts", 0.0)
        restarted = any(x < 0 for x in (*d.values(), *dpos.values()))  # counters went back: a new server
        if state.prev and drafts > 0 and not restarted:
            acc = d.get("vllm:spec_decode_num_accepted_tokens", 0.0)
            drafted = d.get("vllm:spec_decode_num_draft_tokens", 0.0)
            positions = tuple(dpos[p] / drafts for p in sorted(dpos, key=int))
            if any(p > 1.0 for p in positions) or acc / drafts > MAX_POSITIONS:
                state.rejected += 1
            else:
                spec: dict[str, Any] = {
                    "accept_length": 1.0 + acc / drafts, "accept_rate": min(1.0, acc / drafted) if drafted else None,
                    "accepted_tokens": int(acc), "drafted_tokens": int(drafted), "position_acceptance": positions}
                if len(out) == 1:  # one engine: its load and its speculation in one sample
                    out[0] = dataclasses.replace(out[0], **spec)
                else:
                    out.append(ServerSample(source="scrape", **spec))
        state.prev = dict(counters)
        state.prev_pos = dict(per_pos)
    return out


async def scrape_forever(session: aiohttp.ClientSession, url: str, interval_s: float, state: ScrapeState,
                         on_sample: Callable[[ServerSample], None], on_up: Callable[[bool], None]) -> None:
    """Scrape ``url`` every ``interval_s``; each attempt reports up or down, a failure is logged at most once
    per ``WARN_EVERY_S`` (never raised: a failing server is data)."""
    warn = RateLimited(log, WARN_EVERY_S)
    while True:
        error = ""
        try:
            async with session.get(url, allow_redirects=False) as resp:
                text = (await resp.content.read(MAX_SCRAPE_BYTES + 1)).decode("utf-8", "replace") \
                    if resp.status == 200 else ""
                if len(text) > MAX_SCRAPE_BYTES:
                    raise ValueError(f"more than {MAX_SCRAPE_BYTES} bytes")
                error = "" if resp.status == 200 else f"HTTP {resp.status}"
            for s in samples_from_text(text, state, time.monotonic()):
                on_sample(s)
        except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
            error = str(exc) or type(exc).__name__
        on_up(not error)
        if error:
            warn.warning("scrape", "scraping the server's %s failed: %s", url, error)
        await asyncio.sleep(interval_s)

"""Server metrics scrape (``--server-metrics``): SGLang ``sglang:`` gauges and vLLM ``vllm:spec_decode_*``
counters turned into ``ServerSample``s. Server side, source + parse stage; ``samples_from_text`` is pure.

vLLM's counters are turned into interval values from the delta between two scrapes:
accept length = 1 + Δaccepted / Δdrafts, per-position acceptance = Δaccepted_per_pos / Δdrafts.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from ..records import ServerSample

log = logging.getLogger("specwatch")
WARN_EVERY_S = 60.0

SGLANG_GAUGES = {
    "sglang:spec_accept_length": "accept_length",
    "sglang:spec_accept_rate": "accept_rate",
    "sglang:gen_throughput": "gen_throughput",
    "sglang:num_running_reqs": "running",
    "sglang:num_queue_reqs": "queued",
    "sglang:token_usage": "token_usage",
}
VLLM_COUNTERS = ("vllm:spec_decode_num_drafts", "vllm:spec_decode_num_draft_tokens",
                 "vllm:spec_decode_num_accepted_tokens")
VLLM_PER_POS = "vllm:spec_decode_num_accepted_tokens_per_pos"


@dataclass(slots=True)
class ScrapeState:
    """Previous vLLM counter values, to turn counters into interval rates."""

    prev: dict[str, float] = field(default_factory=dict)
    prev_pos: dict[str, float] = field(default_factory=dict)


def samples_from_text(text: str, state: ScrapeState) -> list[ServerSample]:
    sg: dict[str, dict[str, float]] = defaultdict(dict)
    counters: dict[str, float] = defaultdict(float)
    per_pos: dict[str, float] = defaultdict(float)
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name in SGLANG_GAUGES:
                sg[s.labels.get("dp_rank", "0")][SGLANG_GAUGES[s.name]] = s.value
            elif s.name.removesuffix("_total") in VLLM_COUNTERS and s.name.endswith("_total"):
                counters[s.name.removesuffix("_total")] += s.value
            elif s.name == VLLM_PER_POS + "_total":
                per_pos[s.labels.get("position", "0")] += s.value
    out = []
    for dp, v in sorted(sg.items()):
        al = v.get("accept_length")
        out.append(ServerSample(
            source="scrape", dp_rank=dp, accept_length=al if al else None, accept_rate=v.get("accept_rate"),
            gen_throughput=v.get("gen_throughput"),
            running=int(v["running"]) if "running" in v else None,
            queued=int(v["queued"]) if "queued" in v else None, token_usage=v.get("token_usage")))
    if counters:
        d = {k: counters[k] - state.prev.get(k, 0.0) for k in counters}
        drafts = d.get("vllm:spec_decode_num_drafts", 0.0)
        if state.prev and drafts > 0:
            acc = d.get("vllm:spec_decode_num_accepted_tokens", 0.0)
            drafted = d.get("vllm:spec_decode_num_draft_tokens", 0.0)
            positions = tuple((per_pos[p] - state.prev_pos.get(p, 0.0)) / drafts
                              for p in sorted(per_pos, key=int))
            out.append(ServerSample(source="scrape", accept_length=1.0 + acc / drafts,
                                    accept_rate=acc / drafted if drafted else None,
                                    accepted_tokens=int(acc), drafted_tokens=int(drafted),
                                    position_acceptance=positions))
        state.prev = dict(counters)
        state.prev_pos = dict(per_pos)
    return out


async def scrape_forever(session: aiohttp.ClientSession, url: str, interval_s: float,
                         on_sample: Callable[[ServerSample], None], on_up: Callable[[bool], None]) -> None:
    """Scrape ``url`` every ``interval_s``; each attempt reports up or down, a failure is logged at most once
    per ``WARN_EVERY_S`` (never raised: a failing server is data)."""
    state = ScrapeState()
    warned = -WARN_EVERY_S
    while True:
        error = ""
        try:
            async with session.get(url) as resp:
                text = await resp.text() if resp.status == 200 else ""
                error = "" if resp.status == 200 else f"HTTP {resp.status}"
            for s in samples_from_text(text, state):
                on_sample(s)
        except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
            error = str(exc) or type(exc).__name__
        on_up(not error)
        if error and time.monotonic() - warned >= WARN_EVERY_S:
            log.warning("scraping the server's %s failed: %s", url, error)
            warned = time.monotonic()
        await asyncio.sleep(interval_s)

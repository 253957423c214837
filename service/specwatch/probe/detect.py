"""What kind of server a URL is: SGLang (native API) or an OpenAI-compatible one, its model and whether it
speculates. Source stage; one ``ServerInfo`` per target at start."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from ..errors import TargetError
from .client import get_json
from .stream import Target

log = logging.getLogger("specwatch")

UNREACHABLE = (aiohttp.ClientError, TimeoutError)  # the target is down or restarting: retry, never a bug


@dataclass(frozen=True, slots=True)
class ServerInfo:
    api: str
    model: str = "default"
    speculative: bool | None = None  # None: the server does not say (OpenAI-only servers)
    info: dict[str, Any] = field(default_factory=dict)


def _first_model(models: Any) -> str:
    data = models.get("data") if isinstance(models, dict) else None
    if isinstance(data, list) and data and isinstance(data[0], dict):
        return str(data[0].get("id", "default"))
    return "default"


async def detect(session: aiohttp.ClientSession, base_url: str, api: str = "auto") -> ServerInfo:
    """SGLang if ``/get_server_info`` answers with server args, else OpenAI if ``/v1/models`` answers.

    Raises one of ``UNREACHABLE`` when the server cannot be reached, ``TargetError`` when it answers as
    neither."""
    info = await get_json(session, base_url + "/get_server_info")
    sglang = isinstance(info, dict) and ("speculative_algorithm" in info or "version" in info)
    models = await get_json(session, base_url + "/v1/models")
    if api == "auto":
        if sglang:
            api = "sglang"
        elif models is not None:
            api = "completions"
        else:
            raise TargetError(f"{base_url} answers neither /get_server_info (SGLang) nor /v1/models (OpenAI)")
    spec = bool(info.get("speculative_algorithm")) if sglang and isinstance(info, dict) else None
    return ServerInfo(api=api, model=_first_model(models), speculative=spec,
                      info=info if isinstance(info, dict) else {})


async def lifetime_accept_length(session: aiohttp.ClientSession, info: ServerInfo, base_url: str) -> float | None:
    """SGLang's own running average accept length (``internal_states[0].avg_spec_accept_length``)."""
    if info.api != "sglang":
        return None
    for path in ("/server_info", "/get_server_info"):
        try:
            doc = await get_json(session, base_url + path)
        except (*UNREACHABLE, TargetError):
            continue
        if not isinstance(doc, dict):
            continue
        states = doc.get("internal_states") or [doc]
        v = states[0].get("avg_spec_accept_length") if isinstance(states, list) and isinstance(states[0], dict) \
            else None
        return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None
    return None


async def wait_for_target(session: aiohttp.ClientSession, name: str, url: str, api: str, stop: asyncio.Event,
                          on_up: Callable[[str, bool], None], max_delay_s: float = 5.0) -> Target | None:
    """Detect ``url`` until it answers (backing off up to ``max_delay_s``), reporting up/down through ``on_up``.
    With a fixed ``api`` the first failure is enough: the probes themselves will say when it comes up.
    None when ``stop`` is set first."""
    delay = 1.0
    while True:
        try:
            info = await detect(session, url, api)
        except (*UNREACHABLE, TargetError) as exc:
            on_up(name, False)
            log.warning("target %s (%s) not reachable yet: %s", name, url, exc or type(exc).__name__)
            if api != "auto":
                return Target(name, url, api)
            try:
                await asyncio.wait_for(stop.wait(), delay)
                return None
            except TimeoutError:
                delay = min(max_delay_s, delay * 2)
            continue
        on_up(name, True)
        log.info("target %s: %s api=%s model=%s speculative=%s", name, url, info.api, info.model, info.speculative)
        return Target(name, url, info.api, info.model)

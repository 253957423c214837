"""What kind of server a URL is: SGLang (native API), vLLM or another OpenAI-compatible one, its model and
whether it speculates. Source stage; one ``ServerInfo`` per target at start.

vLLM says nothing of its speculative config over HTTP, but its ``/metrics`` does: the ``vllm:spec_decode_*``
counters exist only with a speculative config, and ``…_per_pos_total`` has one ``position`` per draft token."""

from __future__ import annotations

import asyncio
import logging
import math
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from ..errors import AuthError, TargetError
from ..records import (
    MAX_ACCEPT_LENGTH,
    Api,
    ApiChoice,
    Outcome,
    RequestRecord,
    ServerKind,
    TargetName,
    vllm_accept_length,
)
from ..redaction import REDACTED, scrub
from .client import get_json, get_text
from .stream import Target

log = logging.getLogger("specwatch")

UNREACHABLE = (aiohttp.ClientError, TimeoutError)  # the target is down or restarting: retry, never a bug


@dataclass(frozen=True, slots=True)
class ServerInfo:
    api: Api
    model: str = "default"
    speculative: bool | None = None  # None: the server does not say (OpenAI-only servers)
    info: dict[str, Any] = field(default_factory=dict)  # SGLang's server args, or vLLM's engine/version/k
    engine: ServerKind = "openai"


VLLM_DRAFTS = "vllm:spec_decode_num_drafts_total"
VLLM_ACCEPTED = "vllm:spec_decode_num_accepted_tokens_total"
VLLM_PER_POS = "vllm:spec_decode_num_accepted_tokens_per_pos_total"


def vllm_speculation(text: str) -> tuple[int, float | None]:
    """From a vLLM ``/metrics`` text: (draft tokens per round k, 0 without speculation; lifetime mean
    acceptance length 1 + accepted / drafts, None before the first draft). Pure; reads three series only."""
    positions: set[int] = set()
    drafts = accepted = 0.0
    for line in text.splitlines():
        if not line.startswith("vllm:spec_decode_num_"):
            continue
        name, _, rest = line.partition("{")
        value = rest.rpartition("}")[2].split()
        try:
            v = float(value[0]) if value else math.nan
        except ValueError:
            continue
        if not math.isfinite(v) or v < 0:
            continue
        if name == VLLM_PER_POS:
            m = re.search(r'position="(\d{1,3})"', rest)
            if m and int(m.group(1)) < MAX_ACCEPT_LENGTH:
                positions.add(int(m.group(1)))
        elif name == VLLM_DRAFTS:
            drafts += v
        elif name == VLLM_ACCEPTED:
            accepted += v
    k = max(positions) + 1 if positions else 0
    return k, vllm_accept_length(accepted, drafts)


def speculation_of(engine: ServerKind, server_info: dict[str, Any]) -> tuple[int, int]:
    """(draft steps, draft tokens per verify) from a ``ServerInfo.info``; (0, 1) for plain decoding or when the
    server does not say."""
    if engine == "vllm" or "num_speculative_tokens" in server_info:
        k = int(server_info.get("num_speculative_tokens") or 0)
        return k, k + 1
    if server_info.get("speculative_algorithm"):
        return int(server_info.get("speculative_num_steps") or 0), \
            int(server_info.get("speculative_num_draft_tokens") or 1)
    return 0, 1


def _sglang_info(info: Any) -> bool:
    return isinstance(info, dict) and ("speculative_algorithm" in info or "version" in info)


def _first_model(models: Any) -> str:
    data = models.get("data") if isinstance(models, dict) else None
    if isinstance(data, list) and data and isinstance(data[0], dict):
        return str(data[0].get("id", "default"))
    return "default"


async def detect(session: aiohttp.ClientSession, base_url: str, api: ApiChoice = "auto") -> ServerInfo:
    """SGLang if ``/server_info`` (SGLang 0.5.6+; before it ``/get_server_info``) answers with server args, else
    OpenAI if ``/v1/models`` answers. ``/server_info`` is asked first: 0.5.23 logs a deprecation warning on
    every ``/get_server_info`` (``entrypoints/http_server.py:853-860``), and vLLM's dev-mode ``/server_info``
    holds neither key read here.

    Raises one of ``UNREACHABLE`` when the server cannot be reached, ``TargetError`` when it answers as
    neither."""
    info = await get_json(session, base_url + "/server_info")
    if not _sglang_info(info):
        info = await get_json(session, base_url + "/get_server_info")
    sglang = _sglang_info(info)
    models = await get_json(session, base_url + "/v1/models")
    if api == "auto":
        if sglang:
            api = "sglang"
        elif models is not None:
            api = "completions"
        else:
            raise TargetError(f"{base_url} answers neither /server_info or /get_server_info (SGLang) nor /v1/models "
                              "(OpenAI)")
    if sglang and isinstance(info, dict):
        return ServerInfo(api=api, model=_first_model(models), speculative=bool(info.get("speculative_algorithm")),
                          info=without_secrets(info), engine="sglang")
    if _owned_by(models) == "vllm":
        version = await get_json(session, base_url + "/version")
        status, metrics = await get_text(session, base_url + "/metrics")
        k, _ = vllm_speculation(metrics) if status == 200 else (0, None)
        vinfo: dict[str, Any] = {"engine": "vllm", "num_speculative_tokens": k}
        if isinstance(version, dict) and isinstance(version.get("version"), str):
            vinfo["version"] = version["version"][:40]
        return ServerInfo(api=api, model=_first_model(models), speculative=bool(k) if status == 200 else None,
                          info=vinfo, engine="vllm")
    return ServerInfo(api=api, model=_first_model(models))


# a name that ends in a secret's word: api_key, admin_api_key, hf_token; not num_draft_tokens or ssl_keyfile
SECRET_FIELD = re.compile(r"(?i)(?:^|_)(?:api_?key|key|token|secret|password|passwd|credentials?)$")


def without_secrets(info: dict[str, Any]) -> dict[str, Any]:
    """A server's own settings (SGLang's server args hold its ``api_key``) with every secret-looking field's
    value replaced, since they are written to results files and shown."""
    return {k: REDACTED if v and SECRET_FIELD.search(str(k)) else v for k, v in info.items()}


def _owned_by(models: Any) -> str:
    data = models.get("data") if isinstance(models, dict) else None
    if isinstance(data, list) and data and isinstance(data[0], dict):
        return str(data[0].get("owned_by", ""))
    return ""


async def lifetime_accept_length(session: aiohttp.ClientSession, info: ServerInfo, base_url: str) -> float | None:
    """The server's own lifetime accept length: SGLang's ``internal_states[0].avg_spec_accept_length``, vLLM's
    1 + accepted / drafts from its counters."""
    if info.engine == "vllm":
        try:
            status, text = await get_text(session, base_url + "/metrics")
        except (*UNREACHABLE, TargetError):
            return None
        return vllm_speculation(text)[1] if status == 200 else None
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


def detection_failure(name: TargetName, t0_ns: int, exc: BaseException) -> RequestRecord:
    """A detection attempt the target refused (``connect_error``) or let time out (``timeout``), as the failed
    probe it stands for. Its API is not known yet: the OpenAI one, which detection asks last."""
    now = time.monotonic_ns()
    outcome = Outcome.TIMEOUT if isinstance(exc, TimeoutError) else Outcome.CONNECT_ERROR
    return RequestRecord(api="completions", target=name, prompt_id="detect", domain="detect", warmup=False,
                         intended_ns=t0_ns, sent_ns=t0_ns, done_ns=now, chunk_ns=(), chunk_tokens=(),
                         tokens_exact=True, prompt_tokens=0, output_tokens=0, outcome=outcome,
                         error=f"detecting the API: {exc or type(exc).__name__}")


async def wait_for_target(session: aiohttp.ClientSession, name: TargetName, url: str, api: ApiChoice,
                          stop: asyncio.Event,
                          on_up: Callable[[str, bool], None], max_delay_s: float = 5.0,
                          on_info: Callable[[str, ServerInfo], None] | None = None,
                          on_failed: Callable[[RequestRecord], None] | None = None) -> Target | None:
    """Detect ``url`` until it answers (backing off up to ``max_delay_s``), reporting up/down through ``on_up``
    and every attempt the target refused or let time out as a failed probe record (``on_failed``): a target
    that is down counts as down in the probe counts too, not as no traffic.
    With a fixed ``api`` the first failure is enough: the probes themselves will say when it comes up.
    None when ``stop`` is set first; ``AuthError`` at once when the target refuses the key."""
    delay = 1.0
    while True:
        t0 = time.monotonic_ns()
        try:
            info = await detect(session, url, api)
        except AuthError:
            raise  # a wrong or missing key: no retry mends it
        except (*UNREACHABLE, TargetError) as exc:
            if on_failed is not None and isinstance(exc, aiohttp.ClientConnectorError | TimeoutError):
                on_failed(detection_failure(name, t0, exc))
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
        if on_info is not None:
            on_info(name, info)
        log.info("target %s: %s api=%s model=%s speculative=%s", name, url, info.api, scrub(info.model[:200]),
                 info.speculative)
        return Target(name, url, info.api, info.model)

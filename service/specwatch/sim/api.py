"""The simulator's HTTP interface: SGLang's native and OpenAI-compatible routes on the wire.

Request validation and response shapes follow shared/reference/sglang.md §2–4 (0.5.2x shapes).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import orjson
from aiohttp import web

from .engine import Engine, SimRequest, Snapshot
from .text import count_prompt_tokens

MAX_NEW_TOKENS_LIMIT = 32_768
RECEIVED_NS = "specwatch.received_ns"
SSE_HEADERS = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}


class BadRequest(Exception):
    pass


@dataclass(frozen=True, slots=True)
class ServerIdentity:
    model_path: str
    served_model_name: str
    version: str
    server_args: dict[str, Any]


def _json(obj: Any, status: int = 200) -> web.Response:
    return web.Response(body=orjson.dumps(obj), status=status, content_type="application/json")


async def _read_json(request: web.Request) -> dict[str, Any]:
    try:
        body = orjson.loads(await request.read())
    except orjson.JSONDecodeError as exc:
        raise BadRequest(f"invalid JSON body: {exc}") from None
    if not isinstance(body, dict):
        raise BadRequest("request body must be a JSON object")
    return body


def _number(d: dict[str, Any], key: str, default: float, kind: type = float) -> Any:
    v = d.get(key, default)
    if v is None:
        return default
    if isinstance(v, bool) or not isinstance(v, (int, float)) or (kind is int and not float(v).is_integer()):
        raise BadRequest(f"{key} must be {'an integer' if kind is int else 'a number'}, got {v!r}")
    return kind(v)


def _max_tokens(d: dict[str, Any], key: str, default: int) -> int:
    n = _number(d, key, default, int)
    if n <= 0 or n > MAX_NEW_TOKENS_LIMIT:
        raise BadRequest(f"{key} must be between 1 and {MAX_NEW_TOKENS_LIMIT}, got {n}")
    return int(n)


def _bool(d: dict[str, Any], key: str, default: bool = False) -> bool:
    v = d.get(key, default)
    if v is None:
        return default
    if not isinstance(v, bool):
        raise BadRequest(f"{key} must be a boolean, got {v!r}")
    return v


@web.middleware
async def received_at(request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
                      ) -> web.StreamResponse:
    """Stamp the request as early as the server sees it: the simulator's truth starts here."""
    request[RECEIVED_NS] = time.monotonic_ns()
    return await handler(request)


class SimAPI:
    def __init__(self, engine: Engine, ident: ServerIdentity, metrics_render: Callable[[], bytes] | None) -> None:
        self.engine = engine
        self.ident = ident
        self.metrics_render = metrics_render

    def routes(self, app: web.Application) -> None:
        app.middlewares.append(received_at)
        app.router.add_route("POST", "/generate", self.generate)
        app.router.add_route("PUT", "/generate", self.generate)
        app.router.add_post("/v1/completions", self.completions)
        app.router.add_post("/v1/chat/completions", self.chat)
        app.router.add_get("/v1/models", self.models)
        app.router.add_get("/health", self.health)
        app.router.add_get("/health_generate", self.health)
        for path in ("/get_model_info", "/model_info"):
            app.router.add_get(path, self.model_info)
        for path in ("/get_server_info", "/server_info"):
            app.router.add_get(path, self.server_info)
        app.router.add_post("/flush_cache", self.flush_cache)
        if self.metrics_render is not None:
            app.router.add_get("/metrics", self.metrics)

    # ---- info --------------------------------------------------------------------------------
    async def health(self, request: web.Request) -> web.Response:
        return web.Response(status=200)

    async def model_info(self, request: web.Request) -> web.Response:
        return _json({"model_path": self.ident.model_path, "tokenizer_path": self.ident.model_path,
                      "is_generation": True, "preferred_sampling_params": None, "weight_version": "default"})

    async def server_info(self, request: web.Request) -> web.Response:
        e = self.engine
        state: dict[str, Any] = {"last_gen_throughput": e.last_gen_throughput, "load": len(e.running) + len(e.waiting)}
        if e.avg_spec_accept_length is not None:
            state["avg_spec_accept_length"] = e.avg_spec_accept_length
        info = dict(self.ident.server_args)
        info.update({"version": self.ident.version, "max_total_num_tokens": e.s.profile.max_total_tokens,
                     "internal_states": [state]})
        return _json(info)

    async def models(self, request: web.Request) -> web.Response:
        name = self.ident.served_model_name
        return _json({"object": "list", "data": [{"id": name, "object": "model", "created": int(time.time()),
                                                  "owned_by": "sglang", "root": name, "max_model_len": 131072}]})

    async def flush_cache(self, request: web.Request) -> web.Response:
        self.engine.flush_cache()
        return web.Response(text="Cache flushed.\nPlease check backend logs for more details. (When there are "
                                 "running or waiting requests, the operation will not be performed.)\n")

    async def metrics(self, request: web.Request) -> web.Response:
        assert self.metrics_render is not None
        return web.Response(body=self.metrics_render(), headers={"Content-Type": "text/plain; version=0.0.4"})

    # ---- generation --------------------------------------------------------------------------
    def _new_request(self, request: web.Request, prompt: str, prompt_tokens: int, max_new: int, ignore_eos: bool,
                     temperature: float, stream_interval: int | None, rid: str | None) -> SimRequest:
        req = SimRequest(rid=rid or uuid.uuid4().hex, prompt=prompt, prompt_tokens=prompt_tokens,
                         max_new_tokens=max_new, ignore_eos=ignore_eos, temperature=temperature,
                         stream_interval=stream_interval or self.engine.s.stream_interval,
                         arrival_ns=request[RECEIVED_NS])
        self.engine.submit(req)
        return req

    async def _drive(self, req: SimRequest, on_snap: Callable[[Snapshot], Awaitable[None]] | None) -> Snapshot:
        """Feed coalesced snapshots to ``on_snap`` until the request finishes; abort it if the consumer fails
        (a client that disconnects mid-stream frees its batch slot)."""
        try:
            while True:
                snap = await req.queue.get()
                while not req.queue.empty():
                    snap = req.queue.get_nowait()
                if on_snap is not None:
                    await on_snap(snap)
                if snap.finished:
                    return snap
        finally:
            if req.finish_reason is None:
                self.engine.abort(req)

    def _meta(self, req: SimRequest, snap: Snapshot) -> dict[str, Any]:
        meta: dict[str, Any] = {
            "id": req.rid, "finish_reason": snap.finish_reason, "prompt_tokens": req.prompt_tokens,
            "weight_version": "default", "num_retractions": 0, "reasoning_tokens": 0,
            "completion_tokens": snap.completion_tokens, "cached_tokens": 0,
        }
        if snap.finished:
            meta["e2e_latency"] = round((req.last_ns - req.arrival_ns) / 1e9, 6)
            spec = self.engine.s.spec
            if spec.enabled and req.verify_ct > 0:
                proposed = req.verify_ct * (spec.num_draft_tokens - 1)
                meta.update({
                    "spec_accept_rate": req.accepted_drafts / proposed if proposed else 0.0,
                    "spec_accept_length": req.completion_tokens / req.verify_ct,
                    "spec_num_correct_drafts": req.accepted_drafts,
                    "spec_num_proposed_drafts": proposed,
                    "spec_verify_ct": req.verify_ct,
                    "spec_correct_drafts_histogram": list(req.hist),
                })
        return meta

    async def generate(self, request: web.Request) -> web.StreamResponse:
        try:
            body = await _read_json(request)
            text = body.get("text")
            ids = body.get("input_ids")
            if isinstance(text, str):
                prompt, ptoks = text, count_prompt_tokens(text)
            elif isinstance(ids, list) and ids and all(isinstance(i, int) and not isinstance(i, bool) for i in ids):
                prompt, ptoks = " ".join(map(str, ids)), len(ids)
            else:
                raise BadRequest("either text (a string) or input_ids (a non-empty list of integers) is required")
            sp = body.get("sampling_params") or {}
            if not isinstance(sp, dict):
                raise BadRequest("sampling_params must be an object")
            max_new = _max_tokens(sp, "max_new_tokens", 128)
            temperature = _number(sp, "temperature", 1.0)
            ignore_eos = _bool(sp, "ignore_eos")
            interval = sp.get("stream_interval")
            if interval is not None and (not isinstance(interval, int) or interval < 1):
                raise BadRequest("stream_interval must be a positive integer")
            stream = _bool(body, "stream")
            rid = body.get("rid") if isinstance(body.get("rid"), str) else None
        except BadRequest as exc:
            return _json({"error": str(exc)}, 400)
        req = self._new_request(request, prompt, ptoks, max_new, ignore_eos, temperature, interval, rid)
        if not stream:
            last = await self._drive(req, None)
            return _json({"text": last.text, "meta_info": self._meta(req, last)})
        resp = web.StreamResponse(headers=SSE_HEADERS)
        await resp.prepare(request)

        async def write(snap: Snapshot) -> None:
            await resp.write(b"data: " + orjson.dumps({"text": snap.text, "meta_info": self._meta(req, snap)})
                             + b"\n\n")

        await self._drive(req, write)
        await resp.write(b"data: [DONE]\n\n")
        return resp

    async def completions(self, request: web.Request) -> web.StreamResponse:
        return await self._openai(request, chat=False)

    async def chat(self, request: web.Request) -> web.StreamResponse:
        return await self._openai(request, chat=True)

    def _openai_prompt(self, body: dict[str, Any], chat: bool) -> str:
        if chat:
            msgs = body.get("messages")
            if not isinstance(msgs, list) or not msgs or not all(
                    isinstance(m, dict) and isinstance(m.get("content"), str) for m in msgs):
                raise BadRequest("messages must be a non-empty list of {role, content} objects")
            return "\n".join(f"<|{m.get('role', 'user')}|>{m['content']}" for m in msgs) + "\n<|assistant|>"
        prompt = body.get("prompt")
        if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
            prompt = prompt[0]
        if not isinstance(prompt, str):
            raise BadRequest("prompt must be a string")
        return prompt

    async def _openai(self, request: web.Request, chat: bool) -> web.StreamResponse:
        try:
            body = await _read_json(request)
            prompt = self._openai_prompt(body, chat)
            key = "max_completion_tokens" if chat and body.get("max_completion_tokens") is not None else "max_tokens"
            max_new = _max_tokens(body, key, 16 if not chat else 2048)
            temperature = _number(body, "temperature", 1.0)
            ignore_eos = _bool(body, "ignore_eos")
            stream = _bool(body, "stream")
            so = body.get("stream_options") or {}
            if not isinstance(so, dict):
                raise BadRequest("stream_options must be an object")
            include_usage = _bool(so, "include_usage")
            continuous = _bool(so, "continuous_usage_stats")
        except BadRequest as exc:
            return _json({"object": "error", "message": str(exc), "type": "BadRequestError", "param": None,
                          "code": 400}, 400)
        req = self._new_request(request, prompt, count_prompt_tokens(prompt), max_new, ignore_eos, temperature,
                                None, None)
        oid = ("chatcmpl-" if chat else "cmpl-") + req.rid
        created = int(time.time())
        model = self.ident.served_model_name
        obj = "chat.completion.chunk" if chat else "text_completion"

        def usage(done: int) -> dict[str, int]:
            return {"prompt_tokens": req.prompt_tokens, "completion_tokens": done,
                    "total_tokens": req.prompt_tokens + done}

        def reason(snap: Snapshot) -> str | None:
            if not snap.finished or snap.finish_reason is None:
                return None
            return "length" if snap.finish_reason["type"] == "length" else "stop"

        if not stream:
            last = await self._drive(req, None)
            choice: dict[str, Any] = {"index": 0, "finish_reason": reason(last), "logprobs": None}
            if chat:
                choice["message"] = {"role": "assistant", "content": last.text, "reasoning_content": None,
                                     "tool_calls": None}
            else:
                choice["text"] = last.text
                choice["matched_stop"] = None
            return _json({"id": oid, "object": "chat.completion" if chat else "text_completion",
                          "created": created, "model": model, "choices": [choice],
                          "usage": usage(last.completion_tokens)})

        resp = web.StreamResponse(headers=SSE_HEADERS)
        await resp.prepare(request)

        async def send(choices: list[dict[str, Any]], use: dict[str, int] | None) -> None:
            chunk = {"id": oid, "object": obj, "created": created, "model": model, "choices": choices,
                     "usage": use}
            await resp.write(b"data: " + orjson.dumps(chunk) + b"\n\n")

        if chat:
            await send([{"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": None,
                         "finish_reason": None}], usage(0) if continuous else None)
        offset = 0

        async def write(snap: Snapshot) -> None:
            nonlocal offset
            delta, offset = snap.text[offset:], len(snap.text)
            use = usage(snap.completion_tokens) if continuous else None
            fin = reason(snap)
            if chat:
                await send([{"index": 0, "delta": {"content": delta}, "logprobs": None, "finish_reason": None}], use)
                if fin is not None:
                    await send([{"index": 0, "delta": {}, "logprobs": None, "finish_reason": fin}], use)
            else:
                await send([{"index": 0, "text": delta, "logprobs": None, "finish_reason": fin,
                             "matched_stop": None}], use)

        final = await self._drive(req, write)
        if include_usage:
            await send([], usage(final.completion_tokens))
        await resp.write(b"data: [DONE]\n\n")
        return resp


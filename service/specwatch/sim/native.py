"""The simulator's SGLang-native routes: ``/generate`` (streamed and not), health and info endpoints,
``/flush_cache`` and ``/metrics``."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import orjson
from aiohttp import web

from .engine import Engine, SimRequest, Snapshot
from .faults import FaultPlan, FaultyStream, http_status
from .text import count_prompt_tokens
from .wire import (
    SSE_HEADERS,
    BadRequest,
    Handlers,
    ServerIdentity,
    boolean,
    json_response,
    max_tokens,
    number,
    read_json,
)

# 0.5.23 logs a warning on every call of an old name, then answers as the new one (entrypoints/http_server.py:
# 802-810, 853-860)
DEPRECATED = {"/get_model_info": "/model_info", "/get_server_info": "/server_info"}


def deprecation(old: str) -> str:
    return (f"Endpoint '{old}' is deprecated and will be removed in a future version. "
            f"Please use '{DEPRECATED[old]}' instead.")


class NativeAPI(Handlers):
    def __init__(self, engine: Engine, ident: ServerIdentity, metrics_render: Callable[[], bytes] | None,
                 faults: FaultPlan | None = None, warn: Callable[[str], None] = lambda msg: None) -> None:
        super().__init__(engine, ident, faults)
        self.metrics_render = metrics_render
        self.warn = warn

    def routes(self, app: web.Application) -> None:
        app.router.add_route("POST", "/generate", self.generate)
        app.router.add_route("PUT", "/generate", self.generate)
        app.router.add_get("/health", self.health)
        app.router.add_get("/health_generate", self.health)
        app.router.add_get("/model_info", self.model_info)
        app.router.add_get("/server_info", self.server_info)
        app.router.add_get("/get_model_info", self._deprecated("/get_model_info", self.model_info))
        app.router.add_get("/get_server_info", self._deprecated("/get_server_info", self.server_info))
        app.router.add_post("/flush_cache", self.flush_cache)
        if self.metrics_render is not None:
            app.router.add_get("/metrics", self.metrics)

    # ---- info --------------------------------------------------------------------------------
    def _deprecated(self, old: str, handler: Callable[[web.Request], Awaitable[web.Response]]
                    ) -> Callable[[web.Request], Awaitable[web.Response]]:
        async def answer(request: web.Request) -> web.Response:
            self.warn(deprecation(old))
            return await handler(request)
        return answer

    async def health(self, request: web.Request) -> web.Response:
        return web.Response(status=200)

    async def model_info(self, request: web.Request) -> web.Response:
        return json_response({"model_path": self.ident.model_path, "tokenizer_path": self.ident.model_path,
                      "is_generation": True, "preferred_sampling_params": None, "weight_version": "default"})

    async def server_info(self, request: web.Request) -> web.Response:
        e = self.engine
        state: dict[str, Any] = {"last_gen_throughput": e.log.last_gen_throughput,
                                 "load": len(e.running) + len(e.waiting)}
        if e.log.avg_spec_accept_length is not None:
            state["avg_spec_accept_length"] = e.log.avg_spec_accept_length
        info = dict(self.ident.server_args)
        info.update({"version": self.ident.version, "max_total_num_tokens": e.s.profile.max_total_tokens,
                     "internal_states": [state]})
        return json_response(info)


    async def flush_cache(self, request: web.Request) -> web.Response:
        self.engine.flush_cache()
        return web.Response(text="Cache flushed.\nPlease check backend logs for more details. (When there are "
                                 "running or waiting requests, the operation will not be performed.)\n")

    async def metrics(self, request: web.Request) -> web.Response:
        assert self.metrics_render is not None
        return web.Response(body=self.metrics_render(), headers={"Content-Type": "text/plain; version=0.0.4"})

    # ---- generation --------------------------------------------------------------------------
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
                proposed = req.draft_tokens
                meta.update({
                    "spec_accept_rate": req.accepted_drafts / proposed if proposed else 0.0,
                    "spec_accept_length": req.completion_tokens / req.verify_ct,
                    "spec_num_correct_drafts": req.accepted_drafts,
                    "spec_num_proposed_drafts": proposed,
                    "spec_verify_ct": req.verify_ct,
                    "spec_correct_drafts_histogram": list(req.hist),
                })
        return meta

    async def _refuse(self, request: web.Request, message: str, stream: bool) -> web.StreamResponse:
        """A request SGLang's tokenizer manager refuses (ValueError): 400 ``{"error": {"message"}}``
        (entrypoints/http_server.py:983-990, 2246-2250), or when streamed HTTP 200 with one error event and
        ``[DONE]`` (http_server.py:957-975)."""
        if not stream:
            return json_response({"error": {"message": message}}, 400)
        resp = web.StreamResponse(headers=SSE_HEADERS)
        await resp.prepare(request)
        error = {"message": message, "type": "invalid_request_error", "code": 400, "retryable": False}
        await resp.write(b"data: " + orjson.dumps({"error": error}) + b"\n\ndata: [DONE]\n\n")
        return resp

    async def generate(self, request: web.Request) -> web.StreamResponse:
        try:
            body = await read_json(request)
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
            max_new = max_tokens(sp, "max_new_tokens", 128)
            temperature = number(sp, "temperature", 1.0)
            ignore_eos = boolean(sp, "ignore_eos")
            interval = sp.get("stream_interval")
            if interval is not None and (not isinstance(interval, int) or interval < 1):
                raise BadRequest("stream_interval must be a positive integer")
            stream = boolean(body, "stream")
            rid = body.get("rid") if isinstance(body.get("rid"), str) else None
        except BadRequest as exc:
            return json_response({"error": str(exc)}, 400)
        if (refused := self.ident.over_context(ptoks)) is not None:
            return await self._refuse(request, refused, stream)
        fault = self.faults.take()
        if (status := http_status(fault)) is not None:
            return json_response({"error": f"injected fault: HTTP {status}"}, status)
        req = self.new_request(request, prompt, ptoks, max_new, ignore_eos, temperature, interval, rid)
        if not stream:
            last = await self.drive(req, None)
            return json_response({"text": last.text, "meta_info": self._meta(req, last)})
        resp = web.StreamResponse(headers=SSE_HEADERS)
        await resp.prepare(request)
        out = FaultyStream(request, resp, fault, self.faults)

        async def write(snap: Snapshot) -> None:
            await out.write(b"data: " + orjson.dumps({"text": snap.text, "meta_info": self._meta(req, snap)})
                             + b"\n\n")

        await self.drive(req, write)
        await out.write(b"data: [DONE]\n\n")
        return resp


"""The simulator's vLLM surface: ``/v1/completions`` and ``/v1/chat/completions`` streamed chunk for chunk as
vLLM's OpenAI server streams them, ``/v1/models``, ``/health``, ``/version`` and ``/metrics``.

Shapes are vLLM 0.32/0.33's (the reference's verbatim streams; tests/integration/test_sim_vllm.py pins
them): one chunk per engine step, so a chunk carries every token a verify round accepted; the chat stream's
first chunk carries only the role, sent with the first token; ``stream_options.include_usage`` adds a final
chunk with ``choices: []`` and the usage, ``continuous_usage_stats`` adds the usage to every chunk; with
``--per-request-spec-decode-metrics`` the usage chunk carries ``metrics.speculative_decoding``. There is no
``/generate`` and no ``/get_server_info`` (404, as on vLLM).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import orjson
from aiohttp import web

from .engine import Engine, SimRequest, Snapshot
from .faults import FaultPlan, FaultyStream, http_status
from .openai import OpenAIParams, finish_reason
from .text import count_prompt_tokens
from .wire import SSE_HEADERS, BadRequest, Handlers, ServerIdentity, json_response, read_json, received_at

SSE = {**SSE_HEADERS, "Content-Type": "text/event-stream; charset=utf-8"}
NULLS = {"prompt_token_ids": None, "token_ids": None}


def error(message: str, status: int, kind: str = "BadRequestError") -> web.Response:
    return json_response({"error": {"message": message, "type": kind, "param": None, "code": status}}, status)


class VLLMAPI(Handlers):
    def __init__(self, engine: Engine, ident: ServerIdentity, metrics_render: Callable[[], bytes] | None,
                 faults: FaultPlan | None = None, spec_metrics: str = "none", max_model_len: int = 4096) -> None:
        super().__init__(engine, ident, faults)
        self.metrics_render = metrics_render
        self.spec_metrics = spec_metrics
        self.max_model_len = max_model_len
        self.fingerprint = f"vllm-{ident.version}-sim"

    def routes(self, app: web.Application) -> None:
        app.middlewares.append(received_at)
        app.router.add_post("/v1/completions", self.completions)
        app.router.add_post("/v1/chat/completions", self.chat)
        app.router.add_get("/v1/models", self.models)
        app.router.add_get("/health", self.health)
        app.router.add_get("/version", self.version)
        if self.metrics_render is not None:
            app.router.add_get("/metrics", self.metrics)

    async def health(self, request: web.Request) -> web.Response:
        return web.Response(status=200)

    async def version(self, request: web.Request) -> web.Response:
        return json_response({"version": self.ident.version})

    async def metrics(self, request: web.Request) -> web.Response:
        assert self.metrics_render is not None
        return web.Response(body=self.metrics_render(), headers={"Content-Type": "text/plain; version=0.0.4"})

    async def models(self, request: web.Request) -> web.Response:
        name = self.ident.served_model_name
        return json_response({"object": "list", "data": [{
            "id": name, "object": "model", "created": int(time.time()), "owned_by": "vllm",
            "root": self.ident.model_path, "parent": None, "max_model_len": self.max_model_len,
            "permission": []}]})

    async def completions(self, request: web.Request) -> web.StreamResponse:
        return await self._serve(request, chat=False)

    async def chat(self, request: web.Request) -> web.StreamResponse:
        return await self._serve(request, chat=True)

    def _usage(self, req: SimRequest, done: int) -> dict[str, int]:
        return {"prompt_tokens": req.prompt_tokens, "total_tokens": req.prompt_tokens + done,
                "completion_tokens": done}

    def _spec_metrics(self, req: SimRequest) -> dict[str, Any] | None:
        spec = self.engine.s.spec
        if self.spec_metrics == "none" or not spec.enabled or req.verify_ct == 0:
            return None
        drafted = req.draft_tokens
        return {"speculative_decoding": {
            "mean_acceptance_length": 1.0 + req.accepted_drafts / req.verify_ct,
            "draft_acceptance_rate": req.accepted_drafts / drafted if drafted else 0.0,
            "acceptance_histogram": list(req.hist), "num_spec_steps": req.verify_ct,
            "num_accepted_draft_tokens": req.accepted_drafts, "num_draft_tokens": drafted,
            "num_spec_tokens": spec.num_steps}}

    async def _serve(self, request: web.Request, chat: bool) -> web.StreamResponse:
        try:
            p = OpenAIParams.parse(await read_json(request), chat, 16 if not chat else self.max_model_len)
        except BadRequest as exc:
            return error(str(exc), 400)
        fault = self.faults.take()
        if (status := http_status(fault)) is not None:
            return error(f"injected fault: HTTP {status}", status, "Fault")
        req = self.new_request(request, p.prompt, count_prompt_tokens(p.prompt), p.max_new, p.ignore_eos,
                               p.temperature, None, None)
        oid = ("chatcmpl-" if chat else "cmpl-") + req.rid[:16]
        head = {"id": oid, "object": "chat.completion.chunk" if chat else "text_completion",
                "created": int(time.time()), "model": self.ident.served_model_name}
        if p.stream:
            return await self._stream(request, req, p, chat, head, fault)
        last = await self.drive(req, None)
        choice: dict[str, Any] = {"index": 0, "logprobs": None, "finish_reason": finish_reason(last),
                                  "stop_reason": None}
        if chat:
            choice["message"] = {"role": "assistant", "content": last.text, "refusal": None, "tool_calls": []}
        else:
            choice["text"] = last.text
        doc = {**head, "object": "chat.completion" if chat else "text_completion", "choices": [choice],
               "usage": self._usage(req, last.completion_tokens), "system_fingerprint": self.fingerprint}
        if (m := self._spec_metrics(req)) is not None:
            doc["metrics"] = m
        return json_response(doc)

    async def _stream(self, request: web.Request, req: SimRequest, p: OpenAIParams, chat: bool,
                      head: dict[str, Any], fault: str | None) -> web.StreamResponse:
        resp = web.StreamResponse(headers=SSE)
        await resp.prepare(request)
        out = FaultyStream(request, resp, fault, self.faults)
        continuous = p.include_usage and p.continuous
        offset = 0

        async def send(chunk: dict[str, Any]) -> None:
            await out.write(b"data: " + orjson.dumps(chunk) + b"\n\n")

        first = True

        async def write(snap: Snapshot) -> None:
            nonlocal offset, first
            delta, offset = snap.text[offset:], len(snap.text)
            use = {"usage": self._usage(req, snap.completion_tokens)} if continuous else {}
            fin = finish_reason(snap)
            stop = {"stop_reason": None} if fin is not None else {}
            if chat:
                if first:  # vLLM sends the role chunk with the first output, then that output's content
                    await send({**head, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""},
                                                     "logprobs": None, "finish_reason": None}],
                                "prompt_token_ids": None, "prompt_text": None,
                                **({"usage": self._usage(req, 0)} if continuous else {})})
                choice: dict[str, Any] = {"index": 0, "delta": {"content": delta}, "logprobs": None,
                                          "finish_reason": fin, **stop, "token_ids": None}
            else:
                choice = {"index": 0, "text": delta, "logprobs": None, "finish_reason": fin, "stop_reason": None,
                          **NULLS}
            first = False
            await send({**head, "choices": [choice], **use})

        final = await self.drive(req, write)
        if p.include_usage:
            tail: dict[str, Any] = {**head, "choices": [], "usage": self._usage(req, final.completion_tokens),
                                    "system_fingerprint": self.fingerprint}
            if (m := self._spec_metrics(req)) is not None:
                tail["metrics"] = m
            await send(tail)
        await out.write(b"data: [DONE]\n\n")
        return resp

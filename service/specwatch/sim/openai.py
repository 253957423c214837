"""The simulator's OpenAI-compatible routes: ``/v1/completions``, ``/v1/chat/completions`` and ``/v1/models``,
streamed chunk for chunk as SGLang does (``stream_options.include_usage`` / ``continuous_usage_stats``)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import orjson
from aiohttp import web

from .engine import SimRequest, Snapshot
from .faults import FaultyStream, http_status
from .text import count_prompt_tokens
from .wire import SSE_HEADERS, BadRequest, Handlers, boolean, json_response, max_tokens, number, read_json


def finish_reason(snap: Snapshot) -> str | None:
    """The OpenAI ``finish_reason`` of a snapshot: None until it finishes, then "length" or "stop"."""
    if not snap.finished or snap.finish_reason is None:
        return None
    return "length" if snap.finish_reason["type"] == "length" else "stop"


def openai_prompt(body: dict[str, Any], chat: bool) -> str:
    """The prompt text of a completions or chat body (messages joined by a simple role template)."""
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


@dataclass(frozen=True, slots=True)
class OpenAIParams:
    """The request fields both servers' OpenAI routes read, validated."""

    prompt: str
    max_new: int
    temperature: float
    ignore_eos: bool
    stream: bool
    include_usage: bool
    continuous: bool

    @classmethod
    def parse(cls, body: dict[str, Any], chat: bool, default_max: int) -> OpenAIParams:
        prompt = openai_prompt(body, chat)
        key = "max_completion_tokens" if chat and body.get("max_completion_tokens") is not None else "max_tokens"
        so = body.get("stream_options") or {}
        if not isinstance(so, dict):
            raise BadRequest("stream_options must be an object")
        return cls(prompt, max_tokens(body, key, default_max), number(body, "temperature", 1.0),
                   boolean(body, "ignore_eos"), boolean(body, "stream"), boolean(so, "include_usage"),
                   boolean(so, "continuous_usage_stats"))


class OpenAIAPI(Handlers):
    def routes(self, app: web.Application) -> None:
        app.router.add_post("/v1/completions", self.completions)
        app.router.add_post("/v1/chat/completions", self.chat)
        app.router.add_get("/v1/models", self.models)

    async def models(self, request: web.Request) -> web.Response:
        name = self.ident.served_model_name
        return json_response({"object": "list", "data": [{"id": name, "object": "model", "created": int(time.time()),
                                                  "owned_by": "sglang", "root": name,
                                                  "max_model_len": self.ident.context_length}]})
    async def completions(self, request: web.Request) -> web.StreamResponse:
        return await self._openai(request, chat=False)

    async def chat(self, request: web.Request) -> web.StreamResponse:
        return await self._openai(request, chat=True)

    async def _openai(self, request: web.Request, chat: bool) -> web.StreamResponse:
        try:
            p = OpenAIParams.parse(await read_json(request), chat, 16 if not chat else 2048)
        except BadRequest as exc:
            return json_response({"object": "error", "message": str(exc), "type": "BadRequestError", "param": None,
                          "code": 400}, 400)
        ptoks = count_prompt_tokens(p.prompt)
        if (refused := self.ident.over_context(ptoks)) is not None:
            # 400 streamed or not: the stream is kick-started before its 200 (openai/serving_chat.py:2424-2428,
            # serving_completions.py:208-212; the body from serving_base.py:205-221)
            return json_response({"object": "error", "message": refused, "type": "BadRequestError", "param": None,
                                  "code": 400}, 400)
        fault = self.faults.take()
        if (status := http_status(fault)) is not None:
            return json_response({"object": "error", "message": f"injected fault: HTTP {status}", "type": "Fault",
                                  "param": None, "code": status}, status)
        req = self.new_request(request, p.prompt, ptoks, p.max_new, p.ignore_eos, p.temperature, None, None)
        oid = ("chatcmpl-" if chat else "cmpl-") + req.rid
        if p.stream:
            return await self._stream(request, req, p, chat, oid, fault)
        last = await self.drive(req, None)
        choice: dict[str, Any] = {"index": 0, "finish_reason": finish_reason(last), "logprobs": None}
        if chat:
            choice["message"] = {"role": "assistant", "content": last.text, "reasoning_content": None,
                                 "tool_calls": None}
        else:
            choice["text"] = last.text
            choice["matched_stop"] = None
        return json_response({"id": oid, "object": "chat.completion" if chat else "text_completion",
                              "created": int(time.time()), "model": self.ident.served_model_name,
                              "choices": [choice], "usage": usage(req, last.completion_tokens)})

    async def _stream(self, request: web.Request, req: SimRequest, p: OpenAIParams, chat: bool, oid: str,
                      fault: str | None) -> web.StreamResponse:
        include_usage, continuous = p.include_usage, p.continuous and self.ident.continuous_usage
        created = int(time.time())
        model = self.ident.served_model_name
        obj = "chat.completion.chunk" if chat else "text_completion"
        resp = web.StreamResponse(headers=SSE_HEADERS)
        await resp.prepare(request)
        out = FaultyStream(request, resp, fault, self.faults)

        async def send(choices: list[dict[str, Any]], use: dict[str, int] | None) -> None:
            chunk = {"id": oid, "object": obj, "created": created, "model": model, "choices": choices,
                     "usage": use}
            await out.write(b"data: " + orjson.dumps(chunk) + b"\n\n")

        if chat:
            await send([{"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": None,
                         "finish_reason": None}], usage(req, 0) if continuous else None)
        offset = 0

        async def write(snap: Snapshot) -> None:
            nonlocal offset
            delta, offset = snap.text[offset:], len(snap.text)
            use = usage(req, snap.completion_tokens) if continuous else None
            fin = finish_reason(snap)
            if chat:
                await send([{"index": 0, "delta": {"content": delta}, "logprobs": None, "finish_reason": None}], use)
                if fin is not None:
                    await send([{"index": 0, "delta": {}, "logprobs": None, "finish_reason": fin}], use)
            else:
                await send([{"index": 0, "text": delta, "logprobs": None, "finish_reason": fin,
                             "matched_stop": None}], use)

        final = await self.drive(req, write)
        if include_usage:
            await send([], usage(req, final.completion_tokens))
        await out.write(b"data: [DONE]\n\n")
        return resp


def usage(req: SimRequest, done: int) -> dict[str, int]:
    return {"prompt_tokens": req.prompt_tokens, "completion_tokens": done, "total_tokens": req.prompt_tokens + done}

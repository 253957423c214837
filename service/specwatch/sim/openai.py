"""The simulator's OpenAI-compatible routes, ``/v1/completions``, ``/v1/chat/completions`` and ``/v1/models``: one
handler for both engines, streamed chunk for chunk (``stream_options.include_usage`` / ``continuous_usage_stats``).
What SGLang and vLLM send differently is data, ``flavours.py``; vLLM's own routes are in ``vllm_api.py``."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import orjson
from aiohttp import web

from .engine import Engine, SimRequest, Snapshot
from .faults import FaultPlan, FaultyStream, http_status
from .flavours import ROLE, SGLANG, Flavour, Keys
from .text import count_prompt_tokens
from .wire import BadRequest, Handlers, ServerIdentity, boolean, json_response, max_tokens, number, read_json


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
    """The OpenAI routes in one engine's wire format (``flavour``); ``max_model_len`` defaults to SGLang's
    ``--context-length``."""

    def __init__(self, engine: Engine, ident: ServerIdentity, faults: FaultPlan | None = None,
                 flavour: Flavour = SGLANG, max_model_len: int | None = None) -> None:
        super().__init__(engine, ident, faults)
        self.flavour = flavour
        self.max_model_len = ident.context_length if max_model_len is None else max_model_len
        chat_max = flavour.chat_max_tokens or self.max_model_len
        if chat_max is None:
            raise ValueError(f"{flavour.engine}: a chat's default max_tokens is the model length, and none is set")
        self.chat_max_tokens = chat_max
        self.fingerprint = f"{flavour.engine}-{ident.version}-sim"

    def routes(self, app: web.Application) -> None:
        app.router.add_post("/v1/completions", self.completions)
        app.router.add_post("/v1/chat/completions", self.chat)
        app.router.add_get("/v1/models", self.models)

    async def models(self, request: web.Request) -> web.Response:
        f, name = self.flavour, self.ident.served_model_name
        card = f.fill(f.model, {"id": name, "object": "model", "created": int(time.time()),
                                "root": self.ident.model_path if f.root_is_path else name,
                                "max_model_len": self.max_model_len})
        return json_response({"object": "list", "data": [card]})

    async def completions(self, request: web.Request) -> web.StreamResponse:
        return await self._serve(request, chat=False)

    async def chat(self, request: web.Request) -> web.StreamResponse:
        return await self._serve(request, chat=True)

    def error(self, message: str, status: int, kind: str = "BadRequestError") -> web.Response:
        body = {"message": message, "type": kind, "param": None, "code": status}
        return json_response({"error": body} if self.flavour.nested_errors else {"object": "error", **body}, status)

    def usage(self, req: SimRequest, done: int) -> dict[str, Any]:
        return self.flavour.fill(self.flavour.usage, {"prompt_tokens": req.prompt_tokens, "completion_tokens": done,
                                                      "total_tokens": req.prompt_tokens + done})

    def request_metrics(self, req: SimRequest) -> dict[str, Any] | None:
        """Per-request metrics for the answer's end; none here (vLLM's ``--per-request-spec-decode-metrics``)."""
        return None

    def summary(self, req: SimRequest) -> dict[str, Any]:
        """What the answer's end may carry beside the usage; the flavour's ``reply`` keys say what it does."""
        out: dict[str, Any] = {"system_fingerprint": self.fingerprint}
        if (m := self.request_metrics(req)) is not None:
            out["metrics"] = m
        return out

    async def _serve(self, request: web.Request, chat: bool) -> web.StreamResponse:
        try:
            p = OpenAIParams.parse(await read_json(request), chat, self.chat_max_tokens if chat else 16)
        except BadRequest as exc:
            return self.error(str(exc), 400)
        ptoks = count_prompt_tokens(p.prompt)
        if (refused := self.ident.over_context(ptoks)) is not None:
            # SGLang's --context-length (vLLM's identity has none): 400 streamed or not, the stream is kick-started
            # before its 200 (openai/serving_chat.py:2424-2428, serving_completions.py:208-212; the body from
            # serving_base.py:205-221)
            return self.error(refused, 400)
        fault = self.faults.take()
        if (status := http_status(fault)) is not None:
            return self.error(f"injected fault: HTTP {status}", status, "Fault")
        req = self.new_request(request, p.prompt, ptoks, p.max_new, p.ignore_eos, p.temperature, None, None)
        head = {"id": ("chatcmpl-" if chat else "cmpl-") + req.rid[:self.flavour.id_hex],
                "object": "chat.completion.chunk" if chat else "text_completion", "created": int(time.time()),
                "model": self.ident.served_model_name}
        if p.stream:
            return await self._stream(request, req, p, chat, head, fault)
        return json_response(self._reply(req, await self.drive(req, None), chat, head))

    def _reply(self, req: SimRequest, last: Snapshot, chat: bool, head: dict[str, Any]) -> dict[str, Any]:
        f = self.flavour
        live = {"index": 0, "finish_reason": finish_reason(last)}
        if chat:
            choice = f.fill(f.reply_chat, {**live, "message": f.fill(f.message, {"role": "assistant",
                                                                                 "content": last.text})})
        else:
            choice = f.fill(f.reply_text, {**live, "text": last.text})
        return f.fill(f.reply, {**head, "object": "chat.completion" if chat else "text_completion",
                                "choices": [choice], "usage": self.usage(req, last.completion_tokens),
                                **self.summary(req)})

    def _deltas(self, chat: bool, text: str, fin: str | None) -> list[dict[str, Any]]:
        """The choices a snapshot's new text goes out as, one chunk each."""
        f = self.flavour
        if not chat:
            return [f.fill(f.text_delta, {"index": 0, "text": text, "finish_reason": fin})]
        if fin is not None and not f.finish_apart:
            return [f.fill(f.chat_last, {"index": 0, "delta": {"content": text}, "finish_reason": fin})]
        content = f.fill(f.chat_delta, {"index": 0, "delta": {"content": text}, "finish_reason": None})
        if fin is None:
            return [content]
        return [content, f.fill(f.chat_last, {"index": 0, "delta": {}, "finish_reason": fin})]

    async def _stream(self, request: web.Request, req: SimRequest, p: OpenAIParams, chat: bool,
                      head: dict[str, Any], fault: str | None) -> web.StreamResponse:
        f = self.flavour
        resp = web.StreamResponse(headers=f.sse_headers)
        await resp.prepare(request)
        out = FaultyStream(request, resp, fault, self.faults)
        continuous = (p.continuous and self.ident.continuous_usage
                      and (p.include_usage or not f.continuous_needs_include))

        async def send(keys: Keys, choices: list[dict[str, Any]], done: int | None, **end: Any) -> None:
            use = {} if done is None else {"usage": self.usage(req, done)}
            chunk = f.fill(keys, {**head, "choices": choices, **use, **end})
            await out.write(b"data: " + orjson.dumps(chunk) + b"\n\n")

        async def role() -> None:
            choice = f.fill(ROLE, {"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None})
            await send(f.role_chunk, [choice], 0 if continuous else None)

        if chat and not f.role_with_first:
            await role()
        offset, first = 0, True

        async def write(snap: Snapshot) -> None:
            nonlocal offset, first
            delta, offset = snap.text[offset:], len(snap.text)
            if chat and first and f.role_with_first:
                await role()
            first = False
            for choice in self._deltas(chat, delta, finish_reason(snap)):
                await send(f.chunk, [choice], snap.completion_tokens if continuous else None)

        final = await self.drive(req, write)
        if p.include_usage:
            await send(f.reply, [], final.completion_tokens, **self.summary(req))
        await out.write(b"data: [DONE]\n\n")
        return resp

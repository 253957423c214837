"""What the simulator's one OpenAI handler (``openai.py``) sends differently as SGLang and as vLLM: pure data.

Each wire object is a tuple of keys in the order the engine writes them. The handler offers the values it knows
for that object; a key the handler does not offer takes the engine's constant (``Flavour.values``); a key
marked ``?`` is left out when neither has a value (vLLM writes ``usage`` only when asked, ``metrics`` only with
``--per-request-spec-decode-metrics``); any other key without a value is a bug and raises. The shapes are SGLang
0.5.2x's (``shared/reference/sglang.md``; tests/integration/test_sim_wire.py) and vLLM 0.32/0.33's (the
reference's verbatim streams in ``vllm-cpu.md``; tests/integration/test_sim_vllm.py pins them).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from .wire import SSE_HEADERS

Keys = tuple[str, ...]
HEAD = ("id", "object", "created", "model", "choices")
ROLE = ("index", "delta", "logprobs", "finish_reason")  # the chat stream's role chunk: alike on both


@dataclass(frozen=True, slots=True)
class Flavour:
    engine: str  # /v1/models' owned_by, and the system fingerprint's first word
    sse_headers: Mapping[str, str]
    nested_errors: bool  # vLLM: {"error": {...}}; SGLang: {"object": "error", ...}
    id_hex: int  # hex digits of the request id after "cmpl-" / "chatcmpl-"
    chat_max_tokens: int | None  # a chat's max_tokens when it names none; None: the model length (vLLM)
    root_is_path: bool  # /v1/models' root: the model path (vLLM) or the served name (SGLang)
    role_with_first: bool  # vLLM sends the chat role chunk with the first output; SGLang before it
    finish_apart: bool  # SGLang ends a chat stream with its own empty-delta chunk carrying finish_reason
    continuous_needs_include: bool  # vLLM honours continuous_usage_stats only beside include_usage
    reply: Keys  # the non-streamed answer, and the stream's include_usage chunk
    chunk: Keys
    role_chunk: Keys
    reply_text: Keys  # a non-streamed answer's choice: completions, then chat
    reply_chat: Keys
    message: Keys
    text_delta: Keys  # a streamed choice: completions, chat, the chat chunk that carries finish_reason
    chat_delta: Keys
    chat_last: Keys
    usage: Keys
    model: Keys  # one entry of /v1/models
    values: Mapping[str, Any]  # constants; tuples go out as JSON arrays

    def fill(self, keys: Keys, live: Mapping[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key in keys:
            name = key.removesuffix("?")
            if name in live:
                out[name] = live[name]
            elif name in self.values:
                out[name] = self.values[name]
            elif name == key:
                raise KeyError(f"{self.engine} flavour: no value for {key!r}")
        return out


SGLANG_DOC = (*HEAD, "usage")  # nulls included (a pydantic dump): "usage": null unless it is asked for
SGLANG = Flavour(
    engine="sglang", sse_headers=MappingProxyType(SSE_HEADERS), nested_errors=False, id_hex=32,
    chat_max_tokens=2048, root_is_path=False, role_with_first=False, finish_apart=True,
    continuous_needs_include=False,
    reply=SGLANG_DOC, chunk=SGLANG_DOC, role_chunk=SGLANG_DOC,
    reply_text=("index", "finish_reason", "logprobs", "text", "matched_stop"),
    reply_chat=("index", "finish_reason", "logprobs", "message"),
    message=("role", "content", "reasoning_content", "tool_calls"),
    text_delta=("index", "text", "logprobs", "finish_reason", "matched_stop"),
    chat_delta=ROLE, chat_last=ROLE,
    usage=("prompt_tokens", "completion_tokens", "total_tokens"),
    model=("id", "object", "created", "owned_by", "root", "max_model_len"),
    values=MappingProxyType({"owned_by": "sglang", "usage": None, "logprobs": None, "matched_stop": None,
                             "reasoning_content": None, "tool_calls": None}),
)

VLLM = Flavour(
    engine="vllm", sse_headers=MappingProxyType({**SSE_HEADERS, "Content-Type": "text/event-stream; charset=utf-8"}),
    nested_errors=True, id_hex=16, chat_max_tokens=None, root_is_path=True, role_with_first=True,
    finish_apart=False, continuous_needs_include=True,
    reply=(*HEAD, "usage", "system_fingerprint", "metrics?"), chunk=(*HEAD, "usage?"),
    role_chunk=(*HEAD, "prompt_token_ids", "prompt_text", "usage?"),
    reply_text=("index", "logprobs", "finish_reason", "stop_reason", "text"),
    reply_chat=("index", "logprobs", "finish_reason", "stop_reason", "message"),
    message=("role", "content", "refusal", "tool_calls"),
    text_delta=("index", "text", "logprobs", "finish_reason", "stop_reason", "prompt_token_ids", "token_ids"),
    chat_delta=(*ROLE, "token_ids"), chat_last=(*ROLE, "stop_reason", "token_ids"),  # stop_reason: at the end only
    usage=("prompt_tokens", "total_tokens", "completion_tokens"),
    model=("id", "object", "created", "owned_by", "root", "parent", "max_model_len", "permission"),
    values=MappingProxyType({"owned_by": "vllm", "logprobs": None, "stop_reason": None, "prompt_token_ids": None,
                             "token_ids": None, "prompt_text": None, "refusal": None, "tool_calls": (),
                             "parent": None, "permission": ()}),
)

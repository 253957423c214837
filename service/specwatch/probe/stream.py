"""One request's stream, as pure state: the payload to send, then SSE data in, a ``RequestRecord`` out.

No I/O and no clock of its own: the client hands every event its arrival time. Failures inside the stream
raise ``StreamError``; the client turns them into a ``stream_error`` outcome.

Token counting per chunk:
- ``sglang``: ``meta_info.completion_tokens`` is cumulative on every chunk; the delta is exact even when
  the server coalesced several rounds into one chunk.
- OpenAI APIs: we ask for ``stream_options.continuous_usage_stats`` (SGLang 0.5.4.post2+, vLLM), which
  puts cumulative ``usage`` on every chunk: exact. A server that ignores it only reports the total in
  the final usage chunk; the total is then split over the content chunks by text length, flagged with its
  bound, unless the chunks are as many as the tokens (exact). With ``keep_texts`` the record carries the
  chunks' text so the recorder can split it exactly with the model's tokenizer, off the hot path
  (``tokens``).
"""

from __future__ import annotations

import math
from array import array
from dataclasses import InitVar, dataclass, field
from typing import Any

import orjson

from ..errors import StreamError
from ..records import MAX_ACCEPT_LENGTH, Api, Outcome, RequestRecord, SpecStats, TargetName
from .limits import Limits, as_int
from .prompts import Prompt
from .tokens import by_length, chunk_bound

PATHS = {"sglang": "/generate", "completions": "/v1/completions", "chat": "/v1/chat/completions"}


@dataclass(frozen=True, slots=True)
class Target:
    name: TargetName
    base_url: str
    api: Api
    model: str = "default"


@dataclass(frozen=True, slots=True)
class GenParams:
    max_tokens: int = 256
    temperature: float = 0.0
    ignore_eos: bool = True


def build_payload(target: Target, prompt: Prompt, params: GenParams) -> dict[str, Any]:
    if target.api == "sglang":
        return {"text": prompt.as_text(), "stream": True,
                "sampling_params": {"max_new_tokens": params.max_tokens, "temperature": params.temperature,
                                    "ignore_eos": params.ignore_eos}}
    body: dict[str, Any] = {"model": target.model, "max_tokens": params.max_tokens,
                            "temperature": params.temperature, "ignore_eos": params.ignore_eos, "stream": True,
                            "stream_options": {"include_usage": True, "continuous_usage_stats": True}}
    if target.api == "chat":
        body["messages"] = prompt.as_messages()
    else:
        body["prompt"] = prompt.as_text()
    return body




def _spec_from_meta(meta: dict[str, Any], completion_tokens: int) -> SpecStats | None:
    """The server's speculative fields, each validated: a value out of range is left out, never averaged in."""
    vct = as_int(meta.get("spec_verify_ct"))
    if vct is None or not 0 < vct <= max(1, completion_tokens):
        return None  # every verify round yields at least one token
    hist = meta.get("spec_correct_drafts_histogram") or meta.get("spec_accept_histogram") or ()
    counts = tuple(hist) if isinstance(hist, list) and all(as_int(h) is not None and h >= 0 for h in hist) else ()
    al = _num(meta.get("spec_accept_length"))
    return SpecStats(
        verify_ct=vct,
        accept_length=al if al is not None and 0.0 <= al <= MAX_ACCEPT_LENGTH else None,
        histogram=counts if sum(counts) == vct else (),  # one entry per verify round, or it is not that histogram
    )


def _spec_from_vllm(m: Any, completion_tokens: int) -> SpecStats | None:
    """vLLM's per-request ``metrics.speculative_decoding`` (``--per-request-spec-decode-metrics``, 0.32+),
    validated as SGLang's fields are: steps that carried a draft, accepted drafts, the server's mean and the
    histogram (index j = steps that accepted exactly j drafts); None when absent or inconsistent."""
    if not isinstance(m, dict):
        return None
    steps, accepted = as_int(m.get("num_spec_steps")), as_int(m.get("num_accepted_draft_tokens"))
    k = as_int(m.get("num_spec_tokens"))
    k = k if k is not None and 0 < k <= MAX_ACCEPT_LENGTH else MAX_ACCEPT_LENGTH
    # a step yields its accepted drafts and one more token; vLLM also counts the accepted drafts of a last step
    # that max_tokens cut short (at most k)
    if steps is None or accepted is None or not 0 < steps <= max(1, completion_tokens) or accepted < 0 \
            or accepted + steps > completion_tokens + k:
        return None
    hist = m.get("acceptance_histogram")
    counts = tuple(hist) if isinstance(hist, list) and all(as_int(h) is not None and h >= 0 for h in hist) else ()
    al = _num(m.get("mean_acceptance_length"))
    return SpecStats(verify_ct=steps, accept_length=al if al is not None and 1.0 <= al <= MAX_ACCEPT_LENGTH else None,
                     histogram=counts if sum(counts) == steps else (), accepted_drafts=accepted)


def choice_text(choices: Any) -> str:
    """The text an OpenAI chunk's first choice carries (completions' ``text``, chat's ``delta`` content and
    reasoning content); ``StreamError`` for anything but strings where text belongs."""
    if not isinstance(choices, list):
        raise StreamError("choices is not a list")
    if not choices or not isinstance(choices[0], dict):
        return ""
    c = choices[0]
    delta = c.get("delta")
    parts = (delta.get("content"), delta.get("reasoning_content")) if isinstance(delta, dict) else (c.get("text"),)
    if not all(p is None or isinstance(p, str) for p in parts):
        raise StreamError("chunk text is not a string")
    return "".join(p for p in parts if p)


def _num(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) else None


def _cached(d: Any) -> int | None:
    """Prompt tokens served from the prefix cache: SGLang's ``meta_info.cached_tokens``, or an OpenAI usage's
    ``prompt_tokens_details.cached_tokens`` (vLLM and SGLang report it only when asked to)."""
    n = as_int(d.get("cached_tokens")) if isinstance(d, dict) else None
    return n if n is not None and n >= 0 else None


def apportion(chunk_tokens: array[int], chunk_chars: array[int], final: int | None
              ) -> tuple[array[int] | None, int | None]:
    """Unknown per-chunk counts (0) filled from the final total: (the counts, None) when exact (every chunk one
    token), (the counts by text length, their per-chunk bound) when apportioned, (None, None) when every count
    was known (see ``tokens``)."""
    if not chunk_tokens or all(n > 0 for n in chunk_tokens):
        return None, None
    chunks = len(chunk_tokens)
    total = final if final is not None else chunks
    if total == chunks:
        return array("q", [1] * chunks), None
    return array("q", by_length(chunk_chars, total)), chunk_bound(total, chunks)


@dataclass(slots=True)
class Attempt:
    """Mutable state of one request in flight; ``finish`` freezes it into a record."""

    target: Target
    prompt: Prompt
    warmup: bool
    intended_ns: int
    sent_ns: int = 0
    # per chunk: raw int64 buffers, one append each and no Python object kept per chunk
    chunk_ns: array[int] = field(default_factory=lambda: array("q"))
    chunk_tokens: array[int] = field(default_factory=lambda: array("q"))
    chunk_chars: array[int] = field(default_factory=lambda: array("q"))  # text length, to apportion a total
    tokens: int = 0
    counted: bool = False  # saw a per-chunk token count
    final_tokens: int | None = None
    prompt_tokens: int = 0
    cached_tokens: int | None = None  # SGLang's meta_info.cached_tokens, or usage.prompt_tokens_details's
    spec: SpecStats | None = None
    keep_texts: bool = False  # ``--tokenizer``: keep chunk texts when counts are missing, for ``tokens.refine``
    chunk_texts: list[str] = field(default_factory=list)  # kept only then
    chunk_tokens_max: int | None = None  # set when counts were apportioned: each chunk holds 1..this
    max_tokens: InitVar[int | None] = None  # asked for: bounds the tokens claimed and the chunks kept (None: unbounded)
    limits: Limits = field(init=False)  # its caps from max_tokens (kept there), and its counts against them

    def __post_init__(self, max_tokens: int | None) -> None:
        self.limits = Limits(max_tokens)

    def handle(self, data: bytes, now: int) -> bool:
        """Consume one SSE data payload; True once the stream is complete ([DONE])."""
        if data == b"[DONE]":
            return True
        self.limits.event(data, self.tokens)
        try:
            obj = orjson.loads(data)
        except orjson.JSONDecodeError:
            raise StreamError(f"malformed JSON event: {data[:80]!r}") from None
        if not isinstance(obj, dict):
            raise StreamError(f"event is not a JSON object: {data[:80]!r}")
        if "error" in obj:
            err = obj["error"]
            msg = err.get("message", err) if isinstance(err, dict) else err
            raise StreamError(f"server error event: {str(msg)[:160]}")
        if self.target.api == "sglang":
            self._sglang(obj, now)
        else:
            self._openai(obj, now)
        return False

    def _chunk(self, now: int, tokens: int, chars: int | None) -> None:
        """Keep one token-bearing chunk; a stream with more chunks than the tokens it may carry is broken."""
        self.limits.chunk(len(self.chunk_ns))
        self.chunk_ns.append(now)
        self.chunk_tokens.append(tokens)
        if chars is not None:
            self.chunk_chars.append(chars)

    def _sglang(self, obj: dict[str, Any], now: int) -> None:
        meta = obj.get("meta_info")
        if not isinstance(meta, dict) or "completion_tokens" not in meta:
            raise StreamError("chunk without meta_info.completion_tokens")
        ct = self.limits.claim(meta["completion_tokens"])
        if ct > self.tokens:
            self._chunk(now, ct - self.tokens, None)
            self.tokens = ct
        self.counted = True
        self.prompt_tokens = as_int(meta.get("prompt_tokens")) or self.prompt_tokens
        if (cached := _cached(meta)) is not None:
            self.cached_tokens = cached
        fin = meta.get("finish_reason")
        if fin is not None:
            if isinstance(fin, dict) and fin.get("type") == "abort":
                raise StreamError(f"request aborted by the server: {str(fin.get('message', ''))[:160]}")
            self.final_tokens = ct
            self.spec = _spec_from_meta(meta, ct)

    def _openai(self, obj: dict[str, Any], now: int) -> None:
        choices = obj.get("choices") or []
        text = choice_text(choices)
        usage = obj.get("usage")
        ct = usage.get("completion_tokens") if isinstance(usage, dict) else None
        if isinstance(usage, dict):
            self.prompt_tokens = as_int(usage.get("prompt_tokens")) or self.prompt_tokens
            if (cached := _cached(usage.get("prompt_tokens_details"))) is not None:
                self.cached_tokens = cached
        if ct is not None:
            ct = self.limits.claim(ct)
        if isinstance(ct, int) and choices:
            self.counted = True
            if ct > self.tokens:
                self._chunk(now, ct - self.tokens, len(text))
                self.tokens = ct
        elif text:
            self._chunk(now, 0, len(text))  # its tokens unknown until the final usage
            if self.keep_texts:
                self.chunk_texts.append(text)
        if isinstance(ct, int) and not choices:
            self.final_tokens = ct
        if choices and isinstance(choices[0], dict) and choices[0].get("finish_reason") == "abort":
            raise StreamError("request aborted by the server")
        ext = obj.get("sglext")
        if isinstance(ext, dict) and isinstance(ext.get("spec_tokens_details"), dict):
            self.spec = _spec_from_meta(ext["spec_tokens_details"], self.tokens)
        metrics = obj.get("metrics")
        if isinstance(metrics, dict) and "speculative_decoding" in metrics:  # vLLM, on the trailing usage chunk
            self.spec = _spec_from_vllm(metrics["speculative_decoding"], max(self.tokens, self.final_tokens or 0))

    def _apportion(self) -> bool:
        """Fill unknown per-chunk counts from the final total (see ``tokens``); returns whether exact."""
        counts, bound = apportion(self.chunk_tokens, self.chunk_chars, self.final_tokens)
        if counts is not None:
            self.chunk_tokens, self.tokens, self.chunk_tokens_max = counts, sum(counts), bound
        return bound is None

    def finish(self, outcome: Outcome, done_ns: int, error: str = "", http_status: int | None = None
               ) -> RequestRecord:
        if self.target.api == "sglang":
            exact = self.counted
        else:  # exact from per-chunk usage, or split exactly from the final total
            exact = self._apportion() and (self.counted or self.final_tokens is not None)
        out = self.final_tokens if self.final_tokens is not None else self.tokens
        return RequestRecord(
            api=self.target.api, target=self.target.name, prompt_id=self.prompt.id, domain=self.prompt.domain,
            warmup=self.warmup, intended_ns=self.intended_ns, sent_ns=self.sent_ns or self.intended_ns,
            done_ns=done_ns, chunk_ns=self.chunk_ns, chunk_tokens=self.chunk_tokens,
            tokens_exact=exact, prompt_tokens=self.prompt_tokens, output_tokens=max(out, sum(self.chunk_tokens)),
            outcome=outcome, http_status=http_status, error=error, spec=self.spec,
            chunk_tokens_max=None if exact else self.chunk_tokens_max,
            cached_tokens=self.cached_tokens,
            chunk_texts=tuple(self.chunk_texts) if not exact and len(self.chunk_texts) == len(self.chunk_tokens)
            else (),
        )

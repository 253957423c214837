"""The simulator's scheduler: continuous batching, prefill, speculative decode rounds, log lines.

One asyncio task owns all request state. Each iteration either prefills waiting requests (up to
``max_running_requests``) or runs one decode round for every running request, sleeping until an absolute
deadline so that timer overshoot never accumulates. Outputs go to each request's queue as cumulative
snapshots; the HTTP layer coalesces queued snapshots exactly as SGLang's tokenizer manager does.
Everything the engine did is kept in ``truth`` (a bounded ring of finished requests) for tests.
"""

from __future__ import annotations

import asyncio
import collections
import random
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from . import logfmt, model
from .text import TokenStream, classify_domain, natural_length


@dataclass(frozen=True, slots=True)
class Snapshot:
    text: str
    completion_tokens: int
    finished: bool
    finish_reason: dict[str, Any] | None


@dataclass(slots=True)
class SimRequest:
    rid: str
    prompt: str
    prompt_tokens: int
    max_new_tokens: int
    ignore_eos: bool
    temperature: float
    stream_interval: int
    domain: str = "chat"
    cond: list[float] = field(default_factory=list)
    queue: asyncio.Queue[Snapshot] = field(default_factory=asyncio.Queue)
    parts: list[str] = field(default_factory=list)
    tokens: TokenStream | None = None
    completion_tokens: int = 0
    unsent: int = 0
    verify_ct: int = 0
    accepted_drafts: int = 0
    hist: list[int] = field(default_factory=list)
    arrival_ns: int = 0
    first_ns: int = 0
    last_ns: int = 0
    chunks: int = 0
    batch_sum: int = 0  # sum of the batch sizes of the decode rounds it was in
    rounds: int = 0
    finish_reason: dict[str, Any] | None = None

    @property
    def limit(self) -> int:
        return self.max_new_tokens if self.ignore_eos else min(self.max_new_tokens, natural_length(self.prompt))


@dataclass(slots=True)
class EngineSettings:
    profile: model.Profile
    spec: model.SpecConfig
    max_running_requests: int = 48
    decode_log_interval: int = 40
    stream_interval: int = 1
    log_family: str = logfmt.DEFAULT_FAMILY
    log_decode: bool = True
    log_prefill: bool = True  # SGLang's scheduler lines; vLLM's flavour logs from its own stats loop
    log_ms: bool = False
    seed: int | None = None
    draft_cost: float = 1.0  # 0 for proposers that run no model (vLLM's ngram): drafting is a lookup


class Engine:
    def __init__(self, settings: EngineSettings, emit_log: Callable[[str], None]) -> None:
        self.s = settings
        self._emit_log = emit_log
        self.rng = random.Random(settings.seed)
        self.waiting: collections.deque[SimRequest] = collections.deque()
        self.running: list[SimRequest] = []
        self.truth: collections.deque[dict[str, Any]] = collections.deque(maxlen=20_000)
        # every decode round: (end ns, batch size, tokens produced); prefills: (end ns, requests, prompt tokens)
        self.rounds: collections.deque[tuple[int, int, int]] = collections.deque(maxlen=50_000)
        self.prefills: collections.deque[tuple[int, int, int]] = collections.deque(maxlen=20_000)
        self._wake = asyncio.Event()
        self._deadline: int | None = None
        self._pause_ns = 0
        self.forward_ct_decode = 0
        self.prefill_ct = 0
        # interval accumulators (reset at each decode line) and lifetime ones (advanced at each line)
        self._iv_accept_tokens = 0
        self._iv_forward = 0
        self._iv_gen_tokens = 0
        self._iv_start_ns = time.monotonic_ns()
        self._last_prefill_ns = 0
        self.life_accept_tokens = 0
        self.life_forward = 0
        self.last_gen_throughput = 0.0
        self.last_accept_length = 0.0
        self.last_accept_rate = 0.0
        self.counters: collections.Counter[str] = collections.Counter()
        self.on_finish: Callable[[SimRequest], None] | None = None
        self.on_abort: Callable[[SimRequest], None] | None = None
        self.on_step: Callable[[SimRequest, int, int], None] | None = None  # (request, tokens, now_ns) per round
        # lifetime totals, as vLLM's counters keep them: prompt and generated tokens, drafts (verify rounds
        # that carried a draft), draft tokens, accepted draft tokens, accepted per draft position
        self.prompt_tokens_total = 0
        self.generation_tokens_total = 0
        self.spec_drafts = 0
        self.spec_draft_tokens = 0
        self.spec_accepted = 0
        self.spec_accepted_pos = [0] * settings.spec.num_steps

    # ---- control -----------------------------------------------------------------------------
    def set_profile(self, profile: model.Profile) -> None:
        self.s.profile = profile

    def pause(self, seconds: float) -> None:
        self._pause_ns = int(seconds * 1e9)
        self._wake.set()

    def flush_cache(self) -> None:
        self.life_accept_tokens = self.life_forward = 0

    # ---- request intake ----------------------------------------------------------------------
    def submit(self, req: SimRequest) -> None:
        req.arrival_ns = req.arrival_ns or time.monotonic_ns()
        req.domain = classify_domain(req.prompt)
        factor = model.acceptance_factor(self.s.profile, req.domain, req.temperature)
        req.cond = model.conditional_probs(self.s.profile, self.s.spec, factor)
        req.hist = [0] * (self.s.spec.num_steps + 1)
        req.tokens = TokenStream(zlib.crc32(req.rid.encode()) ^ (self.s.seed or 0))
        self.waiting.append(req)
        self._wake.set()

    def abort(self, req: SimRequest, message: str = "client disconnected") -> None:
        if req.finish_reason is not None:
            return
        if req in self.waiting:
            self.waiting.remove(req)
        if req in self.running:
            self.running.remove(req)
        req.finish_reason = {"type": "abort", "message": message}
        self.counters["aborted"] += 1
        self._record(req, "aborted")
        if self.on_abort is not None:
            self.on_abort(req)

    def shutdown(self) -> None:
        """Abort every request and tell its stream, so that handlers finish and the server can stop at once."""
        for req in [*self.running, *self.waiting]:
            self.abort(req, "server shutting down")
            req.queue.put_nowait(Snapshot("".join(req.parts), req.completion_tokens, True, req.finish_reason))

    @property
    def avg_spec_accept_length(self) -> float | None:
        return self.life_accept_tokens / self.life_forward if self.life_forward else None

    @property
    def used_tokens(self) -> int:
        return sum(r.prompt_tokens + r.completion_tokens for r in self.running)

    # ---- main loop ---------------------------------------------------------------------------
    async def run(self) -> None:
        while True:
            if self._pause_ns:
                pause, self._pause_ns = self._pause_ns, 0
                await asyncio.sleep(pause / 1e9)
                self._deadline = None
            if not self.running and not self.waiting:
                self._wake.clear()
                await self._wake.wait()
                self._deadline = None
                continue
            if self.waiting and len(self.running) < self.s.max_running_requests:
                await self._prefill()
            else:
                await self._decode_round()

    async def _sleep_for(self, cost_ms: float) -> int:
        cost_ns = int(cost_ms * 1e6)
        now = time.monotonic_ns()
        if self._deadline is None or now - self._deadline > cost_ns:
            self._deadline = now  # fell behind by more than a round (or idle): do not burst to catch up
        self._deadline += cost_ns
        delay = self._deadline - time.monotonic_ns()
        if delay > 0:
            await asyncio.sleep(delay / 1e9)
        return time.monotonic_ns()

    async def _prefill(self) -> None:
        free = self.s.max_running_requests - len(self.running)
        batch = [self.waiting.popleft() for _ in range(min(free, len(self.waiting)))]
        new_tokens = sum(r.prompt_tokens for r in batch)
        now = await self._sleep_for(model.prefill_ms(self.s.profile, new_tokens))
        batch = [r for r in batch if r.finish_reason is None]
        running_before = len(self.running)
        self.prefill_ct += 1
        self.prompt_tokens_total += sum(r.prompt_tokens for r in batch)
        self.prefills.append((now, len(batch), new_tokens))
        for r in batch:
            r.first_ns = now
            self.running.append(r)
            self._append_tokens(r, 1, now)
        if not self.s.log_prefill:
            return
        elapsed = (now - self._last_prefill_ns) / 1e9 if self._last_prefill_ns else 0.0
        self._last_prefill_ns = now
        stats = logfmt.PrefillStats(
            new_seq=len(batch), new_tokens=new_tokens, cached_tokens=0, used_tokens=self.used_tokens,
            token_usage=self.used_tokens / self.s.profile.max_total_tokens, running=running_before,
            queued=len(self.waiting), pending_tokens=sum(r.prompt_tokens for r in self.waiting),
            input_throughput=new_tokens / elapsed if elapsed > 0 else 0.0, iteration=self.prefill_ct,
        )
        self._emit_log(logfmt.prefill_line(self.s.log_family, stats, time.time(), self.s.log_ms))

    async def _decode_round(self) -> None:
        batch = list(self.running)
        now = await self._sleep_for(model.cycle_ms(self.s.profile, self.s.spec, len(batch), self.s.draft_cost))
        spec = self.s.spec.enabled
        produced = 0
        accepted_total = 0
        k = self.s.spec.num_steps
        pos = self.spec_accepted_pos
        bs = len(batch)
        for r in batch:
            if r.finish_reason is not None:
                continue
            r.batch_sum += bs
            r.rounds += 1
            n = 1
            if spec:
                acc = model.draw_accepted(self.rng, r.cond)
                r.verify_ct += 1
                r.hist[acc] += 1
                n = acc + 1
            n = min(n, r.limit - r.completion_tokens)
            if spec:
                r.accepted_drafts += n - 1
                accepted_total += n - 1
                self.spec_drafts += 1
                self.spec_draft_tokens += k
                for i in range(n - 1):
                    pos[i] += 1
            produced += n
            if self.on_step is not None:
                self.on_step(r, n, now)
            self._append_tokens(r, n, now)
        self.spec_accepted += accepted_total
        self.rounds.append((now, bs, produced))
        self.forward_ct_decode += 1
        self._iv_accept_tokens += accepted_total + bs
        self._iv_forward += bs
        self._iv_gen_tokens += produced
        if self.forward_ct_decode % self.s.decode_log_interval == 0:
            self._log_decode(now, bs)

    def _append_tokens(self, r: SimRequest, n: int, now: int) -> None:
        assert r.tokens is not None
        r.parts.append(r.tokens.next_tokens(n))
        r.completion_tokens += n
        self.generation_tokens_total += n
        r.unsent += n
        r.last_ns = now
        done = r.completion_tokens >= r.limit
        if done:
            length_cut = r.completion_tokens >= r.max_new_tokens
            r.finish_reason = {"type": "length", "length": r.max_new_tokens} if length_cut \
                else {"type": "stop", "matched": 128009}
            self.running.remove(r)
        if done or r.completion_tokens == 1 or r.unsent >= r.stream_interval:
            r.unsent = 0
            r.chunks += 1
            r.queue.put_nowait(Snapshot("".join(r.parts), r.completion_tokens, done, r.finish_reason))
        if done:
            self.counters["finished"] += 1
            self._record(r, "finished")
            if self.on_finish is not None:
                self.on_finish(r)

    def _log_decode(self, now: int, batch_size: int) -> None:
        elapsed = (now - self._iv_start_ns) / 1e9
        self.last_gen_throughput = self._iv_gen_tokens / elapsed if elapsed > 0 else 0.0
        spec = self.s.spec
        stats = logfmt.DecodeStats(
            running=batch_size, used_tokens=self.used_tokens,
            token_usage=self.used_tokens / self.s.profile.max_total_tokens,
            accept_tokens=self._iv_accept_tokens, forward_ct=self._iv_forward,
            gen_throughput=self.last_gen_throughput, queued=len(self.waiting),
            iteration=self.forward_ct_decode, num_steps=spec.num_steps,
            num_draft_tokens=spec.num_draft_tokens, speculative=spec.enabled,
        )
        if spec.enabled and self._iv_forward:
            self.last_accept_length = self._iv_accept_tokens / self._iv_forward
            self.last_accept_rate = logfmt.accept_rate(self.s.log_family, stats)
            self.life_accept_tokens += self._iv_accept_tokens
            self.life_forward += self._iv_forward
        if self.s.log_decode:
            self._emit_log(logfmt.decode_line(self.s.log_family, stats, time.time(), self.s.log_ms))
        self._iv_accept_tokens = self._iv_forward = self._iv_gen_tokens = 0
        self._iv_start_ns = now

    def _record(self, r: SimRequest, outcome: str) -> None:
        self.truth.append({
            "rid": r.rid, "outcome": outcome, "domain": r.domain, "prompt_tokens": r.prompt_tokens,
            "completion_tokens": r.completion_tokens, "verify_ct": r.verify_ct,
            "accepted_drafts": r.accepted_drafts, "chunks": r.chunks, "arrival_ns": r.arrival_ns,
            "mean_batch_size": r.batch_sum / r.rounds if r.rounds else None,
            "first_token_ns": r.first_ns, "last_token_ns": r.last_ns,
        })

"""The simulator's scheduler: continuous batching, prefill, speculative decode rounds, log lines.

One asyncio task owns all request state. Each iteration either prefills waiting requests (up to
``max_running_requests``) or runs one decode round for every running request, sleeping until an absolute
deadline so that timer overshoot never accumulates. The schedule is the engine's, not the host's: an idle
engine resumes at the arrival that woke it, and a prefill takes the requests that had arrived by its
scheduled start, so that a late wake neither lengthens a request nor changes a batch. Outputs go to each
request's queue as cumulative snapshots; the HTTP layer coalesces queued snapshots exactly as SGLang's
tokenizer manager does. Everything the engine did is kept in ``truth`` (a bounded ring of finished requests) for tests.

The engine reads time from the clock it is given and sleeps on its event loop: the wall clock and a
normal loop when it serves; a virtual clock and ``virtual.VirtualLoop`` (time jumps from event to event)
when ``/explain`` runs the same code on a stated arrival pattern. Each request draws its acceptance from its
own generator, seeded by its prompt (``draws``), so a request's draws depend neither on which others shared its
rounds nor on the order they arrived in: the served engine and the virtual one agree request by request.
"""

from __future__ import annotations

import asyncio
import collections
import random
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from . import logfmt, model
from .decode_log import DecodeLog, SchedulerLog
from .draws import DrawSeeds
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
    draft_tokens: int = 0  # drafts proposed over its verify rounds (the step count can change per round)
    hist: list[int] = field(default_factory=list)
    arrival_ns: int = 0
    received_ns: int = 0  # when its first bytes reached the process (served only; arrival_ns is the engine's)
    first_ns: int = 0
    first_sent_ns: int = 0  # when its first token's chunk went to be written (0: not streamed, or not yet)
    last_ns: int = 0
    chunks: int = 0
    batch_sum: int = 0  # sum of the batch sizes of the decode rounds it was in
    rounds: int = 0
    finish_reason: dict[str, Any] | None = None
    rng: random.Random = field(default_factory=random.Random)  # its acceptance draws (seeded at submission)
    stream: bool = True  # False: no text and no snapshots (a virtual run's clients only need the timings)

    @property
    def limit(self) -> int:
        return self.max_new_tokens if self.ignore_eos else min(self.max_new_tokens, natural_length(self.prompt))

    def prepare(self, profile: model.Profile, spec: model.SpecConfig, seed: int | None, now: int) -> None:
        """Its domain, its acceptance odds by draft position, and its reproducible token stream."""
        self.arrival_ns = self.arrival_ns or now
        self.domain = classify_domain(self.prompt)
        self.cond = model.conditional_probs(profile, spec, model.acceptance_factor(profile, self.domain,
                                                                                  self.temperature))
        self.hist = [0] * (spec.num_steps + 1)
        self.tokens = TokenStream(zlib.crc32(self.rid.encode()) ^ (seed or 0))

    def add_tokens(self, n: int, now: int) -> bool:
        """``n`` more tokens at ``now``, streamed as SGLang's ``stream_interval`` says; True when it is done."""
        if self.stream:
            assert self.tokens is not None
            self.parts.append(self.tokens.next_tokens(n))
        self.completion_tokens += n
        self.unsent += n
        self.last_ns = now
        done = self.completion_tokens >= self.limit
        if done:
            self.finish_reason = {"type": "length", "length": self.max_new_tokens} \
                if self.completion_tokens >= self.max_new_tokens else {"type": "stop", "matched": 128009}
        if done or self.completion_tokens == 1 or self.unsent >= self.stream_interval:
            self.unsent = 0
            self.chunks += 1
            if self.stream:
                self.queue.put_nowait(Snapshot("".join(self.parts), self.completion_tokens, done,
                                               self.finish_reason))
        return done

    def truth(self, outcome: str) -> dict[str, Any]:
        """What the engine did with it, as ``/truth`` lists it."""
        return {"rid": self.rid, "outcome": outcome, "domain": self.domain, "prompt_tokens": self.prompt_tokens,
                "completion_tokens": self.completion_tokens, "verify_ct": self.verify_ct,
                "accepted_drafts": self.accepted_drafts, "chunks": self.chunks, "arrival_ns": self.arrival_ns,
                "received_ns": self.received_ns or self.arrival_ns,
                "mean_batch_size": self.batch_sum / self.rounds if self.rounds else None,
                "first_token_ns": self.first_ns, "first_sent_ns": self.first_sent_ns, "last_token_ns": self.last_ns}


def verify(r: SimRequest, batch_size: int, spec: model.SpecConfig, t: Totals) -> int:
    """One verify round of ``r`` in a batch of ``batch_size``: the tokens it produces (its drafts drawn)."""
    r.batch_sum += batch_size
    r.rounds += 1
    if not spec.enabled:
        return min(1, r.limit - r.completion_tokens)
    acc = model.draw_accepted(r.rng, r.cond, spec.num_steps)
    r.verify_ct += 1
    r.hist[acc] += 1
    n = min(acc + 1, r.limit - r.completion_tokens)
    r.accepted_drafts += n - 1
    r.draft_tokens += spec.num_draft_tokens - 1
    t.drafts += 1
    t.draft_tokens += spec.num_steps
    for i in range(n - 1):
        t.accepted_pos[i] += 1
    return n


Clock = Callable[[], int]  # nanoseconds on the engine's event loop's clock


CATCH_UP_NS = 25_000_000  # a host stall up to this long is made up by the rounds after it


class Pacer:
    """Sleeps until absolute deadlines, so that timer overshoot never accumulates over rounds: a round that
    woke late (the event loop's millisecond timers, a busy host) is made up by shorter sleeps after it, up to
    ``CATCH_UP_NS`` or one round behind, whichever is more; further behind (or after idling), the schedule
    restarts from now, and a restart while busy is counted with the time it gave up."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.deadline: int | None = None
        self.stalls = 0  # restarts from a schedule the host had fallen too far behind (``/truth``'s ``pacer``)
        self.lost_ns = 0  # their time: the engine's schedule is that much longer than its costs

    async def sleep_for(self, cost_ms: float) -> int:
        cost_ns = int(cost_ms * 1e6)
        now = self.clock()
        if self.deadline is None:
            self.deadline = now
        elif now - self.deadline > max(cost_ns, CATCH_UP_NS):  # far behind: do not burst to catch up
            self.stalls += 1
            self.lost_ns += now - self.deadline
            self.deadline = now
        self.deadline += cost_ns
        delay = self.deadline - self.clock()
        # a round that is due already still yields once, so the streams write this round's chunk before the
        # next round runs (catching up must not merge rounds into one chunk)
        await asyncio.sleep(max(0, delay) / 1e9)
        return self.clock()

    def now(self) -> int:
        """The engine's time on its own schedule: the last deadline (a late wake's extra time is the host's)."""
        return self.clock() if self.deadline is None else self.deadline

    def resume_at(self, arrival_ns: int) -> None:
        """An idle engine's schedule resumes at the arrival that woke it, not when the event loop ran it: the
        handler's parsing of that request is the host's time, not the engine's."""
        if self.deadline is None or self.deadline < arrival_ns:
            self.deadline = arrival_ns


def due(waiting: collections.deque[SimRequest], now: int, free: int) -> list[SimRequest]:
    """A prefill's batch: the waiting requests that had arrived by ``now`` on the engine's schedule, up to
    ``free``. One the event loop took in while the engine woke late waits for the next step, as it would have
    on time, so the served engine batches as the virtual one does."""
    batch: list[SimRequest] = []
    while waiting and len(batch) < free and waiting[0].arrival_ns <= now:
        batch.append(waiting.popleft())
    return batch


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
    steps: StepPolicy | None = None  # the engine's per-step draft count (a schedule, SGLang's adaptive)


class StepPolicy(Protocol):
    def steps_for(self, batch_size: int) -> int: ...

    def observe(self, batch_size: int, accepted_drafts: int, requests: int) -> None: ...


@dataclass(slots=True)
class Totals:
    """Lifetime totals, as vLLM's counters keep them: prompt and generated tokens, drafts (verify rounds that
    carried a draft), draft tokens, accepted draft tokens, accepted per draft position."""

    prompt_tokens: int = 0
    generation_tokens: int = 0
    drafts: int = 0
    draft_tokens: int = 0
    accepted: int = 0
    accepted_pos: list[int] = field(default_factory=list)


class Engine:
    def __init__(self, settings: EngineSettings, emit_log: Callable[[str], None],
                 clock: Clock = time.monotonic_ns) -> None:
        self.s = settings
        self.clock = clock
        self.draws = DrawSeeds(settings.seed)  # seeds each request's own generator, by its prompt
        self.waiting: collections.deque[SimRequest] = collections.deque()
        self.running: list[SimRequest] = []
        self.truth: collections.deque[dict[str, Any]] = collections.deque(maxlen=20_000)
        # every decode round: (end ns, batch size, tokens produced); prefills: (end ns, requests, prompt tokens)
        self.rounds: collections.deque[tuple[int, int, int]] = collections.deque(maxlen=50_000)
        self.prefills: collections.deque[tuple[int, int, int]] = collections.deque(maxlen=20_000)
        self._wake = asyncio.Event()
        self.pace = Pacer(clock)
        self._pause_ns = 0
        self.forward_ct_decode = 0
        self.prefill_ct = 0
        self.log = DecodeLog(settings.log_family, settings.log_ms, emit_log, settings.log_decode, clock())
        self.lines = SchedulerLog(settings, self.log, emit_log)
        self.counters: collections.Counter[str] = collections.Counter()
        self.on_finish: Callable[[SimRequest], None] | None = None
        self.on_abort: Callable[[SimRequest], None] | None = None
        self.on_step: Callable[[SimRequest, int, int], None] | None = None  # (request, tokens, now_ns) per round
        self.totals = Totals(accepted_pos=[0] * settings.spec.num_steps)
        self.current_steps = settings.spec.num_steps  # the last decode step's draft count (sglang:spec_num_steps)

    # ---- control -----------------------------------------------------------------------------
    def set_profile(self, profile: model.Profile) -> None:
        self.s.profile = profile

    def reseed(self, seed: int) -> None:
        """The next requests draw their acceptance as a fresh engine's with ``seed`` would (``/control``)."""
        self.draws.reseed(seed)

    def pause(self, seconds: float) -> None:
        self._pause_ns = int(seconds * 1e9)
        self._wake.set()

    def flush_cache(self) -> None:
        self.log.flush_cache()

    # ---- request intake ----------------------------------------------------------------------
    def submit(self, req: SimRequest) -> None:
        req.prepare(self.s.profile, self.s.spec, self.s.seed, self.clock())
        req.rng = self.draws.rng_for(req.prompt)
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
        self.truth.append(req.truth("aborted"))
        if self.on_abort is not None:
            self.on_abort(req)

    def shutdown(self) -> None:
        """Abort every request and tell its stream, so that handlers finish and the server can stop at once."""
        for req in [*self.running, *self.waiting]:
            self.abort(req, "server shutting down")
            req.queue.put_nowait(Snapshot("".join(req.parts), req.completion_tokens, True, req.finish_reason))

    @property
    def used_tokens(self) -> int:
        return sum(r.prompt_tokens + r.completion_tokens for r in self.running)

    # ---- main loop ---------------------------------------------------------------------------
    async def run(self) -> None:
        while True:
            if self._pause_ns:
                pause, self._pause_ns = self._pause_ns, 0
                await asyncio.sleep(pause / 1e9)
                self.pace.deadline = None
            if not self.running and not self.waiting:
                self._wake.clear()
                await self._wake.wait()
                self.pace.deadline = None
                continue
            if not self.running:
                self.pace.resume_at(self.waiting[0].arrival_ns)
            ready = self.waiting and self.waiting[0].arrival_ns <= self.pace.now()
            if ready and len(self.running) < self.s.max_running_requests:
                await self._prefill()
            else:
                await self._decode_round()

    async def _prefill(self) -> None:
        batch = due(self.waiting, self.pace.now(), self.s.max_running_requests - len(self.running))
        new_tokens = sum(r.prompt_tokens for r in batch)
        now = await self.pace.sleep_for(model.prefill_ms(self.s.profile, new_tokens))
        batch = [r for r in batch if r.finish_reason is None]
        running_before = len(self.running)
        self.prefill_ct += 1
        self.totals.prompt_tokens += sum(r.prompt_tokens for r in batch)
        self.prefills.append((now, len(batch), new_tokens))
        for r in batch:
            r.first_ns = now
            self.running.append(r)
            self._append_tokens(r, 1, now)
        self.lines.prefill(now, len(batch), new_tokens, running_before, self)

    def spec_at(self, batch_size: int) -> model.SpecConfig:
        """The speculative settings of a decode step of ``batch_size`` requests (the launch settings unless a
        step policy picks another count, at most the launch one; 0 drafts none, and its round still pays the
        speculating server's ``off_round_tax``: ``model.step_ms``)."""
        spec, policy = self.s.spec, self.s.steps
        if policy is None or not spec.enabled:
            return spec
        k = max(0, min(spec.num_steps, policy.steps_for(batch_size)))
        return spec if k == spec.num_steps else replace(spec, num_steps=k, num_draft_tokens=k + 1)

    async def _decode_round(self) -> None:
        batch = list(self.running)
        bs = len(batch)
        spec = self.spec_at(bs)
        self.current_steps = spec.num_steps
        now = await self.pace.sleep_for(model.step_ms(self.s.profile, self.s.spec, spec, bs, self.s.draft_cost))
        produced = accepted_total = 0
        for r in batch:
            if r.finish_reason is not None:
                continue
            n = verify(r, bs, spec, self.totals)
            accepted_total += n - 1 if spec.enabled else 0
            produced += n
            if self.on_step is not None:
                self.on_step(r, n, now)
            self._append_tokens(r, n, now)
        self.totals.accepted += accepted_total
        if self.s.steps is not None:
            self.s.steps.observe(bs, accepted_total, bs)
        self.rounds.append((now, bs, produced))
        self.forward_ct_decode += 1
        self.log.add_round(bs, accepted_total, produced)
        if self.forward_ct_decode % self.s.decode_log_interval == 0:
            self.lines.decode(now, bs, self)

    def _append_tokens(self, r: SimRequest, n: int, now: int) -> None:
        self.totals.generation_tokens += n
        if r.add_tokens(n, now):
            self.running.remove(r)
            self.counters["finished"] += 1
            self.truth.append(r.truth("finished"))
            if self.on_finish is not None:
                self.on_finish(r)

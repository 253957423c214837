"""Traffic: closed-loop workers or an open-loop pacer, feeding records to a sink.

Source stage. Every request runs in its own task and always yields exactly one record, cancelled ones
included; the sink is a plain synchronous call.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import itertools
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from ..records import Outcome, RequestRecord
from .client import Timeouts
from .prompts import Prompt
from .schedule import make_pacer
from .stream import Attempt, GenParams, Target

Sink = Callable[[RequestRecord], None]


class Transport(Protocol):
    """The one seam between the load and the network: one attempt in, its record out, every outcome a
    record (``CancelledError`` propagates). ``client.StreamTransport`` is the real one; tests use a fake."""

    async def execute(self, attempt: Attempt, params: GenParams, limits: Timeouts) -> RequestRecord: ...


FAILURE_BACKOFF_S = 1.0  # closed loop: a failed request (server down) is not retried in a tight loop


@dataclass(frozen=True, slots=True)
class TrafficPlan:
    concurrency: int = 1  # closed loop: streams in flight
    rate_per_s: float | None = None  # open loop when set
    poisson: bool = False
    burstiness: float | None = None  # open loop: vLLM's gamma arrivals of this shape (over ``poisson``)
    max_in_flight: int = 256  # open loop cap; waiting for a slot counts as schedule lag
    warmup: int = 0
    requests: int | None = None  # measured requests; None = until stopped
    pause_s: float = 0.0  # closed loop: think time between a worker's requests
    seed: int = 0

    @property
    def max_streams(self) -> int:
        """Streams this plan can have in flight at once: size the HTTP session's connection pool from it."""
        return self.max_in_flight if self.rate_per_s is not None else self.concurrency


class PromptCycle:
    """Round-robin over prompts and targets (A/B interleaving when there are two targets)."""

    def __init__(self, prompts: Sequence[Prompt], targets: Sequence[Target]) -> None:
        self._it = itertools.cycle([(t, p) for p in prompts for t in targets])

    def next(self) -> tuple[Target, Prompt]:
        return next(self._it)


@dataclass(frozen=True, slots=True)
class Traffic:
    """One load run: what to send, how, where the records go, and when to stop."""

    transport: Transport
    cycle: PromptCycle
    params: GenParams
    plan: TrafficPlan
    sink: Sink
    stop: asyncio.Event
    limits: Timeouts = field(default_factory=Timeouts)
    in_flight: list[int] = field(default_factory=lambda: [0])  # probes of this load in flight, now
    keep_texts: bool = False  # --tokenizer: records keep chunk texts when a server sends no per-chunk usage

    async def run(self) -> None:
        """Warm-up (sequential), then the measured phase until ``plan.requests`` or ``stop``."""
        for _ in range(self.plan.warmup):
            if self.stop.is_set():
                return
            await self.one(time.monotonic_ns(), warmup=True)
        if self.plan.rate_per_s is None:
            await self._closed()
        else:
            await self._open(self.plan.rate_per_s)

    async def one(self, intended_ns: int, warmup: bool = False) -> RequestRecord:
        target, prompt = self.cycle.next()
        attempt = Attempt(target=target, prompt=prompt, warmup=warmup, intended_ns=intended_ns,
                          max_tokens=self.params.max_tokens,
                          keep_texts=self.keep_texts)
        self.in_flight[0] += 1
        mine = self.in_flight[0]  # the probe's own concurrency as it was sent, itself included
        try:
            rec = await self.transport.execute(attempt, self.params, self.limits)
        except asyncio.CancelledError:
            self.sink(dataclasses.replace(attempt.finish(Outcome.CANCELLED, time.monotonic_ns(),
                                                         "cancelled at shutdown"), probe_concurrency=mine))
            raise
        finally:
            self.in_flight[0] -= 1
        rec = dataclasses.replace(rec, probe_concurrency=mine)
        self.sink(rec)
        return rec

    async def _pause(self, seconds: float) -> None:
        if seconds > 0:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.stop.wait(), seconds)

    async def _closed(self) -> None:
        plan = self.plan
        issued = [0]

        def more() -> bool:
            return plan.requests is None or issued[0] < plan.requests

        async def worker() -> None:
            while not self.stop.is_set() and more():
                issued[0] += 1
                rec = await self.one(time.monotonic_ns())
                if more():  # no pause after the last request: a bounded run ends when its requests have
                    await self._pause(plan.pause_s if rec.ok else max(plan.pause_s, FAILURE_BACKOFF_S))

        async with asyncio.TaskGroup() as tg:
            for _ in range(plan.concurrency):
                tg.create_task(worker())

    async def _open(self, rate_per_s: float) -> None:
        plan = self.plan
        pacer = make_pacer(rate_per_s, plan.poisson, plan.seed, plan.burstiness, plan.requests)
        slots = asyncio.Semaphore(plan.max_in_flight)
        start = time.monotonic_ns()
        tasks: set[asyncio.Task[RequestRecord]] = set()

        async def fire(intended: int) -> RequestRecord:
            try:
                return await self.one(intended)
            finally:
                slots.release()

        for i in itertools.count():
            if self.stop.is_set() or (plan.requests is not None and i >= plan.requests):
                break
            intended = start + pacer.offset_ns(i)
            delay = (intended - time.monotonic_ns()) / 1e9
            if delay > 0:
                try:
                    await asyncio.wait_for(self.stop.wait(), delay)
                    break
                except TimeoutError:
                    pass
            await slots.acquire()  # a full cap delays the send; the delay is measured as schedule lag
            task = asyncio.create_task(fire(intended))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)

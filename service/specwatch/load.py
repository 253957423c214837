"""Load generation: closed-loop workers or an open-loop pacer, feeding records to a sink.

Source stage. Every request runs in its own task and always yields exactly one record, cancelled ones
included; the sink is a plain synchronous call.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import aiohttp

from .client import Attempt, GenParams, Target, execute
from .prompts import Prompt
from .records import Outcome, RequestRecord
from .schedule import make_pacer

Sink = Callable[[RequestRecord], None]
FAILURE_BACKOFF_S = 1.0  # closed loop: a failed request (server down) is not retried in a tight loop


@dataclass(frozen=True, slots=True)
class LoadPlan:
    concurrency: int = 1  # closed loop: streams in flight
    rate_per_s: float | None = None  # open loop when set
    poisson: bool = False
    max_in_flight: int = 256  # open loop cap; waiting for a slot counts as schedule lag
    warmup: int = 0
    requests: int | None = None  # measured requests; None = until stopped
    pause_s: float = 0.0  # closed loop: think time between a worker's requests
    seed: int = 0


class PromptCycle:
    """Round-robin over prompts and targets (A/B interleaving when there are two targets)."""

    def __init__(self, prompts: Sequence[Prompt], targets: Sequence[Target]) -> None:
        self._it = itertools.cycle([(t, p) for p in prompts for t in targets])

    def next(self) -> tuple[Target, Prompt]:
        return next(self._it)


async def one(session: aiohttp.ClientSession, target: Target, prompt: Prompt, params: GenParams,
              intended_ns: int, warmup: bool, sink: Sink) -> RequestRecord:
    attempt = Attempt(target=target, prompt=prompt, warmup=warmup, intended_ns=intended_ns)
    try:
        rec = await execute(session, attempt, params)
    except asyncio.CancelledError:
        sink(attempt.finish(Outcome.CANCELLED, "cancelled at shutdown"))
        raise
    sink(rec)
    return rec


async def run(session: aiohttp.ClientSession, cycle: PromptCycle, params: GenParams, plan: LoadPlan,
              sink: Sink, stop: asyncio.Event) -> None:
    """Run warm-up (sequential) then the measured phase until ``plan.requests`` or ``stop``."""
    for _ in range(plan.warmup):
        if stop.is_set():
            return
        target, prompt = cycle.next()
        await one(session, target, prompt, params, time.monotonic_ns(), True, sink)
    if plan.rate_per_s is None:
        await _closed(session, cycle, params, plan, sink, stop)
    else:
        await _open(session, cycle, params, plan, sink, stop)


async def _closed(session: aiohttp.ClientSession, cycle: PromptCycle, params: GenParams, plan: LoadPlan,
                  sink: Sink, stop: asyncio.Event) -> None:
    issued = itertools.count()

    async def worker() -> None:
        while not stop.is_set():
            if plan.requests is not None and next(issued) >= plan.requests:
                return
            target, prompt = cycle.next()
            rec = await one(session, target, prompt, params, time.monotonic_ns(), False, sink)
            pause = plan.pause_s if rec.ok else max(plan.pause_s, FAILURE_BACKOFF_S)
            if pause > 0:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), pause)

    async with asyncio.TaskGroup() as tg:
        for _ in range(plan.concurrency):
            tg.create_task(worker())


async def _open(session: aiohttp.ClientSession, cycle: PromptCycle, params: GenParams, plan: LoadPlan,
                sink: Sink, stop: asyncio.Event) -> None:
    assert plan.rate_per_s is not None
    pacer = make_pacer(plan.rate_per_s, plan.poisson, plan.seed)
    slots = asyncio.Semaphore(plan.max_in_flight)
    start = time.monotonic_ns()
    tasks: set[asyncio.Task[RequestRecord]] = set()

    async def fire(target: Target, prompt: Prompt, intended: int) -> RequestRecord:
        try:
            return await one(session, target, prompt, params, intended, False, sink)
        finally:
            slots.release()

    for i in itertools.count():
        if stop.is_set() or (plan.requests is not None and i >= plan.requests):
            break
        intended = start + pacer.offset_ns(i)
        delay = (intended - time.monotonic_ns()) / 1e9
        if delay > 0:
            try:
                await asyncio.wait_for(stop.wait(), delay)
                break
            except TimeoutError:
                pass
        await slots.acquire()  # a full cap delays the send; the delay is measured as schedule lag
        target, prompt = cycle.next()
        task = asyncio.create_task(fire(target, prompt, intended))
        tasks.add(task)
        task.add_done_callback(tasks.discard)
    if tasks:
        await asyncio.gather(*tasks, return_exceptions=True)

"""The simulator's engine in virtual time: the very code that serves, on an event loop whose clock jumps
from one scheduled event to the next instead of waiting for it.

``run(settings, pattern)`` starts a fresh ``Engine`` (the served one's settings, its logs silenced) on a
``VirtualLoop`` and drives it with the stated arrival pattern (``pattern.Pattern``: what ``bench`` sends),
written as the client writes it: closed-loop streams that send their next request when the last one
finished, or open-loop arrivals at a rate. It returns what ``/truth`` would list for those requests, in
milliseconds of CPU instead of minutes of waiting. Nothing here models the engine: it only supplies time.
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import itertools
import selectors
from dataclasses import dataclass
from typing import Any

from ..probe.schedule import make_pacer
from .engine import Engine, EngineSettings, SimRequest
from .pattern import Pattern


class VirtualStall(RuntimeError):
    """Nothing is ready and nothing is scheduled: the run would wait for ever."""


class _JumpSelector(selectors.SelectSelector):
    """Never waits: where the loop would wait for its next timer, the clock jumps to that timer."""

    def __init__(self, loop: VirtualLoop) -> None:
        super().__init__()
        self._loop = loop

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        if timeout is None:
            raise VirtualStall("the virtual run stalled: every task waits and no timer is due")
        if timeout > 0:
            self._loop.jump(timeout)
        return []


class VirtualLoop(asyncio.SelectorEventLoop):
    """An asyncio loop on a virtual clock (integer nanoseconds from 0)."""

    def __init__(self) -> None:
        self.now_ns = 0
        super().__init__(_JumpSelector(self))

    def time(self) -> float:
        return self.now_ns / 1e9

    def jump(self, timeout: float) -> None:
        """To the earliest timer, to the nanosecond (``timeout`` is that timer's distance in float seconds)."""
        due = self._scheduled[0].when() if self._scheduled else self.time() + timeout  # type: ignore[attr-defined]
        self.now_ns = max(self.now_ns + 1, round(due * 1e9))

    def clock(self) -> int:
        return self.now_ns


@dataclass(frozen=True, slots=True)
class VirtualRun:
    """What the engine did, as ``/truth`` lists it: requests (arrival order), decode rounds, prefills."""

    pattern: Pattern
    requests: tuple[dict[str, Any], ...]
    rounds: tuple[tuple[int, int, int], ...]  # (end ns, batch size, tokens)
    prefills: tuple[tuple[int, int, int], ...]  # (end ns, requests, prompt tokens)


def quiet(settings: EngineSettings) -> EngineSettings:
    """The same engine settings, its log lines off and its step policy a fresh copy (adaptive keeps state)."""
    return dataclasses.replace(settings, log_decode=False, log_prefill=False, steps=copy.deepcopy(settings.steps))


def run(settings: EngineSettings, pattern: Pattern) -> VirtualRun:
    """The engine on ``pattern`` in virtual time. An unseeded engine draws with the pattern's seed: the oracle
    gives one answer to one question (unseeded, seed at 2 steps crossed plain decoding anywhere from 2.7 to 3.7
    streams from run to run: its speed-up stays within 3% of 1 from 2 to 4 streams)."""
    if settings.seed is None:
        settings = dataclasses.replace(settings, seed=pattern.seed)
    loop = VirtualLoop()
    try:
        return loop.run_until_complete(_drive(quiet(settings), pattern, loop))
    finally:
        loop.close()


async def _drive(settings: EngineSettings, pattern: Pattern, loop: VirtualLoop) -> VirtualRun:
    engine = Engine(settings, lambda line: None, loop.clock)
    waiting: dict[str, asyncio.Future[None]] = {}

    def finished(r: SimRequest) -> None:
        waiting.pop(r.rid).set_result(None)

    engine.on_finish = finished
    prompts = itertools.cycle(pattern.prompt_list())
    counter = itertools.count()

    client_free = [0]  # the client sends one request at a time, each taking ``send_ms`` (or its ``sends_ms``)
    sends = itertools.count()

    async def one() -> None:
        """One request, as ``bench`` sends it: the next prompt of the cycle, its tokens as the server counts,
        arriving its send's delay (``Pattern.send_ns``) after the client's previous send or now, whichever is
        later."""
        client_free[0] = max(loop.clock(), client_free[0]) + pattern.send_ns(next(sends))
        await asyncio.sleep((client_free[0] - loop.clock()) / 1e9)
        text, tokens = next(prompts)
        req = SimRequest(rid=f"v{next(counter)}", prompt=text, prompt_tokens=tokens,
                         max_new_tokens=pattern.output_tokens, ignore_eos=pattern.ignore_eos,
                         temperature=pattern.temperature, stream_interval=settings.stream_interval, stream=False)
        waiting[req.rid] = loop.create_future()
        engine.submit(req)
        await waiting[req.rid]

    task = loop.create_task(engine.run())
    for _ in range(pattern.warmup):
        await one()
    if pattern.rate_per_s is None:
        await _closed(pattern, one)
    else:
        await _open(pattern, one, loop)
    task.cancel()
    return VirtualRun(pattern, tuple(engine.truth), tuple(engine.rounds), tuple(engine.prefills))


async def _closed(pattern: Pattern, one: Any) -> None:
    """``pattern.streams`` workers, each sending its next request as soon as its last one ended (``bench
    --concurrency``), started together or ``stagger_ms`` apart."""
    issued = [0]

    async def worker(i: int) -> None:
        if pattern.stagger_ms:
            await asyncio.sleep(i * pattern.stagger_ms / 1e3)
        while issued[0] < pattern.measured:
            issued[0] += 1
            await one()

    await asyncio.gather(*(worker(i) for i in range(pattern.streams)))


async def _open(pattern: Pattern, one: Any, loop: VirtualLoop) -> None:
    """Arrivals at ``rate_per_s`` (evenly spaced, or Poisson with ``bench``'s pacer and seed), whatever is in
    flight."""
    assert pattern.rate_per_s is not None
    pacer = make_pacer(pattern.rate_per_s, pattern.poisson, pattern.seed)
    start, tasks = loop.clock(), []
    for i in range(pattern.measured):
        delay = (start + pacer.offset_ns(i) - loop.clock()) / 1e9
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(loop.create_task(one()))
    await asyncio.gather(*tasks)

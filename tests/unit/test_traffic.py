"""``probe.traffic.Traffic`` through its transport seam, with a fake transport: the closed loop, the open loop's
cap and the shutdown, exactly — no network, no sleeping."""

from __future__ import annotations

import asyncio
import time

from specwatch.probe.client import Timeouts
from specwatch.probe.prompts import Prompt
from specwatch.probe.stream import Attempt, GenParams, Target
from specwatch.probe.traffic import PromptCycle, Traffic, TrafficPlan
from specwatch.records import Outcome, RequestRecord

TARGET = Target("spec", "http://127.0.0.1:1", "sglang")


class FakeTransport:
    """Each request waits until the test releases it (or finishes at once with ``gate=None``)."""

    def __init__(self, gate: asyncio.Event | None = None, outcome: Outcome = Outcome.OK) -> None:
        self.gate, self.outcome = gate, outcome
        self.in_flight = self.max_in_flight = self.sent = 0
        self.warmup_in_flight: list[int] = []

    async def execute(self, attempt: Attempt, params: GenParams, limits: Timeouts) -> RequestRecord:
        self.sent += 1
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        if attempt.warmup:
            self.warmup_in_flight.append(self.in_flight)
        try:
            attempt.sent_ns = time.monotonic_ns()
            if self.gate is not None:
                await self.gate.wait()
            else:
                await asyncio.sleep(0)
            return attempt.finish(self.outcome, time.monotonic_ns())
        finally:
            self.in_flight -= 1


async def until(cond, passes: int = 10_000) -> None:
    """Let the loop run until ``cond()``, within a bounded number of passes (no wall-clock sleeping)."""
    for _ in range(passes):
        if cond():
            return
        await asyncio.sleep(0)
    raise AssertionError("the condition never held")


def load(transport: FakeTransport, plan: TrafficPlan, sink: list[RequestRecord], stop: asyncio.Event) -> Traffic:
    prompts = [Prompt("p1", "chat", "hello"), Prompt("p2", "code", "def f():")]
    return Traffic(transport, PromptCycle(prompts, [TARGET]), GenParams(max_tokens=8), plan, sink.append, stop)


async def test_closed_loop_runs_warmup_alone_then_exactly_the_measured_requests_at_its_concurrency():
    fake, out = FakeTransport(), []
    await load(fake, TrafficPlan(concurrency=3, warmup=2, requests=10), out, asyncio.Event()).run()
    assert [r.warmup for r in out] == [True, True] + [False] * 10
    assert fake.warmup_in_flight == [1, 1] and fake.max_in_flight == 3
    assert all(1 <= r.probe_concurrency <= 3 for r in out) and max(r.probe_concurrency for r in out[2:]) == 3
    assert [r.prompt_id for r in out[:4]] == ["p1", "p2", "p1", "p2"]  # round robin


async def test_open_loop_never_exceeds_its_cap_and_the_wait_is_schedule_lag():
    gate, out = asyncio.Event(), []
    fake = FakeTransport(gate)
    run = asyncio.create_task(load(fake, TrafficPlan(rate_per_s=100_000, max_in_flight=4, requests=9), out,
                                   asyncio.Event()).run())
    await until(lambda: fake.in_flight == 4)  # the pacer is due at once and the cap holds the fifth
    for _ in range(50):
        await asyncio.sleep(0)
    assert (fake.in_flight, fake.sent, out) == (4, 4, [])
    gate.set()
    await run
    assert len(out) == 9 and fake.max_in_flight == 4
    assert max(r.schedule_lag_ns for r in out[4:]) > 0  # the ones that waited for a slot


async def test_shutdown_gives_every_request_in_flight_a_cancelled_record():
    gate, out, stop = asyncio.Event(), [], asyncio.Event()
    fake = FakeTransport(gate)
    run = asyncio.create_task(load(fake, TrafficPlan(concurrency=5), out, stop).run())
    await until(lambda: fake.in_flight == 5)
    stop.set()
    run.cancel()
    await asyncio.gather(run, return_exceptions=True)
    assert [r.outcome for r in out] == [Outcome.CANCELLED] * 5
    assert all(r.error == "cancelled at shutdown" for r in out)


async def test_the_closed_loop_stops_when_told_and_sends_no_more():
    out, stop = [], asyncio.Event()
    fake = FakeTransport()

    def sink(rec: RequestRecord) -> None:
        out.append(rec)
        if len(out) == 7:
            stop.set()

    ld = load(fake, TrafficPlan(concurrency=2), [], stop)
    await Traffic(fake, ld.cycle, ld.params, ld.plan, sink, stop).run()
    assert 7 <= len(out) <= 8 and fake.sent == len(out)  # the other worker's request in flight finishes


async def test_a_failing_bounded_run_backs_off_between_requests_but_not_after_the_last(monkeypatch):
    from specwatch.probe import traffic as load_mod

    monkeypatch.setattr(load_mod, "FAILURE_BACKOFF_S", 3600.0)  # a pause after the last request would hang
    out = []
    fake = FakeTransport(outcome=Outcome.HTTP_ERROR)
    await asyncio.wait_for(load(fake, TrafficPlan(concurrency=1, requests=1), out, asyncio.Event()).run(), 30)
    assert [r.outcome for r in out] == [Outcome.HTTP_ERROR]
    stop = asyncio.Event()
    run = asyncio.create_task(load(fake, TrafficPlan(concurrency=1, requests=2), out, stop).run())
    await until(lambda: len(out) == 2)  # the first of two failed: now it backs off, the second is not sent
    for _ in range(100):
        await asyncio.sleep(0)
    assert len(out) == 2 and not run.done()
    stop.set()
    await asyncio.wait_for(run, 30)

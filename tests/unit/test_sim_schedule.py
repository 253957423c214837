"""The simulator engine keeps its own schedule, not the host's: an idle engine resumes at the arrival that woke
it, and a prefill takes the requests that had arrived by its scheduled start. On the virtual loop a late host is
written as arrival stamps earlier than the moment the engine runs (what the served engine sees when its event
loop parsed a request, or several, before the engine's task got its turn)."""

from __future__ import annotations

import asyncio
import collections

import pytest

from specwatch.sim import model
from specwatch.sim.engine import Engine, EngineSettings, Pacer, SimRequest, due
from specwatch.sim.virtual import VirtualLoop

MS = 1_000_000


def request(rid: str, arrival_ns: int, prompt_tokens: int = 16, tokens: int = 4) -> SimRequest:
    return SimRequest(rid=rid, prompt="x " * prompt_tokens, prompt_tokens=prompt_tokens, max_new_tokens=tokens,
                      ignore_eos=True, temperature=0.0, stream_interval=1, arrival_ns=arrival_ns, stream=False)


@pytest.mark.parametrize(("arrivals", "now", "free", "taken"), [
    ([10, 20, 30], 20, 5, 2),  # the third arrived after the scheduled start: next step
    ([10, 20, 30], 30, 5, 3),  # arrived exactly at the start: taken
    ([10, 20, 30], 30, 1, 1),  # no more than the free slots
    ([10, 20, 30], 5, 5, 0),  # none had arrived
    ([], 100, 5, 0),
])
def test_a_prefill_takes_what_had_arrived_by_its_start(arrivals, now, free, taken):
    waiting = collections.deque(request(f"r{i}", a) for i, a in enumerate(arrivals))
    batch = due(waiting, now, free)
    assert [r.arrival_ns for r in batch] == arrivals[:taken]
    assert [r.arrival_ns for r in waiting] == arrivals[taken:]


@pytest.mark.parametrize(("late_ns", "cost_ms", "ends_at"), [
    (600_000, 4.0, 4 * MS),  # woke 0.6 ms after the arrival: the cost runs from the arrival
    (0, 4.0, 4 * MS),
    (100 * MS, 4.0, 104 * MS),  # far behind (a stalled host): the schedule restarts from now
])
def test_an_idle_engine_resumes_at_the_arrival_that_woke_it(late_ns, cost_ms, ends_at):
    loop = VirtualLoop()
    pace = Pacer(loop.clock)

    async def go() -> int:
        loop.now_ns = late_ns
        pace.resume_at(0)
        assert pace.now() == 0
        return await pace.sleep_for(cost_ms)

    try:
        assert loop.run_until_complete(go()) == ends_at
    finally:
        loop.close()


@pytest.mark.parametrize(("late_ms", "stalls", "lost_ms"), [
    (3.0, 0, 0.0),  # within a round: made up by the next sleeps
    (20.0, 0, 0.0),  # within CATCH_UP_NS
    (60.0, 1, 60.0),  # further behind: the schedule restarts from now, and says what it gave up
])
def test_a_busy_engine_counts_the_time_it_could_not_make_up(late_ms, stalls, lost_ms):
    loop = VirtualLoop()
    pace = Pacer(loop.clock)

    async def go() -> list[int]:
        ends = [await pace.sleep_for(4.0)]  # starts the schedule at 0: an idle start is no stall
        loop.now_ns += int(late_ms * MS)  # the host held the loop past the round's deadline
        ends.append(await pace.sleep_for(4.0))
        ends.append(await pace.sleep_for(4.0))
        return ends

    try:
        ends = loop.run_until_complete(go())
    finally:
        loop.close()
    assert (pace.stalls, pace.lost_ns / MS) == (stalls, lost_ms)
    caught_up = ends[0] + (late_ms * MS if stalls else 0) + 8 * MS  # two rounds after the first, or after the stall
    assert ends[2] == max(caught_up, ends[1])


def test_a_late_engine_neither_lengthens_a_request_nor_merges_a_prefill():
    """Two requests stamped 1 and 1.5 ms; the engine first runs at 1.6 ms. On time it would have prefilled the
    first alone at 1 ms and the second after it, and so it does: each prefill ends its cost after its start."""
    profile = model.PROFILES["seed"]
    loop = VirtualLoop()
    engine = Engine(EngineSettings(profile=profile, spec=model.SpecConfig(), seed=1, log_decode=False,
                                   log_prefill=False), lambda line: None, loop.clock)

    async def go() -> None:
        loop.now_ns = 1_600_000
        engine.submit(request("a", MS))
        engine.submit(request("b", 1_500_000))
        both = asyncio.Event()
        engine.on_finish = lambda r: both.set() if engine.counters["finished"] == 2 else None
        task = loop.create_task(engine.run())
        await both.wait()
        task.cancel()

    try:
        loop.run_until_complete(go())
    finally:
        loop.close()
    first = round(model.prefill_ms(profile, 16) * MS)
    assert [(end, n) for end, n, _ in engine.prefills] == [(MS + first, 1), (MS + 2 * first, 1)]
    a = next(t for t in engine.truth if t["rid"] == "a")
    assert a["first_token_ns"] - a["arrival_ns"] == first

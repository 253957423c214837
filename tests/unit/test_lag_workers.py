"""The event-loop lag monitor flags a stalled loop; the worker split covers the schedule exactly."""

import asyncio
import time

import pytest

from specwatch.probe.lag import LagMonitor, loop_lag
from specwatch.probe.traffic import TrafficPlan
from specwatch.probe.workers import shares, split


def test_samples_over_the_threshold_at_p99_flag_the_interval():
    m = LagMonitor(threshold_s=0.001)
    for _ in range(98):
        m.record_ns(50_000)  # 50 µs
    iv = m.close()
    assert not iv.distorted and iv.p99_s == pytest.approx(50e-6, rel=0.01)
    for _ in range(90):
        m.record_ns(50_000)
    for _ in range(10):
        m.record_ns(3_000_000)  # 10% at 3 ms: p99 is 3 ms
    iv = m.close()
    assert iv.distorted and iv.p99_s == pytest.approx(3e-3, rel=0.01) and iv.samples == 100
    s = loop_lag(m.intervals)
    assert (s.intervals, s.distorted_intervals) == (2, 1)
    assert s.worst_interval_p99_ms == pytest.approx(3.0, rel=0.01)
    assert s.overlaps(iv.start_ns, iv.end_ns)
    assert not s.overlaps(iv.end_ns + 1, iv.end_ns + 2)
    both = loop_lag(m.intervals + m.intervals)  # two workers' intervals, as --workers sums them
    assert (both.intervals, both.distorted_intervals, both.samples) == (4, 2, 2 * s.samples)


async def test_a_blocked_loop_is_seen_with_at_least_the_blocking_time():
    m = LagMonitor(period_s=0.002)
    task = asyncio.create_task(m.run())

    async def samples(at_least: int) -> None:  # a poll with a deadline: the monitor's own samples
        deadline = time.monotonic() + 5
        while m._hist.get_total_count() < at_least:
            assert time.monotonic() < deadline, f"the monitor took no {at_least}th sample in 5 s"
            await asyncio.sleep(0)

    await samples(1)
    before = m._hist.get_total_count()
    time.sleep(0.03)  # noqa: ASYNC251 - the point: a 30 ms stall of the loop, as a synchronous recorder makes
    await samples(before + 1)  # the sample taken across the stall
    task.cancel()
    iv = m.close()
    assert iv.max_s is not None and iv.max_s >= 0.03 - 0.002 - 0.001  # minus the period and the timer slack


@pytest.mark.parametrize(("total", "n", "want"), [(64, 2, [32, 32]), (5, 3, [2, 2, 1]), (1, 2, [1, 0])])
def test_shares(total, n, want):
    assert shares(total, n) == want and sum(shares(total, n)) == total


def test_a_closed_loop_plan_splits_streams_requests_and_warmup():
    parts = split(TrafficPlan(concurrency=5, requests=11, warmup=3, seed=7), 2)
    assert [(p.concurrency, p.requests, p.warmup, p.seed) for p in parts] == [(3, 6, 2, 7), (2, 5, 1, 8)]


def test_an_open_loop_plan_splits_the_rate_and_the_cap():
    parts = split(TrafficPlan(rate_per_s=10.0, max_in_flight=9, requests=None, poisson=True), 3)
    assert [p.rate_per_s for p in parts] == pytest.approx([10 / 3] * 3)
    assert sum(p.max_in_flight for p in parts) == 9 and all(p.requests is None for p in parts)


def test_workers_with_nothing_to_do_are_dropped():
    assert len(split(TrafficPlan(concurrency=1, requests=1), 4)) == 1

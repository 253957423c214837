"""bench's progress (lines off a terminal, on a fake clock), the event-loop lag warning (only when the lag moves a
reported figure beyond its bound, with advice that fits the machine) and a refused detection as a probe record."""

from __future__ import annotations

import io

import aiohttp
import pytest

from specwatch.export.bench_report import lag_warning
from specwatch.export.progress import LineProgress
from specwatch.probe.detect import detection_failure
from specwatch.records import LoopLag, Outcome, RequestRecord
from specwatch.results import ClientLag

S = 1_000_000_000


def done(sent_s: float, tokens: int, ok: bool = True) -> RequestRecord:
    return RequestRecord(api="completions", target="spec", prompt_id="p", domain="chat", warmup=False,
                         intended_ns=int(sent_s * S), sent_ns=int(sent_s * S), done_ns=int(sent_s * S) + 1,
                         chunk_ns=[], chunk_tokens=[], tokens_exact=True, prompt_tokens=1, output_tokens=tokens,
                         outcome=Outcome.OK if ok else Outcome.TIMEOUT)


def test_off_a_terminal_a_line_every_period_and_one_at_the_end():
    clock = [0]
    out = io.StringIO()
    p = LineProgress(4, out, every_s=10, now_ns=lambda: clock[0])
    for t, tokens, ok in [(1, 100, True), (5, 100, True), (12, 50, False), (20, 100, True)]:
        clock[0] = t * S
        p(done(0, tokens, ok))
    assert out.getvalue().splitlines() == [
        "  progress: 3/4 requests (1 failed), 16.7 tok/s aggregate so far, ETA 4 s",  # 200 tokens in 12 s
        "  progress: 4/4 requests (1 failed), 15.0 tok/s aggregate so far, ETA 0 s",
    ]


def lag(p99_ms: float, cpu: float | None, cpus: int = 2, workers: int = 1, distorted: int = 3) -> LoopLag:
    return LoopLag(threshold_ms=1.0, intervals=10, distorted_intervals=distorted, worst_interval_p99_ms=p99_ms,
                   max_ms=p99_ms * 2, samples=1000, distorted_spans_ns=((0, S),) if distorted else (),
                   distorted_cpu_share=cpu, cpus=cpus, workers=workers)


@pytest.mark.parametrize(("p99_ms", "distorted", "shortest_s", "bound_ms", "distorts"), [
    (1.5, 3, 0.030, 1.5, False),  # 30 ms gaps: 5% is 1.5 ms, not exceeded
    (1.6, 3, 0.030, 1.5, True),
    (1.2, 3, 0.002, 1.0, True),  # 2 ms gaps: the 1 ms threshold is the bound
    (0.5, 0, 0.002, 1.0, False),  # no interval over the threshold
    (5.0, 3, None, 1.0, True),  # no latency measured: the threshold
])
def test_the_lag_distorts_only_beyond_its_share_of_the_shortest_median(p99_ms, distorted, shortest_s, bound_ms,
                                                                        distorts):
    c = ClientLag.of(lag(p99_ms, 0.9, distorted=distorted), [done(0.5, 1)], shortest_s)
    assert (c.bound_ms, c.distorts) == (pytest.approx(bound_ms), distorts)


@pytest.mark.parametrize(("cpu", "cpus", "workers", "advice"), [
    (0.97, 2, 1, "the process was CPU-bound (97% busy): try --workers 2"),
    (0.9, 8, 2, "the process was CPU-bound (90% busy): try --workers 4"),
    (0.95, 1, 1, "the probe was CPU-bound (95% busy) on every core it may use (1): fewer streams, or a machine with "
                 "more cores"),
    (0.3, 4, 1, "the process was on a CPU only 30% of that time, so it waited for a core other processes held (or "
                "was paused): free the machine; more --workers would not help"),
])
def test_the_advice_fits_the_machine(cpu, cpus, workers, advice):
    text = lag_warning(ClientLag.of(lag(4.0, cpu, cpus, workers), [done(0.5, 1)], 0.02))
    assert text.startswith("  WARNING:       specwatch's own event loop lagged 4.00 ms at p99 (worst interval), over "
                           "the 1.00 ms within which the latencies hold (5% of the shortest median interval); 1 "
                           "request(s) ran in the 3 of 10 interval(s) over 1 ms")
    assert text.endswith(": " + advice)
    assert ("--workers" in advice and "not help" not in advice) == (cpu >= 0.8 and cpus > workers)


@pytest.mark.parametrize(("exc", "outcome"), [
    (aiohttp.ClientConnectorError(aiohttp.client_reqrep.ConnectionKey("h", 1, False, True, None, None, None),
                                  ConnectionRefusedError(111, "Connection refused")), Outcome.CONNECT_ERROR),
    (TimeoutError(), Outcome.TIMEOUT),
])
def test_a_refused_detection_is_a_failed_probe(exc, outcome):
    r = detection_failure("spec", 5, exc)
    assert (r.outcome, r.target, r.warmup, r.intended_ns, r.output_tokens) == (outcome, "spec", False, 5, 0)
    assert r.error.startswith("detecting the API: ") and r.done_ns >= 5

"""The steady window's rule on synthetic record timings: ramp-up, steady and drain; one stream; an open loop;
refusals (too few requests per stream, a sliver of the run, never all in flight); the figures; old JSON."""

from dataclasses import fields

import orjson
import pytest

from specwatch import codec
from specwatch.analysis import steady_window
from specwatch.analysis.bench_results import analyse
from specwatch.records import Outcome, RequestRecord, RunInfo, Schedule
from specwatch.results import BenchDoc, SteadyWindow

MS = 1_000_000


def rec(sent: int, done: int, *, ok: bool = True, tokens: int = 10, concurrency: int | None = None) -> RequestRecord:
    """A request sent at ``sent`` and ended at ``done`` (ns): ``tokens`` one-token chunks, the first a tenth of
    the way in, the last at the end."""
    step = (done - sent) * 9 // (10 * (tokens - 1))
    chunks = [done - (tokens - 1 - i) * step for i in range(tokens)]
    return RequestRecord("completions", "spec", "p", "d", False, sent, sent, done, chunks, [1] * tokens, True, 5,
                         tokens, Outcome.OK if ok else Outcome.TIMEOUT, probe_concurrency=concurrency)


def spans(rs) -> list[tuple[int, int]]:
    return [(r.sent_ns, r.done_ns) for r in rs]


def closed_loop(streams: int, requests: int, length: int = 100 * MS, gap: int = MS) -> list[RequestRecord]:
    """``streams`` streams started ``gap`` apart, each sending its next request ``gap`` after its last ended, until
    ``requests`` were sent (the closed loop's shared count)."""
    free = [i * gap for i in range(streams)]
    out = []
    for _ in range(requests):
        i = min(range(streams), key=free.__getitem__)
        out.append(rec(free[i], free[i] + length))
        free[i] += length + gap
    return out


TWO = [rec(11, 30), rec(20, 40), rec(31, 50), rec(41, 70), rec(51, 80), rec(60, 90)]


@pytest.mark.parametrize(("records", "streams", "ramp", "steady", "drain"), [
    # two streams: the window opens when both are in flight (20) and closes at the first end (70) after the last
    # send (60); the oracle's steady set of the same timings is the same (tests/unit/test_oracle.py)
    (TWO, 2, [(11, 30)], [(20, 40), (31, 50), (41, 70)], [(51, 80), (60, 90)]),
    # one stream: no ramp-up, no drain (the last request ends the window)
    ([rec(0, 10), rec(10, 20), rec(20, 30)], 1, [], [(0, 10), (10, 20), (20, 30)], []),
    # never two in flight (one ends as the next is sent): the window never opens, all is ramp-up
    ([rec(0, 10), rec(10, 20)], 2, [(0, 10), (10, 20)], [], []),
    # open loop (None): the first tenth is ramp-up; the drain as in a closed loop
    ([rec(10 * i, 10 * i + 15) for i in range(20)], None, [(0, 15), (10, 25)],
     [(10 * i, 10 * i + 15) for i in range(2, 19)], [(190, 205)]),
])
def test_the_window_splits_ramp_up_steady_and_drain(records, streams, ramp, steady, drain):
    s = steady_window.split(records, streams)
    assert (spans(s.ramp_up), spans(s.steady), spans(s.drain)) == (ramp, steady, drain)
    assert [s.phase_of(r) for r in records].count("steady") == len(steady)


@pytest.mark.parametrize(("records", "streams", "reason"), [
    (TWO, 2, "3 request(s) ran entirely inside it, under 2 per stream, 4 (send 4x as many requests as streams or "
             "more)"),
    ([rec(0, 10), rec(10, 20)], 2, "the streams were never all in flight together"),
    # a straggler: one stream's single long request spans the run, the other's ten short ones a tenth of it
    ([rec(0, 1000)] + [rec(1 + 10 * i, 10 + 10 * i) for i in range(10)], 2,
     "it spans 10% of the measured phase, under 25%"),
    ([rec(0, 10, ok=False)], 1, "no request completed"),
    (closed_loop(4, 8), 4, "2 request(s) ran entirely inside it, under 2 per stream, 8 (send 4x as many requests "
                           "as streams or more)"),
    ([rec(10 * i, 10 * i + 15) for i in range(10)], None, "8 request(s) ran entirely inside it, under 10 in an open "
                                                          "loop (send more requests)"),
])
def test_a_window_too_short_to_be_steady_says_why_and_gives_no_figure(records, streams, reason):
    w, _ = steady_window.window(records, streams, None)
    assert (w.steady, w.reason) == (False, reason)
    assert (w.tokens_per_second, w.decode_tokens_per_second, w.output_tokens_per_second) == (None, None, None)


def test_a_steady_window_holds_all_streams_and_their_per_stream_rate():
    records = closed_loop(4, 20)  # 100 ms requests of 10 tokens, 1 ms between a stream's requests
    w, s = steady_window.window(records, 4, 3.5)
    assert (w.steady, w.reason, w.streams, w.requests, w.ramp_up, w.drain) == (True, "", 4, 14, 3, 3)
    assert w.mean_in_flight == pytest.approx(4 * 100 / 101, rel=0.01)  # each stream idles 1 ms in 101
    assert w.tokens_per_second == pytest.approx(100.0)  # 10 tokens / 100 ms
    assert w.decode_tokens_per_second == pytest.approx(9 / 0.09)  # 9 tokens after the first, over 90 ms
    assert w.output_tokens_per_second == pytest.approx(4 * 10 / 0.101, rel=0.03)
    assert w.ttft_s == pytest.approx(0.01, rel=0.01)
    assert w.window_s == pytest.approx((s.end_ns - s.start_ns) / 1e9)
    assert w.server_running == 3.5
    assert s.start_ns == 3 * MS  # the fourth stream's first send


def test_one_stream_keeps_every_measured_request_and_failures_are_in_no_phase():
    records = [rec(0, 100 * MS), rec(100 * MS, 200 * MS, ok=False), rec(200 * MS, 300 * MS)]
    w, s = steady_window.window(records, 1, None)
    assert (w.steady, w.requests, w.ramp_up, w.drain) == (True, 2, 0, 0)
    assert [s.phase_of(r) for r in records] == ["steady", "", "steady"]
    assert w.mean_in_flight == pytest.approx(2 / 3)  # the failed request is not in flight here


@pytest.mark.parametrize(("schedule", "concurrency", "streams", "reason"), [
    (Schedule(40, "inf", 1.0, 4), None, 4, ""),
    (Schedule(), 4, 4, ""),  # a records file from before the schedule: the probes' own count
    (Schedule(), None, None, "the run's stream count is not recorded"),
    (Schedule(40, 5.0, 1.0, 8), None, None, ""),  # an open loop
])
def test_the_stream_count_comes_from_the_schedule(schedule, concurrency, streams, reason):
    records = [rec(r.sent_ns, r.done_ns, concurrency=concurrency) for r in closed_loop(4, 40)]
    w, _ = steady_window.of_run(records, schedule, [3, 4, 4])
    assert (w.streams, w.reason, w.server_running) == (streams, reason, 4.0)


def test_the_bench_document_carries_the_window_and_each_runs_phase_and_old_json_still_loads(tmp_path):
    records = closed_loop(2, 8)
    doc = analyse(RunInfo("http://127.0.0.1:1", "completions", "m", schedule=Schedule(8, "inf", 1.0, 2)),
                  records).doc
    w = doc.results.steady
    assert (w.steady, w.requests, w.ramp_up, w.drain) == (True, 6, 1, 1)
    assert [r.phase for r in doc.runs] == ["ramp_up", *["steady"] * 6, "drain"]  # in send order
    raw = orjson.loads(codec.dumps(doc))
    del raw["results"]["steady"]
    for run in raw["runs"]:
        del run["phase"]
    old = tmp_path / "old.json"
    old.write_bytes(orjson.dumps(raw))
    back = codec.load_as(BenchDoc, str(old))
    assert back.results.steady == SteadyWindow() and not back.results.steady.steady
    assert {r.phase for r in back.runs} == {""}
    assert [f.name for f in fields(back)] == [f.name for f in fields(doc)]

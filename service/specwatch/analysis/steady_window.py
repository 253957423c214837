"""The steady window of a bench run: the span in which all its N streams were in flight, so that a figure "at
16 streams" is 16 streams' and not the average of a ramp-up, 16 streams and a drain. Analysis stage; pure
(the measured records in, a ``results.SteadyWindow`` out).

The rule is the simulator oracle's (``sim/steady.py``: ``/explain`` reads its virtual runs through it), applied
to the client's records, so ``bench`` and ``/explain`` measure the same thing:

- a request is in flight from its send to its end (``sent_ns`` .. ``done_ns``); the ok requests of the measured
  phase count (the warm-up is already apart); one that ends as another is sent is not in flight with it;
- a closed loop of N streams: the window opens when N requests are first in flight together (``full_at``: the
  streams start together, so the N-th send) and closes at the first end after the last send (the moment the
  first stream finishes its last request; from then on fewer than N are in flight);
- an open loop: the window opens after its first tenth of requests (by send) and closes the same way;
- the window's requests are those that ran entirely inside it; the ramp-up (sent before it opened) and the
  drain (ended after it closed) are counted apart, as the warm-up is, and marked on each run (``phase``);
- at one stream the window holds every measured request: there is no ramp-up and no drain.

Its figures: the mean requests in flight (time-weighted over the window), per-stream tok/s (each request's
tokens / its send to end, the mean over the window's requests: what ``/explain`` calls ``tokens_per_second``),
per-stream decode tok/s (token-weighted after each request's first chunk), aggregate output tok/s (every token
that arrived inside the window, whichever request carried it, over the window) and mean TTFT.

Too short to be steady (figures refused, ``reason`` says why): fewer than ``MIN_PER_STREAM`` requests per stream
ran inside it (``MIN_OPEN_LOOP`` in an open loop), or the window is under ``MIN_SHARE`` of the measured phase.
A closed loop of R requests over N equal streams keeps about R - 2N of them (a wave of ramp-up, a wave of
drain), so a steady figure at N streams needs R of 4N or more.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from ..records import RequestRecord, Schedule
from ..results import Phase, SteadyWindow

MIN_PER_STREAM = 2  # requests per stream that ran entirely inside the window
MIN_OPEN_LOOP = 10  # requests inside an open loop's window
MIN_SHARE = 0.25  # of the measured phase (first send to last end)
OPEN_RAMP_SHARE = 0.1  # an open loop's ramp-up: its first tenth of requests


@dataclass(frozen=True, slots=True)
class Split:
    """The ok requests against the window ``[start_ns, end_ns]`` (``opened`` False: it never opened, and every
    request counts as ramp-up)."""

    opened: bool
    start_ns: int
    end_ns: int
    ramp_up: tuple[RequestRecord, ...]
    steady: tuple[RequestRecord, ...]
    drain: tuple[RequestRecord, ...]

    def phase_of(self, rec: RequestRecord) -> Phase:
        """Where ``rec`` ran against the window ("" for a failed request: it is in no figure here)."""
        if not rec.ok:
            return ""
        if not self.opened or rec.sent_ns < self.start_ns:
            return "ramp_up"
        return "drain" if rec.done_ns > self.end_ns else "steady"


def full_at(records: Sequence[RequestRecord], streams: int) -> int | None:
    """The first moment ``streams`` requests are in flight together (None: never)."""
    events = sorted([(r.sent_ns, 1) for r in records] + [(r.done_ns, -1) for r in records])  # ends sort first
    n = 0
    for t, step in events:
        n += step
        if n >= streams:
            return t
    return None


def in_flight(records: Sequence[RequestRecord], start_ns: int, end_ns: int) -> float:
    """Requests between their send and their end, time-averaged over ``[start_ns, end_ns]``."""
    if end_ns <= start_ns:
        return 0.0
    total = sum(max(0, min(r.done_ns, end_ns) - max(r.sent_ns, start_ns)) for r in records)
    return total / (end_ns - start_ns)


def split(ok: Sequence[RequestRecord], streams: int | None) -> Split:
    """``ok``: the measured phase's ok requests; ``streams``: the closed loop's N (None: an open loop)."""
    done = sorted(ok, key=lambda r: r.sent_ns)
    if not done:
        return Split(False, 0, 0, (), (), ())
    opens = (full_at(done, streams) if streams is not None
             else done[math.ceil(len(done) * OPEN_RAMP_SHARE) - 1].sent_ns + 1)
    if opens is None:
        return Split(False, 0, 0, tuple(done), (), ())
    last_send = done[-1].sent_ns
    closes = min((r.done_ns for r in done if r.done_ns > last_send), default=last_send)
    ramp = tuple(r for r in done if r.sent_ns < opens)
    drain = tuple(r for r in done if r.sent_ns >= opens and r.done_ns > closes)
    steady = tuple(r for r in done if r.sent_ns >= opens and r.done_ns <= closes)
    return Split(True, opens, closes, ramp, steady, drain)


def refusal(s: Split, streams: int | None, phase_ns: int) -> str:
    """Why the window is too short to be steady ("" when it is steady)."""
    n = len(s.steady)
    if streams == 1:
        return "" if n else "no request completed"
    if not n:
        return ("the streams were never all in flight together" if streams is not None and not s.opened
                else "no request ran entirely inside it")
    need = MIN_PER_STREAM * streams if streams is not None else MIN_OPEN_LOOP
    if n < need:
        per, hint = ((f"{MIN_PER_STREAM} per stream, {need}", f"send {MIN_PER_STREAM + 2}x as many requests as "
                      "streams or more") if streams is not None else (f"{need} in an open loop", "send more requests"))
        return f"{n} request(s) ran entirely inside it, under {per} ({hint})"
    share = (s.end_ns - s.start_ns) / phase_ns if phase_ns > 0 else 0.0
    if share < MIN_SHARE:
        return f"it spans {100 * share:.0f}% of the measured phase, under {100 * MIN_SHARE:.0f}%"
    return ""


def of_run(measured: Sequence[RequestRecord], schedule: Schedule, server_running: Sequence[int]
           ) -> tuple[SteadyWindow, Split]:
    """The window of a run with ``schedule``'s arrivals; ``server_running``: the counts its ``/metrics`` gave."""
    load = float(statistics.median(server_running)) if server_running else None
    if schedule.request_rate != "inf":
        return window(measured, None, load)
    streams = schedule.max_concurrency or max((r.probe_concurrency or 0 for r in measured), default=0)
    if not streams:
        return SteadyWindow(reason="the run's stream count is not recorded", server_running=load), split([], None)
    return window(measured, streams, load)


def window(measured: Sequence[RequestRecord], streams: int | None, server_running: float | None
           ) -> tuple[SteadyWindow, Split]:
    """``measured``: the run's records without the warm-up (failed ones are left out here)."""
    ok = [r for r in measured if r.ok]
    s = split(ok, streams)
    phase_ns = (max(r.done_ns for r in ok) - min(r.sent_ns for r in ok)) if ok else 0
    span_ns = s.end_ns - s.start_ns
    base = SteadyWindow(steady=False, reason=refusal(s, streams, phase_ns), streams=streams, window_s=span_ns / 1e9,
                        window_share=span_ns / phase_ns if phase_ns > 0 else 0.0, requests=len(s.steady),
                        ramp_up=len(s.ramp_up), drain=len(s.drain),
                        mean_in_flight=in_flight(ok, s.start_ns, s.end_ns) if span_ns > 0 else None,
                        server_running=server_running)
    if base.reason:
        return base, s
    return figures(base, s, ok), s


def figures(base: SteadyWindow, s: Split, ok: Sequence[RequestRecord]) -> SteadyWindow:
    """``base`` with the window's figures (it is steady)."""
    per = [t for r in s.steady if (t := r.service_tokens_per_second) is not None]
    decode_ns = sum(r.decode_ns for r in s.steady)
    ttft = [t for r in s.steady if (t := r.ttft_ns) is not None]
    span_ns = s.end_ns - s.start_ns
    return replace(
        base, steady=True, reason="",
        tokens_per_second=sum(per) / len(per) if per else None,
        decode_tokens_per_second=sum(r.decode_tokens for r in s.steady) * 1e9 / decode_ns if decode_ns else None,
        output_tokens_per_second=tokens_inside(ok, s.start_ns, s.end_ns) * 1e9 / span_ns if span_ns > 0 else None,
        ttft_s=sum(ttft) / len(ttft) / 1e9 if ttft else None)


def tokens_inside(records: Sequence[RequestRecord], start_ns: int, end_ns: int) -> int:
    """Tokens of the chunks that arrived in ``(start_ns, end_ns]``, whichever request carried them."""
    total = 0
    for r in records:
        if r.chunk_ns and r.chunk_ns[-1] > start_ns and r.chunk_ns[0] <= end_ns:
            at = np.asarray(r.chunk_ns, dtype=np.int64)
            inside = (at > start_ns) & (at <= end_ns)
            total += int(np.asarray(r.chunk_tokens, dtype=np.int64)[inside].sum())
    return total

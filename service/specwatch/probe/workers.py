"""``--workers N``: the probe load split over N processes, each with its own uvloop, merged into one sink.

Source stage. One Python event loop tops out at one core; past that, streams wait for the loop and the
client's delay reads as the server's latency. ``split`` divides a ``TrafficPlan`` (streams, requests, rate,
warm-up, in-flight cap; each worker its own Poisson seed); every worker runs the same ``Traffic`` as a single
process would, stamps its own arrivals (``CLOCK_MONOTONIC`` is shared by every process, so timestamps
compare across workers), and ships its records to the parent every ``flush_s`` as one pickled batch —
records, not histograms, because the parent's sinks (the bench report, the daemon's load tracker and
Prometheus histograms) all read records; the parent records them vectorised, so merging stays exact and
cheap. Each worker's event-loop lag intervals come back at its end.

The parent asks workers to stop over their pipe (they drain their streams in flight, as a single process
does on SIGTERM); workers ignore SIGINT, which a terminal sends to the whole process group.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import multiprocessing
import pickle
import signal
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess

from ..records import RequestRecord
from .client import Access, StreamTransport, Timeouts, make_streams
from .lag import LagInterval, LagMonitor
from .prompts import Prompt
from .stream import GenParams, Target
from .traffic import PromptCycle, Traffic, TrafficPlan

log = logging.getLogger("specwatch")
FLUSH_S = 0.25
STOP = b"stop"


def shares(total: int, n: int) -> list[int]:
    """``total`` split into ``n`` integers that differ by at most one, larger first."""
    return [total // n + (1 if i < total % n else 0) for i in range(n)]


def split(plan: TrafficPlan, n: int) -> list[TrafficPlan]:
    """The plan's schedule over ``n`` workers; workers left with nothing to do are dropped."""
    conc = shares(plan.concurrency, n)
    reqs = shares(plan.requests, n) if plan.requests is not None else [None] * n
    warm = shares(plan.warmup, n)
    cap = shares(max(plan.max_in_flight, n), n)
    out = []
    for i in range(n):
        p = dataclasses.replace(plan, concurrency=max(1, conc[i]), requests=reqs[i], warmup=warm[i],
                                max_in_flight=cap[i], seed=plan.seed + i,
                                rate_per_s=None if plan.rate_per_s is None else plan.rate_per_s / n)
        if (plan.rate_per_s is None and conc[i] == 0) or reqs[i] == 0:
            continue
        out.append(p)
    return out


@dataclass(frozen=True)
class Job:
    """Everything one worker needs, picklable."""

    index: int
    targets: tuple[Target, ...]
    prompts: tuple[Prompt, ...]
    params: GenParams
    plan: TrafficPlan
    timeouts: Timeouts
    access: Access
    keep_texts: bool = False  # --tokenizer: the parent splits the counts exactly
    flush_s: float = FLUSH_S


def jobs(plan: TrafficPlan, n: int, targets: Sequence[Target], prompts: Sequence[Prompt], params: GenParams,
         timeouts: Timeouts, access: Access, keep_texts: bool = False) -> list[Job]:
    out = []
    for i, p in enumerate(split(plan, n)):
        shift = (i * len(prompts)) // n  # each worker starts elsewhere in the prompt set
        out.append(Job(i, tuple(targets), tuple(prompts[shift:]) + tuple(prompts[:shift]), params, p, timeouts,
                       access, keep_texts))
    return out


# ---- the worker process -------------------------------------------------------------------------------

def _worker(conn: Connection, stop_conn: Connection, job: Job) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    import uvloop

    uvloop.run(_work(conn, stop_conn, job))


async def _work(conn: Connection, stop_conn: Connection, job: Job) -> None:
    """``conn`` (blocking, to the parent) carries records; ``stop_conn`` (from the parent) is watched by the
    loop, which makes its descriptor non-blocking: the two must not share one."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    batch: list[RequestRecord] = []

    def on_parent() -> None:
        with contextlib.suppress(EOFError, OSError):
            stop_conn.recv_bytes()
        stop.set()  # a stop message, or the parent went away
        loop.remove_reader(stop_conn.fileno())

    def flush() -> None:
        if batch:
            conn.send_bytes(pickle.dumps(("records", batch), protocol=pickle.HIGHEST_PROTOCOL))
            batch.clear()

    async def flusher() -> None:
        while True:
            await asyncio.sleep(job.flush_s)
            flush()

    loop.add_reader(stop_conn.fileno(), on_parent)
    monitor = LagMonitor(interval_s=1.0)
    async with make_streams(job.plan.max_streams, job.timeouts, job.access) as streams:
        helpers = [asyncio.create_task(monitor.run()), asyncio.create_task(flusher())]
        try:
            await Traffic(StreamTransport(streams), PromptCycle(job.prompts, job.targets), job.params, job.plan,
                       batch.append, stop, job.timeouts, keep_texts=job.keep_texts).run()
        finally:
            for t in helpers:
                t.cancel()
            await asyncio.gather(*helpers, return_exceptions=True)
    flush()
    monitor.close()
    conn.send_bytes(pickle.dumps(("done", monitor.intervals)))


# ---- the parent ---------------------------------------------------------------------------------------

class Workers:
    def __init__(self, jobs: Sequence[Job]) -> None:
        self.jobs = list(jobs)
        self.lag: list[LagInterval] = []  # every finished worker's event-loop lag intervals
        self.failed: list[str] = []  # workers that died: their unsent records are lost

    def _start(self) -> tuple[list[BaseProcess], list[Connection], list[Connection]]:
        """Every job's process, with its record pipe (worker → parent) and stop pipe (parent → worker)."""
        ctx = multiprocessing.get_context("spawn")  # a fork of a running event loop is not safe
        procs: list[BaseProcess] = []
        conns, stops = [], []
        for job in self.jobs:
            mine, theirs = ctx.Pipe(duplex=False)
            their_stop, my_stop = ctx.Pipe(duplex=False)
            p = ctx.Process(target=_worker, args=(theirs, their_stop, job), name=f"specwatch-worker-{job.index}",
                            daemon=True)
            p.start()
            theirs.close()
            their_stop.close()
            procs.append(p)
            conns.append(mine)
            stops.append(my_stop)
        return procs, conns, stops

    async def run(self, sink: Callable[[RequestRecord], None], stop: asyncio.Event) -> None:
        """Start the workers, feed every record to ``sink`` on this loop, return when all have finished
        (``stop``: ask them to drain and finish). Cancelled: the workers are killed."""
        loop = asyncio.get_running_loop()
        procs, conns, stops = self._start()
        finished = [loop.create_future() for _ in procs]
        for conn, fut in zip(conns, finished, strict=True):
            threading.Thread(target=_read, args=(conn, loop, sink, fut), daemon=True).start()

        async def relay_stop() -> None:
            await stop.wait()
            for c in stops:
                with contextlib.suppress(OSError):
                    c.send_bytes(STOP)

        relay = asyncio.create_task(relay_stop())
        try:
            results = await asyncio.gather(*finished)
        except asyncio.CancelledError:
            for p in procs:
                p.kill()
            raise
        finally:
            relay.cancel()
            for p in procs:
                await asyncio.to_thread(p.join, 10)
                if p.exitcode not in (0, None):
                    self.failed.append(f"{p.name} exited with code {p.exitcode}")
                    log.warning("probe worker %s exited with code %s", p.name, p.exitcode)
            for c in (*conns, *stops):
                c.close()
        self.lag = [iv for r in results if r is not None for iv in r]


def _read(conn: Connection, loop: asyncio.AbstractEventLoop, sink: Callable[[RequestRecord], None],
          finished: asyncio.Future[list[LagInterval] | None]) -> None:
    """A thread per worker: blocking reads of its pipe, each batch of records handed to the loop's sink; the
    worker's lag intervals (None if it died first) settle ``finished``."""
    def deliver(batch: list[RequestRecord]) -> None:
        for rec in batch:
            sink(rec)

    result: list[LagInterval] | None = None
    try:
        while True:
            kind, payload = pickle.loads(conn.recv_bytes())
            if kind == "records":
                loop.call_soon_threadsafe(deliver, payload)
            else:
                result = payload
                break
    except (EOFError, OSError):
        pass

    def settle() -> None:
        if not finished.done():
            finished.set_result(result)

    loop.call_soon_threadsafe(settle)

"""Run the probes: in this process over the streaming transport, or split over ``--workers`` processes.
Source stage; the one start-up shared by ``bench`` (bounded) and the daemon (until stopped)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass

from ..errors import WorkerError
from .client import Access, StreamTransport, Timeouts, make_streams
from .lag import LagInterval, LagMonitor
from .prompts import Prompt
from .stream import GenParams, Target
from .traffic import PromptCycle, Sink, Traffic, TrafficPlan
from .workers import Workers, jobs


@dataclass(frozen=True, slots=True)
class ProbeSetup:
    plan: TrafficPlan
    targets: Sequence[Target]
    prompts: Sequence[Prompt]
    params: GenParams
    limits: Timeouts
    access: Access
    workers: int = 1
    keep_texts: bool = False  # --tokenizer: keep chunk texts where a server sends no per-chunk usage


async def run_probes(setup: ProbeSetup, sink: Sink, stop: asyncio.Event, lag: LagMonitor | None = None
                     ) -> list[LagInterval]:
    """Until the plan's requests are done or ``stop``. The event-loop lag intervals of the run: every worker's,
    or ``lag``'s, sampled beside the load in this process (none without it). ``WorkerError`` when a worker
    process died: the run is incomplete."""
    if setup.workers > 1:
        workers = Workers(jobs(setup.plan, setup.workers, setup.targets, setup.prompts, setup.params, setup.limits,
                               setup.access, setup.keep_texts))
        await workers.run(sink, stop)
        if workers.failed:
            raise WorkerError("probe worker(s) failed, the run is incomplete: " + "; ".join(workers.failed))
        return workers.lag
    async with make_streams(setup.plan.max_streams, setup.limits, setup.access) as streams:
        load = Traffic(StreamTransport(streams), PromptCycle(setup.prompts, setup.targets), setup.params, setup.plan,
                    sink, stop, setup.limits, keep_texts=setup.keep_texts)
        if lag is None:
            await load.run()
            return []
        task = asyncio.create_task(lag.run())
        try:
            await load.run()
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        lag.close()
        return lag.intervals

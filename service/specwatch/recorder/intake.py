"""Finished probes on their way into the recorder: kept on the loop as they end, recorded later in bounded
slices (never a millisecond of loop time at once, so no stream in flight sees the recorder as server latency).

Recorder stage. Each record is enriched here, once — the tokenizer's exact split where a server sent only a
final total, the server's load while it ran — then recorded, added to the load curve and handed to every
observer (the exporter's per-record metrics): one explicit fan-out.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Callable, Sequence

from ..probe.tokens import Tokenizer, refine
from ..records import RequestRecord
from .load import LoadCurve, LoadTracker
from .observations import Observations, observe
from .windows import Recorder

RECORD_EVERY_S = 0.1
RECORD_SLICE_S = 0.002  # the longest the recorder holds the loop at once
Observer = Callable[[RequestRecord, Observations | None], None]


class ProbeIntake:
    def __init__(self, recorder: Recorder, load: LoadTracker, load_curve: LoadCurve, tokenizer: Tokenizer | None,
                 observers: Sequence[Observer]) -> None:
        self.recorder, self.load, self.load_curve, self.tokenizer = recorder, load, load_curve, tokenizer
        self.observers = tuple(observers)
        self.pending: list[RequestRecord] = []  # finished probes not yet recorded

    def add(self, rec: RequestRecord) -> None:
        self.pending.append(rec)

    def record(self, rec: RequestRecord) -> None:
        now = time.monotonic_ns()
        if self.tokenizer is not None:
            rec = refine(rec, self.tokenizer)
        rec = dataclasses.replace(rec, server_load=self.load.during(rec.sent_ns, rec.done_ns))
        if rec.target == "spec" and not rec.warmup:
            self.load_curve.add(rec, rec.server_load, now)
        obs = observe(rec)
        self.recorder.record(rec, obs)
        for observer in self.observers:
            observer(rec, obs)

    def drain(self, budget_s: float | None = None) -> None:
        """Record pending probes, oldest first; with a budget, stop once it is spent."""
        t0 = time.perf_counter()
        done = 0
        try:
            for rec in self.pending:
                self.record(rec)
                done += 1
                if budget_s is not None and time.perf_counter() - t0 > budget_s:
                    break
        finally:
            del self.pending[:done]

    async def run(self) -> None:
        """Records finished probes in slices of at most ``RECORD_SLICE_S`` of loop time, between streams."""
        while True:
            await asyncio.sleep(0 if self.pending else RECORD_EVERY_S)  # between slices, just yield
            self.drain(RECORD_SLICE_S)

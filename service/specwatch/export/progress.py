"""bench's progress while the streams run: requests done of the total, aggregate tok/s so far and the time left.
Exporter stage, fed one finished measured record at a time (``probe.bounded.Printer``'s ``progress``).

On a terminal (stderr a TTY) a tqdm bar, redrawn at most every ``mininterval``; otherwise a plain line every
``every_s`` seconds and one at the end, so a CI log gets a few lines instead of carriage returns. Either costs
a counter update per request on the event loop, nothing per chunk.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import IO

from tqdm import tqdm

from ..records import RequestRecord

EVERY_S = 10.0


class Tally:
    """Requests done, failed and output tokens since the first measured send; the aggregate rate and what is left."""

    def __init__(self, total: int, now_ns: Callable[[], int] = time.monotonic_ns) -> None:
        self.total = total
        self.now_ns = now_ns
        self.done = self.failed = self.tokens = 0
        self.first_ns: int | None = None

    def add(self, rec: RequestRecord) -> None:
        self.done += 1
        self.failed += not rec.ok
        self.tokens += rec.output_tokens if rec.ok else 0
        self.first_ns = rec.sent_ns if self.first_ns is None else min(self.first_ns, rec.sent_ns)

    def elapsed_s(self) -> float:
        return (self.now_ns() - self.first_ns) / 1e9 if self.first_ns is not None else 0.0

    def tokens_per_second(self) -> float | None:
        e = self.elapsed_s()
        return self.tokens / e if e > 0 else None

    def eta_s(self) -> float | None:
        e = self.elapsed_s()
        return e / self.done * (self.total - self.done) if self.done and e > 0 else None

    def line(self) -> str:
        tps, eta = self.tokens_per_second(), self.eta_s()
        return (f"  progress: {self.done}/{self.total} requests ({self.failed} failed), "
                + ("- tok/s" if tps is None else f"{tps:.1f} tok/s") + " aggregate so far, ETA "
                + ("-" if eta is None else f"{eta:.0f} s"))


class LineProgress:
    """Not a terminal: a line every ``every_s`` seconds and one when the last request is in."""

    def __init__(self, total: int, out: IO[str], every_s: float = EVERY_S,
                 now_ns: Callable[[], int] = time.monotonic_ns) -> None:
        self.tally = Tally(total, now_ns)
        self.out = out
        self.every_ns = int(every_s * 1e9)
        self.now_ns = now_ns
        self.last_ns = now_ns()

    def __call__(self, rec: RequestRecord) -> None:
        self.tally.add(rec)
        now = self.now_ns()
        if now - self.last_ns >= self.every_ns or self.tally.done == self.tally.total:
            self.last_ns = now
            print(self.tally.line(), file=self.out, flush=True)

    def close(self) -> None:
        pass


class BarProgress:
    """A terminal: tqdm's bar (done/total, its own ETA) with the aggregate tok/s and failures as its postfix."""

    def __init__(self, total: int, out: IO[str]) -> None:
        self.tally = Tally(total)
        self.bar = tqdm(total=total, unit="req", file=out, desc="  requests", dynamic_ncols=True, leave=True)

    def __call__(self, rec: RequestRecord) -> None:
        self.tally.add(rec)
        tps = self.tally.tokens_per_second()
        self.bar.set_postfix_str(("-" if tps is None else f"{tps:.1f}") + f" tok/s aggregate, "
                                 f"{self.tally.failed} failed", refresh=False)
        self.bar.update(1)

    def close(self) -> None:
        self.bar.close()


def progress_for(total: int, out: IO[str]) -> LineProgress | BarProgress:
    return BarProgress(total, out) if out.isatty() else LineProgress(total, out)

"""Log line → ``ParseResult`` → line counts and server samples. Server side, parse-stage glue, per line.

The counts live here once; the exporter reads them at scrape time. Malformed lines are logged at most once
per ``log_every_s`` with their reason (the reason text never becomes a label).
"""

from __future__ import annotations

import collections
import logging
import time
from collections.abc import Callable

from ..ratelog import RateLimited
from ..records import LOG_RESULTS, ServerSample
from .logparse import parse_line

log = logging.getLogger("specwatch.logs")


class LogIngest:
    def __init__(self, on_sample: Callable[[ServerSample], None], log_every_s: float = 30.0) -> None:
        self.on_sample = on_sample
        self.counts: collections.Counter[str] = collections.Counter(dict.fromkeys(LOG_RESULTS, 0))
        self.last_sample_wall = 0.0  # Unix time of the last parsed sample; 0 before the first
        self.warn = RateLimited(log, log_every_s)

    def __call__(self, line: str) -> None:
        v = parse_line(line)
        self.counts[v.result] += 1
        if v.sample is not None:
            self.last_sample_wall = time.time()
            self.on_sample(v.sample)
        elif v.result == "malformed":
            self.warn.warning("malformed", "malformed server log line: %s: %.200s", v.reason, line)

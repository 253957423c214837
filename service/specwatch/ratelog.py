"""Rate-limited warnings: error text goes to the log (never to a label), at most once per ``every_s`` per key,
with the count of those not shown. Used at every boundary where trouble repeats (malformed log lines, failed
probes, failed scrapes, a full disk under --hlog)."""

from __future__ import annotations

import logging
import time
from collections.abc import Hashable


class RateLimited:
    def __init__(self, logger: logging.Logger, every_s: float = 60.0) -> None:
        self.logger = logger
        self.every_s = every_s
        self._seen: dict[Hashable, tuple[float, int]] = {}  # key -> (last shown, suppressed since)

    def warning(self, key: Hashable, msg: str, *args: object) -> None:
        now = time.monotonic()
        last, quiet = self._seen.get(key, (-self.every_s, 0))
        if now - last < self.every_s:
            self._seen[key] = (last, quiet + 1)
            return
        more = f" ({quiet} more since the last report)" if quiet else ""
        self.logger.warning(msg + "%s", *args, more)
        self._seen[key] = (now, 0)

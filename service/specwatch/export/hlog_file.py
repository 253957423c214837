"""The daemon's interval log file (``--hlog``): opened at start, one interval appended per tick, closed at the
end. Exporter stage, written on the tick only.

A path that cannot be opened stops start-up (``OSError``, named by ``specwatch run``). A write that fails
later (a full disk) must not take the sidecar down: it is counted (``on_error``) and said at most once a
minute.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable

from ..ratelog import RateLimited
from ..recorder.windows import Interval
from .hlog import HlogWriter


class HlogFile:
    def __init__(self, path: str, on_error: Callable[[], None], warn: RateLimited) -> None:
        self.path = path
        self.on_error = on_error
        self.warn = warn
        self._file = open(path, "a", encoding="utf-8")  # noqa: SIM115 (closed by close(), at the daemon's end)
        self._writer = HlogWriter(self._file)

    def write(self, interval: Interval) -> None:
        try:
            self._writer.write(interval)
        except OSError as exc:
            self.on_error()
            self.warn.warning("hlog", "cannot write the interval log %s: %s", self.path, exc.strerror)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._file.close()

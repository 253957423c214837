"""Whether each target answers, and whether the daemon is ready (``/readyz``).

Recorder stage: state kept from the probes' records as each ends and from target detection, read by the
readiness endpoint and the tick's snapshot. A target is up while its last probe reached it (any outcome but
a connect error); the daemon is ready while the speculative target is up and answered a probe well within
``fresh_s``. Each change of a target's state is handed to ``on_change`` (the exporter's ``target_up``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable

from ..records import Outcome, RequestRecord


class Liveness:
    def __init__(self, targets: Iterable[str], fresh_s: float, on_change: Callable[[str, bool], None]) -> None:
        self.up: dict[str, bool] = dict.fromkeys(targets, False)
        self.last_ok: dict[str, float] = {}  # monotonic seconds of each target's last successful probe
        self.fresh_s = fresh_s
        self.on_change = on_change

    def set_up(self, target: str, up: bool) -> None:
        self.up[target] = up
        self.on_change(target, up)

    def saw(self, rec: RequestRecord) -> None:
        """A probe ended: a connect error says the target is down; any other outcome, that it answered."""
        self.set_up(rec.target, rec.outcome is not Outcome.CONNECT_ERROR)
        if rec.ok:
            self.last_ok[rec.target] = time.monotonic()

    def ready(self) -> bool:
        last = self.last_ok.get("spec")
        return self.up.get("spec", False) and last is not None and time.monotonic() - last < self.fresh_s

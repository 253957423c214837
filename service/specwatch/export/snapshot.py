"""The daemon's snapshot: what it knows at the last tick, one typed record per tick, read by the terminal
view, ``/api/summary`` (as JSON) and the page. Exporter stage; built from what the tick already computed,
nothing recomputed here."""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass

from ..analysis.by_load import LoadVerdict
from ..analysis.live_advisor import Advice
from ..analysis.verdict import Verdict
from ..probe.lag import LagInterval
from ..records import ProbeWindow, ServerSample, ServerWindow, SourceHealth
from ..results import Check


@dataclass(frozen=True, slots=True)
class TargetState:
    up: bool


@dataclass(frozen=True, slots=True)
class ServerState:
    last: dict[str, ServerSample]  # the last sample per ServerSample.source
    windows: dict[str, ServerWindow]  # by window label


@dataclass(frozen=True, slots=True)
class LogState:
    source: str | None  # what is followed ("file PATH", "command", "stdin"), None when no log is configured
    up: bool
    error: str
    lines: dict[str, int]  # by records.LOG_RESULTS
    skipped: dict[str, int]  # by records.SKIP_REASONS
    last_sample_age_s: float | None


@dataclass(frozen=True, slots=True)
class Snapshot:
    time: str
    uptime_s: float
    server_url: str
    api: str | None
    metrics_url: str
    targets: dict[str, TargetState]
    window: str  # the verdict window's label
    probe: dict[str, ProbeWindow]  # the verdict window, per target
    windows: dict[str, dict[str, ProbeWindow]]  # by window label (cumulative included), per target
    server: ServerState
    verdict: Verdict
    log: LogState
    by_load: LoadVerdict | None = None  # speedup per load bucket, the crossover, past it or not
    baseline: str | None = None  # what the baseline is: a fixed value, a curve, an A/B server
    client_lag: LagInterval | None = None  # the daemon's own event-loop lag over the last interval
    advisor: Advice | None = None  # the live advisor: step counts by load
    checks: tuple[Check, ...] = ()  # the honesty checks (``analysis.daemon_checks``)


def log_state(source: str | None, h: SourceHealth) -> LogState:
    last = h.last_sample_unix_s
    return LogState(source=source, up=h.up, error=h.last_error, lines=dict(h.lines), skipped=dict(h.skipped),
                    last_sample_age_s=round(time.time() - last, 1) if last else None)


def server_state(last: Mapping[str, ServerSample], windows: Mapping[str, ServerWindow]) -> ServerState:
    return ServerState(last=dict(last), windows=dict(windows))

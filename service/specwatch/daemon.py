"""The sidecar daemon that ``specwatch run`` (and ``demo``) start. Wiring and lifecycle only: sources →
recorder → analysis → exporters.

Long-lived tasks (prober, log source, scrape, ticker, loop-lag timer, view) run under one TaskGroup: if one
dies, the daemon says why and exits non-zero. First SIGTERM/SIGINT: stop scheduling probes, drain those in
flight (bounded by drain_timeout_s), flush the last interval and the .hlog, exit 0. A second signal exits at
once.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import os
import signal
import time
from collections.abc import Callable, Coroutine
from typing import IO, Any

import aiohttp
from aiohttp import web

from . import codec
from . import config as config_mod
from .analysis import baseline as baseline_mod
from .analysis import engine_flags, live_advisor, spec_profile
from .analysis.by_load import LoadVerdict
from .analysis.checks import random_like
from .analysis.daemon_checks import daemon_checks
from .analysis.tick import TickInputs, TickResult, tick
from .analysis.verdict import Judge, with_checks
from .errors import AnalysisError, ConfigError, RecordFileError, WorkerError
from .export.hlog_file import HlogFile
from .export.http import Endpoints
from .export.page import History
from .export.page import render as render_page
from .export.prometheus import Exporter, window_label
from .export.snapshot import Snapshot, TargetState, log_state, server_state
from .export.view import View
from .probe import prompts as prompt_sets
from .probe.client import Access, Timeouts, make_session
from .probe.detect import ServerInfo, wait_for_target
from .probe.lag import LagInterval, LagMonitor
from .probe.runner import ProbeSetup, run_probes
from .probe.stream import GenParams
from .probe.tokens import Tokenizer
from .probe.traffic import TrafficPlan
from .ratelog import RateLimited
from .recorder.intake import ProbeIntake
from .recorder.liveness import Liveness
from .recorder.load import LoadCurve, LoadTracker
from .recorder.recent import Recent
from .recorder.samples import SampleWindows
from .recorder.windows import Recorder
from .records import RequestRecord, ServerSample, SourceHealth, TargetName
from .results import Check, SweepDoc
from .server.ingest import LogIngest
from .server.logtail import CommandSource, FileFollower, LogSource, StdinSource, kill_now
from .server.scrape import ScrapeState, scrape_forever

log = logging.getLogger("specwatch")
# the open loop's cap on probes in flight (--rate-per-s): room for a slow server's backlog, still bounded
OPEN_LOOP_MIN_IN_FLIGHT = 4
OPEN_LOOP_IN_FLIGHT_PER_STREAM = 4


def make_source(cfg: config_mod.Config, ingest: LogIngest) -> tuple[LogSource | None, str | None]:
    """The configured log source and how the snapshot names it."""
    if cfg.log_file:
        return FileFollower(cfg.log_file, ingest, from_start=cfg.from_start), f"file {cfg.log_file}"
    if cfg.log_cmd:
        return CommandSource(cfg.log_cmd, ingest), "command"
    if cfg.log_stdin:
        return StdinSource(ingest), "stdin"
    return None, None


def read_prior(path: str, max_steps: int) -> live_advisor.Prior:
    """``--advisor-prior``: a sweep's results, fitted at start, or a speculation profile's acceptance; a file
    that is neither fails here, with why."""
    try:
        profile = spec_profile.load(path)
        if profile is not None:
            if profile.validation is not None and not profile.validation.mean_consistency.passed:
                log.warning("--advisor-prior %s: %s", path, profile.validation.mean_consistency.text())
            return live_advisor.prior_of_profile(profile, f"speculation profile {os.path.basename(path)}")
        try:
            doc = codec.load_as(SweepDoc, path)
        except RecordFileError as exc:
            raise RecordFileError(f"{exc} (expected a sweep.json written by specwatch sweep, or a "
                                  "speculation_profile.json, Model-Optimizer schema 1.x)") from None
        return live_advisor.prior_of(doc.configurations, f"sweep {os.path.basename(path)}", max_steps)
    except OSError as exc:
        raise ConfigError(f"--advisor-prior {path}: {exc.strerror}") from None
    except (RecordFileError, AnalysisError) as exc:
        raise ConfigError(f"--advisor-prior: {exc}") from None


class Daemon:
    """Sources → recorder → analysis → exporters, wired once: the sinks (per event), the tasks, the tick."""

    def __init__(self, cfg: config_mod.Config, out: IO[str] | None = None) -> None:
        self.cfg = cfg
        self.targets = cfg.targets
        self.exporter = Exporter(self.targets, cfg.windows)
        # 2 significant digits (values within 1%) keep a long-running daemon's windows small; bench uses 3
        self.recorder = Recorder(cfg.interval_s, cfg.windows, digits=2)
        self.samples = SampleWindows(cfg.windows)
        self.judge = Judge(cfg.hysteresis, cfg.min_requests)
        self.view = View(cfg.view, out)
        self.ingest = LogIngest(lambda s: self.on_sample(s, "log"))
        self.source, self.source_name = make_source(cfg, self.ingest)
        self.scrape_state = ScrapeState()
        self.exporter.set_health_source(self.health)
        self.warn = RateLimited(log)
        self.hlog = HlogFile(cfg.hlog, self.exporter.count_hlog_error, self.warn) if cfg.hlog else None
        self.stop = asyncio.Event()
        self.started = time.monotonic()
        self.api: dict[str, str] = {}
        self.liveness = Liveness(self.targets, max(60.0, 5 * cfg.interval_s), self.exporter.set_target_up)
        self.snapshot: Snapshot | None = None
        self.history = History()
        self.exit_now_hooks: list[Callable[[], None]] = []  # run before a second signal's immediate exit
        self.exporter.set_fixed_baseline(cfg.baseline_tps)
        self.curve = baseline_mod.BaselineCurve.fixed(cfg.baseline_tps) if cfg.baseline_tps else \
            baseline_mod.read(cfg.baseline_curve) if cfg.baseline_curve else None
        self.load = LoadTracker(stale_s=max(30.0, 3 * cfg.interval_s))
        self.load_curve = LoadCurve(cfg.load_curve_window_s)
        self.by_load: LoadVerdict | None = None
        self.setup = engine_flags.ServerSetup("unknown")
        self.prior = read_prior(cfg.advisor_prior, cfg.advisor_max_steps) if cfg.advisor_prior else None
        self.speculative_config = json.loads(cfg.speculative_config) if cfg.speculative_config else None
        self.tokenizer = Tokenizer(cfg.tokenizer) if cfg.tokenizer else None
        self.recent = Recent()  # the last probes, for the honesty checks
        plist = prompt_sets.read(cfg.prompts) if cfg.prompts else prompt_sets.builtin()
        self.random_ids = frozenset(p.id for p in plist if random_like(p.as_text()))
        self.checks: tuple[Check, ...] = ()
        self.intake = ProbeIntake(self.recorder, self.load, self.load_curve, self.tokenizer,
                                  [self.exporter.observe_record, self.recent.observe])
        self.lag = LagMonitor(keep=False)
        self.last_lag: LagInterval | None = None

    # ---- sinks (synchronous, per event) ------------------------------------------------------
    def on_record(self, rec: RequestRecord) -> None:
        """The probe's sink, on the loop as each request ends: only what must be immediate (up, readiness,
        the failure warning). Recording waits in the intake for its task or the tick."""
        self.intake.add(rec)
        self.liveness.saw(rec)
        if not rec.ok and not rec.warmup:
            self.warn.warning((rec.target, rec.outcome.value), "probe to %s failed: %s: %.200s", rec.target,
                              rec.outcome.value, rec.error)

    def on_sample(self, s: ServerSample, channel: str) -> None:
        self.load.add(s, time.monotonic_ns())
        self.samples.record(s)
        self.exporter.observe_sample(s, channel)

    def on_server_info(self, target: str, info: ServerInfo) -> None:
        """What the speculative server says of itself: the engine and version the advice's flags are for."""
        if target == "spec":
            self.setup = engine_flags.setup_from_info(info.info, info.engine, self.speculative_config)

    def health(self) -> SourceHealth:
        """The sources' and the recorder's self-health, read at scrape time."""
        st = self.source.state if self.source else None
        return SourceHealth(configured=st is not None, up=bool(st and st.up), restarts=st.restarts if st else 0,
                            last_error=st.last_error if st else "", lines=dict(self.ingest.counts),
                            skipped=dict(st.skipped) if st else {}, last_sample_unix_s=self.ingest.last_sample_wall,
                            scrape_rejected=self.scrape_state.rejected, out_of_range=self.recorder.out_of_range())

    # ---- tasks -------------------------------------------------------------------------------
    async def prober(self, session: aiohttp.ClientSession, plan: TrafficPlan, limits: Timeouts, access: Access
                     ) -> None:
        c = self.cfg
        urls: dict[TargetName, str] = {"spec": c.server_url}
        if c.baseline_url:
            urls["baseline"] = c.baseline_url
        targets = []
        for name, url in urls.items():
            target = await wait_for_target(session, name, url, c.api, self.stop, self.liveness.set_up,
                                           on_info=self.on_server_info, on_failed=self.on_record)
            if target is None:
                return  # stopped before the target came up
            self.api[name] = target.api
            targets.append(target)
        plist = prompt_sets.read(c.prompts) if c.prompts else prompt_sets.builtin()
        params = GenParams(max_tokens=c.max_tokens, temperature=c.temperature, ignore_eos=True)
        await run_probes(ProbeSetup(plan, targets, plist, params, limits, access, c.workers,
                                    self.tokenizer is not None), self.on_record, self.stop)
        if not self.stop.is_set():
            raise WorkerError("probe workers ended without being stopped")

    def scraper(self, session: aiohttp.ClientSession) -> Coroutine[Any, Any, None]:
        return scrape_forever(session, self.cfg.server_url + "/metrics", self.cfg.interval_s, self.scrape_state,
                              lambda s: self.on_sample(s, "scrape"), self.exporter.set_metrics_up)

    async def ticker(self) -> None:
        while True:
            await asyncio.sleep(self.cfg.interval_s)
            self.tick()

    async def view_task(self) -> None:
        while True:
            await asyncio.sleep(1.0 if self.view.tty else self.cfg.interval_s)
            if self.snapshot is not None:
                self.view.show(self.snapshot)

    # ---- interval tick -----------------------------------------------------------------------
    def tick(self) -> None:
        t0 = time.perf_counter()
        self.intake.drain()  # every probe that ended in this interval is in it
        self._close_lag()
        interval = self.recorder.tick()
        if self.hlog is not None:
            self.hlog.write(interval)
        self.samples.tick(time.monotonic())
        now = time.monotonic_ns()
        self.load_curve.expire(now)
        windows = {window_label(w): per for w, per in self.recorder.windows.items()}
        windows["cumulative"] = self.recorder.cumulative
        c = self.cfg
        load = self.load.current(now, c.verdict_window_s)
        result = tick(TickInputs(windows, self.targets, window_label(c.verdict_window_s),
                                 self.samples.windows.get(c.verdict_window_s), load, self.load_curve.buckets(),
                                 self.curve, bool(c.baseline_url), c.min_requests, self.prior,
                                 c.advisor_max_steps, self.setup), self.judge)
        self.checks = daemon_checks(self.recent.summary(self.random_ids), self.samples.last.values(), c.max_tokens)
        result = dataclasses.replace(result, verdict=with_checks(result.verdict, self.checks))
        self.exporter.set_checks(self.checks)
        for label, per_target in result.views.items():
            self.exporter.update_windows(label, per_target)
        self.exporter.set_verdict(result.verdict)
        self.exporter.set_load(result.by_load)
        self.exporter.set_advice(result.advice)
        self.by_load = result.by_load
        self.snapshot = take_snapshot(self, result)
        self.history.add(self.snapshot)
        self.exporter.set_tick_seconds(time.perf_counter() - t0)

    def _close_lag(self) -> None:
        iv = self.last_lag = self.lag.close()
        self.exporter.set_lag(iv)
        if iv.distorted:
            self.warn.warning("lag", "the daemon's event loop lagged %.2f ms at p99 (max %.2f ms) over the last "
                              "interval: probe latencies then include its own delay", (iv.p99_s or 0) * 1e3,
                              (iv.max_s or 0) * 1e3)


def take_snapshot(d: Daemon, t: TickResult) -> Snapshot:
    """The tick's snapshot for the view, ``/api/summary`` and the page."""
    c = d.cfg
    host, port = c.listen_host_port
    vlabel = window_label(c.verdict_window_s)
    baseline = d.curve.describe() if d.curve else ("A/B: " + c.baseline_url if c.baseline_url else None)
    return Snapshot(
        time=time.strftime("%Y-%m-%dT%H:%M:%S%z"), uptime_s=round(time.monotonic() - d.started, 1),
        server_url=c.server_url, api=d.api.get("spec"), metrics_url=f"http://{host}:{port}/metrics",
        targets={tg: TargetState(d.liveness.up.get(tg, False)) for tg in d.targets}, window=vlabel,
        probe=t.views[vlabel], windows=t.views,
        server=server_state(d.samples.last, {window_label(w): a for w, a in d.samples.windows.items()}),
        verdict=t.verdict, log=log_state(d.source_name, d.health()), by_load=t.by_load, baseline=baseline,
        client_lag=d.last_lag, advisor=t.advice, checks=d.checks)


async def serve(d: Daemon) -> int:
    """The daemon's lifetime: signals, the HTTP endpoints, the task group; the last interval flushed at the end."""
    _on_signals(d)

    def page() -> str | None:
        return None if d.snapshot is None else render_page(d.snapshot, d.history, d.cfg.interval_s)

    endpoints = Endpoints(d.exporter.render, lambda: d.snapshot, d.liveness.ready, page, d.cfg.api_token)
    runner = web.AppRunner(endpoints.app(), access_log=None)
    await runner.setup()
    c = d.cfg
    host, port = c.listen_host_port
    await web.TCPSite(runner, host, port, reuse_address=True).start()
    log.info("serving /metrics on http://%s:%d/metrics", host, port)
    d.tick()
    plan = TrafficPlan(concurrency=c.concurrency, rate_per_s=c.rate_per_s, pause_s=c.pause_s, requests=None,
                       max_in_flight=max(OPEN_LOOP_MIN_IN_FLIGHT, c.concurrency * OPEN_LOOP_IN_FLIGHT_PER_STREAM))
    try:
        limits = Timeouts(c.connect_timeout_s, c.read_timeout_s, c.request_timeout_s)
        access = Access(c.api_key, c.ca_file)
        async with make_session(limits, access) as session:
            prober = asyncio.create_task(d.prober(session, plan, limits, access), name="prober")
            async with asyncio.TaskGroup() as tg:
                background = [tg.create_task(coro, name=name) for name, coro in (
                    ("ticker", d.ticker()), ("loop-lag", d.lag.run()), ("recorder", d.intake.run()),
                    ("view", d.view_task()),
                    *((("log-source", d.source.run()),) if d.source else ()),
                    *((("scrape", d.scraper(session)),) if c.server_metrics else ()))]
                tg.create_task(_supervise(prober, background, d.stop, c.drain_timeout_s), name="supervisor")
    finally:
        d.tick()  # flush the last interval (and the .hlog)
        if d.hlog is not None:
            d.hlog.close()
        await runner.cleanup()
    return 0


def _on_signals(d: Daemon) -> None:
    """First signal: stop and drain. Second: run the exit hooks and exit 130 at once."""
    signals = 0

    def on_signal() -> None:
        nonlocal signals
        signals += 1
        if signals == 1:
            log.info("stopping: draining probes in flight (signal again to exit at once)")
            d.stop.set()
        else:
            kill_now(d.source)
            for hook in d.exit_now_hooks:  # e.g. the demo's simulators, which would be orphaned
                with contextlib.suppress(Exception):
                    hook()
            os._exit(130)

    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):  # SIGHUP: the terminal went away
        loop.add_signal_handler(sig, on_signal)


async def _supervise(prober: asyncio.Task[None], background: list[asyncio.Task[Any]], stop: asyncio.Event,
                     drain_timeout_s: float) -> None:
    """Wait for the stop signal (or the prober dying), drain, then end the background tasks."""
    stop_wait = asyncio.create_task(stop.wait())
    await asyncio.wait([prober, stop_wait], return_when=asyncio.FIRST_COMPLETED)
    if prober.done() and not prober.cancelled():
        failure = prober.exception()
        if failure is not None:
            stop_wait.cancel()
            raise failure
    try:
        await asyncio.wait_for(asyncio.shield(prober), drain_timeout_s)
    except TimeoutError:
        log.warning("probes still in flight after %.0fs: cancelling them", drain_timeout_s)
        prober.cancel()
        await asyncio.gather(prober, return_exceptions=True)
    except asyncio.CancelledError:
        pass
    for t in background:
        t.cancel()

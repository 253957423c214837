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
import logging
import os
import signal
import time
from collections.abc import Callable, Coroutine
from typing import IO, Any

import aiohttp
from aiohttp import web

from . import config as config_mod
from .analysis import baseline as baseline_mod
from .analysis.by_load import LoadVerdict, by_load
from .analysis.verdict import Judge, Verdict, verdict_inputs
from .errors import WorkerError
from .export.hlog import HlogWriter
from .export.http import Endpoints
from .export.page import History
from .export.page import render as render_page
from .export.prometheus import Exporter, window_label
from .export.summary import Summary, TargetState, log_state, server_state
from .export.view import View
from .probe import prompts as prompt_sets
from .probe.client import Access, StreamTransport, Timeouts, make_session, make_streams
from .probe.detect import wait_for_target
from .probe.lag import LagInterval, LagMonitor
from .probe.load import Load, LoadPlan, PromptCycle
from .probe.stream import GenParams
from .probe.tokens import Tokenizer, refine
from .probe.workers import Workers, jobs
from .ratelog import RateLimited
from .recorder.load import LoadCurve, LoadTracker
from .recorder.observations import observe
from .recorder.samples import SampleWindows
from .recorder.stats import Stats
from .recorder.windows import Recorder
from .records import ProbeWindow, RequestRecord, ServerSample
from .server.ingest import LogIngest
from .server.logtail import CommandSource, FileFollower, LogSource, StdinSource, kill_now
from .server.scrape import ScrapeState, scrape_forever

log = logging.getLogger("specwatch")
RECORD_EVERY_S = 0.1
RECORD_SLICE_S = 0.002  # the longest the recorder holds the loop at once


def make_source(cfg: config_mod.Config, ingest: LogIngest) -> tuple[LogSource | None, str | None]:
    """The configured log source and how the summary names it."""
    if cfg.log_file:
        return FileFollower(cfg.log_file, ingest, from_start=cfg.from_start), f"file {cfg.log_file}"
    if cfg.log_cmd:
        return CommandSource(cfg.log_cmd, ingest), "command"
    if cfg.log_stdin:
        return StdinSource(ingest), "stdin"
    return None, None


class Daemon:
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
        self.exporter.sources.ingest = self.ingest
        self.exporter.sources.state = self.source.state if self.source else None
        self.exporter.sources.out_of_range = self.recorder.out_of_range
        self._hlog_file = open(cfg.hlog, "a", encoding="utf-8") if cfg.hlog else None  # noqa: SIM115
        self.hlog = HlogWriter(self._hlog_file) if self._hlog_file else None
        self.stop = asyncio.Event()
        self.started = time.monotonic()
        self.api: dict[str, str] = {}
        self.up: dict[str, bool] = dict.fromkeys(self.targets, False)
        self.last_ok: dict[str, float] = {}
        self.summary: Summary | None = None
        self.history = History()
        self.exit_now_hooks: list[Callable[[], None]] = []  # run before a second signal's immediate exit
        self.warn = RateLimited(log)
        self.exporter.baseline.set(cfg.baseline_tps if cfg.baseline_tps else float("nan"))
        self.curve = baseline_mod.BaselineCurve.fixed(cfg.baseline_tps) if cfg.baseline_tps else \
            baseline_mod.load(cfg.baseline_curve) if cfg.baseline_curve else None
        self.load = LoadTracker(stale_s=max(30.0, 3 * cfg.interval_s))
        self.load_curve = LoadCurve(cfg.load_curve_window_s)
        self.by_load: LoadVerdict | None = None
        self.tokenizer = Tokenizer(cfg.tokenizer) if cfg.tokenizer else None
        self.pending: list[RequestRecord] = []  # finished probes not yet recorded (the recorder task drains)
        self.lag = LagMonitor(keep=False)
        self.last_lag: LagInterval | None = None

    # ---- sinks (synchronous, per event) ------------------------------------------------------
    def on_record(self, rec: RequestRecord) -> None:
        """The probe's sink, on the loop as each request ends: only what must be immediate (up, readiness,
        the failure warning). Recording waits in ``pending`` for the recorder task or the tick."""
        self.pending.append(rec)
        self.set_up(rec.target, rec.outcome.value != "connect_error")
        if rec.ok:
            self.last_ok[rec.target] = time.monotonic()
        elif not rec.warmup:
            self.warn.warning((rec.target, rec.outcome.value), "probe to %s failed: %s: %.200s", rec.target,
                              rec.outcome.value, rec.error)

    def record(self, rec: RequestRecord) -> None:
        now = time.monotonic_ns()
        if self.tokenizer is not None:
            rec = refine(rec, self.tokenizer)
        rec = dataclasses.replace(rec, server_load=self.load.during(rec.sent_ns, rec.done_ns))
        if rec.target == "spec" and not rec.warmup:
            self.load_curve.add(rec, rec.server_load, now)
        obs = observe(rec)
        self.recorder.record(rec, obs)
        self.exporter.observe_record(rec, obs)

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

    async def recording(self) -> None:
        """Records finished probes in slices of at most ``RECORD_SLICE_S`` of loop time, between streams."""
        while True:
            await asyncio.sleep(0 if self.pending else RECORD_EVERY_S)  # between slices, just yield
            self.drain(RECORD_SLICE_S)

    def set_up(self, target: str, up: bool) -> None:
        self.up[target] = up
        self.exporter.target_up.labels(target).set(1 if up else 0)

    def on_sample(self, s: ServerSample, channel: str) -> None:
        self.load.add(s, time.monotonic_ns())
        self.samples.record(s, time.monotonic())
        self.exporter.observe_sample(s, channel)

    def ready(self) -> bool:
        fresh = max(60.0, 5 * self.cfg.interval_s)
        last = self.last_ok.get("spec")
        return self.up.get("spec", False) and last is not None and time.monotonic() - last < fresh

    # ---- tasks -------------------------------------------------------------------------------
    async def prober(self, session: aiohttp.ClientSession, plan: LoadPlan, limits: Timeouts, access: Access
                     ) -> None:
        c = self.cfg
        urls = {"spec": c.server_url} | ({"baseline": c.baseline_url} if c.baseline_url else {})
        targets = []
        for name, url in urls.items():
            target = await wait_for_target(session, name, url, c.api, self.stop, self.set_up)
            if target is None:
                return  # stopped before the target came up
            self.api[name] = target.api
            targets.append(target)
        plist = prompt_sets.load(c.prompts) if c.prompts else prompt_sets.builtin()
        params = GenParams(max_tokens=c.max_tokens, temperature=c.temperature, ignore_eos=True)
        if c.workers > 1:
            workers = Workers(jobs(plan, c.workers, targets, plist, params, limits, access, self.tokenizer is not None))
            await workers.run(self.on_record, self.stop)
            if workers.failed or not self.stop.is_set():
                raise WorkerError("probe workers ended: " + ("; ".join(workers.failed) or "without being stopped"))
            return
        async with make_streams(plan.max_streams, limits, access) as streams:
            await Load(StreamTransport(streams), PromptCycle(plist, targets), params, plan, self.on_record,
                       self.stop, limits, keep_texts=self.tokenizer is not None).run()

    def scraper(self, session: aiohttp.ClientSession) -> Coroutine[Any, Any, None]:
        state = self.exporter.sources.scrape = ScrapeState()
        return scrape_forever(session, self.cfg.server_url + "/metrics", self.cfg.interval_s, state,
                              lambda s: self.on_sample(s, "scrape"), lambda up: self.exporter.srv_metrics_up.set(up))

    async def ticker(self) -> None:
        while True:
            await asyncio.sleep(self.cfg.interval_s)
            self.tick()

    def close_lag(self) -> None:
        iv = self.last_lag = self.lag.close()
        e = self.exporter
        e.loop_lag.set(iv.max_s or 0.0)
        e.loop_lag_p99.set(iv.p99_s or 0.0)
        e.distorted.set(1 if iv.distorted else 0)
        if iv.distorted:
            e.distorted_intervals.inc()
            self.warn.warning("lag", "the daemon's event loop lagged %.2f ms at p99 (max %.2f ms) over the last "
                              "interval: probe latencies then include its own delay", (iv.p99_s or 0) * 1e3,
                              (iv.max_s or 0) * 1e3)

    async def view_task(self) -> None:
        while True:
            await asyncio.sleep(1.0 if self.view.tty else self.cfg.interval_s)
            if self.summary is not None:
                self.view.show(self.summary)

    # ---- interval tick -----------------------------------------------------------------------
    def tick(self) -> None:
        t0 = time.perf_counter()
        self.drain()  # every probe that ended in this interval is in it
        self.close_lag()
        interval = self.recorder.tick()
        if self.hlog is not None:
            try:
                self.hlog.write(interval)
            except OSError as exc:  # a full disk must not take the sidecar down: count it, say it once a minute
                self.exporter.hlog_errors.inc()
                self.warn.warning("hlog", "cannot write the interval log %s: %s", self.cfg.hlog, exc.strerror)
        self.samples.tick(time.monotonic())
        parts = {window_label(w): per for w, per in self.recorder.windows.items()}
        parts["cumulative"] = self.recorder.cumulative
        views = {label: {tg: per.get(tg, Stats()).describe() for tg in self.targets} for label, per in parts.items()}
        for label, per_target in views.items():
            self.exporter.update_windows(label, per_target)
        vlabel = window_label(self.cfg.verdict_window_s)
        vw = views[vlabel]
        srv = self.samples.windows.get(self.cfg.verdict_window_s)
        now = time.monotonic_ns()
        load = self.load.current(now, self.cfg.verdict_window_s)
        base_tps, status, base_load = None, "none", None
        if self.cfg.baseline_url:
            status, base_load = "ab", 1.0  # a baseline server that serves only the probes runs at one stream
        elif self.curve is not None:
            at = self.curve.at(load if load is not None else 1.0)  # unknown load: the idle comparison
            base_tps, status, base_load = at.tokens_per_second, at.status, at.load
        v = self.judge.update(verdict_inputs(vw["spec"], vw.get("baseline"), base_tps,
                                             srv.accept_length if srv else None, load, status, base_load))
        self.exporter.set_verdict(v)
        self.load_curve.expire(now)
        self.by_load = by_load(self.load_curve.buckets(), self.curve, self.cfg.min_requests, load)
        self.exporter.set_load(self.by_load)
        self.summary = self._summary(views, v)
        self.history.add(self.summary)
        self.exporter.tick_seconds.set(time.perf_counter() - t0)

    def _summary(self, views: dict[str, dict[str, ProbeWindow]], v: Verdict) -> Summary:
        host, port = self.cfg.listen_host_port
        vlabel = window_label(self.cfg.verdict_window_s)
        return Summary(
            time=time.strftime("%Y-%m-%dT%H:%M:%S%z"), uptime_s=round(time.monotonic() - self.started, 1),
            server_url=self.cfg.server_url, api=self.api.get("spec"), metrics_url=f"http://{host}:{port}/metrics",
            targets={tg: TargetState(self.up.get(tg, False)) for tg in self.targets}, window=vlabel,
            probe=views[vlabel], windows=views,
            server=server_state(self.samples.last, {window_label(w): a for w, a in self.samples.windows.items()}),
            verdict=v, log=log_state(self.source_name, self.source.state if self.source else None, self.ingest),
            by_load=self.by_load, baseline=self.curve.describe() if self.curve else
            ("A/B: " + self.cfg.baseline_url if self.cfg.baseline_url else None), client_lag=self.last_lag)

    # ---- lifecycle -----------------------------------------------------------------------------
    async def main(self) -> int:
        loop = asyncio.get_running_loop()
        signals = 0

        def on_signal() -> None:
            nonlocal signals
            signals += 1
            if signals == 1:
                log.info("stopping: draining probes in flight (signal again to exit at once)")
                self.stop.set()
            else:
                kill_now(self.source)
                for hook in self.exit_now_hooks:  # e.g. the demo's simulators, which would be orphaned
                    with contextlib.suppress(Exception):
                        hook()
                os._exit(130)

        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):  # SIGHUP: the terminal went away
            loop.add_signal_handler(sig, on_signal)
        def page() -> str | None:
            return None if self.summary is None else render_page(self.summary, self.history, self.cfg.interval_s)

        endpoints = Endpoints(self.exporter.render, lambda: self.summary, self.ready, page, self.cfg.api_token)
        runner = web.AppRunner(endpoints.app(), access_log=None)
        await runner.setup()
        host, port = self.cfg.listen_host_port
        await web.TCPSite(runner, host, port, reuse_address=True).start()
        log.info("serving /metrics on http://%s:%d/metrics", host, port)
        self.tick()
        c = self.cfg
        plan = LoadPlan(concurrency=c.concurrency, rate_per_s=c.rate_per_s, max_in_flight=max(4, c.concurrency * 4),
                        pause_s=c.pause_s, requests=None)
        try:
            limits = Timeouts(c.connect_timeout_s, c.read_timeout_s, c.request_timeout_s)
            access = Access(c.api_key, c.ca_file)
            async with make_session(limits, access) as session:
                prober = asyncio.create_task(self.prober(session, plan, limits, access), name="prober")
                async with asyncio.TaskGroup() as tg:
                    background = [tg.create_task(coro, name=name) for name, coro in (
                        ("ticker", self.ticker()), ("loop-lag", self.lag.run()), ("recorder", self.recording()),
                        ("view", self.view_task()),
                        *((("log-source", self.source.run()),) if self.source else ()),
                        *((("scrape", self.scraper(session)),) if c.server_metrics else ()))]
                    tg.create_task(self._supervise(prober, background), name="supervisor")
        finally:
            self.tick()  # flush the last interval (and the .hlog)
            if self._hlog_file is not None:
                with contextlib.suppress(OSError):
                    self._hlog_file.close()
            await runner.cleanup()
        return 0

    async def _supervise(self, prober: asyncio.Task[None], background: list[asyncio.Task[Any]]) -> None:
        """Wait for the stop signal (or the prober dying), drain, then end the background tasks."""
        stop_wait = asyncio.create_task(self.stop.wait())
        await asyncio.wait([prober, stop_wait], return_when=asyncio.FIRST_COMPLETED)
        if prober.done() and not prober.cancelled():
            failure = prober.exception()
            if failure is not None:
                stop_wait.cancel()
                raise failure
        try:
            await asyncio.wait_for(asyncio.shield(prober), self.cfg.drain_timeout_s)
        except TimeoutError:
            log.warning("probes still in flight after %.0fs: cancelling them", self.cfg.drain_timeout_s)
            prober.cancel()
            await asyncio.gather(prober, return_exceptions=True)
        except asyncio.CancelledError:
            pass
        for t in background:
            t.cancel()

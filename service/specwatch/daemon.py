"""``specwatch run``: the sidecar daemon. Wires sources → recorder → exporters and owns the lifecycle.

Long-lived tasks (prober, log source, scrape, ticker, loop-lag timer, HTTP server) run under one
TaskGroup: if one dies, the daemon says why and exits non-zero. First SIGTERM/SIGINT: stop scheduling
probes, drain those in flight (bounded by drain_timeout_s), flush the last interval and the .hlog, exit 0.
A second signal exits at once.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import logging
import math
import os
import signal
import sys
import time
from typing import IO, Any

import aiohttp
import orjson
from aiohttp import web

from . import config as config_mod
from . import prompts as prompt_sets
from .client import GenParams, Target, Timeouts, detect, make_session
from .ingest import LogIngest
from .load import LoadPlan, PromptCycle
from .load import run as run_load
from .logtail import CommandSource, FileFollower, LogSource, StdinSource
from .metrics import LOG_RESULTS, Exporter, window_label
from .recorder import LATENCY_METRICS, HlogWriter, Recorder, SampleWindows, Stats
from .records import RequestRecord, ServerSample
from .scrape import ScrapeState, samples_from_text
from .verdict import Judge
from .view import View

log = logging.getLogger("specwatch")


class Daemon:
    def __init__(self, cfg: config_mod.Config, out: IO[str] | None = None) -> None:
        self.cfg = cfg
        windows = cfg.windows
        self.targets = ("spec", "baseline") if cfg.baseline_url else ("spec",)
        self.exporter = Exporter(self.targets, windows)
        self._hlog_file = open(cfg.hlog, "a", encoding="utf-8") if cfg.hlog else None  # noqa: SIM115
        # 2 significant digits (values within 1%) keep a long-running daemon's windows small; bench uses 3
        self.recorder = Recorder(cfg.interval_s, windows,
                                 HlogWriter(self._hlog_file, time.time()) if self._hlog_file else None, digits=2)
        self.samples = SampleWindows(windows)
        self.judge = Judge(cfg.hysteresis, cfg.min_requests)
        self.view = View(cfg.view, out)
        line_counters = {r: self.exporter.log_lines.labels(r) for r in LOG_RESULTS}  # resolved once, not per line
        self.ingest = LogIngest(self._on_sample_log, lambda r: line_counters[r].inc())
        self.source: LogSource | None = self._make_source()
        self.stop = asyncio.Event()
        self.started = time.monotonic()
        self.api: dict[str, str] = {}
        self.up: dict[str, bool] = dict.fromkeys(self.targets, False)
        self.last_ok: dict[str, float] = {}
        self.summary: dict[str, Any] = {}
        self._exported_skips: dict[str, int] = {}
        self._exported_oor: dict[str, int] = {}
        self._exported_restarts = 0
        self.exporter.baseline.set(cfg.baseline_tps if cfg.baseline_tps else float("nan"))
        for g in (self.exporter.speedup, self.exporter.breakeven, self.exporter.below, self.exporter.cycle):
            g.set(float("nan"))
        self.exporter.log_up.set(0)
        self.exporter.log_configured.set(1 if self.source is not None else 0)

    def _make_source(self) -> LogSource | None:
        c = self.cfg
        if c.log_file:
            return FileFollower(c.log_file, self.ingest, from_start=c.from_start)
        if c.log_cmd:
            return CommandSource(c.log_cmd, self.ingest)
        if c.log_stdin:
            return StdinSource(self.ingest)
        return None

    # ---- sinks (synchronous, per event) ------------------------------------------------------
    def on_record(self, rec: RequestRecord) -> None:
        self.recorder.record(rec)
        self.exporter.observe_record(rec)
        self._set_up(rec.target, rec.outcome.value != "connect_error")
        if rec.ok:
            self.last_ok[rec.target] = time.monotonic()

    def _set_up(self, target: str, up: bool) -> None:
        self.up[target] = up
        self.exporter.target_up.labels(target).set(1 if up else 0)

    def _on_sample_log(self, s: ServerSample) -> None:
        self.samples.record(s, time.monotonic())
        self.exporter.observe_sample(s, "log")
        self.exporter.log_last.set(time.time())

    def _on_sample_scrape(self, s: ServerSample) -> None:
        self.samples.record(s, time.monotonic())
        self.exporter.observe_sample(s, "scrape")

    # ---- tasks -------------------------------------------------------------------------------
    async def prober(self, session: aiohttp.ClientSession) -> None:
        c = self.cfg
        urls = {"spec": c.server_url} | ({"baseline": c.baseline_url} if c.baseline_url else {})
        targets = []
        for name, url in urls.items():
            target = await self._detect(session, name, url)
            if target is None:
                return  # stopped before the target came up
            targets.append(target)
        plist = prompt_sets.load(c.prompts) if c.prompts else prompt_sets.builtin()
        plan = LoadPlan(concurrency=c.concurrency, rate_per_s=c.rate, max_in_flight=max(4, c.concurrency * 4),
                        pause_s=c.pause_s, requests=None)
        params = GenParams(max_tokens=c.max_tokens, temperature=c.temperature, ignore_eos=True)
        await run_load(session, PromptCycle(plist, targets), params, plan, self.on_record, self.stop)

    async def _detect(self, session: aiohttp.ClientSession, name: str, url: str) -> Target | None:
        delay = 1.0
        while True:
            try:
                info = await detect(session, url, self.cfg.api)
            except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
                self._set_up(name, False)
                log.warning("target %s (%s) not reachable yet: %s", name, url, exc or type(exc).__name__)
                if self.cfg.api != "auto":
                    return Target(name, url, self.cfg.api)
                try:
                    await asyncio.wait_for(self.stop.wait(), delay)
                    return None
                except TimeoutError:
                    delay = min(5.0, delay * 2)
                continue
            self._set_up(name, True)
            self.api[name] = info.api
            log.info("target %s: %s api=%s model=%s speculative=%s", name, url, info.api, info.model,
                     info.speculative)
            return Target(name, url, info.api, info.model)

    async def scraper(self, session: aiohttp.ClientSession) -> None:
        state = ScrapeState()
        url = self.cfg.server_url + "/metrics"
        while True:
            try:
                async with session.get(url) as resp:
                    text = await resp.text() if resp.status == 200 else ""
                for s in samples_from_text(text, state):
                    self._on_sample_scrape(s)
            except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
                log.debug("server metrics scrape failed: %s", exc)
            await asyncio.sleep(self.cfg.interval_s)

    async def ticker(self) -> None:
        while True:
            await asyncio.sleep(self.cfg.interval_s)
            self.tick()

    async def loop_lag(self) -> None:
        period = 0.5
        while True:
            t0 = time.perf_counter()
            await asyncio.sleep(period)
            self.exporter.loop_lag.set(max(0.0, time.perf_counter() - t0 - period))

    async def view_task(self) -> None:
        while True:
            await asyncio.sleep(1.0 if self.view.tty else self.cfg.interval_s)
            if self.summary:
                self.view.show(self.summary)

    # ---- interval tick -----------------------------------------------------------------------
    def tick(self) -> None:
        t0 = time.perf_counter()
        self.recorder.tick()
        now = time.monotonic()
        self.samples.tick(now)
        for w, per_target in self.recorder.windows.items():
            self.exporter.update_windows(window_label(w), per_target)
        self.exporter.update_windows("cumulative", self.recorder.cumulative)
        vw = self.recorder.windows.get(self.cfg.verdict_window_s, {})
        spec = vw.get("spec", Stats())
        baseline = self.cfg.baseline_tps
        if self.cfg.baseline_url:
            baseline = vw.get("baseline", Stats()).decode_tokens_per_second
        accept = spec.accept_length
        if accept is None:
            accept = self.samples.averages.get(self.cfg.verdict_window_s, {}).get("accept_length")
        se = spec.decode_tps_relative_stderr
        if self.cfg.baseline_url and se is not None:
            se_b = vw.get("baseline", Stats()).decode_tps_relative_stderr
            se = None if se_b is None else math.hypot(se, se_b)
        v = self.judge.update(spec.decode_tokens_per_second, accept, baseline, spec.outcomes.get("ok", 0), se)
        e = self.exporter
        e.baseline.set(_nan(baseline))
        e.speedup.set(_nan(v.speedup))
        e.speedup_se.set(_nan(v.relative_stderr))
        e.cycle.set(_nan(v.cycle_s))
        e.breakeven.set(_nan(v.breakeven_accept_length))
        e.below.set(float("nan") if v.below_baseline is None else float(v.below_baseline))
        self._sync_counters()
        self.summary = self.build_summary(dataclasses.asdict(v), accept)
        e.tick_seconds.set(time.perf_counter() - t0)

    def _sync_counters(self) -> None:
        e = self.exporter
        if self.source is not None:
            st = self.source.state
            e.log_up.set(1 if st.up else 0)
            for reason, n in st.skipped.items():
                delta = n - self._exported_skips.get(reason, 0)
                if delta:
                    e.log_skipped.labels(reason).inc(delta)
                    self._exported_skips[reason] = n
            if st.restarts > self._exported_restarts:
                e.log_restarts.inc(st.restarts - self._exported_restarts)
                self._exported_restarts = st.restarts
        oor: dict[str, int] = {}
        for stats in self.recorder.cumulative.values():
            for name, n in stats.out_of_range.items():
                oor[name] = oor.get(name, 0) + n
        for name, n in oor.items():
            delta = n - self._exported_oor.get(name, 0)
            if delta:
                e.out_of_range.labels(name).inc(delta)
                self._exported_oor[name] = n

    def build_summary(self, verdict: dict[str, Any], accept: float | None) -> dict[str, Any]:
        def probe(st: Stats) -> dict[str, Any]:
            return {"tokens_per_second": st.decode_tokens_per_second, "accept_length": st.accept_length,
                    "server_reported_accept_length": st.server_accept_length,
                    "tokens_per_chunk": st.mean("tokens_per_chunk"), "requests": st.requests,
                    "ok": st.outcomes.get("ok", 0), "errors": st.requests - st.outcomes.get("ok", 0),
                    "outcomes": dict(st.outcomes),
                    **{f"{m}_p{int(q * 100)}_s": v for m in LATENCY_METRICS
                       for q, v in st.quantiles(m, (0.5, 0.99)).items()}}

        windows = {window_label(w): {tg: probe(per.get(tg, Stats())) for tg in self.targets}
                   for w, per in self.recorder.windows.items()}
        windows["cumulative"] = {tg: probe(self.recorder.cumulative.get(tg, Stats())) for tg in self.targets}
        vw = window_label(self.cfg.verdict_window_s)
        src = self.source
        host, port = self.cfg.listen_host_port
        return {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "uptime_s": round(time.monotonic() - self.started, 1),
            "server_url": self.cfg.server_url, "api": self.api.get("spec"),
            "metrics_url": f"http://{host}:{port}/metrics",
            "targets": {tg: {"up": self.up.get(tg, False)} for tg in self.targets},
            "window": vw, "probe": windows.get(vw, {}), "windows": windows,
            "server": {"last": {k: dataclasses.asdict(s) for k, s in self.samples.last.items()},
                       "windows": {window_label(w): a for w, a in self.samples.averages.items()}},
            "verdict": verdict | {"accept_length": accept},
            "log": {"source": self._source_text(), "up": bool(src and src.state.up),
                    "error": src.state.last_error if src else "", "lines": {
                        r: self.ingest.counts.get(r, 0) for r in ("parsed", "ignored", "malformed")},
                    "skipped": dict(src.state.skipped) if src else {},
                    "last_sample_age_s": round(time.time() - self.ingest.last_sample_wall, 1)
                    if self.ingest.last_sample_wall else None},
        }

    def _source_text(self) -> str | None:
        c = self.cfg
        return (f"file {c.log_file}" if c.log_file else f"command {c.log_cmd!r}" if c.log_cmd
                else "stdin" if c.log_stdin else None)

    # ---- HTTP ----------------------------------------------------------------------------------
    def app(self) -> web.Application:
        app = web.Application()

        async def metrics(_: web.Request) -> web.Response:
            return web.Response(body=self.exporter.render(), headers={"Content-Type": "text/plain; version=0.0.4"})

        async def healthz(_: web.Request) -> web.Response:
            return web.Response(text="ok\n")

        async def readyz(_: web.Request) -> web.Response:
            fresh = max(60.0, 5 * self.cfg.interval_s)
            last = self.last_ok.get("spec")
            ok = self.up.get("spec", False) and last is not None and time.monotonic() - last < fresh
            return web.Response(status=200 if ok else 503, text="ready\n" if ok else "not ready\n")

        async def summary(_: web.Request) -> web.Response:
            return web.Response(body=orjson.dumps(self.summary, option=orjson.OPT_NON_STR_KEYS),
                                content_type="application/json")

        app.router.add_get("/metrics", metrics)
        app.router.add_get("/healthz", healthz)
        app.router.add_get("/readyz", readyz)
        app.router.add_get("/api/summary", summary)
        return app

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
                os._exit(130)

        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, on_signal)
        runner = web.AppRunner(self.app(), access_log=None)
        await runner.setup()
        host, port = self.cfg.listen_host_port
        await web.TCPSite(runner, host, port, reuse_address=True).start()
        log.info("serving /metrics on http://%s:%d/metrics", host, port)
        self.tick()
        timeouts = Timeouts(self.cfg.connect_timeout_s, self.cfg.read_timeout_s)
        try:
            async with make_session(max(8, self.cfg.concurrency * 4 + 4), timeouts) as session:
                prober = asyncio.create_task(self.prober(session), name="prober")
                async with asyncio.TaskGroup() as tg:
                    background = [tg.create_task(coro, name=name) for name, coro in (
                        ("ticker", self.ticker()), ("loop-lag", self.loop_lag()), ("view", self.view_task()),
                        *((("log-source", self.source.run()),) if self.source else ()),
                        *((("scrape", self.scraper(session)),) if self.cfg.server_metrics else ()))]
                    tg.create_task(self._supervise(prober, background), name="supervisor")
        finally:
            self.tick()  # flush the last interval (and the .hlog)
            if self._hlog_file is not None:
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


def _nan(v: float | None) -> float:
    return float("nan") if v is None else v


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="specwatch run", description=__doc__)
    config_mod.add_flags(p)
    args = p.parse_args(argv)
    try:
        cfg = config_mod.load(args)
        if cfg.prompts:
            prompt_sets.load(cfg.prompts)
    except (config_mod.ConfigError, prompt_sets.PromptFileError) as exc:
        print(f"specwatch run: {exc}", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s level=%(levelname)s logger=%(name)s msg=%(message)s")
    import uvloop

    try:
        return uvloop.run(Daemon(cfg).main())
    except OSError as exc:
        print(f"specwatch run: {exc}", file=sys.stderr)
        return 1
    except ExceptionGroup as eg:
        for failure in eg.exceptions:
            log.error("a long-lived task failed: %r", failure, exc_info=failure)
        return 1

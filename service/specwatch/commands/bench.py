"""``specwatch bench``: a bounded benchmark with the seed script's output shape, plus what it lacked.

Wires the probe (load + client) to a list of records, then replays them through the recorder into the
report (``analyse``, shared with ``specwatch report``): nothing is recorded while streams are in flight.
``--json`` writes the results document, ``--records`` every record (JSON Lines), ``--hlog`` an HdrHistogram
interval log.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from .. import codec, options
from ..errors import ConfigError, TargetError
from ..export import bench_report
from ..export.hlog import HlogWriter
from ..probe import lag as lag_mod
from ..probe import prompts as prompt_sets
from ..probe.client import Access, Timeouts, make_session, make_streams
from ..probe.detect import UNREACHABLE, ServerInfo, detect, lifetime_accept_length
from ..probe.load import Load, LoadPlan, PromptCycle
from ..probe.stream import GenParams, Target
from ..probe.tokens import Tokenizer, refine
from ..probe.workers import Workers, jobs
from ..recorder.stats import Stats
from ..recorder.windows import Interval
from ..records import RequestRecord, RunInfo


@dataclass(frozen=True, slots=True)
class BenchSpec:
    server_url: str = ""
    api: str = "auto"
    max_tokens: int = 500
    num_runs: int = 5
    warmup: int = 1
    concurrency: int = 1
    rate_per_s: float | None = None
    poisson: bool = False
    max_in_flight: int = 256
    prompts: str | None = None
    temperature: float = 0.0
    ignore_eos: bool = True
    connect_timeout_s: float = 5.0
    read_timeout_s: float = 60.0
    request_timeout_s: float = 600.0
    api_key: str | None = None  # from SPECWATCH_API_KEY or --api-key-file, never a flag
    api_key_file: str | None = None
    ca_file: str | None = None
    seed: int = 0
    workers: int = 1
    tokenizer: str | None = None
    json: str | None = None
    records: str | None = None
    hlog: str | None = None

    @property
    def plan(self) -> LoadPlan:
        return LoadPlan(concurrency=self.concurrency, rate_per_s=self.rate_per_s, poisson=self.poisson,
                        max_in_flight=self.max_in_flight, warmup=self.warmup, requests=self.num_runs,
                        seed=self.seed)

    def __repr__(self) -> str:
        return f"BenchSpec(server_url={self.server_url!r}, api_key={'<set>' if self.api_key else None}, …)"

    @property
    def settings(self) -> dict[str, Any]:
        """The options that shape the measurement (not where its outputs go, never a secret)."""
        return {k: v for k, v in dataclasses.asdict(self).items()
                if k not in ("json", "records", "hlog", "api_key", "api_key_file")}

    @property
    def timeouts(self) -> Timeouts:
        return Timeouts(self.connect_timeout_s, self.read_timeout_s, self.request_timeout_s)

    @property
    def access(self) -> Access:
        return Access(self.api_key, self.ca_file)


DEFAULTS: dict[str, Any] = {f.name: f.default for f in dataclasses.fields(BenchSpec)}


class Printer:
    """Prints the seed script's per-request lines as records arrive, and keeps the records."""

    def __init__(self, plan: LoadPlan, say: Callable[[str], None]) -> None:
        self.plan = plan
        self.say = say
        self.records: list[RequestRecord] = []

    def __call__(self, rec: RequestRecord) -> None:
        self.records.append(rec)
        if rec.warmup:
            n = sum(r.warmup for r in self.records)
            state = f"done ({rec.output_tokens} tokens)" if rec.ok else f"failed ({rec.outcome}: {rec.error})"
            self.say(f"  Warmup {n}/{self.plan.warmup} {state}" + ("\n" if n == self.plan.warmup else ""))
            return
        head = f"  Run {len(self.records) - self.plan.warmup}/{self.plan.requests}:"
        if rec.ok:
            secs = rec.service_ns / 1e9
            self.say(f"{head} {rec.output_tokens} tokens in {secs:.2f}s = {rec.output_tokens / secs:.1f} tok/s "
                     f"(prompt: {rec.prompt_tokens} toks)")
        else:
            self.say(f"{head} failed ({rec.outcome}: {rec.error})")


@dataclass(frozen=True, slots=True)
class Analysis:
    doc: dict[str, Any]  # the results document (--json)
    text: str  # the report
    interval: Interval  # the whole measured phase as one interval (--hlog)


def analyse(info: RunInfo, records: Sequence[RequestRecord]) -> Analysis:
    """Records → recorder → report. The one path from records to numbers, for ``bench`` and ``report``."""
    measured = [r for r in records if not r.warmup]  # warm-up is recorded apart and discarded
    domains: dict[str, Stats] = {}
    for rec in measured:  # recorded once, per domain; the overall view is their merge
        domains.setdefault(rec.domain, Stats()).add(rec)
    overall = Stats()
    for st in domains.values():
        overall.merge(st)
    start = min((r.sent_ns for r in measured), default=0)
    interval = Interval(start, max((r.done_ns for r in measured), default=start), {"spec": overall})
    results = bench_report.results(overall, measured, info.lifetime_accept_length, info.loop_lag)
    per_domain = bench_report.by_domain(domains)
    doc = {"server_url": info.server_url, "api": info.api, "model": info.model, "server_info": info.server_info,
           "config": info.settings, "results": results, "by_domain": per_domain,
           "runs": [bench_report.run_doc(r) for r in measured]}
    return Analysis(doc, bench_report.text(results, per_domain, measured), interval)


async def collect(spec: BenchSpec, say: Callable[[str], None] = print) -> tuple[RunInfo, list[RequestRecord]]:
    """Run the benchmark, printing the seed script's lines. ``TargetError`` when ``--api auto`` cannot
    reach or recognise the server."""
    plist = prompt_sets.load(spec.prompts) if spec.prompts else prompt_sets.builtin()
    plan = spec.plan
    params = GenParams(max_tokens=spec.max_tokens, temperature=spec.temperature, ignore_eos=spec.ignore_eos)
    printer = Printer(plan, say)
    async with make_session(spec.timeouts, spec.access) as session:
        try:
            info = await detect(session, spec.server_url, spec.api)
        except (*UNREACHABLE, TargetError) as exc:
            if spec.api == "auto":
                raise TargetError(f"cannot detect the API of {spec.server_url}: {exc or type(exc).__name__}. "
                                  "Start the server or pass --api.") from None
            info = ServerInfo(spec.api)
        mode = (f"rate={spec.rate_per_s}/s{' poisson' if spec.poisson else ''}" if spec.rate_per_s
                else f"concurrency={spec.concurrency}")
        say(f"Benchmarking {spec.server_url} (api {info.api}, {mode})")
        say(f"  max_tokens={spec.max_tokens}, num_runs={spec.num_runs}, warmup={spec.warmup}\n")
        target = Target("spec", spec.server_url, info.api, info.model)
        if spec.workers > 1:
            workers = Workers(jobs(plan, spec.workers, [target], plist, params, spec.timeouts, spec.access,
                                   spec.tokenizer is not None))
            await workers.run(printer, asyncio.Event())
            if workers.failed:
                raise TargetError("probe worker(s) failed, the run is incomplete: " + "; ".join(workers.failed))
            lag = lag_mod.summary(workers.lag) if workers.lag else {}
        else:
            async with make_streams(plan.max_streams, spec.timeouts, spec.access) as streams:
                lag = await _measure(Load(streams, PromptCycle(plist, [target]), params, plan, printer,
                                          asyncio.Event(), spec.timeouts, keep_texts=spec.tokenizer is not None))
        lifetime = await lifetime_accept_length(session, info, spec.server_url)
    first_ns = min((r.sent_ns for r in printer.records), default=time.monotonic_ns())
    run = RunInfo(server_url=spec.server_url, api=info.api, model=info.model, server_info=info.info,
                  lifetime_accept_length=lifetime, settings=spec.settings,
                  start_wall_s=time.time() - (time.monotonic_ns() - first_ns) / 1e9, loop_lag=lag)
    return run, printer.records


async def _measure(load: Load) -> dict[str, Any]:
    """Run the load with the event-loop lag monitor beside it; the lag summary (``event_loop_lag``)."""
    monitor = lag_mod.LagMonitor(interval_s=1.0)
    task = asyncio.create_task(monitor.run())
    try:
        await load.run()
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    monitor.close()
    return lag_mod.summary(monitor.intervals)


def all_failed(doc: dict[str, Any]) -> str | None:
    """The reasons when every measured request failed, else None."""
    runs = doc["runs"]
    if runs and all(r["outcome"] != "ok" for r in runs):
        return "; ".join(sorted({f"{r['outcome']}: {r['error']}" for r in runs})[:3])
    return None


def write_outputs(a: Analysis, info: RunInfo, records: Sequence[RequestRecord], json_path: str | None,
                  records_path: str | None, hlog_path: str | None) -> None:
    if records_path:
        codec.write(records_path, [info, *records])
    if json_path:
        with open(json_path, "wb") as f:
            f.write(orjson.dumps(a.doc, option=orjson.OPT_INDENT_2))
    if hlog_path:
        with open(hlog_path, "w", encoding="utf-8") as f:
            HlogWriter(f, info.start_wall_s if info.start_wall_s is not None else time.time(),
                       a.interval.start_ns).write(a.interval)


async def bench(spec: BenchSpec, tokenizer: Tokenizer | None = None) -> int:
    """The command; ``tokenizer``: ``spec.tokenizer`` already loaded (``main`` loads it before the run, to
    refuse a bad one at once), else it is loaded here when given."""
    try:
        info, records = await collect(spec)
    except TargetError as exc:
        print(f"specwatch bench: {exc}", file=sys.stderr)
        return 1
    if spec.tokenizer:  # after the run: exact counts for streams that had only a final usage total
        tok = tokenizer or Tokenizer(spec.tokenizer)
        records = [refine(r, tok) for r in records]
    a = analyse(info, records)
    print(a.text)
    write_outputs(a, info, records, spec.json, spec.records, spec.hlog)
    reasons = all_failed(a.doc)
    if reasons:
        print(f"specwatch bench: every request failed ({reasons})", file=sys.stderr)
        return 1
    return 0


def parse(argv: list[str]) -> BenchSpec:
    p = argparse.ArgumentParser(prog="specwatch bench", description=__doc__)
    options.add_flags(p, DEFAULTS)
    values = options.from_flags(p.parse_args(argv), DEFAULTS, os.environ)
    options.require(values, ["server_url"])
    spec = BenchSpec(**(values | {"api_key": options.api_key(values), "api_key_file": None}))
    if spec.prompts:
        prompt_sets.load(spec.prompts)
    return spec


def main(argv: list[str]) -> int:
    try:
        spec = parse(argv)
        tok = Tokenizer(spec.tokenizer) if spec.tokenizer else None  # refused before the run, named
    except ConfigError as exc:
        print(f"specwatch bench: {exc}", file=sys.stderr)
        return 2
    import uvloop

    return int(uvloop.run(bench(spec, tok)))

"""specwatch sweep: launch a server per configuration, wait for it, bench it, stop it, go on, explain.

    specwatch sweep --launch "python -m sglang.launch_server … --speculative-num-steps {steps}" \\
        --param steps=1,2,3,5,10 --baseline-launch "python -m sglang.launch_server …" \\
        --server-url http://127.0.0.1:30000 --max-tokens 500 --num-runs 5 --warmup 1 --out sweep-out

Each configuration's result is saved in OUT/results/ as soon as it is finished; a rerun skips it.
A launch that fails, exits early or never becomes ready is reported with the tail of its output and the
sweep goes on. Ctrl-C (or SIGTERM) stops the current server's process group and keeps finished results.
specwatch advise --from OUT/sweep.json prints the advisor's explanation again. Readiness is SGLang's
/health_generate where the server has it, else /health (vLLM). Templates substitute {name} for
each --param and leave every other brace alone, so a vLLM JSON flag is written as it is:

    specwatch sweep --launch "vllm serve MODEL --speculative-config \\
        '{\\"method\\": \\"ngram\\", \\"num_speculative_tokens\\": {k}}'" --param k=1,2,3,5 \\
        --baseline-launch "vllm serve MODEL" --server-url http://127.0.0.1:8000
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import os
import re
import signal
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from .. import codec, options
from ..analysis import advisor, comparisons, cost_model, engine_flags, load_sweep, server_log
from ..analysis import baseline as baseline_mod
from ..analysis.bench_results import analyse
from ..analysis.server_log import SamplePool
from ..errors import AuthError, ConfigError, LaunchError, RecordFileError, TargetError, WorkerError
from ..export import bench_report, sweep_plots, sweep_report, sweep_tables
from ..export.progress import progress_for
from ..launch import Server, wait_ready
from ..options import default
from ..probe.bounded import BenchSpec, collect
from ..records import ApiChoice, RunInfo, ServerSample
from ..results import ConfigResult, LevelResult, SweepDoc, levels
from ..server.logparse import parse_line
from ..server.logtail import SourceState, file_lines


@dataclass(frozen=True, slots=True)
class SweepSpec:
    launch: str | None = default("launch")
    param: tuple[str, ...] = default("param")
    baseline_launch: str | None = default("baseline_launch")
    server_url: str = default("server_url", "sweep")
    targets: str | None = default("targets")
    log_file: str | None = default("log_file")
    api: ApiChoice = default("api")
    max_tokens: int = default("max_tokens")
    num_runs: int = default("num_runs")
    warmup: int = default("warmup")
    concurrency_levels: str = default("concurrency_levels")
    prompts: str | None = default("prompts")
    temperature: float = default("temperature")
    connect_timeout_s: float = default("connect_timeout_s")
    read_timeout_s: float = default("read_timeout_s")
    request_timeout_s: float = default("request_timeout_s")
    api_key: str | None = default("api_key")
    api_key_file: str | None = default("api_key_file")
    ca_file: str | None = default("ca_file")
    ready_timeout_s: float = default("ready_timeout_s")
    grace_s: float = default("grace_s")
    out: str = default("out")
    speculative_config: str | None = default("speculative_config")
    verbose: bool = default("verbose")

    def __repr__(self) -> str:
        return f"SweepSpec(server_url={self.server_url!r}, api_key={'<set>' if self.api_key else None}, …)"

    @property
    def bench(self) -> BenchSpec:
        """The bench options every configuration is measured with (the fields both specs have)."""
        shared = {f.name for f in dataclasses.fields(BenchSpec)} - {"api_key_file"}  # the key itself is read
        return BenchSpec(**{f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name in shared})

    @property
    def levels(self) -> list[int]:
        return [int(x) for x in self.concurrency_levels.split(",")]


DEFAULTS: dict[str, Any] = {f.name: f.default for f in dataclasses.fields(SweepSpec)} | {"param": []}


def parse_params(specs: list[str]) -> dict[str, list[str]]:
    params: dict[str, list[str]] = {}
    for spec in specs:
        name, sep, values = spec.partition("=")
        if not sep or not re.fullmatch(r"[a-z_][a-z0-9_]*", name) or not values:
            raise ConfigError(f"--param {spec!r}: expected NAME=V1,V2,… (e.g. steps=1,2,3,5,10)")
        params[name] = [v.strip() for v in values.split(",") if v.strip()]
    return params


FIELD_RE = re.compile(r"\{([a-z_][a-z0-9_]*)\}")


def fields(template: str) -> set[str]:
    """The ``{name}`` placeholders of a template. Any other brace is literal, so vLLM's JSON flags template
    as written: ``--speculative-config '{"method": "ngram", "num_speculative_tokens": {k}}'``."""
    return set(FIELD_RE.findall(template))


def substitute(template: str, cfg: dict[str, str]) -> str:
    return FIELD_RE.sub(lambda m: cfg[m.group(1)] if m.group(1) in cfg else m.group(0), template)


def check_templates(templates: dict[str, str | None], params: dict[str, list[str]]) -> None:
    for flag, t in templates.items():
        if t is None:
            continue
        unknown = fields(t) - set(params)
        if unknown:
            raise ConfigError(f"{flag} names {', '.join('{' + u + '}' for u in sorted(unknown))}, which no --param "
                              f"defines (defined: {', '.join(sorted(params)) or 'none'})")


def configs(params: dict[str, list[str]]) -> list[dict[str, str]]:
    names = list(params)
    return [dict(zip(names, combo, strict=True)) for combo in itertools.product(*(params[n] for n in names))]


def label(cfg: dict[str, str]) -> str:
    return ",".join(f"{k}={v}" for k, v in cfg.items()) or "baseline"


def log_samples(path: Path, start: int, end: int | None = None) -> list[ServerSample]:
    """The server samples (decode / SpecDecoding / Engine lines) written between two offsets of its log."""
    try:
        with path.open("rb") as f:
            f.seek(start)
            data = f.read() if end is None else f.read(max(0, end - start))
    except OSError:
        data = b""
    return [smp for ln in file_lines([data], SourceState()) if (smp := parse_line(ln).sample) is not None]


def log_stats(path: Path, offset: int) -> tuple[float | None, tuple[float, ...]]:
    """From every line written after ``offset`` (the late last stats line included, which a level's own span
    can miss: vLLM logs every 10 s by default): the pooled accept length and per-position acceptance
    (``analysis.server_log``'s weighting)."""
    pool = SamplePool()
    for sample in log_samples(path, offset):
        pool.add(sample)
    return pool.accept_length, tuple(pool.position_acceptance)


def log_size(path: Path | None) -> int:
    return path.stat().st_size if path and path.exists() else 0


class SweepClock:
    """The sweep's progress between configurations: which of how many, time so far and an estimate of the rest
    from the configurations measured in this run (a resumed one costs nothing)."""

    def __init__(self, total: int, now: Callable[[], float] = time.monotonic) -> None:
        self.total, self.now = total, now
        self.start = now()
        self.took: list[float] = []
        self.left = total
        self._t0 = self.start

    def line(self, i: int, name: str, levels: int) -> str:
        self._t0 = self.now()
        so_far = self._t0 - self.start
        eta = f", about {_span(statistics.fmean(self.took) * self.left)} left" if self.took else ""
        cells = f", {levels} loads each" if levels > 1 else ""
        return f"progress: configuration {i} of {self.total}{cells} ({_span(so_far)} so far{eta})"

    def measured(self) -> None:
        self.took.append(self.now() - self._t0)
        self.left -= 1

    def skipped(self) -> None:
        self.left -= 1


def _span(seconds: float) -> str:
    m, s = divmod(round(seconds), 60)
    return f"{m}m{s:02d}s" if m else f"{s}s"


def run_one(sw: SweepSpec, spec: BenchSpec, step: Step, out: Path) -> ConfigResult:
    name, cfg, launch, _url = step
    print(f"=== {name} ===", flush=True)
    result = ConfigResult(name, cfg, time.time())
    server = None
    log_path = Path(substitute(sw.log_file, cfg)) if sw.log_file else None
    try:
        if launch is not None:
            result = replace(result, command=substitute(launch, cfg))
            print(f"  launching: {result.command}", flush=True)
            server = Server(str(result.command), out / "logs" / f"{safe(name)}.out")
            log_path = log_path or server.out_path
        elapsed = wait_ready(spec.server_url, server, sw.ready_timeout_s, say=lambda m: print(m, flush=True))
        print(f"  ready after {elapsed:.0f}s", flush=True)
        offset = log_size(log_path)
        info, by_c = measure_levels(sw, spec, log_path)
        log_al, log_pos = log_stats(log_path, offset) if log_path else (None, ())
        steps, draft_tokens = info.steps or 0, info.draft_tokens or 1
        n = cfg.get("steps", cfg.get("k", ""))
        if info.steps is None and n.isdigit():  # an OpenAI-only server does not say: trust the template
            steps, draft_tokens = int(n), int(n) + 1
        lowest = by_c[min(by_c)]
        spec_cfg = engine_flags.speculative_config_of(result.command) if result.command else \
            (json.loads(sw.speculative_config) if sw.speculative_config and steps else None)
        result = replace(result, status="ok", server_info=info.server_info, speculative_config=spec_cfg,
                         steps=steps, draft_tokens=draft_tokens,
                         log_accept_length=log_al, log_position_acceptance=log_pos, results=lowest.results,
                         runs=lowest.runs, by_concurrency=by_c)
    except AuthError:
        raise  # every configuration would fail alike: the sweep stops, naming the key's source
    except (LaunchError, TargetError, WorkerError, OSError) as exc:
        result = replace(result, status="failed", error=str(exc))
        print(f"  FAILED: {exc}", flush=True)
    finally:
        if server is not None:
            server.stop(sw.grace_s)
    return replace(result, finished=time.time())


def measure_levels(sw: SweepSpec, spec: BenchSpec, log_path: Path | None
                   ) -> tuple[RunInfo, dict[int, LevelResult]]:
    """Bench the ready server at every concurrency level, with the load its log or metrics reported; the first
    level's run info with the levels."""
    import uvloop

    by_c: dict[int, LevelResult] = {}
    first: RunInfo | None = None
    for c in sw.levels:
        spec_c = level_spec(spec, c)
        if len(sw.levels) > 1:
            print(f"  -- concurrency {c}: {spec_c.num_runs} requests ({spec_c.warmup} warmup)", flush=True)
        start = log_size(log_path)
        progress = progress_for(spec_c.num_runs, sys.stderr)
        try:
            info, records = uvloop.run(collect(spec_c, say=lambda m: print(m, flush=True), progress=progress))
        finally:
            progress.close()
        level = log_samples(log_path, start, log_size(log_path)) if log_path else []
        load, source = server_log.level_load(level, info.server_running)
        analysed = analyse(info, records)
        print(bench_report.text(analysed.doc, records), flush=True)
        reasons = analysed.doc.all_failed()
        if reasons:
            raise LaunchError(f"every request failed at concurrency {c}: {reasons}")
        first = first or info
        by_c[c] = LevelResult(analysed.doc.results, analysed.doc.runs, load, source)
        if len(sw.levels) > 1:
            print(f"  server load at {c} streams: " + (f"{load:g} running requests (median, from its {source})"
                                                        if load is not None else "not reported (no --log-file, "
                                                        "no /metrics): the curve keeps the stream count"),
                  flush=True)
    assert first is not None  # sw.levels is never empty
    return first, by_c


def level_spec(spec: BenchSpec, c: int) -> BenchSpec:
    """At ``c`` streams: at least two measured requests per stream (warmup stays sequential and as given: it
    warms the server, while the closed loop's first round fills the batch at once)."""
    if c == 1:
        return spec
    return dataclasses.replace(spec, concurrency=c, num_runs=max(spec.num_runs, 2 * c))


def safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.=-]+", "_", name).replace(",", "_")


def save(path: Path, doc: ConfigResult | SweepDoc) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_bytes(codec.dumps(doc))
    tmp.replace(path)


Step = tuple[str, dict[str, str], str | None, str]  # label, params, launch command, URL


def plan(sw: SweepSpec) -> list[Step]:
    if sw.targets:
        urls = [u.strip() for u in sw.targets.split(",") if u.strip()]
        return [(f"target={u}", {}, None, options.parse_base_url(u)) for u in urls]
    if not sw.launch:
        raise ConfigError("give --launch (with --param) or --targets")
    params = parse_params(list(sw.param))
    check_templates({"--launch": sw.launch, "--baseline-launch": sw.baseline_launch, "--log-file": sw.log_file},
                    params)
    if sw.baseline_launch is not None and sw.log_file and fields(sw.log_file):
        raise ConfigError("--log-file with {param}s cannot name the baseline's log: use a fixed path")
    steps: list[Step] = [(label(c), c, sw.launch, sw.server_url) for c in configs(params)]
    if sw.baseline_launch:
        steps.insert(0, ("baseline", {}, sw.baseline_launch, sw.server_url))
    return steps


def explain(results: list[ConfigResult]) -> str:
    """Print each load's table, the pick at the lowest load, and the advisor; returns the advice."""
    cs = levels(results)
    for c in cs:
        print(("\n-- concurrency " + str(c) if len(cs) > 1 else "") + "\n" + sweep_tables.table(results, c))
    band = comparisons.band_at(results, cs[0]) if cs else None
    if band is not None:
        where = f" (at {cs[0]} stream{'s' if cs[0] > 1 else ''}, the lowest load)" if len(cs) > 1 else ""
        print(f"\nwinner: {band.sentence()}{where}")
    lowest = at_level(results, cs[0]) if cs else results
    ms = advisor.from_results(lowest)
    if len(ms) < 3:
        return ""
    cmp = comparisons.comparisons(results)
    measured = {r.steps: cmp[r.label, cs[0]] for r in lowest if (r.label, cs[0]) in cmp}
    base_decode = next((m.decode_tokens_per_second for m in ms if m.steps == 0), None)
    advice = advisor.report(ms, cost_model.fit(ms), base_decode, range(1, max(12, *(m.steps for m in ms)) + 1),
                            chain=engine_flags.chain_draft(engine_flags.setup_of(results)), measured=measured)
    print("\n" + advice)
    return advice


def at_level(results: list[ConfigResult], c: int) -> list[ConfigResult]:
    """The sweep's results as measured at concurrency ``c`` (for the single-level tables and advisor)."""
    return [r.at(c) for r in results]


def by_load(results: list[ConfigResult], out: Path) -> str:
    """Per-load verdicts, schedule and batch model (printed), and the baseline curve file; '' for one level."""
    cs = levels(results)
    if len(cs) < 2:
        return ""
    ms = advisor.from_results(at_level(results, cs[0]))
    base = cost_model.fit(ms) if len(ms) >= 3 else None
    steps = range(1, max(8, *(m.steps for m in ms)) + 1) if ms else range(1, 9)
    advice = load_sweep.engine_advice(results, str(out))
    sweep_report.write_advice_files(out, advice)
    text = load_sweep.report(results, base, steps, advice)
    print("\n" + text)
    curve = load_sweep.baseline_curve(results, f"specwatch sweep, {time.strftime('%Y-%m-%d %H:%M')}")
    if curve is not None:
        baseline_mod.save(out / "baseline-curve.json", curve)
        how = ("load = the server's measured running requests" if curve.load_measured else
               "load = the stream counts (nominal: the server reported no load; give --log-file, or run it with "
               "its /metrics)")
        print(f"\nbaseline curve (plain decoding by load; {how}): {out / 'baseline-curve.json'} "
              "(specwatch run --baseline-curve FILE)")
    print(sweep_plots.plot_load(out / "sweep-load.png", results))
    return text


def run_all(sw: SweepSpec, todo: list[Step], out: Path) -> tuple[list[ConfigResult], bool]:
    """Every configuration in turn, resuming finished ones from ``OUT/results/``; (results, interrupted)."""
    results: list[ConfigResult] = []
    spec = sw.bench
    clock = SweepClock(len(todo))
    try:
        for i, step in enumerate(todo, 1):
            saved = out / "results" / f"{safe(step[0])}.json"
            if saved.exists():
                print(f"\n=== {step[0]} === (done earlier, skipped)")
                results.append(codec.load_as(ConfigResult, str(saved)))
                clock.skipped()
                continue
            print(f"\n{clock.line(i, step[0], len(sw.levels))}", flush=True)
            res = run_one(sw, replace(spec, server_url=step[3]), step, out)
            clock.measured()
            if res.ok:
                save(saved, res)  # resumable: a rerun skips it; failures are retried
            results.append(res)
    except KeyboardInterrupt:
        print("\ninterrupted: the current server was stopped; finished configurations are kept", flush=True)
        return results, True
    return results, False


def write_report(results: list[ConfigResult], out: Path) -> str | None:
    """The by-load report, the tables, the advisor, and every output file; the pick at the lowest load."""
    load_text = by_load(results, out)
    cs = levels(results)
    band = comparisons.band_at(results, cs[0]) if cs else None
    base_tps = sweep_report.baseline_tps(at_level(results, cs[0]) if cs else results)
    advice = explain(results)
    if load_text:
        advice = advice + "\n\n" + load_text if advice else load_text
    cmp, picks = comparisons.records(results)
    save(out / "sweep.json", SweepDoc(tuple(results), band.winner if band else None, base_tps, comparisons=cmp,
                                      picks=picks))
    sweep_tables.write_csv(out / "sweep.csv", results)
    print(sweep_plots.plot(out / "sweep.png", results, base_tps))
    (out / "report.html").write_text(sweep_report.html(results, band, base_tps, advice), encoding="utf-8")
    print(f"\nresults: {out / 'sweep.json'}, {out / 'sweep.csv'}, {out / 'report.html'}")
    return band.winner if band else None


def parse(argv: list[str]) -> SweepSpec:
    p = argparse.ArgumentParser(prog="specwatch sweep", description=__doc__, epilog=options.environment(DEFAULTS),
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    options.add_config_flag(p)
    options.add_flags(p, DEFAULTS)
    values = options.from_flags(p.parse_args(argv), DEFAULTS, os.environ)
    return SweepSpec(**(values | {"param": tuple(values["param"]), "api_key": options.api_key(values)}))


def main(argv: list[str]) -> int:
    try:
        sw = parse(argv)
        todo = plan(sw)
    except ConfigError as exc:
        print(f"specwatch sweep: {exc}", file=sys.stderr)
        return 2
    out = Path(sw.out)
    (out / "results").mkdir(parents=True, exist_ok=True)
    (out / "logs").mkdir(exist_ok=True)

    def on_term(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    # SIGINT too, explicitly: a sweep started from a script's background job inherits SIGINT ignored, and
    # Ctrl-C / kill -INT must still stop the current server and keep what finished
    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    try:
        results, interrupted = run_all(sw, todo, out)
    except AuthError as exc:
        print(f"specwatch sweep: {exc}: {options.key_source(sw.api_key_file, sw.api_key)}",
              file=sys.stderr)
        return 2
    except RecordFileError as exc:
        print(f"specwatch sweep: a saved result cannot be read ({exc}); remove it to measure it again",
              file=sys.stderr)
        return 2
    winner = write_report(results, out)
    if interrupted:
        return 130
    return 0 if winner is not None else 1

"""One configuration tried: launched from a template, waited for, benched at each load, stopped. ``sweep``
walks a grid of them and ``tune`` chooses them one at a time; both save each finished configuration as a
``ConfigResult`` in OUT/results/ (a rerun with the same OUT skips it) and read the server's log for its accept
length and load. Templates substitute ``{name}`` for each --param and leave every other brace alone, so a vLLM
JSON flag is written as it is."""

from __future__ import annotations

import dataclasses
import itertools
import json
import re
import signal
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path

from . import codec
from .analysis import engine_flags, server_log
from .analysis.bench_results import analyse
from .analysis.server_log import SamplePool
from .errors import AuthError, ConfigError, LaunchError, TargetError, WorkerError
from .export import bench_report
from .export.progress import progress_for
from .launch import Server, wait_ready
from .options import default
from .probe import prompts as prompt_sets
from .probe.bounded import BenchSpec, collect
from .records import ApiChoice, RunInfo, ServerSample
from .results import ConfigResult, LevelResult
from .server.logparse import parse_line
from .server.logtail import SourceState, file_lines


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
    interleave: int = default("interleave")

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




def parse_params(specs: list[str]) -> dict[str, list[str]]:
    params: dict[str, list[str]] = {}
    for spec in specs:
        name, sep, values = spec.partition("=")
        if not sep or not re.fullmatch(r"[a-z_][a-z0-9_]*", name) or not values:
            raise ConfigError(f"--param {spec!r}: expected NAME=V1,V2,… or NAME=LOW..HIGH (e.g. steps=1,2,3,5,10)")
        params[name] = [x for v in values.split(",") if v.strip() for x in _expand(v.strip(), spec)]
    return params


def _expand(value: str, spec: str) -> list[str]:
    """``0..10``: every integer from 0 to 10; any other value as it is."""
    lo, sep, hi = value.partition("..")
    if not sep:
        return [value]
    if not (lo.strip().isdigit() and hi.strip().isdigit()) or int(lo) > int(hi):
        raise ConfigError(f"--param {spec!r}: a range is LOW..HIGH of whole numbers, LOW <= HIGH (e.g. steps=0..10)")
    return [str(i) for i in range(int(lo), int(hi) + 1)]


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
        result = finished(sw, result, info, by_c, log_stats(log_path, offset) if log_path else (None, ()))
    except AuthError:
        raise  # every configuration would fail alike: the sweep stops, naming the key's source
    except (LaunchError, TargetError, WorkerError, OSError) as exc:
        result = replace(result, status="failed", error=str(exc))
        print(f"  FAILED: {exc}", flush=True)
    finally:
        if server is not None:
            server.stop(sw.grace_s)
    return replace(result, finished=time.time())


def finished(sw: SweepSpec, result: ConfigResult, info: RunInfo, by_c: dict[int, LevelResult],
             log: tuple[float | None, tuple[float, ...]]) -> ConfigResult:
    """``result`` measured: its levels, draft steps (the server's word, else the template's) and log figures."""
    steps, draft_tokens = info.steps or 0, info.draft_tokens or 1
    n = result.params.get("steps", result.params.get("k", ""))
    if info.steps is None and n.isdigit():  # an OpenAI-only server does not say: trust the template
        steps, draft_tokens = int(n), int(n) + 1
    lowest = by_c[min(by_c)]
    spec_cfg = engine_flags.speculative_config_of(result.command) if result.command else \
        (json.loads(sw.speculative_config) if sw.speculative_config and steps else None)
    return replace(result, status="ok", server_info=info.server_info, speculative_config=spec_cfg,
                   steps=steps, draft_tokens=draft_tokens, log_accept_length=log[0], log_position_acceptance=log[1],
                   results=lowest.results, runs=lowest.runs, by_concurrency=by_c)


def measure_levels(sw: SweepSpec, spec: BenchSpec, log_path: Path | None
                   ) -> tuple[RunInfo, dict[int, LevelResult]]:
    """Bench the ready server at every concurrency level, with the load its log or metrics reported; the first
    level's run info with the levels."""
    import uvloop

    by_c: dict[int, LevelResult] = {}
    plist = prompt_sets.read(spec.prompts) if spec.prompts else prompt_sets.builtin()
    texts = {p.id: p.as_text() for p in plist}  # for the random-token check
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
        analysed = analyse(info, records, texts)
        print(bench_report.text(analysed.doc, records), flush=True)
        reasons = analysed.doc.all_failed()
        if reasons:
            raise LaunchError(f"every request failed at concurrency {c}: {reasons}")
        first = first or info
        by_c[c] = LevelResult(analysed.doc.results, analysed.doc.runs, load, source, analysed.doc.checks)
        if len(sw.levels) > 1:
            print(f"  server load at {c} streams: " + (f"{load:g} running requests (median, from its {source})"
                                                        if load is not None else "not reported (no --log-file, "
                                                        "no /metrics): the curve keeps the stream count"),
                  flush=True)
    assert first is not None  # sw.levels is never empty
    return first, by_c


def level_spec(spec: BenchSpec, c: int) -> BenchSpec:
    """At ``c`` streams: at least four measured requests per stream, so that two per stream run inside the steady
    window (the first and last of each stream are its ramp-up and drain: ``analysis.steady_window``) and the
    level's figures are ``c`` streams' (warmup stays sequential and as given: it warms the server, while the
    closed loop's first round fills the batch at once)."""
    if c == 1:
        return spec
    return dataclasses.replace(spec, concurrency=c, num_runs=max(spec.num_runs, 4 * c))


def prepare(out: Path) -> None:
    """OUT/results/ and OUT/logs/ made, and SIGTERM and SIGINT turned into KeyboardInterrupt, so that the current
    server's process group is stopped (``run_one``'s ``finally``) and what finished is kept. SIGINT explicitly: a
    run started from a script's background job inherits SIGINT ignored, and Ctrl-C / kill -INT must still stop it."""
    (out / "results").mkdir(parents=True, exist_ok=True)
    (out / "logs").mkdir(exist_ok=True)

    def on_term(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)


def safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.=-]+", "_", name).replace(",", "_")


def save(path: Path, doc: object) -> None:
    """Write a record through the codec, atomically (a reader never sees half a file)."""
    tmp = path.with_suffix(".tmp")
    tmp.write_bytes(codec.dumps(doc))
    tmp.replace(path)


Step = tuple[str, dict[str, str], str | None, str]  # label, params, launch command, URL

"""``sweep --targets --interleave ROUNDS``: servers already running, measured in rounds that alternate between
them, so that the machine's drift (one server's speed moved 206–353 tok/s between sequential runs on a 2-core
machine) falls on every target alike and cancels in a round-by-round comparison (``analysis.compare``'s
``paired_margin``).

--num-runs requests per target are split into ROUNDS rounds (the first rounds take the remainder); each round
benches every target in turn, the order rotated (round ``r`` starts at target ``r mod n``); the warm-up runs in
the first round only. Each target's records over all rounds are analysed together and every run keeps its round
(``RunResult.round``). Only at one stream, the closed loop's plain case: at more streams each round would have its
own ramp-up and drain, and the concatenated rounds no one steady window. The server's log is not read (one
--log-file cannot tell the targets apart): accept lengths are the API's."""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field, replace

from .analysis import server_log
from .analysis.bench_results import analyse
from .errors import AuthError, ConfigError, LaunchError, TargetError, WorkerError
from .export import bench_report
from .export.progress import progress_for
from .launch import wait_ready
from .probe import prompts as prompt_sets
from .probe.bounded import BenchSpec, collect
from .records import RequestRecord, RunInfo
from .results import ConfigResult, LevelResult
from .trial import Step, SweepSpec, finished


def check(sw: SweepSpec) -> None:
    """ConfigError unless --interleave can be honoured as asked."""
    if sw.interleave == 1:
        return
    if not sw.targets:
        raise ConfigError("--interleave needs --targets: servers already running, measured in alternating rounds")
    if sw.levels != [1]:
        raise ConfigError("--interleave runs at one stream only (--concurrency-levels 1): at more streams each "
                          "round would have its own ramp-up and drain")
    if sw.num_runs < sw.interleave:
        raise ConfigError(f"--num-runs {sw.num_runs} cannot be split into {sw.interleave} rounds: give at least "
                          "one request per round")


def round_sizes(num_runs: int, rounds: int) -> list[int]:
    """``num_runs`` requests split into ``rounds`` rounds, the first rounds taking the remainder."""
    base, extra = divmod(num_runs, rounds)
    return [base + (1 if i < extra else 0) for i in range(rounds)]


def order(n: int, r: int) -> list[int]:
    """Round ``r``'s order over ``n`` targets: it starts at target ``r mod n``."""
    return [(r + k) % n for k in range(n)]


@dataclass(slots=True)
class Target:
    step: Step
    result: ConfigResult
    info: RunInfo | None = None
    records: list[RequestRecord] = field(default_factory=list)
    rounds: list[int] = field(default_factory=list)  # each measured record's round, in order

    @property
    def failed(self) -> bool:
        """Not ready, or a round failed: left out of the later rounds (a result is "failed" until it is "ok")."""
        return bool(self.result.error)


def run_interleaved(sw: SweepSpec, spec: BenchSpec, todo: list[Step]) -> list[ConfigResult]:
    """Every target of ``todo`` measured in ``sw.interleave`` alternating rounds; their results in ``todo``'s
    order (a target that fails is left out of the later rounds and reported failed)."""
    import uvloop

    targets = [Target(step, ConfigResult(step[0], step[1], time.time())) for step in todo]
    for t in targets:
        print(f"=== {t.step[0]} ===", flush=True)
        t.result = _ready(sw, spec, t)
    sizes = round_sizes(spec.num_runs, sw.interleave)
    for r, n in enumerate(sizes):
        for i in order(len(targets), r):
            t = targets[i]
            if t.failed:
                continue
            print(f"  -- round {r + 1} of {len(sizes)}: {t.step[0]}, {n} requests", flush=True)
            one = replace(spec, server_url=t.step[3], num_runs=n, warmup=spec.warmup if r == 0 else 0)
            progress = progress_for(n, sys.stderr)
            try:
                info, records = uvloop.run(collect(one, say=lambda m: print(m, flush=True), progress=progress))
            except AuthError:
                raise
            except (TargetError, WorkerError, OSError) as exc:
                t.result = replace(t.result, status="failed", error=str(exc), finished=time.time())
                print(f"  FAILED: {exc}", flush=True)
                continue
            finally:
                progress.close()
            t.info = t.info or info
            measured = [rec for rec in records if not rec.warmup]
            t.records += records
            t.rounds += [r] * len(measured)
    return [_result(sw, spec, t) for t in targets]


def _ready(sw: SweepSpec, spec: BenchSpec, t: Target) -> ConfigResult:
    try:
        elapsed = wait_ready(t.step[3], None, sw.ready_timeout_s, say=lambda m: print(m, flush=True))
    except (LaunchError, TargetError, OSError) as exc:
        print(f"  FAILED: {exc}", flush=True)
        return replace(t.result, status="failed", error=str(exc), finished=time.time())
    print(f"  ready after {elapsed:.0f}s", flush=True)
    return t.result


def _result(sw: SweepSpec, spec: BenchSpec, t: Target) -> ConfigResult:
    """A target's records over every round analysed together, each run with its round."""
    if t.failed or t.info is None:
        return t.result
    print(f"\n=== {t.step[0]}: {len(set(t.rounds))} rounds ===", flush=True)
    plist = prompt_sets.read(spec.prompts) if spec.prompts else prompt_sets.builtin()
    analysed = analyse(t.info, t.records, {p.id: p.as_text() for p in plist})
    doc = analysed.doc
    print(bench_report.text(doc, t.records), flush=True)
    reasons = doc.all_failed()
    if reasons:
        print(f"  FAILED: every request failed: {reasons}", flush=True)
        return replace(t.result, status="failed", error=f"every request failed: {reasons}", finished=time.time())
    runs = tuple(replace(run, round=r) for run, r in zip(doc.runs, t.rounds, strict=True))
    load, source = server_log.level_load([], t.info.server_running)
    by_c = {1: LevelResult(doc.results, runs, load, source, doc.checks)}
    return replace(finished(sw, t.result, t.info, by_c, (None, ())), finished=time.time())

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
import os
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from .. import codec, interleaved, options
from ..analysis import advisor, comparisons, cost_model, engine_flags, load_sweep
from ..analysis import baseline as baseline_mod
from ..analysis import checks as honesty
from ..errors import AuthError, ConfigError, RecordFileError
from ..export import sweep_plots, sweep_report, sweep_tables
from ..export.check_lines import lines as check_lines
from ..export.format import span
from ..results import ConfigResult, SweepDoc, levels
from ..trial import Step, SweepSpec, check_templates, configs, fields, label, parse_params, prepare, run_one, safe, save


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
        eta = f", about {span(statistics.fmean(self.took) * self.left)} left" if self.took else ""
        cells = f", {levels} loads each" if levels > 1 else ""
        return f"progress: configuration {i} of {self.total}{cells} ({span(so_far)} so far{eta})"

    def measured(self) -> None:
        self.took.append(self.now() - self._t0)
        self.left -= 1

    def skipped(self) -> None:
        self.left -= 1


DEFAULTS: dict[str, Any] = {f.name: f.default for f in dataclasses.fields(SweepSpec)} | {"param": []}


def plan(sw: SweepSpec) -> list[Step]:
    interleaved.check(sw)
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
    if sw.interleave > 1:
        return run_rounds(sw, todo, out)
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


def run_rounds(sw: SweepSpec, todo: list[Step], out: Path) -> tuple[list[ConfigResult], bool]:
    """--interleave: the targets not finished earlier measured together in alternating rounds
    (``interleaved``); a resumed target keeps its own rounds, so it is compared by Welch's rule."""
    saved = {step[0]: out / "results" / f"{safe(step[0])}.json" for step in todo}
    done = {name: codec.load_as(ConfigResult, str(path)) for name, path in saved.items() if path.exists()}
    for name in done:
        print(f"\n=== {name} === (done earlier, skipped)")
    try:
        fresh = interleaved.run_interleaved(sw, sw.bench, [s for s in todo if s[0] not in done])
    except KeyboardInterrupt:
        print("\ninterrupted: nothing of the interleaved rounds is kept", flush=True)
        return list(done.values()), True
    for res in fresh:
        if res.ok:
            save(saved[res.label], res)
        done[res.label] = res
    return [done[s[0]] for s in todo], False


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
    checks = honesty.of_sweep(results)
    save(out / "sweep.json", SweepDoc(tuple(results), band.winner if band else None, base_tps, comparisons=cmp,
                                      picks=picks, checks=checks))
    print("\n".join(["", "Checks over every level:", *check_lines(checks, where="sweep.json")]))
    sweep_tables.write_csv(out / "sweep.csv", results)
    print(sweep_plots.plot(out / "sweep.png", results, base_tps))
    print(sweep_plots.plot_pareto(out / "sweep-pareto.png", results))
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
    prepare(out)
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

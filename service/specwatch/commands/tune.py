"""specwatch tune: start from the configuration running today, let the advisor choose the next one to try, prove the
winner, and stop as soon as it is proven; hand back the engine flags.

    specwatch tune --launch "python -m sglang.launch_server … --speculative-num-steps {steps} \\
        --speculative-num-draft-tokens {draft}" --param steps=1..10 --start steps=5 \\
        --baseline-launch "python -m sglang.launch_server …" --server-url http://127.0.0.1:30000 \\
        --concurrency 1,16 --out tune-out

The launch vocabulary is sweep's (one --param of whole numbers: the draft step count; {draft} in a template is
steps + 1). The baseline is launched once (or given: --baseline-tps, --baseline-curve), the start configuration
next; then after each launch the advisor, fitted to everything this run measured, predicts every step count at
every load, and tune launches the one with the highest predicted gain whose interval reaches above the best
measured, until nothing is predicted to beat it or --max-launches speculative launches are spent; a pick that
won only a tie is measured again against its rival (with --targets at one stream, in rounds alternating between
the two servers). Each configuration is saved in OUT/results/ as it finishes: a rerun with the same --out resumes
without launching it again. A launch that fails is reported with its output's tail and the run goes on without
it; Ctrl-C or SIGTERM stops the current server's process group and keeps what was measured. OUT/tune.json holds
the run.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .. import codec, interleaved, options
from ..analysis import baseline as baseline_mod
from ..analysis import checks as honesty
from ..analysis import comparisons, engine_flags, load_sweep, tune_plan
from ..analysis.compare import Margin, margin
from ..analysis.live_advisor import steps_text
from ..errors import AuthError, ConfigError, RecordFileError
from ..export import sweep_tables
from ..export.check_lines import lines as check_lines
from ..export.format import span
from ..options import default
from ..results import ConfigResult, SweepDoc
from ..trial import Step, SweepSpec, check_templates, parse_params, prepare, run_one, safe, save
from ..tune_results import TuneBest, TuneDoc, TuneLaunch


@dataclass(frozen=True, slots=True)
class TuneSpec:
    sweep: SweepSpec  # the launch vocabulary and the bench options, as sweep takes them
    name: str  # the --param's name
    space: tuple[int, ...]  # its values
    start: int
    max_launches: int = default("max_launches")
    baseline_tps: float | None = None
    baseline_curve: str | None = None

    def step(self, s: int) -> Step:
        sw = self.sweep
        if s == 0:
            return "baseline", {}, sw.baseline_launch, sw.server_url if not sw.targets else self.target(0)
        cfg = {self.name: str(s), "draft": str(s + 1)}
        return f"{self.name}={s}", cfg, sw.launch, sw.server_url if not sw.targets else self.target(s)

    def target(self, s: int) -> str:
        urls = [options.parse_base_url(u.strip()) for u in (self.sweep.targets or "").split(",") if u.strip()]
        return urls[self.space.index(s)]


SETTLE = 3  # a tie is measured again with this many times the requests (the interval ~1/sqrt(3) as wide)
SETTLE_ROUNDS = 6  # with --targets at one stream, over this many rounds alternating between the two servers
TUNE_KEYS = ("start", "max_launches", "baseline_tps", "baseline_curve")
DEFAULTS: dict[str, Any] = ({f.name: f.default for f in dataclasses.fields(SweepSpec) if f.name != "interleave"}
                            | {"param": []}
                            | {k: default(k) for k in TUNE_KEYS} | {"out": default("out", "tune")})


def spec_of(values: dict[str, Any]) -> TuneSpec:
    sweep_keys = {f.name for f in dataclasses.fields(SweepSpec)}
    sw = SweepSpec(**{k: v for k, v in values.items() if k in sweep_keys} | {"param": tuple(values["param"]),
                                                                          "api_key": options.api_key(values)})
    params = parse_params(list(sw.param))
    if len(params) != 1:
        raise ConfigError("give exactly one --param: the draft step count (e.g. steps=1..10)")
    (name, raw), = params.items()
    if not all(v.isdigit() for v in raw):
        raise ConfigError(f"--param {name}: tune needs whole step counts (e.g. {name}=1..10), got {','.join(raw)}")
    space = tuple(sorted({int(v) for v in raw}))
    if not [s for s in space if s > 0]:
        raise ConfigError(f"--param {name}: give at least one step count above 0")
    start = _start(values.get("start"), name, space)
    if sw.targets:
        urls = [u for u in sw.targets.split(",") if u.strip()]
        if len(urls) != len(space):
            raise ConfigError(f"--targets names {len(urls)} servers and --param {name} {len(space)} step counts: "
                              "give one step count per server, in the same order (0: the plain server)")
    elif not sw.launch:
        raise ConfigError("give --launch (with --param) or --targets")
    else:
        check_templates({"--launch": sw.launch, "--baseline-launch": sw.baseline_launch}, params | {"draft": []})
    if 0 not in space and not (sw.baseline_launch or values.get("baseline_tps") or values.get("baseline_curve")):
        raise ConfigError("plain decoding is the yardstick: give --baseline-launch (or --baseline-tps, "
                          "--baseline-curve)")
    return TuneSpec(sw, name, space, start, values["max_launches"], values.get("baseline_tps"),
                    values.get("baseline_curve"))


def _start(raw: str | None, name: str, space: Sequence[int]) -> int:
    spec = [s for s in space if s > 0]
    if raw is None:
        return spec[(len(spec) - 1) // 2]  # the middle of the range
    key, sep, value = raw.partition("=")
    if not sep or key != name or not value.isdigit() or int(value) not in spec:
        raise ConfigError(f"--start {raw!r}: expected {name}=V with V one of the step counts above 0 in --param "
                          f"({','.join(map(str, spec))})")
    return int(value)


def plain_rates(t: TuneSpec) -> dict[int, tune_plan.Plain]:
    """Plain decoding at each load when it is given instead of launched."""
    if t.baseline_curve:
        curve = baseline_mod.read(t.baseline_curve)
    elif t.baseline_tps:
        curve = baseline_mod.BaselineCurve.fixed(t.baseline_tps)
    else:
        return {}
    return {c: tune_plan.Plain(tps) for c in t.sweep.levels if (tps := curve.at(float(c)).tokens_per_second)}


class Run:
    """The run's state: what is measured, in the order it was, and the launches it took."""

    def __init__(self, t: TuneSpec, out: Path) -> None:
        self.t, self.out = t, out
        self.results: list[ConfigResult] = []
        self.launches: list[TuneLaunch] = []
        self.started = time.monotonic()
        self.failed: set[int] = set()

    def measure(self, s: int, why: str, nxt: tune_plan.Next | None = None, repeat: int = 1) -> None:
        """Launch (or resume) step count ``s`` and measure it; ``repeat`` > 1: again, with that many times the
        requests, in place of its earlier measurement (a tie to settle)."""
        step = self.t.step(s)
        saved = self.saved(s)
        t0, wall = time.monotonic(), 0.0
        if saved.exists() and repeat == 1:
            print(f"\n=== {step[0]} === (measured earlier, resumed)", flush=True)
            res = codec.load_as(ConfigResult, str(saved))
        else:
            print(f"\nlaunch: {step[0]} ({why})", flush=True)
            sw = self.t.sweep
            bench = dataclasses.replace(sw.bench, server_url=step[3], num_runs=sw.bench.num_runs * repeat)
            res = self._fresh(run_one(sw, bench, step, self.out), s)
            wall = time.monotonic() - t0
        self._keep(s, res, why, nxt, wall)

    def settle(self, steps: Sequence[int], why: str) -> None:
        """A tie measured again, both sides with ``SETTLE`` times the requests. With every server up (--targets)
        at one stream, in rounds alternating between the two (``interleaved``): a drift of the machine then falls
        on both within a round and cancels in the comparison, paired by round. Else one launch each, back to back."""
        sw = self.t.sweep
        rounds = min(SETTLE_ROUNDS, sw.bench.num_runs * SETTLE)  # at least SETTLE: one request a round
        if not sw.targets or sw.levels != [1]:
            for s in steps:
                self.measure(s, why, repeat=SETTLE)
            return
        why = f"{why}, in {rounds} rounds alternating between them"
        print(f"\nlaunch: {' and '.join(self.t.step(s)[0] for s in steps)} ({why})", flush=True)
        t0 = time.monotonic()
        results = interleaved.run_interleaved(dataclasses.replace(sw, interleave=rounds), dataclasses.replace(
            sw.bench, num_runs=sw.bench.num_runs * SETTLE), [self.t.step(s) for s in steps])
        wall = (time.monotonic() - t0) / len(steps)
        for s, res in zip(steps, results, strict=True):
            self._keep(s, self._fresh(res, s), why, None, wall)

    def _fresh(self, res: ConfigResult, s: int) -> ConfigResult:
        """A new measurement of step count ``s``, named by what was launched (a server that does not report its
        steps), and saved for a rerun to resume."""
        if res.ok and res.steps != s:
            res = dataclasses.replace(res, steps=s, draft_tokens=s + 1 if s else 1)
        if res.ok:
            save(self.saved(s), res)
        return res

    def saved(self, s: int) -> Path:
        """Where step count ``s``'s result is kept for a rerun to resume."""
        return self.out / "results" / f"{safe(self.t.step(s)[0])}.json"

    def _keep(self, s: int, res: ConfigResult, why: str, nxt: tune_plan.Next | None, wall: float) -> None:
        if res.ok:
            self.results = [r for r in self.results if r.label != res.label] + [res]
        else:
            self.failed.add(s)
        launch = launch_record(res, s, why, nxt, wall, self.t.sweep.levels)
        self.launches.append(launch)
        print(launch_line(launch, len(self.launches)), flush=True)

    @property
    def speculative(self) -> int:
        return sum(1 for la in self.launches if la.steps > 0)


def launch_record(res: ConfigResult, s: int, why: str, nxt: tune_plan.Next | None, wall: float,
                  loads: Sequence[int]) -> TuneLaunch:
    pred = dict(nxt.predicted) if nxt is not None else {}
    measured, interval = {}, {}
    for c in loads:
        mean, half = tune_plan.measured(res, c) if res.ok else (None, None)
        if mean is not None:
            measured[c] = mean
            interval[c] = (mean - (half or 0.0), mean + (half or 0.0))
    return TuneLaunch(res.params, s, why, {c: e.value for c, e in pred.items()},
                      {c: (e.lower, e.upper) for c, e in pred.items()}, measured, interval, round(wall, 1),
                      "ok" if res.ok else "failed", res.error)


def launch_line(la: TuneLaunch, i: int) -> str:
    """``launch 2: steps=2 - predicted 88.0 (73.1-114.2), measured 92.9 (92.3-93.5) at 1 stream`` per load."""
    name = steps_text(la.steps)
    if la.status != "ok":
        return f"  launch {i}: {name} FAILED ({la.error[-300:]}); the run goes on without it"
    parts = []
    for c, m in la.measured_tok_s.items():
        lo, hi = la.interval[c]
        pred = f"predicted {la.predicted_tok_s[c]:.1f} ({la.predicted_interval[c][0]:.1f}-" \
               f"{la.predicted_interval[c][1]:.1f}), " if c in la.predicted_tok_s else ""
        parts.append(f"{pred}measured {m:.1f} ({lo:.1f}-{hi:.1f}) at {c} stream{'s' if c != 1 else ''}")
    took = f" [{la.wall_s:.0f}s]" if la.wall_s else " [resumed]"
    return f"  launch {i}: {name}: " + "; ".join(parts) + f" (per-stream decode tok/s, 95% interval){took}"


def loop(run: Run, plain: dict[int, tune_plan.Plain]) -> str:
    """Baseline, start, then the advisor's choices; the reason it stopped."""
    t = run.t
    if t.sweep.baseline_launch or (t.sweep.targets and 0 in t.space):
        run.measure(0, "the baseline: plain decoding")
        if 0 in run.failed and not plain:
            return "the baseline failed: nothing to compare with"
    run.measure(t.start, "the start: the configuration running today")
    space = [s for s in t.space if s not in run.failed]
    while not any(r.steps for r in run.results) and (rest := [s for s in space if s > 0 and s != t.start]):
        if run.speculative >= t.max_launches:
            return f"--max-launches {t.max_launches} spent and no speculative configuration measured"
        run.measure(rest[(len(rest) - 1) // 2], "the start failed: the middle of the rest instead")
        space = [s for s in space if s not in run.failed]
    settled: set[str] = set()
    while True:
        nxt = tune_plan.next_step(run.results, t.sweep.levels, space, plain)
        if nxt.steps is None:
            bands = comparisons.bands(run.results)
            tie = tune_plan.tie_to_settle(bands, settled)
            if tie is None:
                still = tune_plan.tie_to_settle(bands, set())
                return nxt.reason + (f"; {still.words}, still with {SETTLE}x the requests: a tie goes to the fewer "
                                     "draft steps" if still else "")
            both = [r.steps for label in (tie.pick, tie.rival) for r in run.results if r.label == label]
            if run.speculative + sum(1 for s in both if s) > t.max_launches:
                return f"{nxt.reason}; {tie.words}, unsettled: --max-launches {t.max_launches} spent"
            run.settle(both, f"{tie.words}: both measured again with {SETTLE}x the requests to settle it")
            settled.add(tie.rival)
            continue
        if run.speculative >= t.max_launches:
            return f"--max-launches {t.max_launches} spent; still undecided: {steps_text(nxt.steps)}, " \
                   f"{nxt.reason}"
        run.measure(nxt.steps, nxt.reason, nxt)
        space = [s for s in space if s not in run.failed]


def best_by_load(results: Sequence[ConfigResult], start: ConfigResult | None) -> dict[int, TuneBest]:
    out = {}
    for b in comparisons.bands(results, start.label if start else None):
        if not b.winner:  # too few requests to crown anything at this load: its sentence says why
            continue
        win = next(r for r in results if r.label == b.winner)
        vs_start = margin(win.per_request(b.concurrency), start.per_request(b.concurrency)) if start else None
        vs_plain = comparisons.comparisons(results).get((win.label, b.concurrency))
        mp = vs_plain.margin if vs_plain is not None else None
        out[b.concurrency] = TuneBest(win.params, win.steps, win.stream_tps(b.concurrency) or 0.0,
                                      _ratio(vs_start), _interval(vs_start), _ratio(mp), _interval(mp), b.sentence())
    return out


def _ratio(m: Margin | None) -> float | None:
    return 1.0 + m.ratio if m is not None else None


def _interval(m: Margin | None) -> tuple[float, float] | None:
    return (1.0 + m.low, 1.0 + m.high) if m is not None and m.low is not None and m.high is not None else None


def flags(results: Sequence[ConfigResult], out: Path) -> list[str]:
    """The engine flags for the winners: one step count, or the per-load schedule (sweep's generator)."""
    bs = comparisons.bands(results)
    ks = {b.steps for b in bs if b.winner}
    if not ks:
        return []
    advice = engine_flags.static_advice(ks.pop(), engine_flags.setup_of(results)) if len(ks) == 1 else \
        load_sweep.engine_advice(results, str(out))
    return [a.text() for a in advice]


def finish(run: Run, stop: str) -> TuneDoc:
    t, results = run.t, run.results
    for c in t.sweep.levels:
        print(f"\n-- concurrency {c}\n" + sweep_tables.table(results, c))
    start = next((r for r in results if r.steps == t.start), None)
    best = best_by_load(results, start)
    took = [la.wall_s for la in run.launches if la.wall_s]
    per = sum(took) / len(took) if took else None
    exhaustive = len([s for s in t.space if s > 0]) + (1 if t.sweep.baseline_launch or 0 in t.space else 0)
    doc = TuneDoc(tuple(run.launches), best, stop, tuple(flags(results, run.out)), run.speculative,
                  round(time.monotonic() - run.started, 1), exhaustive, round(per * exhaustive, 1) if per else None,
                  {t.name: str(t.start)}, tuple(t.sweep.levels), honesty.of_sweep(results))
    print(summary(doc, t))
    print("\n".join(["", "Checks over every level:", *check_lines(doc.checks, where="tune.json")]))
    cmp, picks = comparisons.records(results, start.label if start else None)
    save(run.out / "sweep.json", SweepDoc(tuple(results), best[min(best)].sentence if best else None, None,
                                          comparisons=cmp, picks=picks, checks=doc.checks))
    save(run.out / "tune.json", doc)
    print(f"\nresults: {run.out / 'tune.json'}, {run.out / 'sweep.json'} (specwatch advise --from)")
    return doc


def summary(doc: TuneDoc, t: TuneSpec) -> str:
    lines = ["", f"stopped: {doc.stop_reason}", ""]
    for c, b in doc.best.items():
        vs = []
        if b.gain_vs_start is not None and b.steps != t.start:
            vs.append(f"{_pct(b.gain_vs_start, b.gain_vs_start_interval)} over the start ({t.start} steps)")
        if b.gain_vs_plain is not None and b.steps:
            vs.append(f"{_pct(b.gain_vs_plain, b.gain_vs_plain_interval)} over plain decoding")
        lines.append(f"best at {c} stream{'s' if c != 1 else ''}: {steps_text(b.steps)}, {b.tok_s:.1f} "
                     "tok/s per stream (decode)" + ("; " + "; ".join(vs) if vs else ""))
    if doc.flags:
        lines += ["", "flags:", *doc.flags]
    cost = f", about {span(doc.exhaustive_wall_s)}" if doc.exhaustive_wall_s else ""
    lines += ["", f"used: {doc.speculative_launches} speculative launch{'es' if doc.speculative_launches != 1 else ''}"
              f" (the baseline apart) in {span(doc.wall_s)}; an exhaustive sweep of the same range: "
              f"{doc.exhaustive_launches} launches{cost}"]
    return "\n".join(lines)


def _pct(r: float, ci: tuple[float, float] | None) -> str:
    inner = f" (95% interval {100 * (ci[0] - 1):+.1f}% to {100 * (ci[1] - 1):+.1f}%)" if ci else ""
    return f"{100 * (r - 1):+.1f}%{inner}"


def parse(argv: list[str]) -> TuneSpec:
    p = argparse.ArgumentParser(prog="specwatch tune", description=__doc__, epilog=options.environment(DEFAULTS),
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    options.add_config_flag(p)
    options.add_flags(p, DEFAULTS)
    return spec_of(options.from_flags(p.parse_args(argv), DEFAULTS, os.environ))


def main(argv: list[str]) -> int:
    try:
        t = parse(argv)
        plain = plain_rates(t)
    except ConfigError as exc:
        print(f"specwatch tune: {exc}", file=sys.stderr)
        return 2
    out = Path(t.sweep.out)
    prepare(out)
    run = Run(t, out)
    try:
        stop = loop(run, plain)
    except KeyboardInterrupt:
        print("\ninterrupted: the current server was stopped; what was measured is kept (rerun with the same "
              "--out to resume)", flush=True)
        finish(run, "interrupted")
        return 130
    except AuthError as exc:
        print(f"specwatch tune: {exc}: {options.key_source(t.sweep.api_key_file, t.sweep.api_key)}", file=sys.stderr)
        return 2
    except RecordFileError as exc:
        print(f"specwatch tune: a saved result cannot be read ({exc}); remove it to measure it again",
              file=sys.stderr)
        return 2
    doc = finish(run, stop)
    return 0 if doc.best else 1

"""``specwatch tune`` against the truth on the simulator (issue 34): per cell (profile × load × the step count
running today) ``tune`` run as a user runs it, over steps 1..10 with the baseline launched, and per profile ×
load an exhaustive ``sweep`` of the same range, timed. Prints a markdown table, one row per cell: launches
used, the configuration chosen, its regret (the true best's tok/s over the chosen configuration's true tok/s)
and the wall time against the sweep's; then the targets' lines.

    python benchmarks/tune_matrix.py [--profiles seed,mixed,fast] [--loads 1,16] [--starts 1,5,10]
        [--cost-scale 0.5] [--fast-cost-scale 20] [--max-tokens 128] [--runs-one 16] [--per-stream 6] [--quick]

The truth is the simulator's oracle (what ``sim --explain`` and ``/explain`` print as "best step count by
load": the served engine's code in virtual time), asked for the pattern ``tune`` sends: N closed-loop streams
started together, the built-in prompts, the same ``--max-tokens`` and the same number of measured requests
(the steady state depends on both). Per-stream decode tok/s is the figure on both sides.

Affordable on 2 shared cores: seed and mixed run at ``--cost-scale 0.5`` (every cost halved: the same shape);
fast is seed at 1/100 of its costs, whose sub-millisecond rounds at 16 plain streams (~11,000 chunks/s at
``--cost-scale 10``) would make the client, not the engine, the bottleneck; ``--fast-cost-scale 20`` (seed at
1/5 of its costs) keeps the simulator ahead of the client (a bench at 16 plain streams reads 342.8 decode
tok/s per stream where the oracle says 344.2) while its fixed per-request host costs still weigh more than
seed's. 128 tokens, 16 requests at one stream and 6 per stream under load keep one launch to ~5-20 s.

Wall time: each tune run stands for the exhaustive sweep of its profile and load, so the ratio is the sum of
the tune runs' wall times over the sum, cell by cell, of the matching sweep's (each sweep counted once per
start). ``--quick``: seed only, starting at 5 steps (2 cells, 2 sweeps: a smoke run of a few minutes).

Everything is the product's own commands (``sim``, ``tune``, ``sweep``) on 127.0.0.1.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from common import free_port
from specwatch.sim import cli as sim_cli
from specwatch.sim import oracle, serve

SW = [sys.executable, "-m", "specwatch"]
SPEC = "--speculative-algorithm EAGLE3 --speculative-num-steps {steps} --speculative-eagle-topk 1"
MAX_STEPS = 10
RANGE = f"steps=1..{MAX_STEPS}"
TIMEOUT_S = 1800


@dataclass(frozen=True, slots=True)
class Cell:
    profile: str
    streams: int
    start: int
    launches: int  # speculative launches (the baseline apart)
    chosen: int | None  # the chosen step count (0: plain decoding); None: no winner
    regret: float | None  # the true best's tok/s over the chosen's true tok/s
    wall_s: float
    sweep_wall_s: float
    error: str = ""


def cost_scale(profile: str, a: argparse.Namespace) -> float:
    return a.fast_cost_scale if profile == "fast" else a.cost_scale


def num_runs(streams: int, a: argparse.Namespace) -> int:
    return a.runs_one if streams == 1 else a.per_stream * streams


def templates(profile: str, a: argparse.Namespace) -> tuple[str, str, str]:
    """(launch, baseline launch, server URL) on a fresh port."""
    port = free_port()
    sim = " ".join([*SW, "sim", "--profile", profile, "--cost-scale", str(cost_scale(profile, a)), "--seed", "1",
                    "--quiet", "--port", str(port)])
    return f"{sim} {SPEC}", sim, f"http://127.0.0.1:{port}"


def common_flags(streams: int, a: argparse.Namespace, out: Path) -> list[str]:
    return ["--param", RANGE, "--concurrency", str(streams), "--max-tokens", str(a.max_tokens),
            "--num-runs", str(num_runs(streams, a)), "--out", str(out)]


def truth(profile: str, streams: int, a: argparse.Namespace) -> tuple[float, ...]:
    """The oracle's per-stream decode tok/s of 0 (plain) .. MAX_STEPS steps at ``streams``, for tune's pattern."""
    args, _ = sim_cli.parse(["--profile", profile, "--cost-scale", str(cost_scale(profile, a)), *SPEC.format(
        steps=5).split(), "--explain", "--output-tokens", str(a.max_tokens), "--requests",
        str(num_runs(streams, a))])
    pattern = serve.explain_pattern(args).at(streams)
    return oracle.best_steps(sim_cli.engine_settings(args), pattern, MAX_STEPS).tokens_per_second


def run(cmd: list[str], log: Path) -> tuple[int, float]:
    """Run ``cmd`` with its output in ``log``; (exit status, wall seconds)."""
    t0 = time.perf_counter()
    with log.open("w") as fh:
        rc = subprocess.run(cmd, stdout=fh, stderr=subprocess.STDOUT, timeout=TIMEOUT_S).returncode
    return rc, time.perf_counter() - t0


def sweep(profile: str, streams: int, a: argparse.Namespace, tmp: Path) -> tuple[float, int | None]:
    """The exhaustive sweep: (wall seconds, its pick's step count)."""
    out = tmp / f"sweep-{profile}-{streams}"
    launch, base, url = templates(profile, a)
    rc, wall = run([*SW, "sweep", "--launch", launch, "--baseline-launch", base, "--server-url", url,
                    *common_flags(streams, a, out)], tmp / f"{out.name}.log")
    doc = out / "sweep.json"
    picks = json.loads(doc.read_text()).get("picks", []) if doc.exists() else []
    if rc or not picks:
        print(f"  sweep {profile} at {streams}: exit {rc}, see {tmp / (out.name + '.log')}", file=sys.stderr)
    return wall, (picks[0]["steps"] if picks else None)


def tune(profile: str, streams: int, start: int, a: argparse.Namespace, tmp: Path,
         rates: tuple[float, ...], sweep_wall_s: float) -> Cell:
    out = tmp / f"tune-{profile}-{streams}-{start}"
    launch, base, url = templates(profile, a)
    rc, wall = run([*SW, "tune", "--launch", launch, "--baseline-launch", base, "--server-url", url,
                    "--start", f"steps={start}", *common_flags(streams, a, out)], tmp / f"{out.name}.log")
    doc = out / "tune.json"
    if not doc.exists():
        return Cell(profile, streams, start, 0, None, None, wall, sweep_wall_s, f"exit {rc}, no tune.json")
    d = json.loads(doc.read_text())
    best = d["best"].get(str(streams))
    chosen = None if best is None else int(best["steps"])
    regret = None if chosen is None else max(rates) / rates[chosen]
    return Cell(profile, streams, start, int(d["speculative_launches"]), chosen, regret, wall, sweep_wall_s,
                "" if rc == 0 else f"exit {rc}")


def row(c: Cell, rates: tuple[float, ...], sweep_pick: int | None) -> str:
    best = max(range(len(rates)), key=rates.__getitem__)
    chosen = "-" if c.chosen is None else f"{c.chosen} ({rates[c.chosen]:.1f})"
    regret = "-" if c.regret is None else f"{100 * (c.regret - 1):.1f}%"
    swept = "-" if sweep_pick is None else f"{sweep_pick} ({100 * (max(rates) / rates[sweep_pick] - 1):.1f}%)"
    return (f"| {c.profile} | {c.streams} | {c.start} | {c.launches} + 1 | {chosen} | {best} ({rates[best]:.1f}) | "
            f"{regret} | {c.wall_s:.0f} | {c.sweep_wall_s:.0f} | {c.wall_s / c.sweep_wall_s:.2f} | {swept} | "
            f"{c.error} |")


def summary(cells: list[Cell]) -> list[str]:
    regrets = [c.regret for c in cells if c.regret is not None]
    launches = [c.launches for c in cells]
    worst = [f"{c.profile}/{c.streams}/{c.start}" for c in cells if c.regret is None or c.regret > 1.03]
    over = [f"{c.profile}/{c.streams}/{c.start}" for c in cells if c.launches > 4]
    ratio = sum(c.wall_s for c in cells) / sum(c.sweep_wall_s for c in cells)
    return [
        f"max regret: {100 * (max(regrets) - 1):.1f}% (target <= 3% in every cell; over it or without a winner: "
        f"{', '.join(worst) or 'none'})",
        f"launches (speculative, the baseline apart): median {statistics.median(launches):g}, max {max(launches)} "
        f"(targets: median <= 3, none above 4; above 4: {', '.join(over) or 'none'})",
        f"wall time: tune {sum(c.wall_s for c in cells):.0f} s over the matching exhaustive sweeps' "
        f"{sum(c.sweep_wall_s for c in cells):.0f} s = {ratio:.2f} (target <= 0.33)",
    ]


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--profiles", default="seed,mixed,fast")
    ap.add_argument("--loads", default="1,16", help="streams in flight, one tune run and one sweep each")
    ap.add_argument("--starts", default="1,5,10", help="the step counts running today (tune --start)")
    ap.add_argument("--cost-scale", type=float, default=0.5, help="sim --cost-scale of seed and mixed")
    ap.add_argument("--fast-cost-scale", type=float, default=20.0, help="sim --cost-scale of fast")
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--runs-one", type=int, default=16, help="measured requests per launch at one stream")
    ap.add_argument("--per-stream", type=int, default=6, help="measured requests per stream at N > 1 streams")
    ap.add_argument("--quick", action="store_true", help="seed only, starting at 5 steps: a smoke run")
    a = ap.parse_args()
    if a.quick:
        a.profiles, a.starts = "seed", "5"
    return a


def main() -> int:
    a = parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="tune-matrix-"))
    print(f"tune over {RANGE} with the baseline launched, against an exhaustive sweep of the same range; "
          f"--max-tokens {a.max_tokens}, {a.runs_one} requests at one stream, {a.per_stream} per stream under load; "
          f"cost scale {a.cost_scale} (fast {a.fast_cost_scale}); logs in {tmp}", flush=True)
    cells: list[Cell] = []
    lines: list[str] = []
    t0 = time.perf_counter()
    for profile in a.profiles.split(","):
        for streams in map(int, a.loads.split(",")):
            rates = truth(profile, streams, a)
            sweep_wall, sweep_pick = sweep(profile, streams, a, tmp)
            print(f"  sweep {profile} at {streams}: {sweep_wall:.0f} s, pick {sweep_pick}", flush=True)
            for start in map(int, a.starts.split(",")):
                cell = tune(profile, streams, start, a, tmp, rates, sweep_wall)
                cells.append(cell)
                lines.append(row(cell, rates, sweep_pick))
                print("  " + lines[-1], flush=True)
    print(f"\n{len(cells)} cells in {time.perf_counter() - t0:.0f} s\n")
    print("| profile | streams | start | launches | chosen (true tok/s) | true best (tok/s) | regret | tune s "
          "| sweep s | ratio | sweep's pick (regret) | note |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    print("\n".join(lines))
    print()
    print("\n".join(summary(cells)))
    return 0


if __name__ == "__main__":
    sys.exit(main())

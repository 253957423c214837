"""The live advisor against ``bench`` on the simulator: per profile a prior sweep (plain, 1, 3 and 8 steps at 1
and 16 streams, the baseline curve with it), then per cell (profile × streams × running step count) the daemon
on a simulator at that step count until its advice at that load stands, and ``bench`` at the advised step count
and two others, each on its own simulator. Prints one row per cell: the advice, the model's best (the
simulator's ``/explain`` for chat traffic, the mix's largest domain), and predicted against measured tok/s.

    python benchmarks/advisor_matrix.py [--profiles seed,mixed,fast] [--streams 1,16] [--running 2,5]
        [--cost-scale 0.5] [--max-tokens 128] [--per-stream 32] [--timeout-s 600] [--accept-scale 0.5]

Everything under load is measured at its steady state: a closed loop of N streams starts them together (one
batched prefill, no stalls) and ends them one by one (a shrinking batch), and on the seed profile at 16
streams the first few requests per stream decode ~20% faster than the rest. So every measurement at N > 1
streams runs ``--per-stream`` requests per stream (32: the ramps then move the mean ~2%; at 4 per stream,
bench read 101 tok/s where the steady state is 91), the prior's levels above one stream are swept again
that long (its one-stream level and the curve keep the short sweep: plain decoding's closed loop stays in
step), and the daemon's advice stands only on that many probes at the load.

``--accept-scale``: the first cell only; once its advice stands the draft's acceptance changes, and it prints
how long the advice took to become the model's new best (the 30 s hold included).

Everything is the product's own commands (``sim``, ``sweep``, ``run``, ``bench``) on 127.0.0.1.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from common import free_port
from specwatch.recorder.load import bucket_of

SW = [sys.executable, "-m", "specwatch"]


def get(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=10) as r:
        return json.loads(r.read())


def sim_flags(profile: str, cost: float, steps: int | str) -> str:
    spec = "" if steps == 0 else (f" --speculative-algorithm EAGLE3 --speculative-num-steps {steps} "
                                  "--speculative-eagle-topk 1")
    return f"--profile {profile} --cost-scale {cost} --seed 1{spec}"


class Sim:
    def __init__(self, profile: str, cost: float, steps: int, tmp: Path) -> None:
        self.port, cport = free_port(), free_port()
        self.log = tmp / f"sim-{self.port}.log"
        self.popen = subprocess.Popen([*SW, "sim", "--port", str(self.port), "--control-port", str(cport),
                                       "--quiet", "--log-file", str(self.log),
                                       *sim_flags(profile, cost, steps).split()],
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.url, self.control = f"http://127.0.0.1:{self.port}", f"http://127.0.0.1:{cport}"
        for _ in range(200):
            try:
                urllib.request.urlopen(self.url + "/health", timeout=1)
                return
            except OSError:
                time.sleep(0.1)
        raise SystemExit(f"simulator on {self.port} did not start")

    def stop(self) -> None:
        self.popen.terminate()
        self.popen.wait(20)


def sweep(profile: str, levels: list[int], runs: int, a: argparse.Namespace, out: Path) -> dict:
    port = free_port()
    sim = " ".join([*SW, "sim", "--port", str(port), "--quiet"])
    p = subprocess.run([*SW, "sweep", "--launch", f"{sim} {sim_flags(profile, a.cost_scale, '{k}')}", "--param",
                        "k=1,3,8", "--baseline-launch", f"{sim} {sim_flags(profile, a.cost_scale, 0)}",
                        "--server-url", f"http://127.0.0.1:{port}", "--concurrency", ",".join(map(str, levels)),
                        "--max-tokens", str(a.max_tokens), "--num-runs", str(runs), "--warmup", "1", "--out", str(out)],
                       capture_output=True, text=True, timeout=3600)
    if p.returncode:
        raise SystemExit(p.stdout[-3000:] + p.stderr[-3000:])
    return json.loads((out / "sweep.json").read_text())


def prior(profile: str, a: argparse.Namespace, tmp: Path) -> tuple[Path, Path]:
    """The sweep at one stream and every load (a curve needs two levels), and each load again at its steady
    state, merged into it."""
    out = tmp / f"prior-{profile}"
    loads = sorted({1, *map(int, a.streams.split(","))})
    doc = sweep(profile, loads, 32, a, out)
    for n in loads[1:]:
        steady = {c["label"]: c for c in sweep(profile, [n], a.per_stream * n, a, tmp / f"prior-{profile}-{n}")
                  ["configurations"]}
        for c in doc["configurations"]:
            c["by_concurrency"][str(n)] = steady[c["label"]]["by_concurrency"][str(n)]
    (out / "sweep.json").write_text(json.dumps(doc))
    return out / "sweep.json", out / "baseline-curve.json"


def advice(profile: str, n: int, k: int, sweep: Path, curve: Path, a: argparse.Namespace, tmp: Path,
           accept_scale: float | None = None) -> tuple[dict, float, dict]:
    """The daemon at ``k`` steps and ``n`` streams until its bucket's advice stands on enough probes and its
    best has held for 30 s; (the bucket's advice, seconds it took, the model's best at n). With
    ``accept_scale``: then the draft's acceptance changes, and the same again from the change, until the best
    is the model's new one (seconds from the change)."""
    sim = Sim(profile, a.cost_scale, k, tmp)
    port = free_port()
    plain = (["--baseline-curve", str(curve)] if curve.exists() else  # one level: the sweep's plain rate
             ["--baseline-tps", str(next(c["results"]["decode_tokens_per_second"] for c in
                                         json.loads(sweep.read_text())["configurations"] if c["steps"] == 0))])
    log = tmp / f"daemon-{port}.out"
    with log.open("wb") as fh:
        d = subprocess.Popen([*SW, "run", "--listen", f"127.0.0.1:{port}", "--server-url", sim.url, "--log-file",
                              str(sim.log), "--concurrency", str(n), "--pause-s", "0", "--max-tokens",
                              str(a.max_tokens), *plain, "--advisor-prior", str(sweep), "--interval-s", "2",
                              "--view", "log"], stdout=fh, stderr=subprocess.STDOUT)
    t0, held, last, got, want = time.monotonic(), 0.0, None, None, None
    explain = ""
    try:
        while time.monotonic() - t0 < a.timeout_s:
            time.sleep(2)
            if d.poll() is not None:
                sim.stop()
                raise SystemExit(f"the daemon exited with {d.returncode}: {log.read_text()[-2000:]}")
            try:
                adv = get(f"http://127.0.0.1:{port}/api/summary").get("advisor") or {}
            except OSError:
                continue
            b = next((x for x in adv.get("buckets", []) if x["bucket"] == bucket_of(n)), None)
            if not b or b["status"] != "ok" or b["requests"] < max(40, a.per_stream * n if n > 1 else 0):
                continue
            if b["best_steps"] != last:
                last, held = b["best_steps"], time.monotonic()
            got = b
            if not explain:  # the model for the traffic the probes send: their mean prompt length
                done = get(sim.control + "/truth")["requests"]
                prompt = round(sum(r["prompt_tokens"] for r in done) / len(done))
                explain = (f"{sim.control}/explain?streams={n}&max_steps=10&output_tokens={a.max_tokens}"
                           f"&prompt_tokens={prompt}")
            if time.monotonic() - held >= 30 and (want is None or last == want):
                if accept_scale is None or want is not None:
                    break
                change = {"accept_scale": accept_scale, "cost_scale": a.cost_scale}  # /control sets both
                req = urllib.request.Request(sim.control + "/control", json.dumps(change).encode(),
                                             {"Content-Type": "application/json"})
                urllib.request.urlopen(req, timeout=10).read()
                t0, last, got = time.monotonic(), None, None
                want = get(explain)["best_steps"][0]["best_steps"]
        model = get(explain)["best_steps"][0]
    finally:
        d.terminate()
        d.wait(30)
        sim.stop()
    if got is None:
        raise SystemExit(f"{profile} n={n} k={k}: no advice in {a.timeout_s:.0f} s")
    return got, time.monotonic() - t0, model


def measured(profile: str, n: int, steps: int, a: argparse.Namespace, tmp: Path) -> float:
    sim = Sim(profile, a.cost_scale, steps, tmp)
    out = tmp / f"bench-{sim.port}.json"
    try:
        subprocess.run([*SW, "bench", "--server-url", sim.url, "--concurrency", str(n), "--num-runs",
                        str(max(24, a.per_stream * n if n > 1 else 0)), "--warmup", "1", "--max-tokens",
                        str(a.max_tokens), "--json", str(out)], check=True, capture_output=True, timeout=1800)
    finally:
        sim.stop()
    return float(json.loads(out.read_text())["results"]["decode_tokens_per_second"])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--profiles", default="seed,mixed,fast")
    ap.add_argument("--streams", default="1,16")
    ap.add_argument("--running", default="2,5")
    ap.add_argument("--cost-scale", type=float, default=0.5)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--per-stream", type=int, default=32, help="requests per stream of every measurement at N > 1 "
                    "streams (the closed loop's ramps then weigh little)")
    ap.add_argument("--timeout-s", type=float, default=600.0)
    ap.add_argument("--accept-scale", type=float, help="instead of the matrix: its first cell, then this "
                    "accept_scale, and the seconds until the advice is the model's new best")
    a = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="advisor-matrix-"))
    if a.accept_scale is not None:
        profile, n, k = a.profiles.split(",")[0], int(a.streams.split(",")[0]), int(a.running.split(",")[0])
        sweep, curve = prior(profile, a, tmp)
        b, secs, model = advice(profile, n, k, sweep, curve, a, tmp, a.accept_scale)
        print(f"{profile} at {n} streams, {k} steps, accept_scale {a.accept_scale}: the advice was the model's "
              f"best ({model['best_steps']} steps) {secs:.0f} s after the change, held 30 s ({b['requests']} probes "
              f"in the bucket); predicted {b['predictions'][model['best_steps']]['tokens_per_second']['value']:.1f}"
              f" tok/s, the model {model['tokens_per_second'][model['best_steps']]:.1f}")
        return 0
    print(f"{'profile':<7}{'n':>3}{'k':>3}{'secs':>6}{'advised':>8}{'model':>6}   predicted / measured tok/s by steps")
    for profile in a.profiles.split(","):
        sweep, curve = prior(profile, a, tmp)
        for n in map(int, a.streams.split(",")):
            for k in map(int, a.running.split(",")):
                b, secs, model = advice(profile, n, k, sweep, curve, a, tmp)
                best = b["best_steps"]
                others = [s for s in (model["best_steps"], 0, 1, 10, 3) if s not in (best, k)][:2]
                pred = {p["steps"]: p["tokens_per_second"]["value"] for p in b["predictions"]}
                cells = []
                for s in (best, *others):
                    m = measured(profile, n, s, a, tmp)
                    cells.append(f"{s}: {pred[s]:.1f}/{m:.1f} ({100 * (pred[s] / m - 1):+.1f}%)")
                print(f"{profile:<7}{n:>3}{k:>3}{secs:>6.0f}{best:>8}{model['best_steps']:>6}   " + "  ".join(cells),
                      flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

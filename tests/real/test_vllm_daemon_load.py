"""The daemon's verdict at the real server's load: vLLM with ngram k=3 under 15 background streams (greedy,
128 tokens), compared by the daemon with plain decoding's curve (``sweep --targets PLAIN --concurrency``,
its load measured on the server), against the same-load truth measured independently: the same probe
under the same background load on the plain server, by a second daemon. Each server is loaded on its own
(the two never compete for the Worker's CPU), up to twice.

Measured here (clients pinned), the truth itself moves between runs far more than 10%, so every run asserts
the load the verdict is at, one run of up to two must match the truth within 15% (a second run only when the
first did not), and the summary prints how close each run came.

Pinning (``vllm-cpu.md``): vLLM binds its Worker to CPU 0 and serve_vllm.py pins the EngineCore beside it;
every client here (background bench, daemon, sweep) runs on CPU 1, beside the API server, so the server's
speed does not depend on how many client processes happen to compete with it. ``REALTIER_PIN_CLIENTS=0``
runs the clients unpinned (to measure what pinning buys; CI always pins)."""

from __future__ import annotations

import os
import subprocess
import time

import pytest
from realserver import COMPARISONS, TIMINGS

from conftest import free_port, http_get, http_json, specwatch_cmd, wait_until

pytestmark = pytest.mark.integration
BACKGROUND = 15
WINDOW_S = 20
RUNS = 2
MATCH = 0.15  # one run of up to RUNS within this of the same-load truth


def error(row: dict) -> float:
    """How far a run's verdict is from its same-load truth (relative)."""
    return abs(row["speedup"] / row["truth"] - 1)


def pinned(cmd: list[str]) -> list[str]:
    return cmd if os.environ.get("REALTIER_PIN_CLIENTS", "1") == "0" else ["taskset", "-c", "1", *cmd]


def measure(procs, server, name: str, curve=None) -> dict:
    """One server under ``BACKGROUND`` streams plus the daemon's probe: the daemon's window once it is all at
    that load."""
    bg = procs.start(pinned(specwatch_cmd("bench", "--server-url", server.url, "--concurrency", str(BACKGROUND),
                                          "--num-runs", "100000", "--warmup", "0", "--max-tokens", "128",
                                          "--temperature", "0")), f"bg-{name}")
    port = free_port()
    d = procs.start(pinned(specwatch_cmd(
        "run", "--listen", f"127.0.0.1:{port}", "--server-url", server.url, "--log-file", str(server.log),
        "--interval-s", "1", "--windows-s", f"{WINDOW_S},60", "--verdict-window-s", str(WINDOW_S), "--max-tokens",
        "128", "--pause-s", "0", "--min-requests", "8", *(("--baseline-curve", str(curve)) if curve else ()))),
        f"daemon-{name}")
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until(lambda: http_get(url + "/healthz", 1)[0] == 200, what=f"{name} daemon /healthz")
        t0 = http_json(url + "/api/summary")["uptime_s"]

        def settled():
            s = http_json(url + "/api/summary")
            load = s["verdict"]["load"]
            full = s["uptime_s"] >= t0 + WINDOW_S + 4  # a whole verdict window under the background load
            return s if full and load is not None and load >= BACKGROUND - 1 and s["probe"]["spec"]["ok"] >= 8 \
                else None

        s = wait_until(settled, timeout_s=WINDOW_S + 90, every_s=0.5, what=f"{name}: a verdict window at load")
    finally:
        d.stop()
        bg.stop()
    return s


def plain_curve(plain_server, out):
    """Plain decoding's curve, its load measured on the server (its /metrics), measured just before the same-load
    truth's plain run: on two cores the servers' speed drifts by tens of percent over minutes, the same for both
    servers, so the two plain measurements the comparison rests on are taken back to back. Its points bracket
    the daemon's load closely (12 and 16 running requests; 24 beyond), with at least two rounds per stream (48
    requests a level) so that a level is not mostly its first round filling the batch and its last emptying it."""
    p = subprocess.run(pinned(specwatch_cmd("sweep", "--targets", plain_server.url, "--concurrency", "12,16,24",
                                            "--max-tokens", "128", "--num-runs", "48", "--warmup", "1",
                                            "--temperature", "0", "--out", str(out))),
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-2000:]
    return out / "baseline-curve.json"


def test_the_daemons_speedup_under_load_matches_the_same_load_truth(spec_server, plain_server, procs, tmp_path):
    t_start = time.monotonic()
    rows = []
    for run in range(RUNS):  # curve, then the plain server's truth, then the speculative one: about two minutes
        if rows and rows[-1]["speedup"] is not None and error(rows[-1]) <= MATCH:
            break  # the assertions below want one run of up to RUNS within MATCH: this one is
        curve = plain_curve(plain_server, tmp_path / f"curve-{run}")
        plain = measure(procs, plain_server, "plain")
        s = measure(procs, spec_server, "spec", curve)
        v = s["verdict"]
        spec_tps, plain_tps = s["probe"]["spec"]["tokens_per_second"], plain["probe"]["spec"]["tokens_per_second"]
        rows.append({"speedup": v["speedup"], "rse": v["relative_stderr"] or 0.0, "truth": spec_tps / plain_tps,
                     "load": v["load"], "status": v["baseline_status"], "plain_load": plain["verdict"]["load"],
                     "spec_tps": spec_tps, "plain_tps": plain_tps, "curve_tps": v["baseline_tps"]})
    TIMINGS[f"daemon vs same-load truth, {len(rows)} run(s) (s)"] = time.monotonic() - t_start
    COMPARISONS.append(f"daemon under {BACKGROUND} background streams (clients "
                       f"{'unpinned' if os.environ.get('REALTIER_PIN_CLIENTS') == '0' else 'pinned to CPU 1'}):")
    COMPARISONS.extend(f"  run {i}: daemon {r['speedup']:.3f} (95% {r['speedup'] * (1 - 1.96 * r['rse']):.3f}-"
                       f"{r['speedup'] * (1 + 1.96 * r['rse']):.3f}, at load {r['load']:.1f}, baseline "
                       f"{r['status']} {r['curve_tps']:.1f} tok/s) vs same-load truth {r['truth']:.3f} (probe "
                       f"{r['spec_tps']:.1f} vs plain {r['plain_tps']:.1f} tok/s at load {r['plain_load']:.1f})"
                       for i, r in enumerate(rows, 1))
    assert all(r["speedup"] is not None and r["status"] in ("measured", "interpolated") for r in rows), rows
    assert all(BACKGROUND - 2 <= r["load"] <= BACKGROUND + 2 for r in rows), rows  # compared at the real load
    # On 2 cores this server is frontend-bound: 16 streams of a tiny model saturate the CPU the API server shares
    # with the clients, and both servers' speed moves by tens of percent from one minute to the next: the truth
    # itself moved 1.38 -> 2.30 between two runs here, and 1.05 -> 1.24 in another, so even the verdict's
    # direction is noise when speculation is worth 5% at this load. The plain curve and the plain truth,
    # measured a minute and a half apart, differed by 30% in one CI run (the daemon read 0.92 against a truth
    # of 1.32, then 1.20 against 1.22 in the next run); they are now measured back to back. What holds is that
    # at least one run of two matches within 15%: a daemon that compared at the wrong load (one stream's plain
    # rate is three times this one's) or against the wrong end of the curve cannot.
    errors = [error(r) for r in rows]
    COMPARISONS.append(f"  within 10% of the truth in {sum(e <= 0.10 for e in errors)} of {len(rows)} runs")
    assert min(errors) <= MATCH, rows

"""The daemon's verdict at the server's real load, against the simulator whose model states the crossover.

A speculative simulator (mixed profile, 7 draft steps: the oracle's crossover is ~11.6 streams) and a
plain one get the same background load (``bench --concurrency N-1``, plus the probe: N running). The
speculative daemon compares with a baseline curve measured by ``sweep --targets PLAIN --concurrency …``;
the truth is the same probe measurement on the plain simulator under the same load, by a second daemon.
Loads ramp 1 → 32; at 4 (below the crossover) and 32 (above) the verdict is checked, and at the end the
speedup-by-load curve's crossover against the oracle's."""

from __future__ import annotations

import json
import math
import subprocess

import pytest

from conftest import Procs, free_port, http_get, http_json, scrape, specwatch_cmd, wait_until
from specwatch.analysis import baseline as baseline_mod
from specwatch.sim import model, oracle
from specwatch.sim.engine import EngineSettings
from specwatch.sim.pattern import Pattern

pytestmark = [pytest.mark.integration, pytest.mark.serial]
SIM = ("--profile", "mixed", "--cost-scale", "0.5", "--seed", "5", "--decode-log-interval", "10", "--quiet")
SPEC = ("--speculative-algorithm", "EAGLE3", "--speculative-num-steps", "7", "--speculative-eagle-topk", "1")
WINDOW_S = 12
PHASES = ((1, 6), (2, 6), (4, 16), (8, 8), (16, 8), (32, 18))  # (running requests, seconds at least)
CHECKED = {4: 0.0, 32: 1.0}  # load → below-baseline


def daemon(procs: Procs, sim, log, name: str, *flags: str):
    port = free_port()
    d = procs.start(specwatch_cmd("run", "--listen", f"127.0.0.1:{port}", "--server-url", sim.url, "--log-file",
                                  str(log), "--interval-s", "1", "--windows-s", f"{WINDOW_S},60", "--verdict-window-s",
                                  str(WINDOW_S), "--max-tokens", "128", "--pause-s", "0", "--min-requests", "4",
                                  *flags), name)
    d.url = f"http://127.0.0.1:{port}"
    wait_until(lambda: http_get(d.url + "/healthz", 1)[0] == 200, what=f"{name} /healthz")
    return d


def test_verdict_at_the_current_load_and_the_speedup_by_load_curve(procs, tmp_path):
    spec_log, plain_log = tmp_path / "spec.log", tmp_path / "plain.log"
    spec = procs.sim(*SIM, *SPEC, "--log-file", str(spec_log), name="spec", control=False)
    plain = procs.sim(*SIM, "--log-file", str(plain_log), name="plain", control=False)
    # plain decoding's per-stream rate by load, measured as a user would
    out = tmp_path / "curve"
    p = subprocess.run(specwatch_cmd("sweep", "--targets", plain.url, "--concurrency", "1,2,4,8,16,32", "--max-tokens",
                                     "128", "--num-runs", "4", "--warmup", "1", "--out", str(out)),
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-2000:]
    curve_file = out / "baseline-curve.json"
    assert [pt.running for pt in baseline_mod.read(str(curve_file)).points] == [1, 2, 4, 8, 16, 32]
    d_spec = daemon(procs, spec, spec_log, "daemon-spec", "--baseline-curve", str(curve_file))
    d_plain = daemon(procs, plain, plain_log, "daemon-plain")  # the truth: the same probes on plain decoding
    background = []
    results = {}
    for n, seconds in PHASES:
        for bg in background:
            bg.stop()
        background = [procs.start(specwatch_cmd("bench", "--server-url", sim.url, "--concurrency", str(n - 1),
                                                "--num-runs", "100000", "--warmup", "0", "--max-tokens", "128"),
                                  f"load-{name}-{n}") for name, sim in (("spec", spec), ("plain", plain)) if n > 1]

        def at_load(d, n=n):
            s = http_json(d.url + "/api/summary")
            load = s["verdict"]["load"]
            return s if load is not None and n - 1.2 <= load <= n + 0.2 and s["probe"]["spec"]["ok"] >= 6 else None

        # stay in the phase long enough for the by-load buckets (and, where checked, a whole verdict window)
        t0 = http_json(d_spec.url + "/api/summary")["uptime_s"]
        wait_until(lambda t0=t0, seconds=seconds: http_json(d_spec.url + "/api/summary")["uptime_s"] >= t0 + seconds,
                   timeout_s=seconds + 30, every_s=0.5, what=f"{seconds} s at load {n}")
        if n in CHECKED:
            s_spec = wait_until(lambda d=d_spec: at_load(d), timeout_s=60, what=f"spec summary at load {n}")
            s_plain = wait_until(lambda d=d_plain: at_load(d), timeout_s=60, what=f"plain summary at load {n}")
            truth = s_spec["probe"]["spec"]["tokens_per_second"] / s_plain["probe"]["spec"]["tokens_per_second"]
            v = s_spec["verdict"]
            results[n] = (v["speedup"], truth, v["baseline_status"], v["below_baseline"])
    for bg in background:
        bg.stop()
    for n, below in CHECKED.items():
        speedup, truth, status, got_below = results[n]
        assert status in ("measured", "interpolated"), results
        assert speedup == pytest.approx(truth, rel=0.05), results  # the same-load truth, not the idle one
        assert got_below == below, results
    # the oracle (the simulator's engine in virtual time, closed loops of N as the sweep and the load run them)
    # agrees in direction: above 1 at 4, below at 32
    settings = EngineSettings(profile=model.PROFILES["mixed"].with_overrides(cost_scale=0.5),
                              spec=model.SpecConfig.from_flags("EAGLE3", 7, 1, None), seed=5)
    rows, truth_cross = oracle.by_load(settings, Pattern(output_tokens=128), [1, 2, 4, 8, 16, 32])
    speedup = {r.streams: r.speedup for r in rows}
    assert speedup[4] > 1 > speedup[32] and truth_cross is not None
    # the speedup-by-load curve and its crossover: within one bucket of the oracle's
    summary = http_json(d_spec.url + "/api/summary")
    by_load = summary["by_load"]
    assert by_load["crossover"] is not None, json.dumps(by_load, indent=1)
    assert abs(math.log2(by_load["crossover"]) - math.log2(truth_cross)) <= 1.0, (by_load, truth_cross)
    print("verdicts (speedup, same-load truth, baseline status, below):", results)
    print("by load:", [(b["bucket"], b["requests"], round(b["mean_load"], 1), b["speedup"] and round(b["speedup"], 3))
                       for b in by_load["buckets"]], "crossover", by_load["crossover"], "model", truth_cross)
    buckets = {b["bucket"]: b for b in by_load["buckets"]}
    assert buckets[1]["speedup"] > 1.0 and buckets[32]["speedup"] < 1.0, by_load
    m = scrape(d_spec.url)
    assert m["specwatch_speculation_crossover_running_requests"] == pytest.approx(by_load["crossover"])
    assert m['specwatch_speedup_by_load_ratio{load_bucket="32"}'] < 1.0
    assert m["specwatch_server_load_known"] == 1.0

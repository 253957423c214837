"""The loop closes: a sweep over load finds where 7 draft steps stop paying off, prints SGLang's adaptive
flags and file, and a fresh simulator launched with exactly that text no longer loses to plain decoding at
high load, where the same server without them does — as the daemon measures it, by load bucket, against
the sweep's own baseline curve.

Profile: mixed at half cost, 7 steps (the model's crossover is ~13.6 running requests; +17% at 8, −14% at 24
in its closed-loop model). Both servers get the same background load (``bench --concurrency N-1`` plus the
daemon's probe: N running) at N = 1, 8 and 32."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys

import pytest

from conftest import free_port, http_get, http_json, scrape, specwatch_cmd, wait_until
from specwatch.sim.model import OFF_ROUND_TAX

pytestmark = [pytest.mark.integration, pytest.mark.serial]
SIM = ("--profile", "mixed", "--cost-scale", "0.5", "--decode-log-interval", "10", "--quiet")
STATIC = ("--speculative-algorithm", "EAGLE3", "--speculative-num-steps", "7", "--speculative-eagle-topk", "1")
PHASES = ((1, 8), (8, 10), (32, 16))  # (running requests, seconds at least)
WINDOW_S = 12
CURVE_ERROR = 0.05  # the sweep's baseline curve against the same server later (see the last assertions)


def sweep(tmp_path) -> tuple[list[str], dict]:
    port = free_port()
    sim = f"{sys.executable} -m specwatch sim {' '.join(SIM)} --seed 3 --port {port}"
    out = tmp_path / "sweep"
    p = subprocess.run(specwatch_cmd(
        "sweep", "--out", str(out), "--launch", sim + " --speculative-algorithm EAGLE3 --speculative-num-steps "
        "{steps} --speculative-eagle-topk 1", "--param", "steps=7", "--baseline-launch", sim, "--server-url",
        f"http://127.0.0.1:{port}", "--concurrency", "1,8,24", "--max-tokens", "128", "--num-runs", "4",
        "--warmup", "1"), capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout[-4000:] + p.stderr[-2000:]
    lines = [ln.strip() for ln in p.stdout.splitlines()]
    head = next(i for i, ln in enumerate(lines) if ln.startswith("SGLang ≥ 0.5.14 (this server: 0.5.23)"))
    flags = shlex.split(lines[head + 1])
    doc = json.loads((out / "sweep.json").read_text())
    return flags, {"doc": doc, "out": out, "stdout": p.stdout}


def daemon(procs, sim, log, curve, name, *flags):
    port = free_port()
    d = procs.start(specwatch_cmd("run", "--listen", f"127.0.0.1:{port}", "--server-url", sim.url, "--log-file",
                                  str(log), "--interval-s", "1", "--windows-s", f"{WINDOW_S},60", "--verdict-window-s",
                                  str(WINDOW_S), "--max-tokens", "128", "--pause-s", "0", "--min-requests", "4",
                                  "--baseline-curve", str(curve), *flags), name)
    d.url = f"http://127.0.0.1:{port}"
    wait_until(lambda: http_get(d.url + "/healthz", 1)[0] == 200, what=f"{name} /healthz")
    return d


def test_the_printed_schedule_applied_to_a_fresh_server_stops_the_loss_at_high_load(procs, tmp_path):
    flags, sw = sweep(tmp_path)
    out = sw["out"]
    # what was printed: the measured depth at one stream, 0 steps from a CUDA-graph size above the crossover
    assert flags[:9] == ["--speculative-algorithm", "EAGLE3", "--speculative-eagle-topk", "1",
                         "--speculative-num-steps", "7", "--speculative-adaptive", "--speculative-adaptive-config",
                         str(out / "sglang-adaptive.json")], flags
    slots = json.loads((out / "sglang-adaptive.json").read_text())
    assert slots["1"] == {"candidate_steps": [7]} and list(slots.values())[-1] == {"candidate_steps": [0]}
    assert 8 < int(list(slots)[-1]) <= 32, slots
    logs = {name: tmp_path / f"{name}.log" for name in ("static", "scheduled")}
    sims = {"static": procs.sim(*SIM, *STATIC, "--seed", "5", "--log-file", str(logs["static"]), name="static",
                                control=False),
            "scheduled": procs.sim(*SIM, *flags, "--seed", "5", "--log-file", str(logs["scheduled"]),
                                   "--enable-metrics", name="scheduled", control=False)}
    curve = out / "baseline-curve.json"
    ds = {"static": daemon(procs, sims["static"], logs["static"], curve, "daemon-static"),
          "scheduled": daemon(procs, sims["scheduled"], logs["scheduled"], curve, "daemon-scheduled",
                              "--server-metrics")}
    background: list = []
    for n, seconds in PHASES:
        for bg in background:
            bg.stop()
        background = [procs.start(specwatch_cmd("bench", "--server-url", sim.url, "--concurrency", str(n - 1),
                                                "--num-runs", "100000", "--warmup", "0", "--max-tokens", "128"),
                                  f"load-{name}-{n}") for name, sim in sims.items() if n > 1]

        def enough(d, n=n):
            b = {x["bucket"]: x for x in http_json(d.url + "/api/summary")["by_load"]["buckets"]}.get(n)
            return b is not None and b["requests"] >= 8 and b["speedup"] is not None

        t0 = http_json(ds["static"].url + "/api/summary")["uptime_s"]
        wait_until(lambda t0=t0, s=seconds: http_json(ds["static"].url + "/api/summary")["uptime_s"] >= t0 + s,
                   timeout_s=seconds + 30, every_s=0.5, what=f"{seconds} s at load {n}")
        for d in ds.values():
            wait_until(lambda d=d: enough(d), timeout_s=90, every_s=0.5, what=f"bucket {n} of {d.url}")
        # the step count in use, as SGLang's running gauge says and the daemon reports it: the measured depth at
        # low load, none at 32 running requests
        want = 0.0 if n == 32 else 7.0
        def sglang_steps(want=want):
            m = http_get(sims["scheduled"].url + "/metrics")[1].decode()
            return any(ln.startswith("sglang:spec_num_steps{") and float(ln.split()[-1]) == want
                       for ln in m.splitlines())

        wait_until(sglang_steps, timeout_s=15, what=f"sglang:spec_num_steps at {want:g}")
        wait_until(lambda want=want: scrape(ds["scheduled"].url).get(
            'specwatch_server_speculative_steps{dp_rank="0",source="scrape"}') == want, timeout_s=15,
            what=f"the daemon's specwatch_server_speculative_steps at {want:g}")
    for bg in background:
        bg.stop()
    table, off = {}, {}
    for name, d in ds.items():
        b = {x["bucket"]: x for x in http_json(d.url + "/api/summary")["by_load"]["buckets"]}
        table[name] = {n: (b[n]["speedup"], b[n]["relative_stderr"] or 0.0, b[n]["requests"]) for n, _ in PHASES}
        off[name] = {n: b[n]["off_range_cost"] for n, _ in PHASES}
    print("speedup by load bucket (speedup, relative stderr, requests):", json.dumps(table))

    def upper(row):
        sp, rse, _ = row
        return sp * (1 + 1.96 * rse)

    def lower(row):
        sp, rse, _ = row
        return sp * (1 - 1.96 * rse)

    # before: the static server loses at high load (0.72-0.76 measured); after: no bucket is below break-even
    # beyond its interval and the curve's own error. The daemon's interval is its probe's alone; the curve it
    # divides by was swept with two requests per stream at 24 streams and is extrapolated to 32, a few percent
    # of its own (a CI run read 0.985 ± 0.002 at 32, where the scheduled server runs plain decoding itself)
    # where the schedule is at 0 the server is not plain decoding: its rounds pay the simulator's off_round_tax
    # (docs/sim-model.md), so break-even there is 1 / (1 + tax)
    assert upper(table["static"][32]) < 1.0, table
    # the daemon prices the running schedule's 0 range where its probes saw no draft: 1 / speedup - 1 at 32, the
    # simulator's tax within the bucket's noise; the static server drafts at every load and has none
    assert off["static"] == {n: None for n, _ in PHASES} and off["scheduled"][1] is off["scheduled"][8] is None, off
    assert off["scheduled"][32] == pytest.approx(1 / table["scheduled"][32][0] - 1) and \
        -CURVE_ERROR < off["scheduled"][32] < OFF_ROUND_TAX + 0.15, off
    floor = {n: (1.0 if n < 32 else 1.0 / (1.0 + OFF_ROUND_TAX)) - CURVE_ERROR for n, _ in PHASES}
    assert all(upper(table["scheduled"][n]) >= floor[n] for n, _ in PHASES), table
    # it still speculates where that wins (7 steps at 1 and 8, as sglang:spec_num_steps said above): at one stream
    # clearly faster; at 8 the model's +17% is within a closed loop's noise of 1 (one CI run: 1.09 ± 0.09)
    assert lower(table["scheduled"][1]) > 1.0, table

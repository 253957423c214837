"""The oracle proven against the engine it speaks for: ``/explain`` (the engine's own code in virtual time)
against what the same simulator, served, did under bench's load (``probe.bounded.collect``, in this process:
a subprocess per cell cost a second each; its ``/truth``), over profiles x
step counts x loads. Per cell both per-stream figures bench prints agree within 1%; per profile the crossover
between the loads and the best step count at each agree.

Each load runs at a ``--cost-scale`` that keeps a round at least 0.25 ms per running request (2 ms at
least), so the server and the client keep pace on 2 cores; the speedups and the best step count do not depend
on the scale (every cost scales together). Before each load the engine is reseeded, so the served requests
draw the acceptance a fresh virtual engine draws: what is compared is timing, not two samples."""

from __future__ import annotations

import asyncio
import math
import os

import pytest

from conftest import free_port, http_get, http_json, specwatch_cmd, wait_until
from specwatch.analysis.by_load import crossover
from specwatch.probe.bounded import BenchSpec, collect
from specwatch.sim import model
from specwatch.sim.steady import steady

pytestmark = pytest.mark.integration
LOADS = (1, 4, 16, 64)
STEPS = (0, 2, 5, 10)
OUTPUT = 64
SEED = 5


def requests_at(n: int) -> int:
    return max(10, 3 * n)  # the steady set drops the first wave (n) and the drain (about n): about n are left


def cost_scale(profile: str, n: int) -> float:
    target_ms = max(2.0, 0.25 * n)
    return target_ms / model.cycle_ms(model.PROFILES[profile], model.SpecConfig(), n)


def served_and_explained(sim, profile: str, n: int) -> tuple[dict, dict]:
    http_json(sim.control + "/control", {"profile": profile, "cost_scale": cost_scale(profile, n), "seed": SEED})
    seen = {r["rid"] for r in http_json(sim.control + "/truth")["requests"]}
    _, records = asyncio.run(collect(BenchSpec(server_url=sim.url, concurrency=n, num_runs=requests_at(n), warmup=1,
                                               max_tokens=OUTPUT), say=lambda line: None))
    assert all(r.ok for r in records), [r.error for r in records if not r.ok][:3]
    truth = http_json(sim.control + "/truth")
    mine = [r for r in truth["requests"] if r["rid"] not in seen]
    rounds = [(r["end_ns"], r["batch_size"], r["tokens"]) for r in truth["rounds"]]
    prefills = [(r["end_ns"], r["requests"], r["prompt_tokens"]) for r in truth["prefills"]]
    served = steady(mine, rounds, prefills, 1, n)
    assert served is not None and len(mine) == requests_at(n) + 1
    explained = http_json(f"{sim.control}/explain?streams={n}&output_tokens={OUTPUT}&requests={requests_at(n)}"
                          "&warmup=1&max_steps=0", timeout=120)
    return vars_of(served), explained["loads"][0]["served"]


def pinned_sim(procs, pin: str, *flags: str, name: str):
    """``procs.sim``, started under ``taskset`` when ``pin`` says so."""
    port, cport = free_port(), free_port()
    cmd = [*pin.split(), *specwatch_cmd("sim", "--port", str(port), "--control-port", str(cport), *flags)]
    sim = procs.start(cmd, name)
    sim.url, sim.control = f"http://127.0.0.1:{port}", f"http://127.0.0.1:{cport}"

    def ready() -> bool:
        if sim.popen.poll() is not None:
            raise AssertionError(f"sim exited early: {sim.output()}")
        return http_get(sim.url + "/health", 1)[0] == 200

    wait_until(ready, 20, what=f"simulator {sim.url}")
    return sim


def vars_of(s) -> dict:
    return {f: getattr(s, f) for f in s.__slots__}


@pytest.fixture
def own_core():
    """The served simulator on core 1, this process (bench's client) on core 0: the two never wait for each
    other's core, as the real tier pins its server and its clients."""
    before = os.sched_getaffinity(0)
    if len(before) < 2:
        yield ""
        return
    os.sched_setaffinity(0, {min(before)})
    try:
        yield f"taskset -c {max(before)}"
    finally:
        os.sched_setaffinity(0, before)


@pytest.mark.parametrize("profile", ["seed", "mixed", "fast"])
def test_explain_is_the_served_engine_at_every_load(procs, own_core, profile):
    decode: dict[tuple[str, int, int], float] = {}
    rows = []
    for steps in STEPS:
        flags = ["--speculative-algorithm", "EAGLE3", "--speculative-num-steps", str(steps),
                 "--speculative-eagle-topk", "1"] if steps else []
        sim = pinned_sim(procs, own_core, "--profile", profile, "--seed", str(SEED), "--quiet",
                         "--max-running-requests", "128", *flags, name=f"sim-{profile}-{steps}")
        for n in LOADS:
            served, explained = served_and_explained(sim, profile, n)
            for figure in ("tokens_per_second", "decode_tokens_per_second"):
                err = explained[figure] / served[figure] - 1
                rows.append((steps, n, figure, served[figure], explained[figure], err))
            decode["served", steps, n] = served["decode_tokens_per_second"]
            decode["explained", steps, n] = explained["decode_tokens_per_second"]
        sim.stop()
    print(f"\n{profile}: steps streams figure served explained error")
    for steps, n, figure, a, b, err in rows:
        print(f"  {steps:>2} {n:>3} {figure:<26} {a:10.2f} {b:10.2f} {100 * err:+.2f}%")
    bad = [r for r in rows if abs(r[5]) > 0.01]
    assert not bad, bad
    for side in ("served", "explained"):  # the same crossover and the same best step count, from either side
        decode[side, "best"] = tuple(max(STEPS, key=lambda s: decode[side, s, n]) for n in LOADS)
        decode[side, "cross"] = tuple(crossover([(float(n), decode[side, s, n] / decode[side, 0, n]) for n in LOADS])
                                      for s in STEPS[1:])
    print("best by load", decode["served", "best"], decode["explained", "best"])
    print("crossovers", decode["served", "cross"], decode["explained", "cross"])
    assert decode["served", "best"] == decode["explained", "best"]
    for a, b in zip(decode["served", "cross"], decode["explained", "cross"], strict=True):
        assert (a is None) == (b is None) and (a is None or math.isclose(a, b, rel_tol=0.05)), (a, b)

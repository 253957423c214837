"""The oracle against the engine it speaks for: ``/explain`` (the simulator's engine in virtual time) against
what the same simulator, served, did under ``specwatch bench --concurrency N`` as its ``/truth`` shows it, read
through the same steady-state rule (``sim.steady``). Profiles seed, mixed and fast x 0, 2, 5, 10 draft steps x
1, 4, 16 and 64 streams: both per-stream figures within 1%, and the best step count and the crossover at each
load the same from either side.

Each load runs at a ``--cost-scale`` that keeps a round at least 0.5 ms per running request and 4 ms at least,
so that the served engine keeps its own pace on two cores; the simulator and the client are pinned to cores of
their own. At one stream the engine idles between requests, so the event loop's overshoot on each request's last
round (0.1-0.4 ms here) stays in that request: 4 ms rounds keep it under 0.25%. At 4 streams 2 ms rounds were
within 0.5% on a quiet machine, but a clean-clone CI run read mixed at 2 steps 1.25% slower served than
explained there (decode 770.4 against 780.1 tok/s): the machine's lateness weighs twice as much in a round half
as long. ``/explain`` is
told the client's pace as the served engine saw it (``sends_ms``: each send's delay after the later of the send
before it and the end that freed its stream, read from ``/truth`` by ``pattern.sends_seen``), the one part of the
pattern that is the machine's. Each cell reseeds the simulator (``/control``): a request's acceptance draws follow
its prompt and how often that prompt was asked (``sim.draws``), so the served run and the virtual one draw alike
whatever order the streams' first requests arrive in.

The pace was a mean (``send_ms``), at which the oracle's client sent evenly; the real client is uneven within a
closed loop's wave. One run here waited 130 ms between two sends of a 64-stream wave: the served engine
prefilled the wave in three batches, the later ones stalling the requests already decoding, and plain decoding's
decode figure read 1.95% below the oracle's. Clean-clone CI runs missed that cell, 0 steps at 64 streams, by
+1.54% and -2.31%, and once (fast) three times in a row (+1.21% to +1.66%), the served run's steady window
prefilled in 7 batches and the even sends' in 6. Each send's own delay gives the virtual client the served
arrivals wherever the ends are. A cell that misses is still measured again, at most twice, only while its served
run batched its arrivals in another number of prefills than the oracle's run (``prefill_batches``) or its engine
lost time to a host stall (``/truth``'s ``pacer``); each such measurement is in the table; a miss with the
oracle's batching fails at once."""

from __future__ import annotations

import os
import statistics
import subprocess

import pytest

from conftest import Procs, http_json, specwatch_cmd
from specwatch.analysis.by_load import crossover
from specwatch.sim import model, pattern
from specwatch.sim.steady import steady

pytestmark = [pytest.mark.integration, pytest.mark.serial]
LOADS = (1, 4, 16, 64)
STEPS = (0, 2, 5, 10)
OUTPUT = 64
SEED = 5
WITHIN = 0.01
RETRIES = 2  # a disturbed cell that misses is measured again at most this often (``measured``)
FIGURES = ("tokens_per_second", "decode_tokens_per_second")
TABLE: list[str] = []
SENDS: list[float] = []  # each cell's mean send delay, their range printed at the module's end


def requests_at(n: int) -> int:
    """At one stream every request but the warm-up is steady, and 8 are enough: the worst of 24 such figures
    read 0.31-0.36% in three runs beside the other serial tests (with 16: 0.26-0.46% in four CI runs). With more
    streams the ramp-up and the drain take their share, and the steady window is what is left: 16 at 4 streams
    missed by 2.3%, and 32 read up to 0.85% beside the other serial tests (64: at most 0.17-0.57%), so 4 streams
    keep 64; above that 3 waves."""
    return 8 if n == 1 else max(64, 3 * n)


def cost_scale(profile: str, n: int) -> float:
    return max(4.0, 0.5 * n) / model.cycle_ms(model.PROFILES[profile], model.SpecConfig(), n)


def cores() -> tuple[set[int], list[str]]:
    """The simulator's core (the last) and a ``taskset`` prefix for the client (the first), when there are two."""
    cpus = sorted(os.sched_getaffinity(0))
    return ({cpus[-1]}, ["taskset", "-c", str(cpus[0])]) if len(cpus) > 1 else (set(cpus), [])


@pytest.fixture(scope="module")
def sims(tmp_path_factory):
    """One simulator per step count, each pinned to the last core; a cell sets its profile and cost scale."""
    ps = Procs(tmp_path_factory.mktemp("oracle"))
    out = {}
    for steps in STEPS:
        flags = ["--speculative-algorithm", "EAGLE3", "--speculative-num-steps", str(steps),
                 "--speculative-eagle-topk", "1"] if steps else []
        out[steps] = ps.sim("--seed", str(SEED), "--quiet", "--max-running-requests", "128", *flags,
                            name=f"sim-{steps}")
        os.sched_setaffinity(out[steps].popen.pid, cores()[0])
    yield out
    ps.stop_all()
    print(f"\nthe client's mean send delay (ms) as the server saw it: {min(SENDS, default=0):.3f}-"
          f"{max(SENDS, default=0):.3f} (the table: in the summary, tests/conftest.py)")


def cell(sim, profile: str, n: int) -> tuple[dict, dict, str]:
    """The served engine's steady figures under bench's load, ``/explain``'s for the same pattern, and what
    disturbed the served run, if anything did (``disturbance``)."""
    http_json(sim.control + "/control", {"profile": profile, "cost_scale": cost_scale(profile, n), "seed": SEED})
    before = http_json(sim.control + "/truth")
    seen = {r["rid"] for r in before["requests"]}
    p = subprocess.run([*cores()[1], *specwatch_cmd("bench", "--server-url", sim.url, "--concurrency", str(n),
                                                    "--num-runs", str(requests_at(n)), "--warmup", "1",
                                                    "--max-tokens", str(OUTPUT))],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    truth = http_json(sim.control + "/truth")
    mine = [r for r in truth["requests"] if r["rid"] not in seen]
    rounds = [(r["end_ns"], r["batch_size"], r["tokens"]) for r in truth["rounds"]]
    prefills = [(r["end_ns"], r["requests"], r["prompt_tokens"]) for r in truth["prefills"]]
    served = steady(mine, rounds, prefills, 1, n)
    assert served is not None, f"{profile} at {n} streams: no steady request"
    sends = pattern.sends_seen(mine, n, 1)
    assert len(sends) == len(mine), f"{profile} at {n} streams: a request without an end"
    SENDS.append(statistics.fmean(sends[1:]))
    explained = http_json(f"{sim.control}/explain?streams={n}&output_tokens={OUTPUT}&requests={requests_at(n)}"
                          f"&warmup=1&max_steps=0&sends_ms={','.join(f'{d:.4f}' for d in sends)}"
                          )["loads"][0]["served"]
    stalled = {k: truth["pacer"][k] - before["pacer"][k] for k in ("stalls", "lost_ms")}
    return ({f: getattr(served, f) for f in FIGURES}, explained,
            disturbance(served.prefill_batches, explained["prefill_batches"], stalled))


def disturbance(served_batches: int, explained_batches: int, stalled: dict[str, float]) -> str:
    """What the host did to a served run that the oracle's run of the stated pattern cannot show, or "": the
    engine batched the arrivals in another number of prefills (the client paused within a wave: one run here
    waited 130 ms between two of a 64-stream wave's sends, the wave was prefilled as 1, 16 and 47 requests, and
    the last prefill stalled the 17 already decoding: -1.95% on decode), or the engine's schedule fell too far
    behind to catch up (``/truth``'s ``pacer``)."""
    why = []
    if served_batches != explained_batches:
        why.append(f"the served engine prefilled its steady window in {served_batches} batches, the oracle's run in "
                   f"{explained_batches}")
    if stalled["stalls"]:
        why.append(f"the host stalled the served engine {stalled['stalls']:.0f} times, {stalled['lost_ms']:.1f} ms")
    return "; ".join(why)


def measured(sim, profile: str, steps: int, n: int) -> tuple[dict, dict, list[str]]:
    """A cell's figures, served and explained, and its table rows; a cell that misses is measured again, up to
    ``RETRIES`` times, only while a disturbance of the host explains it (the table says so), never otherwise."""
    cell_name = f"  {profile:<5} {steps:>2} {n:>3}"
    for attempt in range(1, RETRIES + 2):
        served, explained, disturbed = cell(sim, profile, n)
        errs = {f: explained[f] / served[f] - 1 for f in FIGURES}
        if attempt > RETRIES or not disturbed or all(abs(e) <= WITHIN for e in errs.values()):
            break
        TABLE.append(f"{cell_name} measured again ({attempt}): "
                     + ", ".join(f"{f} {100 * e:+.2f}%" for f, e in errs.items()) + f" after {disturbed}")
    return served, explained, [f"{cell_name} {f:<25} {served[f]:9.2f} {explained[f]:9.2f} {100 * errs[f]:+.2f}%"
                               for f in FIGURES]


@pytest.mark.parametrize("profile", ["seed", "mixed", "fast"])
def test_explain_is_the_served_engine_at_every_load(sims, profile):
    decode: dict[tuple[str, int, int], float] = {}
    misses = []
    for steps in STEPS:
        for n in LOADS:
            served, explained, rows = measured(sims[steps], profile, steps, n)
            TABLE.extend(rows)
            misses += [row for row, f in zip(rows, FIGURES, strict=True)
                       if abs(explained[f] / served[f] - 1) > WITHIN]
            decode["served", steps, n] = served["decode_tokens_per_second"]
            decode["explained", steps, n] = explained["decode_tokens_per_second"]
    assert misses == [], "\n".join(misses)

    def best(side: str) -> tuple[int, ...]:
        return tuple(max(STEPS, key=lambda s, n=n: decode[side, s, n]) for n in LOADS)

    def crossovers(side: str) -> tuple[float | None, ...]:
        return tuple(crossover([(float(n), decode[side, s, n] / decode[side, 0, n]) for n in LOADS])
                     for s in STEPS[1:])

    assert best("served") == best("explained")
    for got, want in zip(crossovers("served"), crossovers("explained"), strict=True):
        assert (got is None) == (want is None) and (got is None or got == pytest.approx(want, rel=0.05)), (
            crossovers("served"), crossovers("explained"))

"""tune's planner against the simulator's own truth: per-stream decode tok/s of every step count 0-10 at one and
16 streams (``specwatch sim --profile P --explain --streams 1,16 --max-steps 10``, the engine in virtual time)
and the profile's per-position acceptance. Each "launch" returns the truth with a 1% per-request spread."""

from __future__ import annotations

import pytest

from specwatch.analysis import tune_plan
from specwatch.results import BenchResult, ConfigResult, LevelResult, RunResult, Spread

TRUTH = {  # profile -> load -> tok/s at steps 0..10
    "seed": {1: [90.0, 88.9, 92.9, 82.9, 76.7, 71.8, 69.2, 65.5, 64.0, 62.0, 60.4],
             16: [68.9, 60.0, 60.9, 54.6, 49.6, 46.9, 44.0, 42.0, 39.9, 38.7, 36.8]},
    "mixed": {1: [125.0, 201.0, 242.7, 259.1, 265.2, 261.0, 250.1, 238.4, 227.5, 222.1, 212.2],
              16: [73.8, 94.6, 99.7, 97.5, 92.5, 85.3, 77.9, 71.3, 65.3, 60.9, 56.3]},
}
POSITIONS = {"seed": (0.62, 0.4836, 0.0242, 0.0012, 0.0001, 0.0, 0.0, 0.0, 0.0, 0.0),
             "mixed": (0.8075, 0.5984, 0.4093, 0.2566, 0.1463, 0.0764, 0.0363, 0.0172, 0.0082, 0.0039)}


def level(tps: float, steps: int, positions: tuple[float, ...]) -> LevelResult:
    al = 1.0 + sum(positions[:steps])
    runs = tuple(RunResult("p", "chat", "ok", 200, "", 500, 64, 5.0, 5.0, 0.0, 0.05, 100, tps * f, al, None, 100,
                           True) for f in (0.99, 1.0, 1.01, 0.995, 1.005))
    res = BenchResult(5, 5, tps, tps, tps, tps, tps, {}, Spread(), al if steps else None, None, None,
                      1000 if steps else 0, positions[:steps], {"ok": 5}, {}, 0, None)
    return LevelResult(res, runs)


def launch(profile: str, steps: int) -> ConfigResult:
    by_c = {n: level(t[steps], steps, POSITIONS[profile]) for n, t in TRUTH[profile].items()}
    low = by_c[1]
    return ConfigResult("baseline" if steps == 0 else f"steps={steps}", {"steps": str(steps)}, 0.0, "ok",
                        steps=steps, draft_tokens=steps + 1, results=low.results, runs=low.runs, by_concurrency=by_c)


def tune(profile: str, start: int, loads: list[int], budget: int = 4) -> tuple[list[int], tune_plan.Next]:
    results = [launch(profile, 0), launch(profile, start)]
    launched = [start]
    while True:
        nxt = tune_plan.next_step(results, loads, range(0, 11), {})
        if nxt.steps is None or len(launched) == budget:
            return launched, nxt
        assert nxt.steps not in launched
        launched.append(nxt.steps)
        results.append(launch(profile, nxt.steps))


def best_measured(profile: str, launched: list[int], load: int) -> int:
    truth = TRUTH[profile][load]
    return max([0, *launched], key=lambda s: truth[s])


@pytest.mark.parametrize("profile", ["seed", "mixed"])
@pytest.mark.parametrize("load", [1, 16])
@pytest.mark.parametrize("start", [1, 5, 10])
def test_tune_finds_the_best_within_four_launches(profile, load, start):
    launched, nxt = tune(profile, start, [load])
    truth = TRUTH[profile][load]
    regret = max(truth) / truth[best_measured(profile, launched, load)] - 1
    assert regret <= 0.03, (launched, nxt.reason)
    assert len(launched) <= 4


def test_the_seed_story_ends_at_two_steps_within_three_launches():
    launched, nxt = tune("seed", 5, [1])
    assert best_measured("seed", launched, 1) == 2 and len(launched) <= 3
    assert nxt.steps is None and "2 steps measured 92.9 tok/s" in nxt.reason and "nothing else predicted above" \
        in nxt.reason


def test_two_loads_are_tuned_together():
    launched, _ = tune("mixed", 10, [1, 16])
    for load in (1, 16):
        truth = TRUTH["mixed"][load]
        assert max(truth) / truth[best_measured("mixed", launched, load)] - 1 <= 0.03, launched


def test_without_per_position_acceptance_it_climbs_from_the_best_to_its_neighbours():
    import dataclasses
    blind = launch("seed", 5)
    lvl = blind.by_concurrency[1]
    res = dataclasses.replace(lvl.results, position_acceptance=())
    blind = dataclasses.replace(blind, results=res, by_concurrency={1: LevelResult(res, lvl.runs)})
    nxt = tune_plan.next_step([launch("seed", 0), blind], [1], range(0, 11), {})
    assert nxt.steps == 4 and nxt.predicted == () and nxt.reason.startswith("a neighbour of 5 steps")


def lookup(profile: str, steps: int) -> ConfigResult:
    """A lookup drafter (SGLang's NGRAM, by its server info): its widths are each measured, never predicted."""
    import dataclasses
    r = launch(profile, steps)
    return dataclasses.replace(r, server_info={"speculative_algorithm": "NGRAM"} if steps else {})


@pytest.mark.parametrize(("profile", "start"), [("seed", 5), ("seed", 1), ("mixed", 1), ("mixed", 10)])
def test_a_lookup_drafter_is_climbed_to_a_local_best(profile, start):
    results, launched = [lookup(profile, 0), lookup(profile, start)], [start]
    while (nxt := tune_plan.next_step(results, [1], range(0, 11), {})).steps is not None:
        assert nxt.predicted == () and nxt.steps not in launched
        launched.append(nxt.steps)
        results.append(lookup(profile, nxt.steps))
    truth = TRUTH[profile][1]
    top = max(launched, key=truth.__getitem__)
    assert all(truth[n] < truth[top] for n in (top - 1, top + 1) if 1 <= n <= 10), launched  # a local best
    assert max(truth[1:]) == truth[top] and "neighbours are measured" in nxt.reason, (launched, nxt.reason)


def test_a_given_plain_rate_stands_in_for_the_baseline():
    nxt = tune_plan.next_step([launch("seed", 5)], [1], range(0, 11), {1: tune_plan.Plain(90.0, 0.005)})
    assert nxt.steps is not None and nxt.outlooks[0].best_steps == 0  # plain (given) is the best so far


def spread(result: ConfigResult, f: tuple[float, ...]) -> ConfigResult:
    """The same configuration, its one-stream requests spread by the factors ``f``."""
    import dataclasses
    lvl = result.by_concurrency[1]
    runs = tuple(dataclasses.replace(lvl.runs[0], decode_tokens_per_second=lvl.results.decode_tokens_per_second * x)
                 for x in f)
    return dataclasses.replace(result, runs=runs, by_concurrency={1: LevelResult(lvl.results, runs)})


def test_a_tie_with_plain_decoding_is_settled_once_then_reported():
    from specwatch.analysis import comparisons
    noisy = spread(launch("seed", 2), (0.9, 1.1, 0.95, 1.05, 1.0))  # +3.2% over plain, within its noise
    bands = comparisons.bands([launch("seed", 0), launch("seed", 5), noisy])
    assert bands[0].winner == "baseline"
    tie = tune_plan.tie_to_settle(bands, set())
    assert tie is not None and (tie.rival, tie.pick) == ("steps=2", "baseline")  # both measured again
    assert tie.words.startswith("at 1 stream, steps=2 ties baseline (")
    assert tune_plan.tie_to_settle(bands, {"steps=2"}) is None
    clear = comparisons.bands([launch("seed", 0), launch("seed", 5), launch("seed", 2)])  # 1% spread: +3.2% wins
    assert clear[0].winner == "steps=2" and tune_plan.tie_to_settle(clear, set()) is None


class CannedRun:
    """``tune.loop``'s run with canned measurements: steps=2 ties plain decoding at first (its requests spread
    ±10%), and is clearly faster once measured again. Records each measurement as (steps, repeat)."""

    def __init__(self, max_launches: int) -> None:
        import types
        self.t = types.SimpleNamespace(sweep=types.SimpleNamespace(baseline_launch="", targets="t0,t2", levels=[1]),
                                       space=(0, 2), start=2, max_launches=max_launches)
        self.results: list[ConfigResult] = []
        self.failed: set[int] = set()
        self.measured: list[tuple[int, int]] = []

    def measure(self, s: int, why: str, nxt: object = None, repeat: int = 1) -> None:
        self.measured.append((s, repeat))
        res = launch("seed", s)
        if s == 2 and repeat == 1:
            res = spread(res, (0.9, 1.1, 0.95, 1.05, 1.0))
        self.results = [r for r in self.results if r.label != res.label] + [res]

    def settle(self, steps: list[int], why: str) -> None:
        from specwatch.commands import tune as tune_cmd
        for s in steps:
            self.measure(s, why, repeat=tune_cmd.SETTLE)

    @property
    def speculative(self) -> int:
        return sum(1 for s, _ in self.measured if s)


def test_tune_settles_a_tie_by_measuring_both_sides_again():
    from specwatch.commands import tune as tune_cmd
    run = CannedRun(max_launches=2)
    reason = tune_cmd.loop(run, {})  # type: ignore[arg-type]
    assert run.measured == [(0, 1), (2, 1), (0, tune_cmd.SETTLE), (2, tune_cmd.SETTLE)], run.measured
    assert "ties" not in reason, reason  # settled: steps=2 measured clear of plain decoding
    short = CannedRun(max_launches=1)  # no launch left for the settle: the tie is reported, not settled
    reason = tune_cmd.loop(short, {})  # type: ignore[arg-type]
    assert short.measured == [(0, 1), (2, 1)] and "steps=2 ties baseline" in reason
    assert "unsettled: --max-launches 1 spent" in reason


@pytest.mark.parametrize(("argv", "interleaved_rounds"), [
    (["--targets", "http://127.0.0.1:9,http://127.0.0.1:10"], 6),  # both up, one stream: alternating rounds
    (["--targets", "http://127.0.0.1:9,http://127.0.0.1:10", "--num-runs", "1"], 3),  # no more rounds than requests
    (["--targets", "http://127.0.0.1:9,http://127.0.0.1:10", "--concurrency", "1,4"], 0),  # a level at 4 streams
    (["--launch", "serve --steps {steps}", "--baseline-launch", "serve", "--server-url", "http://127.0.0.1:9"], 0),
])
def test_a_settle_alternates_between_running_servers_at_one_stream_else_goes_back_to_back(
        argv, interleaved_rounds, tmp_path, monkeypatch):
    """``Run.settle``: the same requests either way (``SETTLE`` x ``--num-runs`` a side); in rounds alternating
    between the two servers when both are up (--targets) and every level is one stream, else one launch each."""
    from specwatch import interleaved
    from specwatch.commands import tune as tune_cmd
    t = tune_cmd.parse([*argv, "--param", "steps=0,2", "--start", "steps=2", *(
        [] if "--num-runs" in argv else ["--num-runs", "4"])])
    calls: list[tuple[str, int, int, list[str]]] = []

    def run_one(sw, bench, step, out):
        calls.append(("launch", sw.interleave, bench.num_runs, [step[0]]))
        return launch("seed", int(step[1].get("steps", 0)))

    def run_interleaved(sw, bench, todo):
        calls.append(("interleaved", sw.interleave, bench.num_runs, [step[0] for step in todo]))
        return [launch("seed", int(step[1].get("steps", 0))) for step in todo]

    monkeypatch.setattr(tune_cmd, "run_one", run_one)
    monkeypatch.setattr(interleaved, "run_interleaved", run_interleaved)
    (tmp_path / "results").mkdir()
    run = tune_cmd.Run(t, tmp_path)
    run.settle([0, 2], "a tie")
    requests = tune_cmd.SETTLE * t.sweep.bench.num_runs
    if interleaved_rounds:
        assert calls == [("interleaved", interleaved_rounds, requests, ["baseline", "steps=2"])]
    else:
        assert calls == [("launch", 1, requests, ["baseline"]), ("launch", 1, requests, ["steps=2"])]
    assert [la.steps for la in run.launches] == [0, 2] and {r.label for r in run.results} == {"baseline", "steps=2"}
    assert all((tmp_path / "results" / f"{label}.json").exists() for label in ("baseline", "steps=2"))

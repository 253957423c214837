"""``sweep --interleave``: the rounds' split and order, the option's limits, and the paired margin (drift that
moves every configuration alike between rounds cancels; a real difference is found)."""

import json
import math
from dataclasses import replace

import pytest

from specwatch import codec
from specwatch.analysis.compare import margin, margin_of, paired_margin
from specwatch.errors import ConfigError
from specwatch.interleaved import check, order, round_sizes
from specwatch.results import RunResult
from specwatch.trial import SweepSpec


@pytest.mark.parametrize("num_runs, rounds, sizes", [
    (6, 3, [2, 2, 2]), (7, 3, [3, 2, 2]), (3, 3, [1, 1, 1]), (5, 1, [5]), (10, 4, [3, 3, 2, 2]),
])
def test_num_runs_are_split_into_rounds_the_first_taking_the_remainder(num_runs, rounds, sizes):
    assert round_sizes(num_runs, rounds) == sizes


@pytest.mark.parametrize("n, r, expected", [
    (2, 0, [0, 1]), (2, 1, [1, 0]), (2, 2, [0, 1]), (3, 1, [1, 2, 0]), (3, 2, [2, 0, 1]), (1, 5, [0]),
])
def test_round_r_starts_at_target_r_mod_n(n, r, expected):
    assert order(n, r) == expected


@pytest.mark.parametrize("spec, error", [
    (SweepSpec(interleave=3, launch="x {steps}"), "needs --targets"),
    (SweepSpec(interleave=3, targets="http://127.0.0.1:1", concurrency_levels="1,4"), "one stream only"),
    (SweepSpec(interleave=3, targets="http://127.0.0.1:1", num_runs=2), "cannot be split into 3 rounds"),
])
def test_interleave_refuses_what_it_cannot_honour(spec, error):
    with pytest.raises(ConfigError, match=error):
        check(spec)


@pytest.mark.parametrize("spec", [SweepSpec(), SweepSpec(interleave=3, targets="http://127.0.0.1:1", num_runs=3)])
def test_interleave_accepts_the_default_and_targets_at_one_stream(spec):
    check(spec)


# plain decoding at 100 tok/s and a configuration 10% faster, on a machine whose speed drifts between rounds
DRIFT = [1.0, 0.6, 1.4, 0.8]
JITTER = [-0.5, 0.0, 0.5]  # within a round, per request


def rounds_of(rate: float, drift: list[float]) -> list[list[float]]:
    return [[rate * d + j for j in JITTER] for d in drift]


@pytest.mark.parametrize("speedup", [1.10, 0.90, 1.0])
def test_drift_that_moves_every_configuration_alike_cancels_in_the_paired_margin(speedup):
    a, b = rounds_of(100 * speedup, DRIFT), rounds_of(100.0, DRIFT)
    paired = paired_margin(a, b)
    assert paired is not None and paired.rounds == len(DRIFT)
    assert paired.ratio == pytest.approx(speedup - 1, abs=0.002)
    assert paired.high - paired.low < 0.02  # the drift is gone: only the within-round jitter is left
    welch = margin([x for r in a for x in r], [x for r in b for x in r])
    assert welch is not None and welch.high - welch.low > 10 * (paired.high - paired.low)


@pytest.mark.parametrize("speedup, outcome", [(1.10, "faster"), (0.90, "slower"), (1.0, "tie")])
def test_a_real_difference_is_found_through_the_drift_and_none_is_a_tie(speedup, outcome):
    paired = paired_margin(rounds_of(100 * speedup, DRIFT), rounds_of(100.0, DRIFT))
    assert paired is not None
    found = "tie" if paired.tie else "faster" if paired.low > 0 else "slower"
    assert found == outcome
    welch = margin([x for r in rounds_of(100 * speedup, DRIFT) for x in r], [x for r in rounds_of(100.0, DRIFT)
                                                                            for x in r])
    assert welch is not None and welch.noise  # Welch's, over the pooled requests, cannot tell


def test_the_paired_interval_is_stated_as_paired_over_the_rounds():
    paired = paired_margin(rounds_of(110.0, DRIFT), rounds_of(100.0, DRIFT))
    assert paired is not None and "paired over 4 rounds" in paired.interval_text()
    assert "paired" not in (margin([1.0, 2.0], [1.0, 2.0]) or paired).interval_text()


@pytest.mark.parametrize("a_rounds, b_rounds, paired", [
    ([[1.0], [2.0], [3.0]], [[1.0], [2.0], [3.0]], True),  # the same rounds: paired
    ([[1.0, 2.0, 3.0]], [[1.0, 2.0, 3.0]], False),  # one round (not interleaved): Welch
    ([[1.0], [2.0], [3.0]], [[1.0, 2.0, 3.0]], False),  # one interleaved, one resumed: Welch
    ([[1.0], [], [3.0]], [[1.0], [2.0], [3.0]], False),  # a round empty on one side: Welch
    ((), (), False),
])
def test_margin_of_pairs_only_configurations_measured_in_the_same_rounds(a_rounds, b_rounds, paired):
    m = margin_of([1.0, 2.0, 3.0], [1.0, 2.0, 3.0], a_rounds, b_rounds)
    assert m is not None and (m.rounds > 0) == paired


def test_one_round_has_a_ratio_and_no_interval():
    m = paired_margin([[110.0]], [[100.0]])
    assert m is not None and m.low is None and math.isclose(m.ratio, 0.1)


def test_a_run_saved_before_rounds_existed_loads_in_round_zero():
    run = RunResult("p", "code", "ok", 200, "", 10, 5, 1.0, 1.0, 0.0, 0.1, 10, 9.0, None, None, None, True)
    doc = json.loads(codec.dumps(replace(run, round=2)))
    assert codec.from_json(RunResult, doc, "run").round == 2
    del doc["round"]
    assert codec.from_json(RunResult, doc, "run").round == 0

"""Pacers (pure functions of the request index) and the verdict's hysteresis."""

import dataclasses
import itertools
import statistics

import pytest

from specwatch.analysis.verdict import Judge, VerdictInputs, breakeven, cycle_seconds, speedup, verdict_inputs
from specwatch.probe.schedule import ConstantPacer, PoissonPacer, make_pacer
from specwatch.records import ProbeWindow


@pytest.mark.parametrize(("rate", "i", "offset_ns"), [(1, 0, 0), (1, 3, 3_000_000_000), (4, 2, 500_000_000),
                                                     (0.5, 1, 2_000_000_000)])
def test_constant_pacer(rate, i, offset_ns):
    assert ConstantPacer(rate).offset_ns(i) == offset_ns


def test_poisson_pacer_is_reproducible_monotone_and_has_the_right_mean():
    a, b = PoissonPacer(10, seed=1), PoissonPacer(10, seed=1)
    offs = [a.offset_ns(i) for i in range(5000)]
    assert offs == [b.offset_ns(i) for i in range(5000)]
    gaps = [y - x for x, y in itertools.pairwise(offs)]
    assert all(g >= 0 for g in gaps)
    assert statistics.fmean(gaps) == pytest.approx(1e8, rel=0.05)
    assert a.offset_ns(10) == offs[10]  # asking again does not redraw


def test_bad_rate():
    with pytest.raises(ValueError, match="rate must be > 0"):
        make_pacer(0, False)


def test_arithmetic_seed_story():
    # 5 steps: 71 tok/s at accept length 2.1 against a 90 tok/s baseline
    cyc = cycle_seconds(2.1, 71.0)
    assert cyc == pytest.approx(0.02958, rel=1e-3)
    assert breakeven(cyc, 90.0) == pytest.approx(2.662, rel=1e-3)
    assert speedup(71.0, 90.0) == pytest.approx(0.789, rel=1e-3)
    assert speedup(71.0, None) is None and cycle_seconds(None, 71.0) is None


@pytest.mark.parametrize(("ratios", "expected"), [
    ([0.8], [True]),
    ([1.05], [False]),
    ([0.9, 1.01, 1.02, 1.04], [True, True, True, False]),  # clears only above 1 + hysteresis
    ([1.05, 0.999, 1.01], [False, True, True]),
    ([1.05, 1.0, 1.01], [False, False, False]),
])
def test_hysteresis(ratios, expected):
    j = Judge(hysteresis=0.03, min_requests=1)
    assert [j.update(VerdictInputs(r * 90, 2.0, 90.0, 5, None)).below_baseline for r in ratios] == expected


def test_no_verdict_until_enough_requests():
    j = Judge(min_requests=3)
    assert j.update(VerdictInputs(50, 2.0, 90, 2, None)).below_baseline is None
    assert j.update(VerdictInputs(50, 2.0, 90, 3, None)).below_baseline is True


def test_a_noisy_small_win_never_enters_below_baseline_but_a_clear_loss_does():
    j = Judge(hysteresis=0.03, min_requests=3)
    # 3% faster measured as 0.99x with a 2% standard error: not confidently slower
    assert j.update(VerdictInputs(0.99 * 90, 2.1, 90.0, 10, 0.02)).below_baseline is False
    assert j.update(VerdictInputs(0.97 * 90, 2.1, 90.0, 10, 0.02)).below_baseline is False
    assert j.update(VerdictInputs(0.95 * 90, 2.1, 90.0, 10, 0.02)).below_baseline is True
    assert Judge(min_requests=3).update(VerdictInputs(0.67 * 90, 2.1, 90.0, 5, 0.05)).below_baseline is True
    # the same 5% loss measured over only 4 requests is not yet confident (t = 3.18, not 2)
    assert Judge(min_requests=3).update(VerdictInputs(0.95 * 90, 2.1, 90.0, 4, 0.02)).below_baseline is False


def window(tps, se, accept=None, ok=10):
    return ProbeWindow(requests=ok, ok=ok, errors=0, outcomes={}, tokens_per_second=tps,
                       tokens_per_second_relative_stderr=se, accept_length=accept, server_reported_accept_length=None,
                       tokens_per_chunk=None, position_acceptance=(), approximated_requests=0, latency_s={})


@pytest.mark.parametrize(("spec", "baseline", "fixed", "server_al", "expected"), [
    # fixed baseline: the probe's own spread, the client's accept length
    (window(80.0, 0.02, 2.1), None, 90.0, 3.0, VerdictInputs(80.0, 2.1, 90.0, 10, 0.02)),
    # no client accept length: the server's (from its logs) stands in
    (window(80.0, 0.02), None, 90.0, 3.0, VerdictInputs(80.0, 3.0, 90.0, 10, 0.02)),
    # A/B: the baseline target's tok/s, the two spreads combined
    (window(80.0, 0.03, 2.1), window(90.0, 0.04), None, None, VerdictInputs(80.0, 2.1, 90.0, 10, 0.05)),
    # A/B with no spread yet on one side: no standard error, so no confidence claimed
    (window(80.0, 0.03, 2.1), window(90.0, None), None, None, VerdictInputs(80.0, 2.1, 90.0, 10, None)),
    # A/B before the baseline has data: no baseline
    (window(80.0, None, 2.1, ok=1), window(None, None, ok=0), None, None, VerdictInputs(80.0, 2.1, None, 1, None)),
])
def test_verdict_inputs(spec, baseline, fixed, server_al, expected):
    got = verdict_inputs(spec, baseline, fixed, server_al)
    assert dataclasses.replace(got, relative_stderr=None) == dataclasses.replace(expected, relative_stderr=None)
    assert got.relative_stderr == pytest.approx(expected.relative_stderr)

"""Pacers (pure functions of the request index) and the verdict's hysteresis."""

import itertools
import statistics

import pytest

from specwatch.schedule import ConstantPacer, PoissonPacer, make_pacer
from specwatch.verdict import Judge, breakeven, cycle_seconds, speedup


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
    assert [j.update(r * 90, 2.0, 90.0, 5).below_baseline for r in ratios] == expected


def test_no_verdict_until_enough_requests():
    j = Judge(min_requests=3)
    assert j.update(50, 2.0, 90, 2).below_baseline is None
    assert j.update(50, 2.0, 90, 3).below_baseline is True


def test_a_noisy_small_win_never_enters_below_baseline_but_a_clear_loss_does():
    j = Judge(hysteresis=0.03, min_requests=3)
    # 3% faster measured as 0.99x with a 2% standard error: not confidently slower
    assert j.update(0.99 * 90, 2.1, 90.0, 10, relative_stderr=0.02).below_baseline is False
    assert j.update(0.97 * 90, 2.1, 90.0, 10, relative_stderr=0.02).below_baseline is False
    assert j.update(0.95 * 90, 2.1, 90.0, 10, relative_stderr=0.02).below_baseline is True
    assert Judge(min_requests=3).update(0.67 * 90, 2.1, 90.0, 5, relative_stderr=0.05).below_baseline is True
    # the same 5% loss measured over only 4 requests is not yet confident (t = 3.18, not 2)
    assert Judge(min_requests=3).update(0.95 * 90, 2.1, 90.0, 4, relative_stderr=0.02).below_baseline is False

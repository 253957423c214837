"""vLLM's ``--burstiness`` arrivals: gamma gaps of mean 1/rate and shape ``burstiness``, scaled over a bounded run
so the gaps sum to exactly requests / rate (``vllm/benchmarks/serve.py``'s ``get_request``)."""

import itertools
import statistics

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specwatch.probe.schedule import ConstantPacer, GammaPacer, PoissonPacer, make_pacer


@pytest.mark.parametrize(("rate", "burstiness", "cv"), [
    (10.0, 1.0, 1.0),  # Poisson: exponential gaps, coefficient of variation 1
    (10.0, 0.25, 2.0),  # burstier: cv = 1/sqrt(0.25)
    (4.0, 4.0, 0.5),  # more even
    (100.0, 16.0, 0.25),
])
def test_gaps_have_the_rate_and_the_shape(rate, burstiness, cv):
    p = GammaPacer(rate, burstiness, seed=3)
    offs = [p.offset_ns(i) for i in range(20_000)]
    gaps = [b - a for a, b in itertools.pairwise(offs)]
    mean = statistics.fmean(gaps)
    assert mean == pytest.approx(1e9 / rate, rel=0.03)
    assert statistics.pstdev(gaps) / mean == pytest.approx(cv, rel=0.05)


@pytest.mark.parametrize(("rate", "burstiness", "total", "last_ns"), [
    (1.0, 1.0, 10, 10_000_000_000),  # request i waits i + 1 gaps, the n gaps sum to n / rate, as in vLLM
    (4.0, 0.5, 100, 25_000_000_000),
    (0.5, 3.0, 7, 14_000_000_000),
    (1000.0, 1.0, 1, 1_000_000),
])
def test_a_bounded_run_is_scaled_to_requests_over_rate(rate, burstiness, total, last_ns):
    p = GammaPacer(rate, burstiness, seed=0, total=total)
    assert p.offset_ns(total - 1) == pytest.approx(last_ns, abs=1)
    assert p.offset_ns(0) > 0


@pytest.mark.parametrize(("args", "kind"), [
    ((2.0, False), ConstantPacer),
    ((2.0, True), PoissonPacer),
    ((2.0, False, 0, 1.0), GammaPacer),
    ((2.0, True, 0, 0.5), GammaPacer),  # --burstiness decides the arrivals over --poisson
])
def test_make_pacer_picks_the_arrivals(args, kind):
    assert type(make_pacer(*args)) is kind


@pytest.mark.parametrize("bad", [0.0, -1.0, float("nan")])
def test_bad_burstiness(bad):
    with pytest.raises(ValueError, match="burstiness must be > 0"):
        make_pacer(1.0, False, 0, bad)


@settings(max_examples=60, deadline=None)
@given(rate=st.floats(0.01, 1e4), burstiness=st.floats(0.05, 50), seed=st.integers(0, 2**32),
       total=st.one_of(st.none(), st.integers(1, 300)))
def test_offsets_are_reproducible_monotone_and_bounded(rate, burstiness, seed, total):
    n = total or 50
    a, b = GammaPacer(rate, burstiness, seed, total), GammaPacer(rate, burstiness, seed, total)
    offs = [a.offset_ns(i) for i in range(n)]
    assert offs == [b.offset_ns(i) for i in reversed(range(n))][::-1]  # any order of asking, the same times
    assert all(x <= y for x, y in itertools.pairwise(offs)) and offs[0] >= 0
    if total:
        assert offs[-1] == pytest.approx(total / rate * 1e9, abs=2)

"""speculation_profile.json (NVIDIA Model-Optimizer, schema 1.0): the vectors a sweep's acceptance gives, the
mean-consistency check, the file read back (ours and one shaped as Model-Optimizer writes it), and a profile as
the live advisor's prior."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from specwatch.analysis import live_advisor as la
from specwatch.analysis import spec_profile as sp
from specwatch.errors import AnalysisError, RecordFileError
from specwatch.recorder.load import LoadBucket
from specwatch.results import BenchResult, ConfigResult, Spread


def measured(marginal, steps, mean, chain=True) -> sp.Measured:
    return sp.Measured(tuple(marginal), steps, mean, None, chain, "eagle3")


@pytest.mark.parametrize(("marginal", "steps", "want_marginal", "want_conditional"), [
    # Model-Optimizer's own example: 40 rounds of length 1, 30 of 2, 30 of 3, at K = 3
    ((0.6, 0.3), 3, (0.6, 0.3, 0.0), (0.6, 0.5, 0.0)),
    ((0.9, 0.81, 0.729), 3, (0.9, 0.81, 0.729), (0.9, 0.9, 0.9)),
    ((0.5, 0.25, 0.1, 0.05), 2, (0.5, 0.25), (0.5, 0.5)),  # cut at the chain that ran
    ((0.0, 0.0), 2, (0.0, 0.0), (0.0, 0.0)),  # never accepted: 0, not a division by zero
])
def test_vectors_are_dense_per_draft_position(marginal, steps, want_marginal, want_conditional):
    p = sp.build(measured(marginal, steps, 1 + sum(want_marginal)))
    assert p.marginal_accept_rates == pytest.approx(want_marginal)
    assert p.conditional_accept_rates == pytest.approx(want_conditional)
    assert p.num_speculative_tokens == steps == len(p.marginal_accept_rates) == len(p.conditional_accept_rates)


@pytest.mark.parametrize(("marginal", "steps", "mean", "passed", "delta"), [
    ((0.6, 0.3), 3, 1.9, True, 0.0),
    ((0.6, 0.3), 3, 1.915, True, 0.015),
    ((0.6, 0.3), 3, 1.93, False, 0.03),
    # a vector cut short of what ran (4 accepted drafts seen, K said 2): implied 2.4, below the measured 3.0
    ((0.8, 0.6, 0.4, 0.2), 2, 3.0, False, 0.6),
    ((0.8, 0.6, 0.4, 0.2), 4, 3.0, True, 0.0),
])
def test_the_mean_consistency_check(marginal, steps, mean, passed, delta):
    v = sp.build(measured(marginal, steps, mean)).validation
    assert v is not None
    c = v.mean_consistency
    assert (c.passed, c.abs_delta, c.tolerance) == (passed, pytest.approx(delta, abs=1e-6), 0.02)
    assert c.implied_mean_accept_length == pytest.approx(1 + sum(marginal[:steps]))
    assert ("passed" if passed else "FAILED") in c.text()


def test_a_rising_marginal_is_a_monotonicity_violation():
    v = sp.build(measured((0.5, 0.6, 0.2), 3, 2.3)).validation
    assert v is not None and not v.marginal_monotonicity.passed
    assert v.marginal_monotonicity.violations == (sp.Violation(1, 0.6, 0.5),)


conditionals = st.lists(st.floats(0.0, 1.0, allow_nan=False), min_size=1, max_size=12)


@given(conditionals, st.integers(1, 14), st.floats(1.0, 15.0), st.booleans())
def test_write_then_read_gives_the_same_profile(cond, steps, mean, chain):
    p = sp.build(measured(sp.marginal_of(cond), steps, mean, chain))
    back = sp.parse(json.loads(sp.dumps(p)))
    assert back == p
    # the schema's identity: marginal_i = Π conditional_≤i (to the file's 6 decimals)
    assert back.marginal_accept_rates == pytest.approx(sp.marginal_of(back.conditional_accept_rates), abs=1e-5)
    assert back.chain is chain


def modelopt_file() -> dict:
    """As Model-Optimizer's specdec_bench writes one (its test's histogram {1: 40, 2: 30, 3: 30} at K = 3),
    with a key a later 1.x might add."""
    return {"schema_version": "1.0", "measured": True, "method": "eagle3",
            "draft_checkpoint": {"path": "org/draft"}, "target_model": {"path": "org/target"},
            "num_speculative_tokens": 3, "block_size": None, "max_supported_k": 3,
            "verification_method": "longest_prefix", "conditional_accept_rates": [0.6, 0.5, 0.0],
            "marginal_accept_rates": [0.6, 0.3, 0.0], "mean_accept_length": 1.9,
            "mean_accept_length_per_request": 1.9, "accept_length_model": "chain_analytic",
            "accept_length_by_k": {"3": 1.9}, "acceptance_length_histogram": {"1": 40, "2": 30, "3": 30},
            "per_category": None, "measurement_conditions": {"concurrency": 1},
            "validation": {"mean_consistency": {"implied_mean_accept_length": 1.9, "reported_mean_accept_length": 1.9,
                                                "abs_delta": 0.0, "tolerance": 0.02, "passed": True},
                           "marginal_monotonicity": {"passed": True, "violations": []}, "later_check": {}},
            "later_key": 1}


def test_a_model_optimizer_profile_is_read():
    p = sp.parse(modelopt_file())
    assert (p.marginal_accept_rates, p.accept_length_by_k, p.chain) == ((0.6, 0.3, 0.0), {3: 1.9}, True)
    assert p.validation is not None and p.validation.mean_consistency.passed


@pytest.mark.parametrize(("change", "message"), [
    ({"schema_version": "2.0"}, "schema_version: '2.0': this specwatch reads speculation_profile.json schema 1.x"),
    ({"accept_length_model": "tree"}, "accept_length_model: 'tree' is not one of chain_analytic, measured_per_k"),
    ({"marginal_accept_rates": [0.6, "x"]}, "marginal_accept_rates[1]: 'x' is not of type float"),
    ({"num_speculative_tokens": None}, "num_speculative_tokens: None is not of type int"),
])
def test_a_profile_that_does_not_decode_names_the_key(change, message):
    with pytest.raises(RecordFileError) as e:
        sp.parse(modelopt_file() | change)
    assert str(e.value) == message


def test_load_tells_a_profile_from_a_sweep(tmp_path):
    prof, sweep, bad = tmp_path / "p.json", tmp_path / "s.json", tmp_path / "b.json"
    prof.write_text(json.dumps(modelopt_file()))
    sweep.write_text(json.dumps({"configurations": [], "winner": None, "baseline_tokens_per_second": None}))
    bad.write_text("{")
    loaded = sp.load(str(prof))
    assert loaded is not None and loaded.num_speculative_tokens == 3
    assert sp.load(str(sweep)) is None and sp.load(str(bad)) is None  # the sweep reader says what they are not
    broken = tmp_path / "broken.json"
    broken.write_text(json.dumps(modelopt_file() | {"marginal_accept_rates": "x"}))
    with pytest.raises(RecordFileError, match=r"broken\.json: speculation profile: marginal_accept_rates: expected"):
        sp.load(str(broken))


def bench(verify_rounds: int, positions: tuple[float, ...], accept: float | None, decode: float) -> BenchResult:
    return BenchResult(requests=8, ok=8, overall_tokens_per_second=decode, avg_tokens_per_second=decode,
                       min_tokens_per_second=decode, max_tokens_per_second=decode, decode_tokens_per_second=decode,
                       latency_seconds={}, tokens_per_chunk=Spread(), accept_length_client=accept,
                       accept_length_server_per_request=None if accept is None else accept + 0.05,
                       accept_length_server_lifetime=None, verify_rounds=verify_rounds, position_acceptance=positions,
                       outcomes={"ok": 8}, out_of_range={}, approximated_token_counts=0, tokens_per_chunk_bound=None)


def sweep(topk: int = 1) -> list[ConfigResult]:
    info = {"speculative_algorithm": "EAGLE3", "speculative_eagle_topk": topk, "version": "0.5.23",
            "speculative_draft_model_path": "/models/org/eagle3-head", "model_path": "/models/org/target"}

    def cfg(steps: int, rounds: int, pos: tuple[float, ...]) -> ConfigResult:
        al = 1 + sum(pos) if steps else 1.0
        return ConfigResult(f"steps={steps}" if steps else "baseline", {}, 0.0, "ok", steps=steps,
                            draft_tokens=steps + 1, server_info=info if steps else {},
                            results=bench(rounds, pos, al if steps else None, 100.0 + 10 * steps))

    return [cfg(0, 0, ()), cfg(1, 1000, (0.8,)), cfg(3, 3000, (0.7, 0.5, 0.3))]


def test_a_sweep_is_pooled_by_verify_rounds_for_a_chain():
    m = sp.measured_of(sweep())
    # position 1: (0.8 × 1000 + 0.7 × 3000) / 4000 = 0.725; positions 2 and 3: the 3-step configuration's
    assert m.marginal == pytest.approx((0.725, 0.5, 0.3))
    assert (m.steps, m.mean_accept_length, m.chain, m.method) == (3, pytest.approx(2.5), True, "eagle3")
    assert (m.draft_checkpoint, m.target_model) == ("org/eagle3-head", "org/target")  # never a machine path
    assert m.accept_length_by_k == ((1, pytest.approx(1.8)), (3, pytest.approx(2.5)))
    c = sp.build(m).validation
    assert c is not None and c.mean_consistency.abs_delta == pytest.approx(0.025) and not c.mean_consistency.passed


def test_a_tree_drafters_profile_is_its_deepest_configuration_alone_and_measured_per_k():
    p = sp.build(sp.measured_of(sweep(topk=4)))
    assert (p.marginal_accept_rates, p.accept_length_model) == ((0.7, 0.5, 0.3), "measured_per_k")
    assert p.validation is not None and p.validation.mean_consistency.passed


def test_a_sweep_without_per_position_acceptance_has_no_profile():
    plain_only = [c for c in sweep() if c.steps == 0]
    with pytest.raises(AnalysisError, match="no speculative configuration measured per-position acceptance"):
        sp.measured_of(plain_only)


def test_a_profile_is_a_prior_of_acceptance_only():
    prior = la.prior_of_profile(sp.parse(modelopt_file()), "speculation profile p.json")
    assert (prior.fit, prior.positions, prior.measured_steps) == (None, (0.6, 0.3, 0.0), 3)
    with pytest.raises(AnalysisError, match=r"measured_per_k .* cannot be a prior"):
        la.prior_of_profile(sp.parse(modelopt_file() | {"accept_length_model": "measured_per_k"}), "p")
    with pytest.raises(AnalysisError, match="no measured acceptance"):
        la.prior_of_profile(sp.parse(modelopt_file() | {"measured": False}), "p")


def bucket() -> tuple[LoadBucket, la.Acceptance]:
    # running 1 step at 1 stream: 50 decode tok/s, accept length 1.9 (0.9 at position 1); plain decoding 40
    return LoadBucket(1, 60, 1.0, 50.0, 0.005, 1.9), la.Acceptance((0.9,), 5000, "probes")


def test_with_a_profile_the_tail_follows_its_acceptance_and_the_cost_stays_a_range():
    b, acc = bucket()
    # conditional 0.9, then 0.5 and 0.5: scaled by live ÷ profile at position 1 (0.9 / 0.9 = 1)
    prof = la.Prior(None, 3, "profile", (), (0.9, 0.45, 0.225))
    with_p = la.advise_bucket(b, 40.0, None, acc, prof, 3, 3)
    without = la.advise_bucket(b, 40.0, None, acc, None, 3, 3)
    assert [p.accept_length for p in with_p.predictions] == pytest.approx([1.0, 1.9, 2.35, 2.575])
    two = with_p.prediction(2)
    assert two is not None
    # the cost shape is the no-prior range: 2 steps' cycle between the running one's and twice its overhead
    cyc, plain = 1.9 / 50.0, 1 / 40.0
    lo, hi = 2.35 / (plain + 2 * (cyc - plain)), 2.35 / cyc
    assert two.tokens_per_second.lower <= lo * 1.0001 and two.tokens_per_second.upper >= hi * 0.9999
    assert math.isclose(two.tokens_per_second.value, 2.35 / (plain + 1.5 * (cyc - plain)), rel_tol=1e-9)
    # as without a prior, only a measured step count is advised
    assert with_p.best_steps == without.best_steps == 1


def test_a_tree_or_lookup_drafter_gets_no_prediction_for_an_unmeasured_k():
    b, acc = bucket()
    adv = la.advise(([b]), None, (40.0, None), acc, None, 6, 3, 1, extrapolate=False)
    only = adv.buckets[0]
    assert [p.steps for p in only.predictions] == [0, 1] and all(p.measured for p in only.predictions)
    assert only.best_steps == 1 and only.undecided == ()
    assert not adv.extrapolates and "not valid (each k must be measured)" in adv.notes()
    chain = la.advise(([b]), None, (40.0, None), acc, None, 6, 3, 1)
    assert [p.steps for p in chain.buckets[0].predictions] == list(range(7)) and chain.extrapolates
    assert chain.notes() == "no --advisor-prior: the cost shape over step counts is a range"


scalars = st.none() | st.booleans() | st.integers(-5, 5) | st.floats(allow_nan=False) | st.text(max_size=4)
json_values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=3)
                           | st.dictionaries(st.text(max_size=6), inner, max_size=3), max_leaves=8)


@given(st.dictionaries(st.sampled_from(sorted(modelopt_file())), json_values, max_size=6))
def test_any_json_either_decodes_or_says_which_key(changes):
    """Whatever another tool wrote, reading it is a profile or a RecordFileError, never a crash."""
    try:
        p = sp.parse(modelopt_file() | changes)
    except RecordFileError as exc:
        assert str(exc)
    else:
        assert isinstance(p.marginal_accept_rates, tuple) and isinstance(p.num_speculative_tokens, int)

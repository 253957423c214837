"""The advisor's cycle model: exact recovery from the simulator's model, predictions, pooling."""

import pytest

from specwatch.analysis import advisor, cost_model, engine_flags
from specwatch.analysis.compare import Margin
from specwatch.analysis.comparisons import Comparison
from specwatch.analysis.cost_model import Measurement
from specwatch.analysis.engine_flags import ServerSetup
from specwatch.errors import AnalysisError
from specwatch.sim import model


def measured(steps_list, profile="seed"):
    p = model.PROFILES[profile]
    out = []
    for s in steps_list:
        e = model.explain(p, model.SpecConfig.from_flags("EAGLE3" if s else None, s or None, 1, None))
        out.append(Measurement(f"steps={s}", s, e.num_draft_tokens, e.tokens_per_second, e.tokens_per_second,
                               e.accept_length, e.position_acceptance, 500))
    return out


@pytest.mark.parametrize("profile", ["seed", "mixed"])
def test_predictions_for_left_out_steps_match_the_model(profile):
    f = cost_model.fit(measured([0, 1, 2, 3, 5, 10], profile))
    for s in (4, 6, 7, 8, 9):
        truth = model.explain(model.PROFILES[profile], model.SpecConfig.from_flags("EAGLE3", s, 1, None))
        assert f.tokens_per_second(s) == pytest.approx(truth.tokens_per_second, rel=0.01)
    assert f.verify_1_s == pytest.approx(model.PROFILES[profile].base_step_ms / 1000, rel=0.01)


def vs_plain(ratio, low, high):
    return Comparison("steps=2", 1, 90.0 * (1 + ratio), 90.0, Margin(ratio, low, high))


def test_seed_fit_recovers_draft_cost_and_says_two_steps_win():
    f = cost_model.fit(measured([0, 1, 2, 3, 5, 10]))
    assert f.draft_step_s == pytest.approx(0.00095, rel=0.02)
    text = advisor.report(measured([0, 1, 2, 3, 5, 10]), f, 90.0, range(1, 13),
                          measured={2: vs_plain(0.032, 0.01, 0.05)})
    assert "Best predicted: 2 steps - measured: beats plain decoding, +3.2% (95% interval +1.0% to +5.0%)" in text
    assert "the model predicts +3.3%" in text  # the fit's own figure beside the measured one
    assert "steps  2: measured 92.9 tok/s" in text and "steps  4: predicted" in text


def test_a_measured_tie_is_never_called_a_win_by_the_model():
    f = cost_model.fit(measured([0, 1, 2, 3, 5, 10]))
    text = advisor.report(measured([0, 1, 2, 3, 5, 10]), f, 90.0, range(1, 13),
                          measured={2: vs_plain(0.032, -0.05, 0.1)})
    assert "Best predicted: 2 steps - measured: a tie with plain decoding, +3.2% (95% interval -5.0% to +10.0%); " \
           "the model predicts +3.3%" in text
    assert "beats plain decoding" not in text


@pytest.mark.parametrize(("steps", "quality"), [
    ([0, 2, 5], "4 parameters to 3 points: exact fit, not validated; leave-one-out error"),
    ([0, 2, 5, 10], "4 parameters to 4 points: exact fit, not validated; leave-one-out error"),
    ([0, 1, 2, 3, 5, 10], "fit error 0.0% rms over 6 points (2 degrees of freedom); leave-one-out error"),
])
def test_the_fit_says_its_degrees_of_freedom_and_its_leave_one_out_error(steps, quality):
    f = cost_model.fit(measured(steps))
    assert f.quality().startswith(quality) and f.dof == len(steps) - 4
    assert f.loo_rms_rel_error is not None
    assert quality in advisor.report(measured(steps), f, 90.0, range(1, 13))


def test_leave_one_out_finds_a_point_the_others_do_not_predict():
    ms = measured([0, 1, 2, 3, 5, 10])
    slow5 = Measurement("steps=5", 5, 6, 50.0, 50.0, ms[4].accept_length, ms[4].position_acceptance, 500)
    bent = [*ms[:4], slow5, ms[5]]
    good, bad = cost_model.fit(ms), cost_model.fit(bent)
    assert good.loo_rms_rel_error < 0.01 < bad.loo_rms_rel_error


def test_a_losing_draft_model_is_told_to_run_without_speculation():
    ms = [Measurement("base", 0, 1, 90, 90, 1.0), Measurement("s2", 2, 3, 60, 60, 1.3, (0.25, 0.05), 100),
          Measurement("s4", 4, 5, 50, 50, 1.3, (0.25, 0.05, 0.0, 0.0), 100)]
    text = advisor.report(ms, cost_model.fit(ms), 90.0, range(1, 9))
    assert "no step count beats plain decoding" in text


def test_positions_are_pooled_by_rounds_and_extrapolated():
    ms = [Measurement("a", 2, 3, 1, 1, 1, (0.6, 0.4), 100), Measurement("b", 3, 4, 1, 1, 1, (0.8, 0.5, 0.25), 300)]
    pos = cost_model.pooled_positions(ms, 5)
    assert pos[0] == pytest.approx((0.6 * 100 + 0.8 * 300) / 400)
    assert pos[2] == 0.25 and pos[3] == pytest.approx(0.25 * 0.25 / pos[1])
    assert pos[3] <= pos[2]


def test_too_few_configurations():
    with pytest.raises(AnalysisError, match="at least two"):
        cost_model.fit(measured([2]))


def synthetic(verify_ms, draft_ms=1.0, a=0.72, steps=(0, 1, 2, 3, 5, 10)):
    """Measurements from a cost curve that is *not* the model's own form: the fit must generalise."""
    out = []
    for s in steps:
        pos = tuple(a**i for i in range(1, s + 1))
        al = 1 + sum(pos)
        tps = al / ((s * draft_ms + verify_ms(s + 1)) / 1000)
        out.append(Measurement(f"s{s}", s, s + 1, tps, tps, al, pos, 500))
    return out


def truth_tps(verify_ms, s, draft_ms=1.0, a=0.72):
    return (1 + sum(a**i for i in range(1, s + 1))) / ((s * draft_ms + verify_ms(s + 1)) / 1000)


def test_a_dense_targets_power_law_verify_cost_is_predicted_for_untested_steps():
    verify = lambda d: 10 * d**0.35  # noqa: E731 - concave, but not a saturating exponential
    f = cost_model.fit(synthetic(verify))
    for s in (4, 6, 7, 8, 9):
        assert f.tokens_per_second(s) == pytest.approx(truth_tps(verify, s), rel=0.01)
    assert f.rms_rel_error < 0.005


def test_a_convex_verify_cost_the_model_cannot_follow_shows_in_its_fit_error():
    verify = lambda d: 10 + 0.4 * (d - 1) + 0.08 * (d - 1) ** 2  # noqa: E731 - compute-bound growth
    ms = synthetic(verify)
    f = cost_model.fit(ms)
    assert f.rms_rel_error > 0.02  # the report prints this: the user is told the model does not fit
    text = advisor.report(ms, f, truth_tps(verify, 0), range(1, 13))
    assert f"fit error {100 * f.rms_rel_error:.1f}% rms" in text


def test_a_lookup_or_tree_drafter_gets_no_predicted_widths():
    """NGRAM's (or a tree's) acceptance at one width says nothing of another: the report shows what was measured
    and predicts nothing (Model-Optimizer's measured_per_k), naming the best measured configuration."""
    ms = [Measurement("baseline", 0, 1, 90.0, 90.0, 1.0), Measurement("draft=2", 2, 2, 120.0, 120.0, 1.9),
          Measurement("draft=4", 4, 4, 150.0, 150.0, 3.1)]
    text = advisor.report(ms, cost_model.fit(ms), 90.0, range(1, 13), chain=False)
    assert "Predicted (decode" not in text and "Best predicted" not in text
    assert "best measured: draft=4 at 150.0 tok/s" in text
    assert "predicting a step count the sweep did not run is not valid: each must be measured" in text


@pytest.mark.parametrize(("setup", "chain"), [
    (ServerSetup("sglang", algorithm="EAGLE3", topk=1), True),
    (ServerSetup("sglang", algorithm="EAGLE", topk=4), False),
    (ServerSetup("sglang", algorithm="NGRAM", topk=1), False),
    (ServerSetup("vllm", speculative_config={"method": "ngram", "num_speculative_tokens": 3}), False),
    (ServerSetup("vllm", speculative_config={"method": "deepseek_mtp", "num_speculative_tokens": 1}), True),
    (ServerSetup("unknown"), True)])
def test_which_drafters_extrapolate(setup, chain):
    assert engine_flags.chain_draft(setup) is chain

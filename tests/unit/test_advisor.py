"""The advisor's cycle model: exact recovery from the simulator's model, predictions, pooling."""

import pytest

from specwatch import advisor
from specwatch.advisor import Measurement
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
    f = advisor.fit(measured([0, 1, 2, 3, 5, 10], profile))
    for s in (4, 6, 7, 8, 9):
        truth = model.explain(model.PROFILES[profile], model.SpecConfig.from_flags("EAGLE3", s, 1, None))
        assert f.tokens_per_second(s) == pytest.approx(truth.tokens_per_second, rel=0.01)
    assert f.verify_1_s == pytest.approx(model.PROFILES[profile].base_step_ms / 1000, rel=0.01)


def test_seed_fit_recovers_draft_cost_and_says_two_steps_win():
    f = advisor.fit(measured([0, 1, 2, 3, 5, 10]))
    assert f.draft_step_s == pytest.approx(0.00095, rel=0.02)
    text = advisor.report(measured([0, 1, 2, 3, 5, 10]), f, 90.0, range(1, 13))
    assert "Best predicted: 2 steps" in text and "beats plain decoding" in text


def test_a_losing_draft_model_is_told_to_run_without_speculation():
    ms = [Measurement("base", 0, 1, 90, 90, 1.0), Measurement("s2", 2, 3, 60, 60, 1.3, (0.25, 0.05), 100),
          Measurement("s4", 4, 5, 50, 50, 1.3, (0.25, 0.05, 0.0, 0.0), 100)]
    text = advisor.report(ms, advisor.fit(ms), 90.0, range(1, 9))
    assert "no step count beats plain decoding" in text


def test_positions_are_pooled_by_rounds_and_extrapolated():
    ms = [Measurement("a", 2, 3, 1, 1, 1, (0.6, 0.4), 100), Measurement("b", 3, 4, 1, 1, 1, (0.8, 0.5, 0.25), 300)]
    pos = advisor.pooled_positions(ms, 5)
    assert pos[0] == pytest.approx((0.6 * 100 + 0.8 * 300) / 400)
    assert pos[2] == 0.25 and pos[3] == pytest.approx(0.25 * 0.25 / pos[1])
    assert pos[3] <= pos[2]


def test_too_few_configurations():
    with pytest.raises(ValueError, match="at least two"):
        advisor.fit(measured([2]))

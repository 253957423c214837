"""The simulator's timing model: the seed profile reproduces the tuning story; SGLang flag normalisation."""

import itertools
import random
import statistics

import pytest

from specwatch.sim import model
from specwatch.sim.model import PROFILES, SpecConfig, explain

SEED_STORY = [(None, 90.0), (2, 94.0), (5, 71.0), (10, 60.0)]  # shared/seed/: steps -> tok/s at one stream


@pytest.mark.parametrize(("steps", "tps"), SEED_STORY)
def test_seed_profile_reproduces_the_story_within_5_percent(steps, tps):
    spec = SpecConfig.from_flags("EAGLE3" if steps else None, steps, 1, None)
    e = explain(PROFILES["seed"], spec)
    assert abs(e.tokens_per_second - tps) / tps < 0.05


def test_seed_five_steps_accept_length_is_about_2_1_and_two_steps_win():
    tps = {s: explain(PROFILES["seed"], SpecConfig.from_flags("EAGLE3", s, 1, None)).tokens_per_second
           for s in range(1, 11)}
    assert max(tps, key=tps.get) == 2
    assert tps[2] > 90.0 > tps[1]
    al5 = explain(PROFILES["seed"], SpecConfig.from_flags("EAGLE3", 5, 1, None)).accept_length
    assert 2.0 <= al5 <= 2.2


def test_accept_length_saturates_and_verify_cost_saturates():
    p = PROFILES["seed"]
    als = [explain(p, SpecConfig.from_flags("EAGLE3", s, 1, None)).accept_length for s in range(1, 11)]
    assert all(b >= a for a, b in itertools.pairwise(als))
    assert als[-1] - als[4] < 0.01  # the tail adds almost nothing
    increments = [model.verify_ms(p, d + 1) - model.verify_ms(p, d) for d in range(1, 11)]
    assert all(b < a for a, b in itertools.pairwise(increments))  # concave: steep then flat


def test_topk_one_forces_draft_tokens_to_steps_plus_one_like_sglang():
    assert SpecConfig.from_flags("EAGLE3", 5, 1, 16).num_draft_tokens == 6
    assert SpecConfig.from_flags("EAGLE3", 5, 4, 16).num_draft_tokens == 16
    assert SpecConfig.from_flags("NEXTN", 3, 1, None).algorithm == "EAGLE"
    assert SpecConfig.from_flags("EAGLE3", None, None, None) == SpecConfig("EAGLE3", 3, 1, 4)
    assert not SpecConfig.from_flags(None, 5, 1, 6).enabled
    with pytest.raises(ValueError, match="must be >= 1"):
        SpecConfig.from_flags("EAGLE3", 0, 1, None)


def test_draws_follow_the_conditional_probabilities():
    rng = random.Random(7)
    cond = model.conditional_probs(PROFILES["seed"], SpecConfig.from_flags("EAGLE3", 5, 1, None))
    draws = [model.draw_accepted(rng, cond) for _ in range(40_000)]
    mean_len = 1 + statistics.fmean(draws)
    expected = model.expected_accept_length(cond)
    sd = statistics.pstdev(draws) / len(draws) ** 0.5
    assert abs(mean_len - expected) < 4 * sd
    assert draws.count(0) / len(draws) == pytest.approx(1 - cond[0], abs=0.01)


def test_mixed_profile_depends_on_domain_and_temperature():
    p, spec = PROFILES["mixed"], SpecConfig.from_flags("EAGLE3", 5, 1, None)
    code = explain(p, spec, domain="code").accept_length
    creative = explain(p, spec, domain="creative").accept_length
    hot = explain(p, spec, domain="code", temperature=1.0).accept_length
    assert code > creative + 0.5
    assert hot < code
    seed = PROFILES["seed"]
    assert explain(seed, spec, domain="code").accept_length == explain(seed, spec, domain="creative").accept_length


def test_batch_size_slows_each_stream_and_breakeven_is_cycle_over_plain_cycle():
    p, spec = PROFILES["seed"], SpecConfig.from_flags("EAGLE3", 5, 1, None)
    one, many = explain(p, spec, 1), explain(p, spec, 16)
    # the memory-bound floor grows with the batch, and every extra request adds its verified tokens
    assert many.cycle_ms == pytest.approx(one.cycle_ms * (1 + p.batch_cost * 15) + p.token_ms * 15 * 6)
    assert one.breakeven_accept_length == pytest.approx(one.cycle_ms / (1000 / 90))
    assert one.draft_ms + one.verify_ms == pytest.approx(one.cycle_ms)

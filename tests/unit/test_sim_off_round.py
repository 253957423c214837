"""A round that drafts nothing inside a speculating server (vLLM's K = 0 range, SGLang's adaptive 0) is not
plain decoding: the simulator charges plain decoding's round and the profile's ``off_round_tax`` on top, on
both engines' surfaces, and ``/explain``'s round and table say so."""

from __future__ import annotations

import dataclasses
import json

import pytest

from specwatch.sim import model, oracle, steps
from specwatch.sim.engine import EngineSettings
from specwatch.sim.pattern import Pattern

SEED = model.PROFILES["seed"]
PAT = Pattern(streams=1, prompt_tokens=64, output_tokens=100, send_ms=0)


def scheduled(profile: model.Profile, policy: steps.BatchSchedule | steps.AdaptiveSteps) -> EngineSettings:
    spec = model.SpecConfig.from_flags("EAGLE3", 3, 1, None)
    return EngineSettings(profile=profile, spec=spec, seed=7, steps=policy)


def vllm_zero(max_batch: int = 64) -> steps.BatchSchedule:
    return steps.BatchSchedule(steps.batch_schedule([[1, max_batch, 0]], max_batch, 3))


def sglang_zero(tmp_path) -> steps.AdaptiveSteps:
    path = tmp_path / "adaptive.json"
    path.write_text(json.dumps({"1": {"candidate_steps": [0]}, "64": {"candidate_steps": [3]}}))
    return steps.AdaptiveSteps.build(steps.adaptive_slots(str(path)), 3, [])


@pytest.mark.parametrize("tax", [0.0, 0.066, 0.216, 1.0])
@pytest.mark.parametrize("surface", ["vllm", "sglang"])
def test_a_zero_range_is_slower_than_plain_decoding_by_the_tax(tax, surface, tmp_path):
    profile = dataclasses.replace(SEED, off_round_tax=tax)
    s = scheduled(profile, vllm_zero() if surface == "vllm" else sglang_zero(tmp_path))
    off, plain = oracle.figures(s, PAT), oracle.figures(oracle.plain(s), PAT)
    # one stream: decode is nothing but rounds, so the ratio is the tax exactly
    assert plain.decode_tokens_per_second / off.decode_tokens_per_second == pytest.approx(1 + tax, rel=1e-6)
    assert off.accept_length is None or off.accept_length == pytest.approx(1.0)


def test_under_load_the_tax_is_paid_on_decode_rounds_only():
    s = scheduled(SEED, vllm_zero())
    pat = dataclasses.replace(PAT, streams=4, requests=24)
    off, plain = oracle.figures(s, pat), oracle.figures(oracle.plain(s), pat)
    slower = plain.decode_tokens_per_second / off.decode_tokens_per_second - 1
    assert 0.0 < slower <= SEED.off_round_tax + 1e-9  # prefills, which stall the streams, are not taxed


def test_a_range_that_drafts_is_not_taxed_and_plain_decoding_never_is():
    spec = model.SpecConfig.from_flags("EAGLE3", 3, 1, None)
    at3 = model.with_steps(spec, 3)
    assert model.step_ms(SEED, spec, at3, 4) == model.cycle_ms(SEED, at3, 4)
    assert model.step_ms(SEED, model.SpecConfig(), model.SpecConfig(), 4) == model.cycle_ms(SEED, model.SpecConfig(), 4)
    assert model.step_ms(SEED, spec, model.SpecConfig(), 4) == pytest.approx(
        model.cycle_ms(SEED, model.SpecConfig(), 4) * (1 + model.OFF_ROUND_TAX))


def test_explain_states_the_zero_draft_round():
    spec = model.SpecConfig.from_flags("EAGLE3", 2, 1, None)
    e = model.explain(SEED, spec, 4)
    assert e.off_round_tax == model.OFF_ROUND_TAX
    assert e.off_cycle_ms == pytest.approx(model.cycle_ms(SEED, model.SpecConfig(), 4) * 1.066)
    assert "zero-draft round" in model.format_explanation(e) and "+6.6%" in model.format_explanation(e)
    plain = model.explain(SEED, model.SpecConfig())
    assert plain.off_cycle_ms is None and "zero-draft" not in model.format_explanation(plain)


def test_the_by_load_table_names_the_tax_of_a_scheduled_server():
    s = scheduled(SEED, vllm_zero())
    rows, _ = oracle.by_load(s, dataclasses.replace(PAT, requests=8), [1])
    text = oracle.format_by_load(s, PAT, rows, None)
    assert "+6.6% (off_round_tax)" in text and rows[0].speedup == pytest.approx(1 / 1.066, rel=1e-6)


@pytest.mark.parametrize("surface", ["sglang", "vllm"])
def test_both_flavours_take_the_flag_and_explain_body_carries_it(surface, tmp_path):
    from specwatch.sim import cli, control, vllm_cli

    if surface == "vllm":
        cfg = {"method": "eagle3", "num_speculative_tokens": 3, "num_speculative_tokens_per_batch_size": [[1, 64, 0]]}
        args, _ = vllm_cli.parse(["--speculative-config", json.dumps(cfg), "--off-round-tax", "0.5"])
        s = vllm_cli.engine_settings(args)
    else:
        path = tmp_path / "a.json"
        path.write_text(json.dumps({"1": {"candidate_steps": [0]}, "64": {"candidate_steps": [3]}}))
        args, _ = cli.parse(["--speculative-algorithm", "EAGLE3", "--speculative-num-steps", "3",
                             "--speculative-eagle-topk", "1", "--speculative-adaptive", "--speculative-adaptive-config",
                             str(path), "--off-round-tax", "0.5"])
        s = cli.engine_settings(args)
    assert s.profile.off_round_tax == 0.5
    body = control.explain_body(s, {"streams": "1", "max_steps": "0", "output_tokens": "64", "requests": "6"}, 1)
    assert body["off_round_tax"] == 0.5 and body["off_cycle_ms"] == pytest.approx(
        model.cycle_ms(s.profile, model.SpecConfig()) * 1.5)
    assert body["loads"][0]["speedup"] == pytest.approx(1 / 1.5, rel=1e-6)  # one stream: the tax exactly

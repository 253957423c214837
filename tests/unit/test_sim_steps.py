"""The simulator's per-step draft counts: vLLM's per-batch-size schedule (its own rules and dense lookup)
and SGLang 0.5.23's adaptive slots (routing, candidates, 0 = no drafting, the start-up refusal)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from specwatch.sim import graphs, steps


@pytest.mark.parametrize(("raw", "max_k", "want"), [
    ([[1, 2, 3], [3, 5, 0]], 3, [3, 3, 0, 0, 0, 0, 0, 0]),  # the tail carries the last K
    ([[1, 2, 3], [5, 6, 1]], 3, [3, 3, 3, 3, 1, 1, 1, 1]),  # a gap carries the previous K
    ([[1, 8, 5]], 3, [3] * 8),  # clamped to num_speculative_tokens
    ([[3, 4, 0], [1, 2, 2]], 2, [2, 2, 0, 0, 0, 0, 0, 0]),  # sorted first, as vLLM does
])
def test_the_dense_lookup_is_vllms(raw, max_k, want):
    assert steps.batch_schedule(raw, 8, max_k)[1:] == want


@pytest.mark.parametrize(("raw", "message"), [
    ([], "must not be empty"), ({"1-8": 3}, "non-empty list"), ([[1, 8]], "3-item sequence"),
    ([[0, 8, 3]], "must be positive"), ([[1, 8, -1]], "must be >= 0"), ([[4, 2, 1]], "start must be <= end"),
    ([[1, 8, 3], [8, 9, 1]], "non-overlapping"), ([[2, 8, 3]], "must start at 1"), ([[1, 8, True]], "3-item"),
])
def test_a_bad_schedule_is_refused_with_vllms_message(raw, message):
    with pytest.raises(steps.StepsConfigError, match=message):
        steps.batch_schedule(raw, 64, 3)


@given(st.lists(st.tuples(st.integers(1, 40), st.integers(0, 8)), min_size=1, max_size=5), st.integers(1, 6))
def test_every_batch_size_gets_its_ranges_k_clamped(cuts, max_k):
    starts = sorted({1, *(c for c, _ in cuts)})
    ks = [k for _, k in cuts] + [0] * len(starts)
    raw = [[lo, (starts[i + 1] - 1) if i + 1 < len(starts) else lo + 3, ks[i]] for i, lo in enumerate(starts)]
    dense = steps.batch_schedule(raw, 64, max_k)
    for lo, hi, k in raw:
        assert all(dense[b] == min(k, max_k) for b in range(lo, min(hi, 64) + 1))
    assert all(dense[b] == min(raw[-1][2], max_k) for b in range(raw[-1][1] + 1, 65))


def test_adaptive_slots_route_by_the_running_requests_unless_decode_graph_sizes_are_given():
    # 0.5.23 hands its router only a given --cuda-graph-bs-decode list: by default nothing is padded
    a = steps.AdaptiveSteps.build({1: (3,), 16: (0,)}, 3, graphs.router_sizes(graphs.GraphFlags()))
    assert [a.steps_for(b) for b in (1, 4, 8, 9, 14, 15, 16, 40)] == [3, 3, 3, 3, 3, 3, 0, 0]
    given = graphs.GraphFlags(bs_decode=(16, 1, 2, 4, 8, 24))
    a = steps.AdaptiveSteps.build({1: (3,), 16: (0,)}, 3, graphs.router_sizes(given))
    assert [a.steps_for(b) for b in (1, 8, 9, 16, 17, 24, 25, 40)] == [3, 3, 0, 0, 0, 0, 0, 0]  # 9 pads to 16
    off = graphs.GraphFlags(bs_decode=(1, 2, 4, 8, 16), decode_off=True)
    assert graphs.router_sizes(off) == []  # decode graphs off: no padding (eagle_worker_v2.py:1408-1413)
    below = steps.AdaptiveSteps.build({4: (3,), 16: (0,)}, 3, [])
    assert [below.steps_for(b) for b in (1, 3, 4, 15, 16)] == [3, 3, 3, 3, 0]  # below the smallest key: its slot


def test_the_launch_step_must_be_a_candidate():
    with pytest.raises(steps.StepsConfigError, match=r"^--speculative-num-steps=2 is not in the adaptive config "
                                                     r"candidate_steps \[0, 1, 3, 5, 7\]\. Pass one of those values"):
        steps.AdaptiveSteps.build(steps.SGLANG_DEFAULT_SLOTS, 2, [])


def test_the_default_64_slot_is_out_of_reach_under_48_running_requests():
    a = steps.AdaptiveSteps.build(steps.SGLANG_DEFAULT_SLOTS, 3, [])
    assert a._slot(48) is a.slots[32] and a._slot(64) is a.slots[64]


SPEC_UP_TO_48 = [*range(1, 9), *range(10, 33, 2), 40, 44, 48]  # cuda_graph_hook.py:518-532


@pytest.mark.parametrize(("max_bs", "speculative", "want"), [
    (48, True, SPEC_UP_TO_48),
    (256, True, [*range(1, 9), *range(10, 33, 2), *range(40, 65, 4), *range(72, 257, 8)]),
    (50, True, [*SPEC_UP_TO_48, 50]),  # max_bs itself is always captured
    (300, True, [*range(1, 9), *range(10, 33, 2), *range(40, 65, 4), *range(72, 257, 8), 272, 288, 300]),
    (8, False, [1, 2, 4, 8]), (20, False, [1, 2, 4, 8, 12, 16, 20]),
])
def test_the_captured_decode_sizes_are_sglangs(max_bs, speculative, want):
    assert graphs.decode_sizes(max_bs, speculative) == want


def test_server_info_answers_with_0_5_23s_graph_keys():
    got = graphs.server_info(graphs.GraphFlags(max_running=48), True)
    assert got["cuda_graph_bs_decode"] is None and got["cuda_graph_bs_prefill"] is None and "cuda_graph_bs" not in got
    decode = got["cuda_graph_config"]["decode"]
    assert (decode["backend"], decode["max_bs"], decode["bs"]) == ("full", 48, SPEC_UP_TO_48)
    # the speculative default of 48 running requests comes after the graph sizes: only a given one caps them
    assert graphs.server_info(graphs.GraphFlags(), True)["cuda_graph_config"]["decode"]["max_bs"] == 256
    given = graphs.server_info(graphs.GraphFlags(bs_decode=(1, 8, 4), decode_off=True), True)
    assert given["cuda_graph_bs_decode"] == [1, 8, 4]
    assert {k: given["cuda_graph_config"]["decode"][k] for k in ("backend", "max_bs", "bs")} == {
        "backend": "disabled", "max_bs": 8, "bs": [1, 8, 4]}
    prefill = got["cuda_graph_config"]["prefill"]
    assert (prefill["backend"], prefill["max_bs"], prefill["bs"][:3], prefill["bs"][-1]) == ("breakable", 8192,
                                                                                            [4, 8, 12], 8192)


def test_the_controller_drops_on_poor_acceptance_and_probes_back_from_zero():
    a = steps.AdaptiveSteps.build({1: (0, 1, 3)}, 3, [1])
    seen = []
    for _ in range(40):
        a.observe(1, 0, 1)  # nothing accepted
        seen.append(a.steps_for(1))
    assert seen[9] == 3 and 0 in seen and 1 in seen  # waits 10 batches, then goes down, then probes 1 again
    b = steps.AdaptiveSteps.build({1: (1, 3, 5)}, 1, [1])
    for _ in range(40):
        b.observe(1, b.steps_for(1), 1)  # everything accepted
    assert b.steps_for(1) == 5


def test_the_adaptive_config_file(tmp_path):
    f = tmp_path / "a.json"
    f.write_text(json.dumps({"1": {"candidate_steps": [3]}, "24": {"candidate_steps": [0]}, "note": "x"}))
    assert steps.adaptive_slots(str(f)) == {1: (3,), 24: (0,)}  # a key that is no digit string is skipped
    assert steps.adaptive_slots(None) == steps.SGLANG_DEFAULT_SLOTS
    f.write_text(json.dumps({"8": {"candidate_steps": [0, 1]}}))
    assert steps.adaptive_slots(str(f)) == {8: (0, 1)}  # no slot "1" needed, as in SGLang
    for doc, message in [({"8": [0]}, r"^BS 8: candidate_steps must be a list of non-negative ints, got None"),
                         ({"1": {"candidate_steps": []}}, r"^BS 1: candidate_steps must be .*got \[\]"),
                         ({"x": [1]}, r"^speculative_adaptive_config must contain at least one integer-string BS key"),
                         ([], "must be a JSON object")]:
        f.write_text(json.dumps(doc))
        with pytest.raises(steps.StepsConfigError, match=message):
            steps.adaptive_slots(str(f))
    with pytest.raises(steps.StepsConfigError, match="No such file"):
        steps.adaptive_slots(str(tmp_path / "missing.json"))

"""The engine flags a per-load schedule is printed as: complete for vLLM (the server's own config with the
schedule merged in), SGLang's adaptive-config file where the release and algorithm have it, and a plain
"no knob" where they do not."""

from __future__ import annotations

import bisect
import json
import shlex

import pytest

from specwatch.analysis import engine_flags as ef
from specwatch.analysis import engine_routing as routing
from specwatch.analysis.engine_flags import ServerSetup
from specwatch.results import ConfigResult

RANGES = [(1, 8, 5), (9, 22, 2), (23, 64, 0)]
NGRAM = {"method": "ngram", "num_speculative_tokens": 5, "prompt_lookup_max": 4, "prompt_lookup_min": 2}


@pytest.mark.parametrize(("text", "want"), [
    ("0.32.0+cpu", (0, 32, 0)), ("0.5.10.post1", (0, 5, 10)), ("0.5.23", (0, 5, 23)), ("0.24.0rc1", (0, 24, 0)),
    ("v1", None), ("", None), (None, None), ("dev", None), ("1", (1,)),
])
def test_version_tuple(text, want):
    assert ef.version_tuple(text) == want


@pytest.mark.parametrize(("command", "want"), [
    ("vllm serve M --speculative-config '{\"method\": \"ngram\", \"num_speculative_tokens\": 3}'",
     {"method": "ngram", "num_speculative_tokens": 3}),
    ("vllm serve M -sc '{\"method\": \"eagle3\", \"num_speculative_tokens\": 2}' --port 1",
     {"method": "eagle3", "num_speculative_tokens": 2}),
    ("vllm serve M --speculative-config='{\"num_speculative_tokens\": 1}'", {"num_speculative_tokens": 1}),
    ("vllm serve M --speculative-config '[1, 2]'", None),  # not an object
    ("vllm serve M --speculative-config '{broken'", None),
    ("vllm serve M --speculative-config", None),  # no value
    ("vllm serve M 'unbalanced", None),
    (None, None),
])
def test_the_speculative_config_of_a_launch_command(command, want):
    assert ef.speculative_config_of(command) == want


def pasted(advice: ef.EngineAdvice) -> dict:
    words = shlex.split(advice.flags)
    assert words[0] == "--speculative-config" and len(words) == 2
    return json.loads(words[1])


def test_vllm_gets_its_own_config_with_the_schedule_merged_and_the_largest_k():
    a = ef.vllm_advice(RANGES, ServerSetup("vllm", "0.32.0+cpu", dict(NGRAM, num_speculative_tokens=2)))
    cfg = pasted(a)
    assert cfg == {"method": "ngram", "num_speculative_tokens": 5, "prompt_lookup_max": 4, "prompt_lookup_min": 2,
                   "num_speculative_tokens_per_batch_size": [[1, 8, 5], [9, 22, 2], [23, 64, 0]]}
    assert "0.24.0" in a.headline and "0.32.0+cpu" in a.headline
    assert any("VLLM_USE_V2_MODEL_RUNNER" in n for n in a.notes)


def test_a_method_vllm_0_33_drops_the_schedule_for_is_said():
    a = ef.vllm_advice(RANGES, ServerSetup("vllm", "0.33.0", {"method": "suffix", "num_speculative_tokens": 5}))
    assert "keeps a schedule only for ngram, eagle, eagle3, mtp, draft_model, dflash: for suffix" in a.notes[0]
    assert not any("keeps a schedule only" in n for n in ef.vllm_advice(RANGES, ServerSetup("vllm", "0.33.0",
                                                                                           NGRAM)).notes)


@pytest.mark.parametrize(("cfg", "method"), [
    ({"method": "deepseek_mtp"}, "mtp"), ({"method": "qwen3_next_mtp", "model": "q/next"}, "mtp"),
    ({"method": "mtp"}, "mtp"), ({"method": "[ngram]"}, "ngram"), ({"method": "suffix"}, "suffix"),
    ({}, "draft_model"), ({"model": "ngram"}, "ngram"), ({"model": "[ngram]"}, "ngram"),
    ({"model": "my_pkg.MyProposer"}, "custom_class"), ({"model": "org/my_pkg.v2"}, "draft_model"),
    ({"model": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"}, "eagle3"), ({"model": "yuhuili/EAGLE-LLaMA3-8B"}, "eagle"),
    ({"method": "draft_model", "model": "deepseek-ai/dspark_qwen3_8b_block7"}, "dspark"),
    ({"method": "deepseek_mtp", "model": "z/some-dflash-head"}, "dflash"),  # *_mtp first, then the name
    ({"method": "eagle", "model": "x/eagle3-head"}, "eagle"),  # an explicit eagle method is kept
    ({"method": "ngram", "model": "x/eagle3"}, "ngram"),
])
def test_the_method_is_the_one_vllm_settles_on(cfg, method):
    assert routing.vllm_method(cfg) == method


@pytest.mark.parametrize(("cfg", "kept"), [
    ({"method": "deepseek_mtp", "num_speculative_tokens": 1}, True),  # vLLM rewrites it to mtp, which keeps it
    ({"method": "glm4_moe_mtp", "num_speculative_tokens": 1}, True),
    ({"model": "org/eagle3-head", "num_speculative_tokens": 3}, True),  # no method: eagle3 from the name
    ({"method": "draft_model", "model": "x/dspark_qwen3", "num_speculative_tokens": 3}, False),  # run as dspark
    ({"model": "pkg.Proposer", "num_speculative_tokens": 3}, False),  # custom_class
    ({"method": "ngram_gpu", "num_speculative_tokens": 3}, False),
])
def test_the_0_33_gate_is_decided_on_the_method_vllm_runs(cfg, kept):
    notes = ef.vllm_advice(RANGES, ServerSetup("vllm", "0.33.0", cfg)).notes
    assert any("keeps a schedule only" in n for n in notes) is not kept
    if cfg.get("method") == "draft_model":
        assert "for draft_model (run as dspark) it drops it" in notes[0]


def test_a_schedule_already_in_the_config_is_replaced_and_quotes_survive_the_shell():
    cfg = {"method": "eagle3", "model": "/models/it's a head", "num_speculative_tokens": 3,
           "num_speculative_tokens_per_batch_size": [[1, 4, 1]]}
    got = pasted(ef.vllm_advice(RANGES, ServerSetup("vllm", None, cfg)))
    assert got["model"] == "/models/it's a head"
    assert got["num_speculative_tokens_per_batch_size"] == [[1, 8, 5], [9, 22, 2], [23, 64, 0]]


def test_vllm_without_its_config_gets_the_key_and_says_what_is_missing():
    a = ef.vllm_advice(RANGES, ServerSetup("vllm", "0.33.0"))
    assert json.loads("{" + a.flags + "}") == {"num_speculative_tokens_per_batch_size": [[1, 8, 5], [9, 22, 2],
                                                                                      [23, 64, 0]]}
    assert "--speculative-config" in a.headline and "num_speculative_tokens set to 5" in a.headline


@pytest.mark.parametrize(("ranges", "version", "flags", "says"), [
    ([(1, 64, 3)], "0.32.0", "", "keep --speculative-config as it is"),
    ([(1, 64, 0)], "0.32.0", "", "launch without --speculative-config"),
    (RANGES, "0.23.0", "", "0.24.0 and later"),
])
def test_vllm_when_no_schedule_is_needed_or_possible(ranges, version, flags, says):
    a = ef.vllm_advice(ranges, ServerSetup("vllm", version, NGRAM))
    assert a.flags == flags and says in a.headline


def sglang_route(batch: int, keys, cuda_graph_bs) -> int:
    """SGLang 0.5.23's own router, ported line by line from ``speculative/adaptive_spec_params.py:342-358``
    (``_route``: pad to a CUDA-graph batch size, then the closest slot key at or below), written here apart
    from the code under test so the two are compared."""
    bs_list = sorted(keys)
    graphs = sorted(cuda_graph_bs) if cuda_graph_bs else None  # set_cuda_graph_bs, :310-311
    if graphs is None:
        target = batch
    else:
        idx = bisect.bisect_left(graphs, batch)
        target = graphs[idx] if idx < len(graphs) else batch
    return bs_list[max(0, bisect.bisect_right(bs_list, target) - 1)]


def default_decode_graphs_0_5_13(max_bs: int) -> list[int]:
    """0.5.13's default decode CUDA-graph sizes under speculation (``server_args.py:1671-1686``; 0.5.23 keeps
    the same list in ``arg_groups/cuda_graph_hook.py:518-532``, but no longer hands it to the router)."""
    bs = [*range(1, 9), *range(10, 33, 2), *range(40, 65, 4), *range(72, 257, 8), *range(272, max_bs + 1, 16)]
    bs = [b for b in bs if b <= max_bs]
    return bs + ([max_bs] if max_bs not in bs else [])


def steps_by_batch(advice: ef.EngineAdvice, pad_to, upto: int) -> list[int]:
    slots = {int(k): v["candidate_steps"][0] for k, v in json.loads(advice.files[0][1]).items()}
    return [slots[sglang_route(b, slots, pad_to)] for b in range(1, upto + 1)]


def want_by_batch(ranges, upto: int) -> list[int]:
    return [next((k for lo, hi, k in ranges if lo <= b <= hi), ranges[-1][2]) for b in range(1, upto + 1)]


def test_sglang_eagle3_topk1_gets_an_adaptive_config_file_keyed_by_where_each_range_starts():
    a = ef.sglang_advice(RANGES, ServerSetup("sglang", "0.5.23", algorithm="EAGLE3", topk=1, max_running=48),
                         "sweep-out")
    (name, content), = a.files
    assert name == "sglang-adaptive.json"
    # from 0.5.14 the router pads nothing unless --cuda-graph-bs-decode is given: a key is the range's start
    assert json.loads(content) == {"1": {"candidate_steps": [5]}, "9": {"candidate_steps": [2]},
                                   "23": {"candidate_steps": [0]}}
    assert ("so: 5 steps from 1 running request, 2 steps from 9 running requests, 0 steps from 23 running requests"
            in a.notes[0])
    assert "only when --cuda-graph-bs-decode is given" in a.notes[0]
    assert steps_by_batch(a, (), 48) == want_by_batch(RANGES, 48)  # SGLang's router runs the schedule exactly
    assert shlex.split(a.flags) == [
        "--speculative-algorithm", "EAGLE3", "--speculative-eagle-topk", "1", "--speculative-num-steps", "5",
        "--speculative-adaptive", "--speculative-adaptive-config", "sweep-out/sglang-adaptive.json",
        "--max-running-requests", "48"]
    assert "0.5.14" in a.headline


# (ranges, the router's graph sizes, slots printed, what SGLang's router then runs at batch sizes 1..upto)
ROUTED = [
    # the crossover from issue 32: 3 steps below 9 running requests, none from 9
    ([(1, 8, 3), (9, 64, 0)], (), {"1": [3], "9": [0]}, [3] * 8 + [0] * 40),
    # a 5/1/0 schedule switches exactly where it was measured
    ([(1, 8, 5), (9, 22, 1), (23, 64, 0)], (), {"1": [5], "9": [1], "23": [0]}, [5] * 8 + [1] * 14 + [0] * 26),
    # an explicit --cuda-graph-bs-decode 1 2 4 8 16 24 32 48: 9 pads to 16, so key 16 takes 9-16 (nearest 9)
    ([(1, 8, 3), (9, 64, 0)], (1, 2, 4, 8, 16, 24, 32, 48), {"1": [3], "16": [0]}, [3] * 8 + [0] * 40),
    # 23 pads to 24: key 24 would take 17 and up, key 32 takes 25 and up, nearer 23
    ([(1, 22, 3), (23, 64, 0)], (1, 2, 4, 8, 16, 24, 32, 48), {"1": [3], "32": [0]}, [3] * 24 + [0] * 24),
    # 0.5.13's default list pads 9 to 10 and 15 to 16: a key 10 takes 9 and up, as measured
    ([(1, 8, 5), (9, 64, 1)], tuple(default_decode_graphs_0_5_13(256)), {"1": [5], "10": [1]}, [5] * 8 + [1] * 40),
    # past the largest graph size nothing is padded and the start itself is the key
    ([(1, 50, 3), (51, 200, 0)], (1, 2, 4, 12, 40), {"1": [3], "51": [0]}, [3] * 50 + [0]),
]


@pytest.mark.parametrize(("ranges", "pad_to", "slots", "runs"), ROUTED)
def test_sglangs_own_router_runs_the_printed_slots_where_the_sweep_measured_them(ranges, pad_to, slots, runs):
    version = "0.5.13" if 0 not in {k for _, _, k in ranges} else "0.5.23"
    a = ef.sglang_advice(ranges, ServerSetup("sglang", version, algorithm="EAGLE3", topk=1, max_running=48,
                                             pad_to=pad_to), "")
    assert {k: v["candidate_steps"] for k, v in json.loads(a.files[0][1]).items()} == slots
    upto = int(shlex.split(a.flags)[-1])
    assert steps_by_batch(a, pad_to, upto) == runs[:upto] and upto == len(runs)


@pytest.mark.parametrize("pad_to", [(), (1, 2, 4, 8, 16, 24, 32, 48), (1, 3, 7, 9, 30), (2, 5)])
@pytest.mark.parametrize("batch", range(1, 70))
def test_the_advice_routes_a_batch_as_sglangs_router_does(pad_to, batch):
    keys = (1, 5, 9, 16, 31, 40)
    assert routing.slot_for(batch, keys, pad_to) == sglang_route(batch, keys, pad_to)


def test_sglang_slots_follow_the_servers_own_graph_sizes_and_raise_the_batch_cap():
    setup = ServerSetup("sglang", "0.5.23", algorithm="EAGLE", topk=1, max_running=32, pad_to=(1, 2, 4, 12, 40))
    a = ef.sglang_advice([(1, 6, 3), (7, 200, 0)], setup, "")
    assert json.loads(a.files[0][1]) == {"1": {"candidate_steps": [3]}, "12": {"candidate_steps": [0]}}  # from 5
    assert shlex.split(a.flags)[-2:] == ["--max-running-requests", "32"]
    assert "the server's CUDA-graph batch sizes (its --cuda-graph-bs-decode list)" in a.notes[0]
    assert "0 steps from 5 running requests" in a.notes[0]
    a = ef.sglang_advice([(1, 50, 3), (51, 200, 0)], setup, "")
    assert json.loads(a.files[0][1])["51"] == {"candidate_steps": [0]}  # past the largest graph: not padded
    assert shlex.split(a.flags)[-1] == "51"  # a slot above the batch cap is never reached
    a = ef.sglang_advice([(1, 60, 3), (61, 200, 0)], ServerSetup("sglang", "0.5.23", algorithm="EAGLE", topk=1), "")
    assert shlex.split(a.flags)[-1] == "61"  # unpadded: the cap is raised to the key itself


@pytest.mark.parametrize(("setup", "says"), [
    (ServerSetup("sglang", "0.5.23", algorithm="NGRAM", topk=1), "EAGLE and EAGLE3 only (this server: NGRAM)"),
    (ServerSetup("sglang", "0.5.23", algorithm="EAGLE3", topk=4), "needs --speculative-eagle-topk 1"),
    (ServerSetup("sglang", "0.5.13", algorithm="EAGLE3", topk=1), "needs SGLang 0.5.14"),
    (ServerSetup("sglang", "0.5.10.post1", algorithm="EAGLE3", topk=1), "needs SGLang 0.5.14"),
])
def test_sglang_says_plainly_when_no_engine_knob_exists(setup, says):
    a = ef.sglang_advice(RANGES, setup, "out")
    assert a.flags == "" and not a.files and says in a.headline
    assert "load-aware router" in a.notes[0] and "--max-queued-requests" in a.notes[0]


def test_sglang_0_5_13_has_slots_without_zero():
    a = ef.sglang_advice([(1, 8, 5), (9, 64, 1)], ServerSetup("sglang", "0.5.13", algorithm="EAGLE3", topk=1), "")
    assert json.loads(a.files[0][1]) == {"1": {"candidate_steps": [5]}, "9": {"candidate_steps": [1]}}


@pytest.mark.parametrize(("lo", "graphs", "want"), [
    (2, (), (2, 2)), (9, (), (9, 9)), (23, (), (23, 23)),  # nothing padded: the start is the key
    (9, (1, 2, 4, 8, 16, 24, 32), (16, 9)), (12, (1, 2, 4, 8, 16, 24, 32), (16, 9)),
    (14, (1, 2, 4, 8, 16, 24, 32), (24, 17)),
    (13, (1, 2, 4, 8, 16, 24, 32), (24, 17)),  # a tie: the later key keeps speculating longer
    (23, (1, 2, 4, 8, 16, 24, 32), (32, 25)),
    (50, (1, 2, 4, 8, 16, 32), (50, 50)), (20, (1, 2, 4, 8, 16, 32), (32, 17)),
])
def test_a_slot_key_takes_the_batches_above_the_graph_size_before_it(lo, graphs, want):
    assert routing.slot_key(lo, graphs) == want


GRAPH_CONFIG_0_5_23 = {"decode": {"backend": "full", "max_bs": 256, "bs": default_decode_graphs_0_5_13(256)},
                       "prefill": {"backend": "breakable", "bs": None}}


@pytest.mark.parametrize(("info", "want"), [
    # 0.5.23 without --cuda-graph-bs-decode: the captured sizes are in cuda_graph_config, the router gets none
    ({"cuda_graph_bs_decode": None, "cuda_graph_bs_prefill": None, "cuda_graph_config": GRAPH_CONFIG_0_5_23}, ()),
    ({"cuda_graph_bs_decode": [16, 1, 8, 8, "x", 0], "cuda_graph_config": GRAPH_CONFIG_0_5_23}, (1, 8, 16)),
    ({"cuda_graph_bs_decode": [1, 8], "cuda_graph_config": {"decode": {"backend": "disabled"}}}, ()),
    ({"cuda_graph_bs_decode": [1, 8], "disable_cuda_graph": True}, ()),
    ({"cuda_graph_bs_decode": [1, 8]}, (1, 8)),  # 0.5.14-0.5.17: no cuda_graph_config yet
    # 0.5.13: the resolved list, default or given
    ({"cuda_graph_bs": [1, 2, 3, 4]}, (1, 2, 3, 4)), ({"cuda_graph_bs": [1, 2], "disable_cuda_graph": True}, ()),
    ({}, ()), ({"cuda_graph_bs_decode": "1 2"}, ()),
])
def test_the_routers_graph_sizes_come_from_the_servers_info(info, want):
    assert routing.router_graphs(info) == want


def config(label, steps, info, command=None, spec_cfg=None):
    return ConfigResult(label, {}, 0.0, "ok", steps=steps, server_info=info, command=command,
                        speculative_config=spec_cfg, results=None)


def test_the_setup_comes_from_the_deepest_speculative_configuration():
    ok = [ConfigResult("baseline", {}, 0.0, "ok", results=object()),  # type: ignore[arg-type]
          ConfigResult("k=2", {}, 0.0, "ok", steps=2, server_info={"engine": "vllm", "version": "0.32.0"},
                       command="vllm serve M --speculative-config '{\"method\": \"ngram\", "
                               "\"num_speculative_tokens\": 2}'", results=object()),  # type: ignore[arg-type]
          ConfigResult("k=4", {}, 0.0, "ok", steps=4, server_info={"engine": "vllm", "version": "0.32.0"},
                       command="vllm serve M -sc '{\"method\": \"ngram\", \"num_speculative_tokens\": 4}'",
                       results=object())]  # type: ignore[arg-type]
    s = ef.setup_of(ok)
    assert (s.engine, s.version, s.speculative_config) == ("vllm", "0.32.0",
                                                            {"method": "ngram", "num_speculative_tokens": 4})
    sg = ConfigResult("steps=3", {}, 0.0, "ok", steps=3, results=object(),  # type: ignore[arg-type]
                      server_info={"version": "0.5.23", "speculative_algorithm": "EAGLE3",
                                   "speculative_eagle_topk": 1, "max_running_requests": 48,
                                   "cuda_graph_bs_decode": [1, 2, 4, 8, "x"], "cuda_graph_bs_prefill": None})
    s = ef.setup_of([sg])
    assert (s.engine, s.algorithm, s.topk, s.max_running, s.pad_to) == ("sglang", "EAGLE3", 1, 48, (1, 2, 4, 8))
    assert ef.setup_of([ok[0]]).engine == "unknown"


def test_an_unknown_server_gets_both_engines_and_the_two_pool_way():
    got = ef.advise(RANGES, ServerSetup("unknown"), "out")
    assert [a.engine for a in got] == ["vllm", "sglang"]


@pytest.mark.parametrize(("setup", "flags", "says"), [
    (ServerSetup("sglang", "0.5.23", algorithm="NGRAM", topk=1), "--speculative-algorithm NGRAM "
     "--speculative-num-draft-tokens 4", "launch NGRAM with 4 draft tokens"),
    (ServerSetup("sglang", "0.5.23", algorithm="NGRAM", topk=10), "", "breadth-10 tree"),
    (ServerSetup("sglang", "0.5.23", algorithm="EAGLE3", topk=1), "--speculative-algorithm EAGLE3 "
     "--speculative-eagle-topk 1 --speculative-num-steps 4 --speculative-num-draft-tokens 5", "4 draft steps"),
])
def test_sglangs_static_advice_names_the_knob_each_algorithm_has(setup, flags, says):
    """NGRAM has no steps flag: its steps are the draft tokens over the tree's breadth (SGLang 0.5.23
    speculative_hook.py:1310-1329); --speculative-eagle-topk and --speculative-num-steps are EAGLE's."""
    (advice,) = ef.static_advice(4, setup)
    assert advice.flags == flags and says in advice.headline


def test_one_step_count_at_every_load_prints_its_flags_not_keep_the_launch_flags():
    """A sweep's winner at every load is the flags to paste: the same generator as the one-step advice."""
    setup = ServerSetup("sglang", "0.5.23", algorithm="NGRAM", topk=1)
    advice = ef.sglang_advice([(1, 4, 4)], setup, "out")
    assert advice.flags == "--speculative-algorithm NGRAM --speculative-num-draft-tokens 4"
    assert advice.headline.startswith("SGLang: 4 steps win at every load measured (no schedule needed): launch NGRAM")

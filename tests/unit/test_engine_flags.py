"""The engine flags a per-load schedule is printed as: complete for vLLM (the server's own config with the
schedule merged in), SGLang's adaptive-config file where the release and algorithm have it, and a plain
"no knob" where they do not."""

from __future__ import annotations

import json
import shlex

import pytest

from specwatch.analysis import engine_flags as ef
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


def test_sglang_eagle3_topk1_gets_an_adaptive_config_file_on_cuda_graph_sizes():
    a = ef.sglang_advice(RANGES, ServerSetup("sglang", "0.5.23", algorithm="EAGLE3", topk=1, max_running=48),
                         "sweep-out")
    (name, content), = a.files
    assert name == "sglang-adaptive.json"
    # 9 → key 16 (takes batches 9-16), 23 → key 32 (takes 25 and up: nearer 23 than key 24's 17)
    assert json.loads(content) == {"1": {"candidate_steps": [5]}, "16": {"candidate_steps": [2]},
                                   "32": {"candidate_steps": [0]}}
    assert "0 steps from 25 running requests" in a.notes[0]
    assert shlex.split(a.flags) == [
        "--speculative-algorithm", "EAGLE3", "--speculative-eagle-topk", "1", "--speculative-num-steps", "5",
        "--speculative-adaptive", "--speculative-adaptive-config", "sweep-out/sglang-adaptive.json",
        "--max-running-requests", "48"]
    assert "0.5.14" in a.headline


def test_sglang_slots_follow_the_servers_own_graph_sizes_and_raise_the_batch_cap():
    setup = ServerSetup("sglang", "0.5.23", algorithm="EAGLE", topk=1, max_running=32, cuda_graph_bs=(1, 2, 4, 12, 40))
    a = ef.sglang_advice([(1, 6, 3), (7, 200, 0)], setup, "")
    assert json.loads(a.files[0][1]) == {"1": {"candidate_steps": [3]}, "12": {"candidate_steps": [0]}}  # from 5
    assert shlex.split(a.flags)[-2:] == ["--max-running-requests", "32"]
    a = ef.sglang_advice([(1, 50, 3), (51, 200, 0)], setup, "")
    assert json.loads(a.files[0][1])["51"] == {"candidate_steps": [0]}  # past the largest graph: not padded
    assert shlex.split(a.flags)[-1] == "51"  # a slot above the batch cap is never reached


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
    assert json.loads(a.files[0][1]) == {"1": {"candidate_steps": [5]}, "16": {"candidate_steps": [1]}}


@pytest.mark.parametrize(("lo", "graphs", "want"), [
    (2, (), (2, 2)), (9, (), (16, 9)), (12, (), (16, 9)), (14, (), (24, 17)),
    (13, (), (24, 17)),  # a tie: the later key keeps speculating longer
    (23, (), (32, 25)),
    (50, (1, 2, 4, 8, 16, 32), (50, 50)), (20, (1, 2, 4, 8, 16, 32), (32, 17)),
])
def test_a_slot_key_takes_the_batches_above_the_graph_size_before_it(lo, graphs, want):
    assert ef.slot_key(lo, graphs) == want


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
                                   "cuda_graph_bs": [1, 2, 4, 8, "x"]})
    s = ef.setup_of([sg])
    assert (s.engine, s.algorithm, s.topk, s.max_running, s.cuda_graph_bs) == ("sglang", "EAGLE3", 1, 48,
                                                                                (1, 2, 4, 8))
    assert ef.setup_of([ok[0]]).engine == "unknown"


def test_an_unknown_server_gets_both_engines_and_the_two_pool_way():
    got = ef.advise(RANGES, ServerSetup("unknown"), "out")
    assert [a.engine for a in got] == ["vllm", "sglang"]

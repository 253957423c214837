"""The simulator's launch flags as the engines' own argument parsers take them: SGLang 0.5.23's CUDA-graph
flags (and the refused ``--cuda-graph-bs``), what its ``/server_info`` then says and what its adaptive router
pads to; vLLM's ``--speculative-config`` keys (a pydantic dataclass that forbids extras) and its batch cap."""

from __future__ import annotations

import json

import pytest

from specwatch.sim import cli, vllm_cli, vllm_spec

SPEC = ["--speculative-algorithm", "EAGLE3", "--speculative-num-steps", "3", "--speculative-eagle-topk", "1"]


@pytest.mark.parametrize("argv", [["--cuda-graph-bs", "1", "2"], ["--cuda-graph-bs=8"]])
def test_cuda_graph_bs_is_refused_as_sglang_0_5_23s_argparse_refuses_it(argv, capsys):
    with pytest.raises(SystemExit) as e:
        cli.parse([*SPEC, *argv])
    assert e.value.code == 2
    flag = argv[0]
    assert (f"error: ambiguous option: {flag} could match --cuda-graph-bs-decode, --cuda-graph-bs-prefill"
            in capsys.readouterr().err)


@pytest.mark.parametrize(("argv", "given", "router", "decode_backend", "decode_max_bs"), [
    ([], None, [], "full", 256),  # nothing given: nothing padded; 256 captured on the simulated 80 GB GPU
    (["--max-running-requests", "24"], None, [], "full", 24),  # a given batch cap caps the captured sizes
    (["--cuda-graph-bs-decode", "16", "1", "8"], [16, 1, 8], [1, 8, 16], "full", 16),
    (["--cuda-graph-bs-decode", "1", "8", "--disable-cuda-graph"], [1, 8], [], "disabled", 8),
    (["--cuda-graph-bs-decode", "1", "8", "--disable-decode-cuda-graph"], [1, 8], [], "disabled", 8),
    (["--cuda-graph-bs-decode", "1", "8", "--cuda-graph-backend-decode", "disabled"], [1, 8], [], "disabled", 8),
])
def test_the_router_pads_only_to_a_given_decode_list(argv, given, router, decode_backend, decode_max_bs):
    args, unknown = cli.parse([*SPEC, "--speculative-adaptive", *argv])
    assert unknown == [] and args.adaptive is not None
    assert list(args.adaptive.graphs) == router
    info = cli.server_args(args, args.spec, 48)
    assert "cuda_graph_bs" not in info and info["cuda_graph_bs_prefill"] is None
    assert info["cuda_graph_bs_decode"] == given
    decode = info["cuda_graph_config"]["decode"]
    assert (decode["backend"], decode["max_bs"]) == (decode_backend, decode_max_bs)


def test_a_bad_decode_size_is_refused(capsys):
    with pytest.raises(SystemExit):
        cli.parse(["--cuda-graph-bs-decode", "0", "8"])
    assert "--cuda-graph-bs-decode: batch sizes must be >= 1" in capsys.readouterr().err


def unexpected(key: str, value: str, kind: str) -> str:
    return (f"{key}\n  Unexpected keyword argument [type=unexpected_keyword_argument, input_value={value}, "
            f"input_type={kind}]")


@pytest.mark.parametrize(("config", "message"), [
    # no SpeculativeConfig field: vLLM 0.32 and 0.33 stop with pydantic's error (extra="forbid"), as here
    ({"tokenizer": "t"}, "1 validation error for SpeculativeConfig\n" + unexpected("tokenizer", "'t'", "str")),
    ({"max_num_seqs": 4, "tokenizer": None}, "2 validation errors for SpeculativeConfig\n"
     + unexpected("max_num_seqs", "4", "int") + "\n" + unexpected("tokenizer", "None", "NoneType")),
    ({"max-num-seqs": 4}, unexpected("max_num_seqs", "4", "int")),  # vLLM turns '-' into '_' first
    ({"speculative_disable_by_batch_size": 4}, unexpected("speculative_disable_by_batch_size", "4", "int")),
    # a field the simulator does not simulate: refused naming it
    ({"parallel_drafting": True}, "key 'parallel_drafting' cannot be simulated"),
])
def test_a_speculative_config_key_vllm_has_no_field_for_stops_it_as_vllm_does(config, message):
    with pytest.raises(vllm_spec.SpecConfigError) as e:
        vllm_spec.spec_from_config(json.dumps({"method": "ngram", "num_speculative_tokens": 3, **config}))
    assert message in str(e.value)


def test_every_key_the_vllm_simulator_takes_is_a_speculative_config_field():
    assert set(vllm_spec.SIMULATED_KEYS) | vllm_spec.IGNORED_KEYS <= vllm_spec.FIELDS_0_32
    got = vllm_spec.spec_from_config('{"method": "eagle3", "num_speculative_tokens": 2, "model": "m", '
                                    '"prompt-lookup-max": 4}')
    assert got.ignored == ["model", "prompt_lookup_max"]


def test_the_vllm_simulators_batch_cap_default_is_stated():
    args, _ = vllm_cli.parse([])
    assert args.max_num_seqs == vllm_cli.DEFAULT_MAX_NUM_SEQS == 256
    action = next(a for a in vllm_cli.build_parser()._actions if "--max-num-seqs" in a.option_strings)
    assert action.help.endswith("`vllm serve` picks 128 per CPU worker and 1024 on an H100 or larger (default: 256 "
                                "requests, what it picks on a GPU under 70 GiB or an A100)")


SCHEDULE = {"num_speculative_tokens": 2, "num_speculative_tokens_per_batch_size": [[1, 4, 2], [5, 64, 0]]}


@pytest.mark.parametrize(("config", "method", "kept"), [
    ({"method": "deepseek_mtp"}, "mtp", True),  # vLLM replaces every *_mtp with mtp before 0.33's gate
    ({"method": "mtp"}, "mtp", True), ({"method": "ngram"}, "ngram", True),
    ({"model": "org/EAGLE3-head"}, "eagle3", True),  # no method: read off the draft model's name
    ({"method": "draft_model", "model": "org/dspark_qwen3_8b"}, "dspark", False),
    ({"method": "ngram_gpu"}, "ngram_gpu", False), ({"method": "suffix"}, "suffix", False),
])
def test_the_0_33_schedule_gate_reads_the_method_vllm_settles_on(config, method, kept):
    args, _ = vllm_cli.parse(["--speculative-config", json.dumps({**config, **SCHEDULE})])
    assert args.spec.algorithm == method
    assert (args.schedule is not None) is kept and bool(args.schedule_dropped) is not kept
    assert args.replaced == ("deepseek_mtp" if config.get("method") == "deepseek_mtp" else "")
    if not kept:
        assert args.schedule_dropped == (f"Dynamic speculative decoding is not supported with the '{method}' "
                                         "speculative method on Model Runner V1. Disabling num_speculative_tokens_"
                                         "per_batch_size and falling back to static num_speculative_tokens=2.")


def test_a_custom_proposer_class_is_refused():
    with pytest.raises(vllm_spec.SpecConfigError, match="a custom_class proposer cannot be simulated"):
        vllm_spec.spec_from_config('{"model": "my_pkg.Proposer", "num_speculative_tokens": 2}')


NGRAM = ["--speculative-algorithm", "NGRAM"]


@pytest.mark.parametrize(("argv", "reported", "chain"), [
    # the real 0.5.23 server's /server_info for these flags: steps 4, topk 1, draft tokens 4
    (["--speculative-num-draft-tokens", "4", "--speculative-ngram-max-bfs-breadth", "1",
      "--speculative-ngram-min-bfs-breadth", "1"], (4, 1, 4), 3),
    ([], (1, 10, 12), 11),  # defaults: 12 draft tokens (with its warning), breadth 10, 12 // 10 steps
    (["--speculative-num-draft-tokens", "8", "--speculative-ngram-max-bfs-breadth", "4"], (2, 4, 8), 7),
    (["--speculative-num-draft-tokens", "2", "--speculative-eagle-topk", "3"], (0, 10, 2), 1),  # topk overwritten
    (["--speculative-num-draft-tokens", "6", "--speculative-num-steps", "2",
      "--speculative-ngram-max-bfs-breadth", "1"], (2, 1, 6), 5),  # given steps are kept
])
def test_ngram_resolves_its_flags_as_sglang_0_5_23s_handle_ngram(argv, reported, chain):
    args, unknown = cli.parse([*NGRAM, *argv])
    assert unknown == []
    info = cli.server_args(args, args.spec, 48)
    assert (info["speculative_num_steps"], info["speculative_eagle_topk"],
            info["speculative_num_draft_tokens"]) == reported
    spec = args.spec  # simulated as a chain: draft tokens - 1 drafts a round, each a lookup of the chain
    assert (spec.num_steps, spec.topk, spec.num_draft_tokens) == (chain, 1, reported[2])


def test_context_length_is_in_server_info_and_defaults_to_the_old_max_model_len():
    args, _ = cli.parse([])
    assert cli.server_args(args, args.spec, 256)["context_length"] == 131072
    args, _ = cli.parse(["--context-length", "2048"])
    assert cli.server_args(args, args.spec, 256)["context_length"] == 2048

"""The simulator's launch flags as the engines' own argument parsers take them: SGLang 0.5.23's CUDA-graph
flags (and the refused ``--cuda-graph-bs``), what its ``/server_info`` then says and what its adaptive router
pads to."""

from __future__ import annotations

import pytest

from specwatch.sim import cli

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

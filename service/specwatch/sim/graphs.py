"""SGLang 0.5.23's CUDA-graph batch sizes, as the simulated server resolves, reports and routes by them. Pure.

Facts from the 0.5.23 wheel (``sglang/srt/...``):

- Flags: ``--cuda-graph-bs-decode`` and ``--cuda-graph-bs-prefill`` (``arg_groups/fields/exec_.py:640-647``).
  ``--cuda-graph-bs`` was the flag up to 0.5.13 and a deprecated alias of ``--cuda-graph-bs-decode`` in
  0.5.14-0.5.19; from 0.5.20 argparse refuses it as an ambiguous prefix of the two.
- Without ``--cuda-graph-bs-decode`` the decode sizes are generated up to a ``max_bs`` picked by GPU memory
  (256 on an 80 GB GPU at TP 1, ``arg_groups/memory_hook.py:132-145``), lowered to ``--max-running-requests``
  only when that is given (``:182-188``; the speculative default of 48 is set later, by the speculative
  hook), with the list ``arg_groups/cuda_graph_hook.py:500-532`` makes. ``/server_info`` reports the result in
  ``cuda_graph_config`` and the flags as given in ``cuda_graph_bs_decode`` / ``cuda_graph_bs_prefill``.
- The adaptive router is handed the *given* decode list only (``speculative/eagle_worker_v2.py:1408-1413``),
  and nothing when decode graphs are off: without the flag it pads no batch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

DECODE_MAX_BS = 256  # the simulated GPU: 80 GB at TP 1 (memory_hook.py:132-145)
CHUNKED_PREFILL = 8192  # that GPU's chunked_prefill_size, the prefill graphs' max_bs (memory_hook.py:139,235-236)
PREFILL_BACKEND = "breakable"  # CUDA's default (model_executor/cuda_graph_config.py:119-123)


@dataclass(frozen=True, slots=True)
class GraphFlags:
    """The launch flags that decide the CUDA graphs."""

    bs_decode: tuple[int, ...] | None = None  # --cuda-graph-bs-decode
    bs_prefill: tuple[int, ...] | None = None  # --cuda-graph-bs-prefill
    decode_off: bool = False  # --disable-cuda-graph, --disable-decode-cuda-graph, --cuda-graph-backend-decode disabled
    prefill_off: bool = False  # --disable-cuda-graph
    max_running: int | None = None  # --max-running-requests as given


def decode_sizes(max_bs: int, speculative: bool) -> list[int]:
    """``generate_decode_cuda_graph_batch_sizes`` (``cuda_graph_hook.py:500-532``, padding enabled)."""
    if speculative:  # less padding for small batches
        bs = [*range(1, 9), *range(10, 33, 2), *range(40, 65, 4), *range(72, 257, 8), *range(272, max_bs + 1, 16)]
    else:
        bs = [1, 2, 4, 8, 12, *range(16, 257, 8), *range(272, 512, 16), *range(512, max_bs + 1, 32)]
    bs = [b for b in bs if b <= max_bs]
    return bs if max_bs in bs else [*bs, max_bs]


def prefill_sizes(max_bs: int) -> list[int]:
    """``generate_prefill_cuda_graph_batch_sizes`` (``cuda_graph_hook.py:480-497``): captured token counts."""
    sizes = [*range(4, 33, 4), *range(48, 257, 16), *range(288, 513, 32), *range(576, 1025, 64),
             *range(1280, 4097, 256), *range(4608, max_bs + 1, 512)]
    return [s for s in sizes if s <= max_bs]


def router_sizes(f: GraphFlags) -> list[int]:
    """What the adaptive router pads a batch up to: the given decode list, sorted; [] without one or with
    decode graphs off."""
    return [] if f.decode_off or not f.bs_decode else sorted(f.bs_decode)


def _phase(backend: str, max_bs: int, bs: list[int]) -> dict[str, Any]:
    return {"backend": backend, "max_bs": max_bs, "bs": bs, "tc_compiler": "eager", "max_context_size": None,
            "full_prefill_max_req": None, "full_prefill_prefix_chunk_tokens": None, "max_seq_len": None}


def server_info(f: GraphFlags, speculative: bool) -> dict[str, Any]:
    """The CUDA-graph keys of 0.5.23's ``/server_info`` (its resolved server args)."""
    if f.bs_decode:
        decode_max = max(f.bs_decode)  # memory_hook.py:206-207
    else:
        decode_max = min(DECODE_MAX_BS, f.max_running) if f.max_running else DECODE_MAX_BS
    decode = list(f.bs_decode) if f.bs_decode else decode_sizes(decode_max, speculative)
    prefill = list(f.bs_prefill) if f.bs_prefill else prefill_sizes(CHUNKED_PREFILL)
    return {
        "cuda_graph_bs_decode": list(f.bs_decode) if f.bs_decode else None,
        "cuda_graph_bs_prefill": list(f.bs_prefill) if f.bs_prefill else None,
        "cuda_graph_config": {
            "decode": _phase("disabled" if f.decode_off else "full", decode_max, decode),
            "prefill": _phase("disabled" if f.prefill_off else PREFILL_BACKEND, CHUNKED_PREFILL, prefill),
        },
    }

"""How the engines themselves read what the advice prints, ported from the released wheels' code. Analysis
stage; pure.

- SGLang's adaptive router (``speculative/adaptive_spec_params.py``): which CUDA-graph sizes it pads a batch up
  to (``router_graphs``), which slot a batch of running requests then uses (``slot_for``), and so where a slot
  key must go for a range to start where it was measured (``slot_key``, ``adaptive_slots``).
- vLLM's speculative method as ``SpeculativeConfig`` settles it (``vllm_method``), which 0.33's per-batch-size
  schedule gate reads.
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping, Sequence
from typing import Any

Range = tuple[int, int, int]  # (lo, hi, k): batch sizes lo..hi inclusive run k draft tokens (0: none)


def router_graphs(info: Mapping[str, Any]) -> tuple[int, ...]:
    """The batch sizes SGLang's adaptive router pads a batch up to, from the server's info; () when it pads
    nothing (a slot key then meets the running requests as they are). The router is handed the *given*
    ``--cuda-graph-bs-decode`` list, or nothing when decode graphs are off (0.5.23
    ``speculative/eagle_worker_v2.py:1408-1413``; 0.5.14 ``:1050-1055``): resolution writes the sizes it
    captures by default to ``cuda_graph_config.decode.bs`` (``arg_groups/memory_hook.py:202-205``) and never
    back, so without the flag there is no padding. 0.5.13 handed it ``cuda_graph_bs``, which resolution
    filled with the default sizes (``server_args.py:1535-1536``; the router ``eagle_worker_v2.py:892-897``).
    ``/server_info`` has carried ``cuda_graph_bs_decode`` and ``cuda_graph_bs_prefill`` instead of
    ``cuda_graph_bs`` since 0.5.14."""
    if "cuda_graph_bs_decode" in info:
        graph_cfg = info.get("cuda_graph_config")
        decode = graph_cfg.get("decode") if isinstance(graph_cfg, dict) else None
        off = info.get("disable_cuda_graph") is True or (isinstance(decode, dict)
                                                         and decode.get("backend") == "disabled")
        graphs = None if off else info["cuda_graph_bs_decode"]
    else:
        graphs = None if info.get("disable_cuda_graph") is True else info.get("cuda_graph_bs")
    if not isinstance(graphs, list):
        return ()
    return tuple(sorted({b for b in graphs if isinstance(b, int) and not isinstance(b, bool) and b > 0}))


def vllm_method(cfg: Mapping[str, Any]) -> str:
    """The method vLLM runs a ``--speculative-config`` as, settled the way ``SpeculativeConfig.__post_init__``
    settles it before 0.33's schedule gate (``config/vllm.py:1088-1108``) reads it (0.33.0
    ``config/speculative.py:1236-1250`` and ``:1432-1473``; 0.32.0 ``:1131-1145`` and ``:1325-1350``): none given
    is ``custom_class`` for a dotted import path as ``model``, ``ngram`` for the model ``ngram``/``[ngram]``, else
    ``draft_model``; every ``*_mtp`` becomes ``mtp``; and a model-based method other than eagle, eagle3, dflash
    and dspark takes the one its draft model's name says (``eagle-``, ``eagle3``, ``dflash``, ``dspark``; vLLM
    also reads the draft's architectures, which a launch command does not show)."""
    method, model = cfg.get("method"), cfg.get("model")
    name = model if isinstance(model, str) else None
    if method is None:
        parts = (name or "").split(".")
        dotted = name is not None and "/" not in name and not name.startswith(("http://", "https://", "file://"))
        if dotted and len(parts) >= 2 and all(p.isidentifier() for p in parts):
            return "custom_class"
        method = "ngram" if name in ("ngram", "[ngram]") else "draft_model"
    method = str(method)
    if method.endswith("_mtp"):
        method = "mtp"
    if method == "[ngram]":
        method = "ngram"
    if name is None or method in ("ngram", "ngram_gpu", "suffix", "custom_class", "extract_hidden_states",
                                  "eagle", "eagle3", "dflash", "dspark"):
        return method
    lowered = name.lower()
    return next((m for word, m in (("eagle-", "eagle"), ("eagle3", "eagle3"), ("dflash", "dflash"),
                                   ("dspark", "dspark")) if word in lowered), method)


def padded(batch: int, graphs: Sequence[int]) -> int:
    """SGLang's ``_pad_to_cuda_graph_bs`` (0.5.23 ``speculative/adaptive_spec_params.py:348-354``): the smallest
    of the (sorted) router graph sizes at or above ``batch``; past the largest, or with none, ``batch``."""
    i = bisect.bisect_left(graphs, batch)
    return graphs[i] if i < len(graphs) else batch


def slot_for(batch: int, keys: Sequence[int], graphs: Sequence[int]) -> int:
    """The slot key a batch of ``batch`` running requests uses: SGLang's ``_route`` and ``_find_closest_bs``
    (``adaptive_spec_params.py:342-346,356-358``): the largest key at or below the padded batch size, or the
    smallest key when none is."""
    ordered = sorted(keys)
    return ordered[max(0, bisect.bisect_right(ordered, padded(batch, graphs)) - 1)]


def first_batch(key: int, graphs: Sequence[int]) -> int:
    """The smallest batch size that pads up to ``key`` or beyond (where slot ``key`` starts, when no larger key
    takes it): the largest router graph size below ``key``, plus one; ``key`` itself when it is past the
    largest graph size or nothing is padded."""
    if not graphs or key > max(graphs):
        return key
    return max([0, *(g for g in graphs if g < key)]) + 1


def slot_key(lo: int, graphs: Sequence[int]) -> tuple[int, int]:
    """(slot key, first batch size it takes) for a range starting at batch size ``lo``. Without padding the key
    is ``lo``. With router graph sizes a key ``g`` takes every batch above the graph size before it: the key
    whose first batch is nearest ``lo``, the later one on a tie (past the largest graph nothing is padded, and
    ``lo`` itself is a key)."""
    if not graphs or lo > max(graphs):
        return lo, lo
    options = [(g, first_batch(g, graphs)) for g in sorted(graphs)]
    return min(options, key=lambda o: (abs(o[1] - lo), -o[0]))


def adaptive_slots(ranges: Sequence[Range], graphs: Sequence[int]) -> dict[str, dict[str, list[int]]]:
    """``--speculative-adaptive-config``'s JSON: one slot per range, keyed by where the range starts (``slot_key``:
    a router graph size when the server pads), one candidate each (the measured k; 0 = no drafting)."""
    slots: dict[int, int] = {}
    for lo, _hi, k in ranges:
        key = 1 if lo <= 1 else slot_key(lo, graphs)[0]
        if slots and list(slots.values())[-1] == k:
            continue
        slots.setdefault(key, k)
    return {str(key): {"candidate_steps": [k]} for key, k in slots.items()}

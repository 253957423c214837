"""Stand-in for ``sgl_kernel``, the CPU build of SGLang's kernel package, which the registry does not have
(``sglang-kernel`` there is the CUDA build). SGLang 0.5.23's CPU engine imports it at module level, e.g.
``sglang/kernels/ops/kvcache/cache_move.py`` (``from sgl_kernel import copy_all_layer_kv_cache_cpu``).

What it provides, and what it deliberately does not:
- no ``torch.ops.sgl_kernel.convert_weight_packed`` (no torch op at all): ``srt/utils/common.py``'s
  ``_is_intel_amx_backend_available`` is then false, SGLang says "The current platform does not support
  Intel AMX, will fallback to torch_native backend." and takes its own pure-torch paths;
- ``sgl_kernel.speculative`` and ``sgl_kernel.mamba`` import (SGLang imports them unconditionally on CPU);
  every other ``sgl_kernel.<x>`` submodule raises ``ModuleNotFoundError``, so SGLang's own
  ``try/except ImportError`` fallbacks run;
- nine functions, in plain torch, each computing what SGLang's reference kernel for it computes (the
  reference named in each docstring, paths relative to the ``sglang`` package of the 0.5.23 wheel);
- any other attribute imports, and raises ``_missing.StandInMissing`` naming itself when called.

Tensors are small here (one tiny model, a handful of requests), so clarity wins over speed: loops in
Python where the reference kernel has one program per request.
"""

from __future__ import annotations

import ctypes

import torch

from ._missing import Missing, StandInMissing, module_getattr

__all__ = [
    "Missing",
    "StandInMissing",
    "assign_draft_cache_locs_contiguous_cpu",
    "assign_extend_cache_locs_cpu",
    "assign_req_to_token_pool_cpu",
    "build_tree_kernel_efficient_cpu",
    "copy_all_layer_kv_cache_cpu",
    "fill_accept_out_cache_loc_cpu",
    "fill_bonus_tokens_cpu",
    "verify_tree_greedy_cpu",
]

# submodules of the real package that the stand-in does not have: ``from sgl_kernel import flash_attn`` must
# fail as an import, not hand back a ``Missing``
SUBMODULES = frozenset({"allreduce", "elementwise", "flash_attn", "kvcacheio", "metal", "quantization",
                        "scalar_type", "sparse_flash_attn", "utils", "version", "testing", "gemm", "moe",
                        "attention", "sampling", "cutlass_moe", "fused_moe", "top_k", "memory", "spatial",
                        "grammar", "load_utils", "debug_utils", "marlin", "expert_specialization", "mla"})

__getattr__ = module_getattr(__name__, SUBMODULES)


def _rows(t: torch.Tensor) -> list[int]:
    return [int(x) for x in t.reshape(-1).tolist()]


def assign_extend_cache_locs_cpu(req_pool_indices: torch.Tensor, req_to_token: torch.Tensor,
                                 start_offset: torch.Tensor, end_offset: torch.Tensor, out_cache_loc: torch.Tensor,
                                 pool_len: int) -> None:
    """``kernels/ops/speculative/cache_locs.py::assign_extend_cache_locs``: request ``b``'s slots
    ``req_to_token[req_pool_indices[b], start_offset[b]:end_offset[b]]``, packed one request after another
    into ``out_cache_loc``."""
    table = req_to_token.reshape(-1, pool_len)
    out = out_cache_loc.view(-1)
    at = 0
    for row, start, end in zip(_rows(req_pool_indices), _rows(start_offset), _rows(end_offset), strict=True):
        n = end - start
        if n > 0:
            out[at:at + n] = table[row, start:end].to(out.dtype)
            at += n


def assign_req_to_token_pool_cpu(req_pool_indices: torch.Tensor, req_to_token: torch.Tensor,
                                 start_offset: torch.Tensor, end_offset: torch.Tensor, out_cache_loc: torch.Tensor,
                                 pool_len: int) -> None:
    """``srt/mem_cache/allocation.py::assign_req_to_token_pool``: the inverse of the above, writing the packed
    ``out_cache_loc`` into ``req_to_token[req_pool_indices[b], start_offset[b]:end_offset[b]]``."""
    table = req_to_token.view(-1, pool_len)
    src = out_cache_loc.view(-1)
    at = 0
    for row, start, end in zip(_rows(req_pool_indices), _rows(start_offset), _rows(end_offset), strict=True):
        n = end - start
        if n > 0:
            table[row, start:end] = src[at:at + n].to(table.dtype)
            at += n


def assign_draft_cache_locs_contiguous_cpu(req_pool_indices: torch.Tensor, req_to_token: torch.Tensor,
                                           seq_lens: torch.Tensor, out_cache_loc: torch.Tensor, pool_len: int,
                                           topk: int, num_cols: int) -> None:
    """``kernels/ops/speculative/cache_locs.py::assign_draft_cache_locs_contiguous`` (without positions, as
    the CPU path calls it): request ``b``'s ``topk * num_cols`` draft slots
    ``req_to_token[req_pool_indices[b], seq_lens[b]:][:topk * num_cols]`` into
    ``out_cache_loc[b * topk * num_cols:]``."""
    table = req_to_token.reshape(-1, pool_len)
    out = out_cache_loc.view(-1)
    width = topk * num_cols
    for b, (row, start) in enumerate(zip(_rows(req_pool_indices), _rows(seq_lens), strict=True)):
        out[b * width:(b + 1) * width] = table[row, start:start + width].to(out.dtype)


def fill_accept_out_cache_loc_cpu(accept_index: torch.Tensor, out_cache_loc: torch.Tensor,
                                  accept_out_cache_loc: torch.Tensor) -> None:
    """``kernels/ops/speculative/eagle.py::fill_accept_out_cache_loc``: for every entry ``src`` of the
    flattened ``accept_index`` that is not -1, in order, ``out_cache_loc[src]`` is appended to
    ``accept_out_cache_loc`` (its place: the number of non -1 entries before it)."""
    idx = accept_index.reshape(-1)
    kept = idx[idx != -1].to(torch.int64)
    accept_out_cache_loc.view(-1)[: kept.numel()] = out_cache_loc.view(-1)[kept].to(accept_out_cache_loc.dtype)


def fill_bonus_tokens_cpu(accept_tokens: torch.Tensor, accept_lens: torch.Tensor, bonus_tokens: torch.Tensor,
                          accept_stride: int) -> None:
    """``kernels/ops/speculative/eagle.py::fill_bonus_tokens``: request ``b``'s bonus token is its last accepted
    one, ``accept_tokens.flat[accept_stride * b + accept_lens[b] - 1]``."""
    lens = accept_lens.reshape(-1).to(torch.int64)
    at = torch.arange(lens.numel(), dtype=torch.int64, device=lens.device) * accept_stride + lens - 1
    bonus_tokens.view(-1)[: lens.numel()] = accept_tokens.reshape(-1)[at].to(bonus_tokens.dtype)


def copy_all_layer_kv_cache_cpu(data_ptrs: torch.Tensor, strides: torch.Tensor, tgt_loc: torch.Tensor,
                                src_loc: torch.Tensor) -> None:
    """``kernels/ops/kvcache/cache_move.py::copy_all_layer_kv_cache_tiled``: in every buffer ``i`` (raw address
    ``data_ptrs[i]``, one slot = ``strides[i]`` bytes), slot ``tgt_loc[j]`` gets the bytes of slot
    ``src_loc[j]``; all sources are read before any target is written (safe in place)."""
    src = src_loc.reshape(-1).to(torch.int64)
    tgt = tgt_loc.reshape(-1).to(torch.int64)
    if src.numel() == 0:
        return
    slots = int(torch.maximum(src.max(), tgt.max())) + 1
    for ptr, stride in zip(_rows(data_ptrs), _rows(strides), strict=True):
        raw = (ctypes.c_uint8 * (slots * stride)).from_address(ptr)
        buf = torch.frombuffer(raw, dtype=torch.uint8).view(slots, stride)
        buf[tgt] = buf[src]  # the gather makes a copy first


def verify_tree_greedy_cpu(predicts: torch.Tensor, accept_index: torch.Tensor, accept_token_num: torch.Tensor,
                           candidates: torch.Tensor, retrive_index: torch.Tensor, retrive_next_token: torch.Tensor,
                           retrive_next_sibling: torch.Tensor, target_predict: torch.Tensor) -> None:
    """``kernels/ops/speculative/spec_tree.py::verify_tree_greedy_kernel_triton``: per request, walk the draft
    tree from its root, at each level taking the first child (then its siblings) whose token equals the
    target's prediction at the last accepted node; record the accepted nodes' indices in ``accept_index``,
    their count in ``accept_token_num``, and the target's token at every accepted node (and at the last, the
    bonus) in the flat ``predicts``."""
    bs, num_draft = candidates.shape[0], candidates.shape[1]
    num_spec = accept_index.shape[1]
    cand = candidates.reshape(bs, num_draft).tolist()
    r_index = retrive_index.reshape(bs, num_draft).tolist()
    r_next = retrive_next_token.reshape(bs, num_draft).tolist()
    r_sib = retrive_next_sibling.reshape(bs, num_draft).tolist()
    target = target_predict.reshape(-1).tolist()
    flat_predicts = predicts.view(-1)
    for b in range(bs):
        last = r_index[b][0]
        accepted = [last]
        cur = 0
        for _ in range(1, num_spec):
            cur = r_next[b][cur]
            want = target[last]
            found = False
            for _ in range(num_draft):  # the reference's bound on a sibling walk
                if cur == -1:
                    break
                if cand[b][cur] == want:
                    flat_predicts[last] = want
                    last = r_index[b][cur]
                    accepted.append(last)
                    found = True
                    break
                cur = r_sib[b][cur]
            if not found:
                break
        accept_index[b, : len(accepted)] = torch.tensor(accepted, dtype=accept_index.dtype)
        accept_token_num[b] = len(accepted) - 1
        flat_predicts[last] = target[last]


def build_tree_kernel_efficient_cpu(parent_list: torch.Tensor, selected_index: torch.Tensor,
                                    verified_seq_len: torch.Tensor, tree_mask: torch.Tensor, positions: torch.Tensor,
                                    retrieve_index: torch.Tensor, retrieve_next_token: torch.Tensor,
                                    retrieve_next_sibling: torch.Tensor, topk: int, depth: int, draft_token_num: int,
                                    tree_mask_mode: int) -> None:
    """``kernels/ops/speculative/spec_tree.py::sgl_build_tree_kernel_efficient_triton``, element for element:
    each request's retrieve index / first-child / next-sibling lists, its draft tokens' positions (depth in
    the tree + committed length) and its tree mask, in FULL_MASK (0: committed prefix columns included) or
    QLEN_ONLY (1: draft × draft) layout. As in the reference, the retrieve lists must come in filled with
    -1 and the mask's prefix columns with True; the bit-packed mode (2) is not supported (nor by the
    reference's Triton version)."""
    mode = int(tree_mask_mode)
    if mode not in (0, 1):
        raise StandInMissing(f"sgl_kernel.build_tree_kernel_efficient_cpu: tree mask mode {mode} (bit-packed) is not "
                             f"covered by the stand-in ({Missing.__module__})")
    n = draft_token_num
    bs = verified_seq_len.shape[0]
    seq = _rows(verified_seq_len)
    prefix = [sum(seq[:b]) for b in range(bs)]
    pl_stride = parent_list.stride(0) if parent_list.dim() > 1 else parent_list.shape[0]
    parents = _rows(parent_list)
    sel_stride = selected_index.stride(0)
    sel = _rows(selected_index)
    mask = tree_mask.view(-1)
    pos = positions.view(-1)
    r_index, r_next, r_sib = retrieve_index.view(-1), retrieve_next_token.view(-1), retrieve_next_sibling.view(-1)
    next_tok = _rows(retrieve_next_token)

    def selected(b: int, i: int) -> int:
        return sel[b * sel_stride + i]

    def find(b: int, token_idx: int) -> int:
        """First ``pp`` in 0..n-2 with ``selected_index[b, pp] == token_idx``, or -1."""
        for pp in range(n - 1):
            if selected(b, pp) == token_idx:
                return pp
        return -1

    for b in range(bs):
        seq_len = seq[b]
        seq_tree_idx = n * n * b + prefix[b] * n
        pos[b * n] = seq_len
        for i in range(n - 1, 0, -1):
            r_index[b * n + i] = b * n + i
            parent_tb_idx = selected(b, i - 1) // topk
            if parent_tb_idx == 0:
                parent_position, found = 0, True
            else:
                pp = find(b, parents[b * pl_stride + parent_tb_idx])
                parent_position, found = pp + 1, pp >= 0
            if found:
                at = b * n + parent_position
                if next_tok[at] != -1:
                    r_sib[b * n + i] = next_tok[at]
                next_tok[at] = i
                r_next[at] = i
        r_index[b * n] = b * n
        for x in range(n):
            # FULL_MASK: row x of the request's (seq_len + n)-wide block; QLEN_ONLY: row x of its n × n block
            token_tree_idx = seq_tree_idx + (seq_len + n) * x + seq_len + 1 if mode == 0 else n * n * b + n * x + 1
            mask[token_tree_idx - 1] = True
            mask[token_tree_idx:token_tree_idx + n - 1] = False
            if x > 0:
                cur, position = x - 1, 0
                for _ in range(depth):
                    position += 1
                    mask[token_tree_idx + cur] = True
                    parent_tb_idx = selected(b, cur) // topk
                    if parent_tb_idx == 0:
                        break
                    cp = find(b, parents[b * pl_stride + parent_tb_idx])
                    if cp < 0:
                        break
                    cur = cp
                pos[b * n + x] = position + seq_len

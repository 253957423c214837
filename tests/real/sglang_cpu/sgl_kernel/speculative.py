"""Stand-in for ``sgl_kernel.speculative`` (SGLang 0.5.23 imports it on CPU in
``kernels/ops/speculative/reconstruct_tree.py``): the NGRAM verify metadata, in plain torch."""

from __future__ import annotations

import torch

from ._missing import module_getattr

__getattr__ = module_getattr(__name__)


def reconstruct_indices_from_tree_mask(tree_mask: torch.Tensor, verified_seq_len: torch.Tensor,
                                       positions: torch.Tensor, retrieve_index: torch.Tensor,
                                       retrieve_next_token: torch.Tensor, retrieve_next_sibling: torch.Tensor,
                                       batch_size: int, draft_token_num: int) -> None:
    """``kernels/ops/speculative/reconstruct_tree.py::_reconstruct_tree_mask_kernel``: from each request's
    ``n × n`` tree mask (row i, column j: j is an ancestor of i, counted only for j < i), in place:
    ``positions = #ancestors + verified_seq_len``, ``retrieve_index = b * n + i``, ``retrieve_next_token`` =
    the first child (-1: none), ``retrieve_next_sibling`` = the next node with the same parent (-1: none, or a
    root)."""
    n, bs = draft_token_num, batch_size
    if bs == 0:
        return
    m = tree_mask.reshape(-1)[: bs * n * n].view(bs, n, n).bool()
    idx = torch.arange(n, device=m.device)
    row, col = idx.view(1, n, 1), idx.view(1, 1, n)
    anc = m & (col < row)
    depth = anc.sum(-1)
    parent = torch.where(anc, col, -1).amax(-1)  # [bs, n] by node
    first_child = torch.where(anc, row, n).amin(1)  # [bs, n] by column (the parent)
    next_token = torch.where(anc.any(1), first_child, -1)
    same_parent = (parent.unsqueeze(2) == parent.unsqueeze(1)) & (row > col)  # [b, k, tid]
    first_sibling = torch.where(same_parent, row, n).amin(1)
    next_sibling = torch.where((parent >= 0) & (first_sibling < n), first_sibling, -1)
    _put(positions, depth.to(torch.int64) + verified_seq_len.reshape(bs, 1).to(torch.int64))
    _put(retrieve_index, torch.arange(bs * n, device=m.device))
    _put(retrieve_next_token, next_token)
    _put(retrieve_next_sibling, next_sibling)


def _put(dst: torch.Tensor, values: torch.Tensor) -> None:
    """The reference's flat stores ``dst[b * n + i]`` (into a flat or a ``[bs, n]`` output)."""
    flat = values.reshape(-1)
    if dst.numel() == flat.numel():
        dst.copy_(flat.view(dst.shape))
    else:
        dst.view(-1)[: flat.numel()] = flat.to(dst.dtype)

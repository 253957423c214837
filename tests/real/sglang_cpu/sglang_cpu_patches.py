"""What ``sitecustomize`` patches into SGLang 0.5.23 as its modules are imported (the wheel stays untouched),
so that its torch_native attention backend, the only one our CPUs (no AMX) can use, serves speculative
decoding:

1. ``patch_torch_native_backend``: ``srt/layers/attention/torch_native_backend.py``,
   ``TorchNativeAttnBackend.forward_extend`` has no speculative-verify branch (a verify batch carries no
   ``extend_prefix_lens``: ``AttributeError: 'NoneType' object has no attribute 'shape'``). The branch added
   here mirrors ``srt/layers/attention/intel_amx_backend.py::IntelAMXAttnBackend._build_extend_metadata``:
   each request extends by ``spec_info.draft_token_num`` tokens after its ``seq_lens`` committed ones; the
   committed prefix is fully visible, and draft token i sees draft token j iff ``spec_info.custom_mask``
   (``n × n`` per request on CPU) says so.
2. ``patch_draft_utils``: ``srt/speculative/draft_utils.py::DraftBackendFactory._create_backend`` refuses
   EAGLE on torch_native (``EAGLE is not supported in (decode) attention backend torch_native``). Here it
   accepts it: draft extend gets a plain ``TorchNativeAttnBackend`` (draft-extend batches carry
   ``extend_prefix_lens``/``extend_seq_lens``, its own ``forward_extend`` serves them); multi-step draft
   decode gets ``TorchNativeMultiStepDraftBackend``, the torch_native counterpart of
   ``intel_amx_backend.IntelAMXMultiStepDraftBackend`` for topk 1. Draft trees (topk > 1 with more than one
   step) are refused at start.
"""

from __future__ import annotations

import itertools
from typing import Any

import torch
from torch.nn.functional import scaled_dot_product_attention

STANDIN = "specwatch's SGLang CPU stand-in (tests/real/sglang_cpu/sglang_cpu_patches.py)"
MARK = "_specwatch_cpu_patched"


def _check_plain_layer(layer: Any, what: str) -> None:
    if layer.is_cross_attention or (layer.sliding_window_size is not None and layer.sliding_window_size > -1):
        raise NotImplementedError(f"{what}: cross or sliding-window attention is not covered by {STANDIN}")


def _write_kv(backend: Any, layer: Any, forward_batch: Any, k: Any, v: Any, save_kv_cache: bool) -> None:
    from sglang.srt.mem_cache.memory_pool import KVWriteLoc

    if save_kv_cache and k is not None and v is not None:
        backend.token_to_kv_pool.set_kv_buffer(
            layer, KVWriteLoc(forward_batch.out_cache_loc, backend.swa_out_cache_loc), k, v)


def verify_extend(backend: Any, q: torch.Tensor, k: Any, v: Any, layer: Any, forward_batch: Any,
                  save_kv_cache: bool = True) -> torch.Tensor:
    """A TARGET_VERIFY batch's attention: request b's ``n`` draft tokens attend to its ``seq_lens[b]`` committed
    tokens and to the draft tokens its tree mask allows (themselves included)."""
    _check_plain_layer(layer, "speculative verify on torch_native")
    spec = forward_batch.spec_info
    if spec is None:
        raise RuntimeError(f"a TARGET_VERIFY batch without spec_info ({STANDIN})")
    n = int(spec.draft_token_num)
    bs = int(forward_batch.batch_size)
    mask = spec.custom_mask
    seq_lens = forward_batch.seq_lens.tolist()
    full = sum((int(s) + n) * n for s in seq_lens)
    rows_of: list[torch.Tensor] = []  # request b's [n, seq_len + n] visibility, when the mask carries the prefix
    if mask is not None and mask.numel() == bs * n * n:
        tree = mask.reshape(bs, n, n).to(torch.bool)
    elif mask is None or mask.numel() == 0:
        tree = torch.ones(n, n, dtype=torch.bool, device=q.device).tril().expand(bs, n, n)  # a chain
    elif mask.numel() == full:
        # the full layout (build_tree_kernel_efficient's mode 0, and what a 0-step round of the adaptive
        # controller verifies with): per request, n rows of seq_len + n entries, row-major, prefix included
        starts = [0]
        for s in seq_lens:
            starts.append(starts[-1] + (int(s) + n) * n)
        rows_of = [mask[a:b].reshape(n, -1).to(torch.bool) for a, b in itertools.pairwise(starts)]
        tree = torch.stack([r[:, -n:] for r in rows_of])
    else:
        raise NotImplementedError(f"speculative verify on torch_native: a tree mask of {mask.numel()} entries for "
                                  f"{bs} requests of {n} draft tokens (n × n or (seq_len + n) × n per request is "
                                  f"covered by {STANDIN})")
    o = q.new_empty((q.shape[0], layer.tp_q_head_num * layer.v_head_dim)) if layer.qk_head_dim != layer.v_head_dim \
        else torch.empty_like(q)
    _write_kv(backend, layer, forward_batch, k, v, save_kv_cache)
    k_cache = backend.token_to_kv_pool.get_key_buffer(layer.layer_id)
    v_cache = backend.token_to_kv_pool.get_value_buffer(layer.layer_id)
    req_to_token = backend.req_to_token_pool.req_to_token
    q_ = q.view(-1, layer.tp_q_head_num, layer.qk_head_dim).movedim(0, 1)  # [heads, tokens, dim]
    o_ = o.view(-1, layer.tp_q_head_num, layer.v_head_dim)
    gqa = layer.tp_q_head_num != layer.tp_k_head_num
    rows = forward_batch.req_pool_indices.tolist()
    for b in range(bs):
        kv_len = int(seq_lens[b]) + n
        slots = req_to_token[rows[b], :kv_len]
        key = k_cache[slots].movedim(0, 1)
        value = v_cache[slots].movedim(0, 1)
        query = q_[:, b * n:(b + 1) * n]
        if key.dtype != query.dtype:
            key, value = key.to(query.dtype), value.to(query.dtype)
        if rows_of:
            visible = rows_of[b]
        else:
            visible = torch.ones(n, kv_len, dtype=torch.bool, device=q.device)
            visible[:, kv_len - n:] = tree[b]
        out = scaled_dot_product_attention(query.unsqueeze(0), key.unsqueeze(0), value.unsqueeze(0),
                                           attn_mask=visible, scale=layer.scaling, enable_gqa=gqa)
        o_[b * n:(b + 1) * n] = out.squeeze(0).movedim(0, 1)
    return o


def patch_torch_native_backend(module: Any) -> None:
    cls = module.TorchNativeAttnBackend
    if getattr(cls, MARK, False):
        return
    original = cls.forward_extend

    def forward_extend(self: Any, q: Any, k: Any, v: Any, layer: Any, forward_batch: Any, *args: Any,
                       **kwargs: Any) -> Any:
        if forward_batch.forward_mode.is_target_verify():
            return verify_extend(self, q, k, v, layer, forward_batch, *args, **kwargs)
        return original(self, q, k, v, layer, forward_batch, *args, **kwargs)

    forward_extend.__doc__ = f"{original.__doc__ or ''}\n(speculative-verify branch added by {STANDIN})"
    cls.forward_extend = forward_extend
    setattr(cls, MARK, True)


class TorchNativeMultiStepDraftBackend:
    """Multi-step EAGLE draft decode on torch_native, topk 1: draft step i (0-based, one per step but the last)
    writes its KV at the request's slot ``req_to_token[row, seq_len + i]`` and attends to
    ``req_to_token[row, :seq_len + i + 1]``, the same cache rows that the CPU kernel's
    ``build_draft_decode_metadata_cpu`` gives ``IntelAMXMultiStepDraftBackend`` for topk 1."""

    def __init__(self, model_runner: Any, topk: int, speculative_num_steps: int) -> None:
        if topk != 1:
            raise ValueError(f"EAGLE draft trees (--speculative-eagle-topk {topk} with --speculative-num-steps "
                             f"{speculative_num_steps}) are not covered by {STANDIN}: use topk 1, or 1 step")
        from sglang.srt.layers.attention.torch_native_backend import TorchNativeAttnBackend

        class DraftStepBackend(TorchNativeAttnBackend):  # type: ignore[misc,valid-type]
            """One draft step: decode against the committed prefix plus this round's earlier drafts."""

            draft_seq_lens: torch.Tensor | None = None

            def forward_decode(self, q: Any, k: Any, v: Any, layer: Any, forward_batch: Any,
                               save_kv_cache: bool = True, **kwargs: Any) -> Any:
                if self.draft_seq_lens is None:
                    raise RuntimeError(f"a draft decode step before init_forward_metadata ({STANDIN})")
                _check_plain_layer(layer, "EAGLE draft decode on torch_native")
                q = q.reshape(-1, layer.tp_q_head_num * layer.qk_head_dim)
                o = q.new_empty((q.shape[0], layer.tp_q_head_num * layer.v_head_dim)) \
                    if layer.qk_head_dim != layer.v_head_dim else torch.empty_like(q)
                _write_kv(self, layer, forward_batch, k, v, save_kv_cache)
                self._run_sdpa_forward_decode(
                    q.view(-1, layer.tp_q_head_num, layer.qk_head_dim),
                    o.view(-1, layer.tp_q_head_num, layer.v_head_dim),
                    self.token_to_kv_pool.get_key_buffer(layer.layer_id),
                    self.token_to_kv_pool.get_value_buffer(layer.layer_id),
                    self.req_to_token_pool.req_to_token, forward_batch.req_pool_indices, self.draft_seq_lens,
                    None, scaling=layer.scaling, enable_gqa=layer.tp_q_head_num != layer.tp_k_head_num,
                    causal=False, is_cross_attn=False, sliding_window_size=None)
                return o

        self.topk = topk
        self.speculative_num_steps = speculative_num_steps
        self.device = model_runner.device
        self.attn_backends = [DraftStepBackend(model_runner) for _ in range(speculative_num_steps - 1)]

    def init_forward_metadata(self, forward_batch: Any) -> None:
        for step, backend in enumerate(self.attn_backends):
            backend.init_forward_metadata(forward_batch)
            backend.draft_seq_lens = forward_batch.seq_lens + step + 1


def patch_draft_utils(module: Any) -> None:
    cls = module.DraftBackendFactory
    if getattr(cls, MARK, False):
        return
    original = cls._create_backend

    def _create_backend(self: Any, backend_name: str, backend_map: dict[str, Any], error_template: str,
                        *args: Any, **kwargs: Any) -> Any:
        if "torch_native" not in backend_map:
            decode = getattr(backend_map.get("intel_amx"), "__func__", None) is cls._create_intel_amx_decode_backend
            backend_map = {**backend_map, "torch_native": (lambda: torch_native_decode(self)) if decode
                           else (lambda: torch_native_extend(self))}
        return original(self, backend_name, backend_map, error_template, *args, **kwargs)

    def torch_native_extend(factory: Any) -> tuple[str, Any]:
        from sglang.srt.layers.attention.torch_native_backend import TorchNativeAttnBackend

        return "torch_native", TorchNativeAttnBackend(factory.draft_model_runner)

    def torch_native_decode(factory: Any) -> tuple[str, Any]:
        return "torch_native", TorchNativeMultiStepDraftBackend(factory.draft_model_runner, factory.topk,
                                                                factory.speculative_num_steps)

    cls._create_backend = _create_backend
    setattr(cls, MARK, True)

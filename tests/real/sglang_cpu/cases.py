"""Direct cases of the SGLang CPU stand-ins, each a small hand-checked instance of the SGLang 0.5.23 reference
kernel (or code) it replaces; the expected values are worked out by hand from the reference's source (named
in each stand-in's docstring), not computed by the stand-in. Runs in the tier's SGLang venv, with this
folder first on ``PYTHONPATH`` (``sglang_env.environment()``); not collected by the project's pytest, which
has no torch: ``tests/real/test_sglang_standins.py`` runs it and asserts each case.

    python cases.py [--json] [NAME ...]
"""

from __future__ import annotations

import json
import sys
import traceback
import types
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch

CASES: dict[str, Callable[[], None]] = {}


def case(fn: Callable[[], None]) -> Callable[[], None]:
    CASES[fn.__name__] = fn
    return fn


def same(got: torch.Tensor, want: list, what: str) -> None:
    w = torch.tensor(want, dtype=got.dtype)
    if got.shape != w.shape or not torch.equal(got, w):
        raise AssertionError(f"{what}: got {got.tolist()}, want {want}")


# A draft tree of 4 nodes used twice: 0 the root (the bonus token), 1 and 2 its children, 3 a child of 1.
TREE_MASK = [[1, 0, 0, 0], [1, 1, 0, 0], [1, 0, 1, 0], [1, 1, 0, 1]]
CHAIN_MASK = [[1, 0, 0, 0], [1, 1, 0, 0], [1, 1, 1, 0], [1, 1, 1, 1]]


@case
def reconstruct_indices_from_tree_mask() -> None:
    """reconstruct_tree.py::_reconstruct_tree_mask_kernel on a tree and a chain (batch of 2)."""
    from sgl_kernel.speculative import reconstruct_indices_from_tree_mask as f

    mask = torch.tensor([TREE_MASK, CHAIN_MASK], dtype=torch.bool).flatten()
    pos = torch.zeros(8, dtype=torch.int64)
    idx, nxt, sib = (torch.full((2, 4), -7, dtype=torch.int64) for _ in range(3))
    f(mask, torch.tensor([10, 5]), pos, idx, nxt, sib, 2, 4)
    same(pos, [10, 11, 11, 12, 5, 6, 7, 8], "positions")
    same(idx, [[0, 1, 2, 3], [4, 5, 6, 7]], "retrieve_index")
    same(nxt, [[1, 3, -1, -1], [1, 2, 3, -1]], "retrieve_next_token")
    same(sib, [[-1, 2, -1, -1], [-1, -1, -1, -1]], "retrieve_next_sibling")


@case
def assign_extend_cache_locs_cpu() -> None:
    """cache_locs.py::assign_extend_cache_locs: two requests' slot ranges, packed."""
    from sgl_kernel import assign_extend_cache_locs_cpu as f

    table = torch.arange(24, dtype=torch.int32).view(3, 8) + 100
    out = torch.full((5,), -1, dtype=torch.int64)
    f(torch.tensor([2, 0]), table, torch.tensor([1, 3]), torch.tensor([3, 6]), out, 8)
    same(out, [117, 118, 103, 104, 105], "out_cache_loc")


@case
def assign_req_to_token_pool_cpu() -> None:
    """allocation.py::assign_req_to_token_pool: the packed slots written back into the requests' rows."""
    from sgl_kernel import assign_req_to_token_pool_cpu as f

    table = torch.zeros(3, 8, dtype=torch.int32)
    f(torch.tensor([2, 0]), table, torch.tensor([1, 3]), torch.tensor([3, 6]), torch.tensor([7, 8, 9, 10, 11]), 8)
    same(table, [[0, 0, 0, 9, 10, 11, 0, 0], [0] * 8, [0, 7, 8, 0, 0, 0, 0, 0]], "req_to_token")


@case
def assign_draft_cache_locs_contiguous_cpu() -> None:
    """cache_locs.py::assign_draft_cache_locs_contiguous: topk × steps slots from each seq_len on."""
    from sgl_kernel import assign_draft_cache_locs_contiguous_cpu as f

    table = torch.arange(20, dtype=torch.int32).view(2, 10)
    out = torch.full((4,), -1, dtype=torch.int64)
    f(torch.tensor([1, 0]), table, torch.tensor([3, 5]), out, 10, 1, 2)
    same(out, [13, 14, 5, 6], "out_cache_loc")


@case
def verify_tree_greedy_cpu() -> None:
    """spec_tree.py::verify_tree_greedy_kernel_triton: the tree (the target wants node 2, a sibling, then a
    token no child has) and a chain accepted whole."""
    from sgl_kernel import verify_tree_greedy_cpu as f

    predicts = torch.zeros(4, dtype=torch.int32)
    acc = torch.full((1, 3), -1, dtype=torch.int64)
    num = torch.zeros(1, dtype=torch.int32)
    f(predicts=predicts, accept_index=acc, accept_token_num=num, candidates=torch.tensor([[50, 51, 52, 53]]),
      retrive_index=torch.tensor([[0, 1, 2, 3]]), retrive_next_token=torch.tensor([[1, 3, -1, -1]]),
      retrive_next_sibling=torch.tensor([[-1, 2, -1, -1]]), target_predict=torch.tensor([[52, 60, 70, 80]]))
    same(acc, [[0, 2, -1]], "tree accept_index")
    same(num, [1], "tree accept_token_num")
    same(predicts, [52, 0, 70, 0], "tree predicts")
    predicts = torch.zeros(6, dtype=torch.int32)
    acc = torch.full((2, 3), -1, dtype=torch.int64)
    num = torch.zeros(2, dtype=torch.int32)
    f(predicts=predicts, accept_index=acc, accept_token_num=num, candidates=torch.tensor([[5, 6, 7], [5, 6, 7]]),
      retrive_index=torch.tensor([[0, 1, 2], [3, 4, 5]]), retrive_next_token=torch.tensor([[1, 2, -1], [1, 2, -1]]),
      retrive_next_sibling=torch.full((2, 3), -1), target_predict=torch.tensor([[6, 7, 8], [9, 9, 9]]))
    same(acc, [[0, 1, 2], [3, -1, -1]], "chain accept_index")
    same(num, [2, 0], "chain accept_token_num")
    same(predicts, [6, 7, 8, 9, 0, 0], "chain predicts")


@case
def fill_accept_out_cache_loc_cpu() -> None:
    """eagle.py::fill_accept_out_cache_loc: the accepted slots, packed in order."""
    from sgl_kernel import fill_accept_out_cache_loc_cpu as f

    out = torch.full((6,), -1, dtype=torch.int64)
    f(torch.tensor([[0, 2, -1], [4, -1, -1]]), torch.arange(100, 106), out)
    same(out, [100, 102, 104, -1, -1, -1], "accept_out_cache_loc")


@case
def fill_bonus_tokens_cpu() -> None:
    """eagle.py::fill_bonus_tokens: each request's last accepted token."""
    from sgl_kernel import fill_bonus_tokens_cpu as f

    bonus = torch.zeros(2, dtype=torch.int64)
    f(torch.tensor([[1, 2, 3], [4, 5, 6]]), torch.tensor([2, 3]), bonus, 3)
    same(bonus, [2, 6], "bonus_tokens")


@case
def copy_all_layer_kv_cache_cpu() -> None:
    """cache_move.py::copy_all_layer_kv_cache_tiled: slots 0 and 1 swapped in two buffers (reads before
    writes), slot 5 copied to 4; nothing else touched."""
    from sgl_kernel import copy_all_layer_kv_cache_cpu as f

    bufs = [torch.arange(24, dtype=torch.float32).view(6, 4) + 100 * i for i in range(2)]
    want = [b.clone() for b in bufs]
    for w in want:
        w[[0, 1, 4]] = w[[1, 0, 5]].clone()
    ptrs = torch.tensor([b.data_ptr() for b in bufs], dtype=torch.uint64)
    f(ptrs, torch.tensor([16, 16]), torch.tensor([0, 1, 4]), torch.tensor([1, 0, 5]))
    for i, (b, w) in enumerate(zip(bufs, want, strict=True)):
        same(b, w.tolist(), f"buffer {i}")


@case
def build_tree_kernel_efficient_cpu_chain() -> None:
    """spec_tree.py::sgl_build_tree_kernel_efficient_triton, QLEN_ONLY, topk 1 and 3 steps (the worker's
    topk-1 parents [-1, 0, 1] and selected [0, 1, 2]): a chain."""
    from sgl_kernel import build_tree_kernel_efficient_cpu as f

    mask = torch.ones(16, dtype=torch.bool)
    pos = torch.empty(4, dtype=torch.int64)
    idx, nxt, sib = torch.full((3, 1, 4), -1, dtype=torch.int64)
    f(torch.tensor([[-1, 0, 1]]), torch.tensor([[0, 1, 2]]), torch.tensor([7]), mask, pos, idx, nxt, sib, 1, 3, 4, 1)
    same(mask.view(4, 4).int(), CHAIN_MASK, "tree_mask")
    same(pos, [7, 8, 9, 10], "positions")
    same(idx, [[0, 1, 2, 3]], "retrieve_index")
    same(nxt, [[1, 2, 3, -1]], "retrieve_next_token")
    same(sib, [[-1, -1, -1, -1]], "retrieve_next_sibling")


@case
def build_tree_kernel_efficient_cpu_tree() -> None:
    """The same kernel, FULL_MASK, topk 2 and 2 steps, batch of 2 (committed lengths 2 and 1): parents
    [-1, 0, 1], selected score indices [0, 1, 2] (two children of the root, then the first child's first
    child): the tree of the reconstruct case; committed-prefix columns left as they came (True)."""
    from sgl_kernel import build_tree_kernel_efficient_cpu as f

    mask = torch.ones(3 * 4 + 2 * 16, dtype=torch.bool)
    pos = torch.empty(8, dtype=torch.int64)
    idx, nxt, sib = torch.full((3, 2, 4), -1, dtype=torch.int64)
    f(torch.tensor([[-1, 0, 1], [-1, 0, 1]]), torch.tensor([[0, 1, 2], [0, 1, 2]]), torch.tensor([2, 1]), mask, pos,
      idx, nxt, sib, 2, 2, 4, 0)
    want = [[1, 1, *row] for row in TREE_MASK] + [[1, *row] for row in TREE_MASK]
    same(mask.int(), [x for row in want for x in row], "tree_mask")
    same(pos, [2, 3, 3, 4, 1, 2, 2, 3], "positions")
    same(idx, [[0, 1, 2, 3], [4, 5, 6, 7]], "retrieve_index")
    same(nxt, [[1, 3, -1, -1]] * 2, "retrieve_next_token")
    same(sib, [[-1, 2, -1, -1]] * 2, "retrieve_next_sibling")


@case
def uncovered_calls_raise_with_their_names() -> None:
    """Anything the stand-ins do not provide imports, and raises naming itself when called; the submodules
    SGLang guards with ``try/except ImportError`` do not import; no AMX op."""
    import sgl_kernel
    import sgl_kernel.mamba
    import torchvision.transforms as T
    from torchvision.transforms.functional import InterpolationMode

    for fn, name in ((lambda: sgl_kernel.fused_add_rmsnorm_cpu(1), "sgl_kernel.fused_add_rmsnorm_cpu"),
                     (lambda: sgl_kernel.mamba.causal_conv1d_fn_cpu(), "sgl_kernel.mamba.causal_conv1d_fn_cpu"),
                     (lambda: T.Resize((4, 4), interpolation=InterpolationMode.BICUBIC),
                      "torchvision.transforms.Resize"),
                     (lambda: sgl_kernel.build_tree_kernel_efficient_cpu(*[torch.zeros(1)] * 8, 1, 1, 1, 2),
                      "sgl_kernel.build_tree_kernel_efficient_cpu")):
        try:
            fn()
        except NotImplementedError as exc:
            if name not in str(exc):
                raise AssertionError(f"{name}: raised without its name: {exc}") from None
        else:
            raise AssertionError(f"{name}: no error")
    for mod in ("sgl_kernel.flash_attn", "sgl_kernel.kvcacheio", "sgl_kernel.scalar_type"):
        try:
            __import__(mod)
        except ModuleNotFoundError:
            pass
        else:
            raise AssertionError(f"{mod} imported")
    if hasattr(torch.ops.sgl_kernel, "convert_weight_packed"):
        raise AssertionError("torch.ops.sgl_kernel.convert_weight_packed exists: SGLang would pick intel_amx")


def _attention_by_hand(q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, visible: list[int],
                       scale: float) -> torch.Tensor:
    """One query token, one head: softmax over the visible key positions, in float64."""
    s = torch.tensor([float(q.double() @ keys[j].double()) * scale for j in visible], dtype=torch.float64)
    w = torch.softmax(s, 0)
    return sum(w[i] * values[j].double() for i, j in enumerate(visible))


def _fake_backend(heads: int, kv_heads: int, dim: int, slots: int, req_to_token: torch.Tensor) -> tuple:
    g = torch.Generator().manual_seed(0)
    k_cache = torch.randn(slots, kv_heads, dim, generator=g)
    v_cache = torch.randn(slots, kv_heads, dim, generator=g)
    pool = types.SimpleNamespace(get_key_buffer=lambda _i: k_cache, get_value_buffer=lambda _i: v_cache,
                                 set_kv_buffer=lambda *a, **k: None)
    backend = types.SimpleNamespace(token_to_kv_pool=pool, swa_out_cache_loc=None,
                                    req_to_token_pool=types.SimpleNamespace(req_to_token=req_to_token))
    layer = types.SimpleNamespace(tp_q_head_num=heads, tp_k_head_num=kv_heads, qk_head_dim=dim, v_head_dim=dim,
                                  layer_id=0, scaling=dim ** -0.5, is_cross_attention=False, sliding_window_size=-1)
    return backend, layer, k_cache, v_cache, g


@case
def torch_native_verify_branch() -> None:
    """The verify branch patched into torch_native_backend.py::TorchNativeAttnBackend.forward_extend, against
    attention worked out token by token as intel_amx_backend.py::_build_extend_metadata specifies it: request
    b's n draft tokens (slots after its seq_lens[b] committed ones) see the whole committed prefix and the
    draft tokens their tree mask allows. Two requests (the tree; a chain) of 4 draft tokens, GQA 4:2."""
    import sglang_cpu_patches

    heads, kv_heads, dim, n = 4, 2, 8, 4
    req_to_token = torch.tensor([[9, 3, 5, 11, 12, 13, 14, 0], [1, 2, 4, 6, 7, 8, 10, 15]])
    backend, layer, k_cache, v_cache, g = _fake_backend(heads, kv_heads, dim, 16, req_to_token)
    seq_lens = [3, 2]
    masks = [TREE_MASK, CHAIN_MASK]
    spec = types.SimpleNamespace(draft_token_num=n, custom_mask=torch.tensor(masks, dtype=torch.bool).flatten())
    fb = types.SimpleNamespace(spec_info=spec, batch_size=2, seq_lens=torch.tensor(seq_lens),
                               req_pool_indices=torch.tensor([1, 0]), out_cache_loc=None)
    q = torch.randn(2 * n, heads * dim, generator=g)
    out = sglang_cpu_patches.verify_extend(backend, q, None, None, layer, fb).view(2 * n, heads, dim)
    for b, row in enumerate((1, 0)):
        for i in range(n):
            visible = [int(s) for s in req_to_token[row, :seq_lens[b]]] + \
                [int(req_to_token[row, seq_lens[b] + j]) for j in range(n) if masks[b][i][j]]
            for h in range(heads):
                want = _attention_by_hand(q[b * n + i].view(heads, dim)[h], k_cache[:, h // 2], v_cache[:, h // 2],
                                          visible, layer.scaling)
                if not torch.allclose(out[b * n + i, h].double(), want, atol=1e-5):
                    raise AssertionError(f"request {b}, draft token {i}, head {h}: {out[b * n + i, h]} != {want}")


@case
def torch_native_draft_decode_steps() -> None:
    """The multi-step draft container patched into draft_utils.py's factory: draft step i of a request with
    seq_len committed tokens attends to req_to_token[row, :seq_len + i + 1] (the topk-1 rows of
    intel_amx_backend.IntelAMXMultiStepDraftBackend); topk > 1 is refused naming the stand-in."""
    import sglang_cpu_patches

    try:
        sglang_cpu_patches.TorchNativeMultiStepDraftBackend(types.SimpleNamespace(), 2, 3)
    except ValueError as exc:
        if "sglang_cpu_patches" not in str(exc):
            raise AssertionError(f"topk 2 refused without naming the stand-in: {exc}") from None
    else:
        raise AssertionError("topk 2 with 3 steps was accepted")
    heads, kv_heads, dim = 2, 1, 8
    req_to_token = torch.tensor([[4, 7, 1, 2, 9, 3, 0, 0], [5, 6, 8, 10, 11, 12, 0, 0]])
    backend, layer, k_cache, v_cache, g = _fake_backend(heads, kv_heads, dim, 16, req_to_token)
    runner = types.SimpleNamespace(device="cpu", req_to_token_pool=backend.req_to_token_pool,
                                   token_to_kv_pool=backend.token_to_kv_pool)
    container = sglang_cpu_patches.TorchNativeMultiStepDraftBackend(runner, 1, 3)
    seq_lens = [3, 2]
    fb = types.SimpleNamespace(seq_lens=torch.tensor(seq_lens), req_pool_indices=torch.tensor([0, 1]),
                               out_cache_loc=torch.tensor([2, 8]), encoder_lens=None)
    container.init_forward_metadata(fb)
    if len(container.attn_backends) != 2:
        raise AssertionError(f"{len(container.attn_backends)} step backends for 3 steps, want 2")
    for step, child in enumerate(container.attn_backends):
        q = torch.randn(2, heads * dim, generator=g)
        out = child.forward_decode(q, None, None, layer, fb).view(2, heads, dim)
        for b in range(2):
            visible = [int(s) for s in req_to_token[b, :seq_lens[b] + step + 1]]
            for h in range(heads):
                want = _attention_by_hand(q[b].view(heads, dim)[h], k_cache[:, 0], v_cache[:, 0], visible,
                                          layer.scaling)
                if not torch.allclose(out[b, h].double(), want, atol=1e-5):
                    raise AssertionError(f"step {step}, request {b}, head {h}: {out[b, h]} != {want}")


@case
def import_hook_patches_sglang() -> None:
    """sitecustomize's hook: importing SGLang's modules patches them (the wheel itself is unchanged)."""
    from sglang.srt.layers.attention import torch_native_backend
    from sglang.srt.speculative import draft_utils

    for cls in (torch_native_backend.TorchNativeAttnBackend, draft_utils.DraftBackendFactory):
        if not getattr(cls, "_specwatch_cpu_patched", False):
            raise AssertionError(f"{cls.__qualname__} was not patched: is sglang_cpu first on PYTHONPATH?")
    source = Path(torch_native_backend.__file__).read_text()
    if "specwatch" in source:
        raise AssertionError("the installed torch_native_backend.py was edited")


def main(argv: list[str]) -> int:
    as_json = "--json" in argv
    names = [a for a in argv if not a.startswith("--")] or list(CASES)
    results = []
    for name in names:
        try:
            CASES[name]()
        except Exception as exc:  # every failure is reported, with where it happened
            tb = traceback.extract_tb(exc.__traceback__)[-1]
            results.append({"name": name, "ok": False, "error": f"{type(exc).__name__}: {exc} "
                            f"({Path(tb.filename).name}:{tb.lineno})"})
        else:
            results.append({"name": name, "ok": True, "error": ""})
    if as_json:
        print(json.dumps(results))
    else:
        for r in results:
            print(f"{'ok  ' if r['ok'] else 'FAIL'} {r['name']} {r['error']}")
    return 0 if all(r["ok"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

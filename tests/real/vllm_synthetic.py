"""Forced acceptance on the CPU vLLM: the tier's patch that lets ``rejection_sample_method: "synthetic"`` serve.

vLLM 0.32's ``--speculative-config`` keys ``rejection_sample_method: "synthetic"`` and
``synthetic_acceptance_rates`` (per-position unconditional rates) keep the engine's real costs and set its
acceptance to a known value. The CPU build refuses it at start: its stand-ins for the two rejection kernels
(``vllm/utils/cpu_triton_utils.py``, ``_rejection_greedy_sample_kernel_impl`` and
``_rejection_random_sample_kernel_impl``) assert ``not SYNTHETIC_MODE``, and the warm-up calls the random one
even for greedy traffic. This patch replaces each assertion with the Triton kernels' synthetic branch
(``vllm/v1/sample/rejection_sampler.py``, ``rejection_greedy_sample_kernel`` and
``rejection_random_sample_kernel``) in plain Python over the step's few tokens: the draft token at position p
is accepted while ``uniform < conditional_rate[p]`` and the draft id is not padding (-1), else the position
holds the target's token (greedy: its argmax; random: the recovered token) and the request stops there; the
bonus token follows when nothing was rejected. Each kernel handles only its own requests (greedy or not),
as the Triton ones do. Without ``SYNTHETIC_MODE`` nothing changes.

Applied like the #55005 fix in ``vllm_env.py``: idempotent (a marker says it is in), and it refuses, naming
the file, to touch code that is not the code it was written for.
"""

from __future__ import annotations

from pathlib import Path

MARK = "# specwatch real tier: synthetic acceptance on CPU"
ASSERT = '    assert not SYNTHETIC_MODE, "Synthetic acceptance not supported with CPU sampling"\n'
TAIL = """    orig_dtype = output_token_ids.dtype
    output_token_ids_i64 = _ensure_int64(output_token_ids)
    torch.ops._C.{kernel}(
"""
GREEDY_CALL = """    if SYNTHETIC_MODE:
        _specwatch_synthetic_sample(
            output_token_ids, cu_num_draft_tokens, draft_token_ids, target_argmax, bonus_token_ids,
            None if is_greedy is None else is_greedy.tolist(), uniform_probs, synthetic_conditional_rates,
        )
        return
"""
RANDOM_CALL = """    if SYNTHETIC_MODE:
        _specwatch_synthetic_sample(
            output_token_ids, cu_num_draft_tokens, draft_token_ids, recovered_token_ids, bonus_token_ids,
            [not g for g in is_greedy.tolist()], uniform_probs, synthetic_conditional_rates,
        )
        return
"""
SAMPLER = f'''

{MARK}: the synthetic branch of vLLM's
# Triton rejection kernels (rejection_sampler.py), in plain Python over the step's few draft tokens.
def _specwatch_synthetic_sample(
    output_token_ids, cu_num_draft_tokens, draft_token_ids, fallback_token_ids, bonus_token_ids,
    rows, uniform_probs, conditional_rates,
):
    ends = cu_num_draft_tokens.tolist()
    drafts = draft_token_ids.tolist()
    fallback = fallback_token_ids.reshape(-1).tolist()
    bonus = bonus_token_ids.reshape(-1).tolist()
    uniform = uniform_probs.tolist()
    rates = conditional_rates.tolist()
    out = output_token_ids.tolist()
    start = 0
    for req, end in enumerate(ends):
        if rows is None or rows[req]:
            rejected = False
            for pos in range(end - start):
                t = start + pos
                accepted = uniform[t] < rates[pos] and drafts[t] >= 0
                out[req][pos] = drafts[t] if accepted else fallback[t]
                if not accepted:
                    rejected = True
                    break
            if not rejected:
                out[req][end - start] = bonus[req]
        start = end
    output_token_ids.copy_(torch.tensor(out, dtype=output_token_ids.dtype))
'''


class PatchError(RuntimeError):
    """The installed vLLM is not the code this patch was written for; the message names the file."""


def patched(text: str, path: str) -> str | None:
    """The patched source, or ``None`` when the marker says it is in already; ``PatchError`` naming ``path``
    when either function does not look as expected (nothing is changed then)."""
    if MARK in text:
        return None
    for kernel, call in (("rejection_greedy_sample_kernel_impl", GREEDY_CALL),
                         ("rejection_random_sample_kernel_impl", RANDOM_CALL)):
        original = ASSERT + TAIL.format(kernel=kernel)
        if text.count(original) != 1:
            raise PatchError(f"synthetic acceptance patch: {path}: the assertion before "
                             f"torch.ops._C.{kernel} does not look as expected; refusing to change it")
        text = text.replace(original, call + TAIL.format(kernel=kernel))
    return text + SAMPLER


def apply(site_packages: Path) -> str:
    """Patch the venv's vLLM once: 'applied' or 'already applied'; ``PatchError`` naming the file otherwise."""
    target = site_packages / "vllm" / "utils" / "cpu_triton_utils.py"
    if not target.exists():
        raise PatchError(f"synthetic acceptance patch: {target} does not exist")
    new = patched(target.read_text(encoding="utf-8"), str(target))
    if new is None:
        return "already applied"
    target.write_text(new, encoding="utf-8")
    return "applied"

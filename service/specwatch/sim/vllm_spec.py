"""vLLM's ``--speculative-config`` as the simulator takes it: the JSON checked as vLLM 0.32/0.33 check it (a
key that is no ``SpeculativeConfig`` field stops it with pydantic's error), the method settled as vLLM settles
it, and what is simulated (method, ``num_speculative_tokens``, the per-batch-size schedule) or accepted and
ignored. Pure."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from . import model

# method -> draft cost: lookup proposers run no model
# (0.33.0's methods; medusa and mlp_speculator were dropped in 0.33.0)
METHODS = {"ngram": 0.0, "ngram_gpu": 0.0, "suffix": 0.0, "eagle": 1.0, "eagle3": 1.0, "mtp": 1.0,
           "draft_model": 1.0, "dflash": 1.0, "dspark": 1.0}
# the methods 0.33.0 keeps a per-batch-size schedule for on Model Runner V1 (config/vllm.py); others drop it
SCHEDULE_METHODS = ("ngram", "eagle", "eagle3", "mtp", "draft_model", "dflash")
SCHEDULE_KEY = "num_speculative_tokens_per_batch_size"
SIMULATED_KEYS = ("method", "num_speculative_tokens", SCHEDULE_KEY)
# SpeculativeConfig's fields (vllm/config/speculative.py: 0.32.0 :386-610, 0.33.0 :407-660). It is a pydantic
# dataclass with extra="forbid" (@config, config/utils.py:70-71): any other key stops the server with a
# validation error
FIELDS_0_32 = frozenset({
    "enforce_eager", "num_speculative_tokens", "model", "method", "draft_tensor_parallel_size",
    "tensor_parallel_size", "quantization", "moe_backend", "attention_backend", "kv_cache_dtype", "max_model_len",
    "revision", "code_revision", "index_share_for_mtp_iteration", "disable_padded_drafter_batch",
    "disable_eagle_block_drop", "use_local_argmax_reduction", "use_heterogeneous_vocab", "prompt_lookup_max",
    "prompt_lookup_min", "parallel_drafting", "target_model_config", "target_parallel_config", SCHEDULE_KEY,
    "draft_model_config", "draft_parallel_config", "suffix_decoding_max_tree_depth",
    "suffix_decoding_max_cached_requests", "suffix_decoding_max_spec_factor", "suffix_decoding_min_token_prob",
    "draft_load_config", "rejection_sample_method", "synthetic_acceptance_rates", "synthetic_acceptance_length",
    "enable_adaptive_verification", "draft_sample_method", "dspark_draft_topk"})
FIELDS_NEW_IN_0_33 = frozenset({"disable_lookahead_block_hashes", "draft_lm_head_quantization", "xpress_topc",
                                "fly_window_size", "fly_entropy_threshold", "fly_entropy_top_k"})
SPEC_FIELDS = FIELDS_0_32 | FIELDS_NEW_IN_0_33
# fields that tune a real drafter but not the simulated timing: accepted, ignored with a notice
IGNORED_KEYS = frozenset({
    "model", "prompt_lookup_max", "prompt_lookup_min", "draft_tensor_parallel_size", "max_model_len",
    "quantization", "revision", "code_revision", "disable_padded_drafter_batch", "rejection_sample_method",
    "draft_sample_method", "suffix_decoding_max_tree_depth", "suffix_decoding_max_cached_requests",
    "suffix_decoding_max_spec_factor", "suffix_decoding_min_token_prob", "enforce_eager"})
MAX_SPEC_TOKENS = 32


class SpecConfigError(ValueError):
    pass


@dataclass(frozen=True, slots=True)
class VLLMSpec:
    spec: model.SpecConfig  # its algorithm: the method vLLM settles on (``vllm_method``)
    draft_cost: float
    ignored: list[str]
    schedule: object = None  # num_speculative_tokens_per_batch_size as given (validated against max_num_seqs)
    replaced: str = ""  # a *_mtp method given, which vLLM replaces with mtp (and says so)


def vllm_method(method: str | None, model_name: object) -> str:
    """The method vLLM runs, as ``SpeculativeConfig.__post_init__`` settles it (0.33.0 config/speculative.py:
    1236-1250, 1432-1473): none given is ``custom_class`` for a dotted import path, ``ngram`` for the model
    ``ngram``/``[ngram]``, else ``draft_model``; every ``*_mtp`` is ``mtp``; a model-based method other than
    eagle, eagle3, dflash and dspark takes the one its draft model's name says."""
    name = model_name if isinstance(model_name, str) else None
    if method is None:
        parts = (name or "").split(".")
        if (name is not None and "/" not in name and not name.startswith(("http://", "https://", "file://"))
                and len(parts) >= 2 and all(p.isidentifier() for p in parts)):
            return "custom_class"
        method = "ngram" if name in ("ngram", "[ngram]") else "draft_model"
    method = "mtp" if method.endswith("_mtp") else "ngram" if method == "[ngram]" else method
    if name is None or method in ("ngram", "ngram_gpu", "suffix", "eagle", "eagle3", "dflash", "dspark"):
        return method
    lowered = name.lower()
    return next((m for word, m in (("eagle-", "eagle"), ("eagle3", "eagle3"), ("dflash", "dflash"),
                                   ("dspark", "dspark")) if word in lowered), method)


def spec_from_config(raw: str | None) -> VLLMSpec:
    """vLLM's ``--speculative-config`` JSON → the simulated config, its draft cost, the ignored keys and the
    per-batch-size schedule."""
    if raw is None:
        return VLLMSpec(model.SpecConfig(), 1.0, [])
    try:
        cfg = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise SpecConfigError(f"--speculative-config: not valid JSON ({exc})") from None
    if not isinstance(cfg, dict):
        raise SpecConfigError("--speculative-config: must be a JSON object")
    cfg = {k.replace("-", "_"): v for k, v in cfg.items()}  # as vLLM does (engine/arg_utils.py:2086-2088)
    extra = [k for k in cfg if k not in SPEC_FIELDS]
    if extra:
        raise SpecConfigError("--speculative-config: " + validation_error(extra, cfg))
    unknown = sorted(k for k in cfg if k not in SIMULATED_KEYS and k not in IGNORED_KEYS)
    if unknown:
        raise SpecConfigError(f"--speculative-config: key {unknown[0]!r} cannot be simulated (simulated: "
                              f"{', '.join(SIMULATED_KEYS)}; accepted and ignored: {', '.join(sorted(IGNORED_KEYS))})")
    given = cfg.get("method")
    if (given is None and not cfg.get("model")) or (given is not None and not isinstance(given, str)):
        raise SpecConfigError("--speculative-config: key 'method' is required (e.g. \"ngram\", \"eagle3\", \"mtp\")")
    if isinstance(given, str) and ("mtp" if given.endswith("_mtp") else given) not in METHODS:
        raise SpecConfigError(f"--speculative-config: key 'method': {given!r} is not one of "
                              f"{', '.join(sorted(METHODS))} (or a *_mtp method)")
    method = vllm_method(given, cfg.get("model"))
    if method not in METHODS:
        raise SpecConfigError(f"--speculative-config: a {method} proposer cannot be simulated")
    k = cfg.get("num_speculative_tokens")
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= MAX_SPEC_TOKENS:
        raise SpecConfigError(f"--speculative-config: key 'num_speculative_tokens' must be an integer from 1 to "
                              f"{MAX_SPEC_TOKENS}, got {k!r}")
    ignored = sorted(key for key in cfg if key in IGNORED_KEYS)
    replaced = given if isinstance(given, str) and given.endswith("_mtp") else ""
    return VLLMSpec(model.SpecConfig(algorithm=method, num_steps=k, topk=1, num_draft_tokens=k + 1), METHODS[method],
                    ignored, cfg.get(SCHEDULE_KEY), replaced)


def validation_error(extra: list[str], cfg: dict[str, Any]) -> str:
    """pydantic's error for keyword arguments a forbid-extra dataclass has no field for, as vLLM stops with it."""
    n = len(extra)
    lines = [f"{n} validation error{'s' if n > 1 else ''} for SpeculativeConfig"]
    for k in extra:
        lines += [k, f"  Unexpected keyword argument [type=unexpected_keyword_argument, input_value={cfg[k]!r}, "
                     f"input_type={type(cfg[k]).__name__}]"]
    return "\n".join(lines)

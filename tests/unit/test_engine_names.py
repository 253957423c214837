"""Every engine flag, config key, variable and metric specwatch names anywhere (README, docs, runbooks, alert
rules, dashboards, and the advice it prints) is one the engine really has, in the version it is said to
apply to. ``KNOWN`` is the checked list, each with where it was read (the released wheels' source, as the
project's engine reference records it; vLLM's names are also checked against the installed wheel in the
real tier, ``tests/real/test_vllm_names.py``). A name that is not in it fails here until someone checks it."""

from __future__ import annotations

import re
from pathlib import Path

from specwatch.analysis import engine_flags as ef
from specwatch.analysis.engine_flags import ServerSetup

ROOT = Path(__file__).resolve().parents[2]
NAME = re.compile(r"--speculative-[a-z-]+|--max-running-requests|--max-queued-requests|--max-num-seqs"
                  r"|--cuda-graph-bs(?:-decode|-prefill)?(?![\w-])"
                  r"|--per-request-spec-decode-metrics|--enable-per-request-metrics|--disable-log-stats"
                  r"|--decode-log-interval|--enable-metrics|num_speculative_tokens[a-z_]*|VLLM_[A-Z0-9_]+"
                  r"|sglang:[a-z_]+(?![\w.])|vllm:[a-z_]+(?![\w.])|speculative_disable_by_batch_size|enable_adaptive_verification"
                  r"|candidate_steps")
# name → (engine, versions it applies to, where it is defined)
KNOWN = {
    "--speculative-config": ("vLLM", "all V1", "engine/arg_utils.py; the whole SpeculativeConfig as JSON"),
    "num_speculative_tokens": ("vLLM", "all V1", "config/speculative.py; > 0, the maximum k under a schedule"),
    "num_speculative_tokens_per_batch_size": ("vLLM", ">= 0.24.0", "config/speculative.py; [[lo, hi, k], ...]"),
    "VLLM_LOG_STATS_INTERVAL": ("vLLM", "all V1", "envs.py; seconds between stats lines, default 10"),
    "VLLM_USE_V2_MODEL_RUNNER": ("vLLM", ">= 0.24.0", "envs.py; keeps full CUDA graphs under a schedule"),
    "--max-num-seqs": ("vLLM", "all", "engine/arg_utils.py; the batch cap"),
    "--kv-cache-memory-bytes": ("vLLM", "0.32.0", "v1/worker/cpu_worker.py:215 on CPU; VLLM_CPU_KVCACHE_SPACE, when "
                                "set, overrides it (platforms/cpu.py:324)"),
    "VLLM_CPU_KVCACHE_SPACE": ("vLLM", "0.32.0", "envs.py:887; whole GiB, the KV cache on CPU; overrides "
                               "--kv-cache-memory-bytes (platforms/cpu.py:324)"),
    "--per-request-spec-decode-metrics": ("vLLM", ">= 0.32.0", "engine/arg_utils.py; none|summary|detailed"),
    "--disable-log-stats": ("vLLM", "all", "engine/arg_utils.py"),
    "speculative_disable_by_batch_size": ("vLLM", "V0 only (gone)", "named only as refused / gone"),
    "vllm:spec_decode_num_accepted_tokens_per_pos_total": ("vLLM", "V1", "v1/spec_decode/metrics.py"),
    "vllm:spec_decode_": ("vLLM", "V1", "the v1/spec_decode/metrics.py counter family"),
    "vllm:num_requests_running": ("vLLM", "V1", "v1/metrics/loggers.py"),
    "vllm:num_requests_waiting": ("vLLM", "V1", "v1/metrics/loggers.py:538 (0.33.0); the server_queueing check"),
    "vllm:generation_tokens_total": ("vLLM", "V1", "v1/metrics/loggers.py"),
    "--speculative-algorithm": ("SGLang", "all", "server_args; EAGLE, EAGLE3, NGRAM, ..."),
    "--speculative-num-steps": ("SGLang", "all", "server_args"),
    "--speculative-eagle-topk": ("SGLang", "all", "server_args"),
    "--speculative-num-draft-tokens": ("SGLang", "all", "server_args; forced to steps + 1 at topk 1"),
    "--speculative-draft-model-path": ("SGLang", "all", "server_args"),
    "--speculative-draft-model": ("SGLang", ">= 0.5.2", "arg_groups/fields/spec.py:40 (0.5.23); an alias of "
                                  "--speculative-draft-model-path"),
    "--speculative-ngram-min-bfs-breadth": ("SGLang", "0.5.x", "arg_groups/fields/spec.py:252 (0.5.23); NGRAM"),
    "--speculative-ngram-capacity": ("SGLang", "0.5.x", "arg_groups/fields/spec.py:268 (0.5.23); NGRAM's trie, "
                                     "10 million nodes by default, allocated at start (ngram_worker.py:118)"),
    "--cuda-graph-bs-prefill": ("SGLang", ">= 0.5.14", "arg_groups/fields/exec_.py:644 (0.5.23); the prefill "
                                "CUDA-graph batch sizes"),
    "--speculative-adaptive": ("SGLang", ">= 0.5.11", "adaptive_spec_params.py; EAGLE/EAGLE3, topk 1"),
    "--speculative-adaptive-config": ("SGLang", ">= 0.5.11 (slots 0.5.13, 0 steps 0.5.14)", "adaptive_spec_params.py"),
    "candidate_steps": ("SGLang", ">= 0.5.13", "the adaptive config's per-slot key"),
    "--max-running-requests": ("SGLang", "all", "server_args; caps the batch, queues the rest locally"),
    "--max-queued-requests": ("SGLang", "0.5.x", "server_args; refuse past a queue length"),
    "--cuda-graph-bs-decode": ("SGLang", ">= 0.5.14", "arg_groups/fields/exec_.py:640 (0.5.23); the decode "
                               "CUDA-graph batch sizes, and the only list the adaptive router pads to"),
    # <= 0.5.13 the flag; 0.5.14-0.5.19 a deprecated alias of --cuda-graph-bs-decode (0.5.19 server_args.py:3937);
    # from 0.5.20 argparse stops: "ambiguous option: --cuda-graph-bs could match --cuda-graph-bs-decode, ..."
    "--cuda-graph-bs": ("SGLang", "<= 0.5.19", "named only as refused from 0.5.20"),
    "--decode-log-interval": ("SGLang", "all", "server_args"),
    "--enable-metrics": ("SGLang", "all", "server_args; /metrics"),
    "sglang:spec_num_steps": ("SGLang", ">= 0.5.13", "metrics_collector.py; the running step count"),
    "sglang:num_running_reqs": ("SGLang", "all", "metrics_collector.py"),
    "sglang:num_queue_reqs": ("SGLang", ">= 0.4.1", "metrics_collector.py; the server_queueing check"),
    "sglang:spec_accept_length": ("SGLang", ">= 0.4.1.post7", "metrics_collector.py; the last decode-log window's"),
    "sglang:spec_verify_calls_total": ("SGLang", ">= 0.5.13", "metrics_collector.py; sum of finished spec_verify_ct"),
    "sglang:generation_tokens_total": ("SGLang", "all", "metrics_collector.py"),
    "--speculative-ngram-max-bfs-breadth": ("SGLang", "0.5.x", "arg_groups/fields/spec.py:256 (0.5.23); NGRAM's "
                                            "tree breadth, reported as speculative_eagle_topk"),
}
SOURCES = ["README.md", "docs/*.md", "deploy/**/*.yml", "deploy/**/*.yaml", "grafana/*.json"]


def named_in(text: str) -> set[str]:
    return set(NAME.findall(text))


def test_every_engine_name_in_the_docs_rules_and_dashboards_is_known():
    found: dict[str, set[str]] = {}
    for pattern in SOURCES:
        for path in sorted(ROOT.glob(pattern)):
            for name in named_in(path.read_text(encoding="utf-8")):
                found.setdefault(name, set()).add(str(path.relative_to(ROOT)))
    unknown = {n: sorted(where) for n, where in found.items() if n not in KNOWN}
    assert not unknown, unknown
    assert "num_speculative_tokens_per_batch_size" in found and "--speculative-adaptive-config" in found


def test_every_name_the_advice_prints_is_known():
    ranges = [(1, 8, 3), (9, 64, 0)]
    printed = []
    for setup in (ServerSetup("vllm", "0.32.0", {"method": "ngram", "num_speculative_tokens": 3}),
                  ServerSetup("vllm", "0.33.0"), ServerSetup("vllm", "0.23.0"),
                  ServerSetup("sglang", "0.5.23", algorithm="EAGLE3", topk=1),
                  ServerSetup("sglang", "0.5.23", algorithm="NGRAM", topk=1), ServerSetup("unknown")):
        printed += [a.text() for a in ef.advise(ranges, setup, "out")]
    names = named_in("\n".join(printed)) | {name for _, name in ef.NAMES}
    assert names - set(KNOWN) == set(), names - set(KNOWN)
    assert {"--speculative-adaptive-config", "num_speculative_tokens_per_batch_size"} <= names

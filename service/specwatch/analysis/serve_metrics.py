"""``vllm bench serve``'s numbers from specwatch's records: its ``calculate_metrics`` (vLLM 0.32,
``vllm/benchmarks/serve.py``) applied to what its request function would have measured. Analysis stage; pure.

What vLLM's request function measures, and the record field that holds the same instant:
- start ``st``: before the POST (``sent_ns``); a request is a success only if a chunk with ``choices`` came;
- ``ttft``: first such chunk - ``st`` (``chunk_ns[0] - sent_ns``);
- ``itl``: the gap before every later chunk, one value per chunk however many tokens it carried (``chunk_ns``
  differences; specwatch's own per-token ITL splits each gap over its tokens);
- ``latency`` (e2el): last chunk - ``st``;
- output tokens: the usage's ``completion_tokens`` (1 when absent and no tokenizer);
- TPOT: (latency - ttft) / (output tokens - 1), only for requests of more than one token;
- ``duration``: the whole measured phase (here: the first intended start to the last request's end).
Statistics are numpy's: mean, population std, median, linear-interpolated percentiles; 0.0 over no value.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..records import RequestRecord, Schedule
from ..results import ServeMetrics

MS = 1000.0


def _stats(name: str, seconds: Sequence[float] | np.ndarray) -> dict[str, float]:
    v = np.asarray(seconds, dtype=np.float64) if len(seconds) else np.zeros(1)  # vLLM: np.mean(x or 0)
    return {f"mean_{name}_ms": float(np.mean(v)) * MS, f"median_{name}_ms": float(np.median(v)) * MS,
            f"std_{name}_ms": float(np.std(v)) * MS, f"p99_{name}_ms": float(np.percentile(v, 99)) * MS}


def duration_s(measured: Sequence[RequestRecord]) -> float:
    if not measured:
        return 0.0
    return (max(r.done_ns for r in measured) - min(r.intended_ns for r in measured)) / 1e9


def serve_metrics(measured: Sequence[RequestRecord], schedule: Schedule) -> ServeMetrics:
    """``measured``: the run's records without the warm-up."""
    done = [r for r in measured if r.ok and r.chunk_ns]
    out_lens = [r.output_tokens or 1 for r in done]
    ttft = [(r.chunk_ns[0] - r.sent_ns) / 1e9 for r in done]
    e2el = [(r.chunk_ns[-1] - r.sent_ns) / 1e9 for r in done]
    tpot = [(e - t) / (n - 1) for e, t, n in zip(e2el, ttft, out_lens, strict=True) if n > 1]
    gaps = [np.diff(np.asarray(r.chunk_ns, dtype=np.int64)) for r in done if len(r.chunk_ns) > 1]
    itl = np.concatenate(gaps) / 1e9 if gaps else np.zeros(0)
    dur = duration_s(measured)
    n_in, n_out = sum(r.prompt_tokens for r in done), sum(out_lens)

    def per_s(x: float) -> float:
        return x / dur if dur > 0 else 0.0

    return ServeMetrics(
        duration=dur, completed=len(done), failed=len(measured) - len(done), total_input_tokens=n_in,
        total_output_tokens=n_out, request_throughput=per_s(len(done)), output_throughput=per_s(n_out),
        total_token_throughput=per_s(n_in + n_out) if all(r.prompt_tokens > 0 for r in done) else None,
        **_stats("ttft", ttft), **_stats("tpot", tpot), **_stats("itl", itl), **_stats("e2el", e2el),
        num_prompts=schedule.num_prompts or len(measured), request_rate=schedule.request_rate,
        burstiness=schedule.burstiness, max_concurrency=schedule.max_concurrency)

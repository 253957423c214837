"""A ``RequestRecord``'s observations: the one derivation every recorder and exporter shares. Pure.

Per-token ITL: a chunk of ``n`` tokens that arrived ``g`` after the previous chunk stands for ``n`` samples
of ``g / n`` (what SGLang's bench_serving does for its native backend): with speculative decoding a chunk
carries a whole verify round, so one sample per chunk would overstate per-token latency by the accept
length. The raw gap is the inter-chunk time. The first chunk (the prefill's token) is TTFT, not ITL, and is
left out of tokens per chunk.

Per-chunk series are numpy arrays viewing the record's ``array('q')`` buffers (no Python object per chunk):
recorders and exporters take them whole (``recorder.vector``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..records import RequestRecord


@dataclass(frozen=True, slots=True)
class Observations:
    ttft_ns: int | None
    e2e_ns: int
    service_ns: int
    schedule_lag_ns: int
    gaps_ns: np.ndarray  # int64 inter-chunk gaps, one per chunk after the first
    gap_tokens: np.ndarray  # int64 tokens each of those chunks carried (0: apportioning gave it none)
    decode_tokens_per_second: float | None

    def itl(self) -> tuple[np.ndarray, np.ndarray]:
        """Per-token ITL as (values in ns, float64; how many tokens each, int64): ``n`` samples of ``gap / n``
        per chunk that carried tokens."""
        keep = self.gap_tokens > 0
        n = self.gap_tokens[keep]
        return self.gaps_ns[keep] / n, n


def int_array(values: object) -> np.ndarray:
    """An int64 view of a record's ``array('q')`` (zero-copy), or a copy of any other sequence of ints."""
    if isinstance(values, np.ndarray):
        return values.astype(np.int64, copy=False)
    try:
        return np.frombuffer(values, dtype=np.int64)  # type: ignore[call-overload]
    except (TypeError, ValueError):
        return np.asarray(values, dtype=np.int64)


def observe(rec: RequestRecord) -> Observations | None:
    """None for a request that failed or carried no tokens: failures are counted, never fed to histograms."""
    if not rec.ok or not len(rec.chunk_ns):
        return None
    ts = int_array(rec.chunk_ns)
    return Observations(
        ttft_ns=rec.ttft_ns, e2e_ns=rec.e2e_ns, service_ns=rec.service_ns, schedule_lag_ns=rec.schedule_lag_ns,
        gaps_ns=np.diff(ts), gap_tokens=int_array(rec.chunk_tokens)[1:],
        decode_tokens_per_second=rec.decode_tokens_per_second,
    )

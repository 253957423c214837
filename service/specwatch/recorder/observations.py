"""A ``RequestRecord``'s observations: the one derivation every recorder and exporter shares. Pure.

Per-token ITL: a chunk of ``n`` tokens that arrived ``g`` after the previous chunk stands for ``n`` samples
of ``g / n`` (what SGLang's bench_serving does for its native backend): with speculative decoding a chunk
carries a whole verify round, so one sample per chunk would overstate per-token latency by the accept
length. The raw gap is the inter-chunk time. The first chunk (the prefill's token) is TTFT, not ITL, and is
left out of tokens per chunk.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from ..records import RequestRecord


@dataclass(frozen=True, slots=True)
class Observations:
    ttft_ns: int | None
    e2e_ns: int
    service_ns: int
    schedule_lag_ns: int
    gaps_ns: tuple[int, ...]  # inter-chunk gaps, one per chunk after the first
    gap_tokens: tuple[int, ...]  # tokens each of those chunks carried (0: apportioning gave it none)
    decode_tokens_per_second: float | None

    def itl(self) -> list[tuple[float, int]]:
        """Per-token ITL as (value in ns, how many tokens) runs: ``n`` samples of ``gap / n`` per chunk."""
        return [(g / n, n) for g, n in zip(self.gaps_ns, self.gap_tokens, strict=True) if n > 0]


def observe(rec: RequestRecord) -> Observations | None:
    """None for a request that failed or carried no tokens: failures are counted, never fed to histograms."""
    if not rec.ok or not rec.chunk_ns:
        return None
    ts = rec.chunk_ns
    return Observations(
        ttft_ns=rec.ttft_ns, e2e_ns=rec.e2e_ns, service_ns=rec.service_ns, schedule_lag_ns=rec.schedule_lag_ns,
        gaps_ns=tuple(b - a for a, b in itertools.pairwise(ts)), gap_tokens=rec.chunk_tokens[1:],
        decode_tokens_per_second=rec.decode_tokens_per_second,
    )

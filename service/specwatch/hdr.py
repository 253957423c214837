"""HdrHistogram helpers every stage may use: quantiles read in one vectorised pass. Imports nothing from the
project; ``recorder.vector`` holds the recording side."""

from __future__ import annotations

import numpy as np
from hdrh.histogram import HdrHistogram


def hdr_quantiles(h: HdrHistogram, qs: tuple[float, ...]) -> list[int | None]:
    """Values at quantiles ``qs`` (0..1) as hdrh reports them (highest equivalent value), from one cumulative
    sum over the counts: hdrh's own query walks the counts array in Python, milliseconds per call."""
    total = h.get_total_count()
    if not total:
        return [None] * len(qs)
    end = h.get_counts_array_index(h.get_max_value()) + 1
    cum = np.cumsum(np.frombuffer(h.counts, dtype=np.int64)[:end])
    out: list[int | None] = []
    for q in qs:
        target = max(1, int(min(q, 1.0) * total + 0.5))  # hdrh's get_target_count_at_percentile
        idx = int(np.searchsorted(cum, target, side="left"))
        out.append(int(h.get_highest_equivalent_value(h.get_value_from_index(idx))))
    return out

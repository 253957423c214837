"""Vectorised recording: many values into an HDR histogram, or into a Prometheus histogram, in one numpy pass.

Recorder stage. ``hdr_record`` computes hdrh's own counts index for a whole array (the same arithmetic as
``HdrHistogram._counts_index_for``, checked value for value by the unit tests) and adds the weights into the
histogram's counts array with one ``bincount``; ``prom_observe`` does the same for a
``prometheus_client.Histogram`` child's buckets. A request of 256 tokens costs a handful of numpy calls
instead of ~1,500 Python calls.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from hdrh.histogram import HdrHistogram

DENSE_AFTER = 256  # values: past this a dense bincount over the counts array beats a scatter-add


def hdr_indices(h: HdrHistogram, values: np.ndarray) -> np.ndarray:
    """hdrh's counts index of every (non-negative int64) value."""
    v = values | h.sub_bucket_mask
    bits = np.frexp(v.astype(np.float64))[1].astype(np.int64)  # bit length; exact below 2**53
    bucket = bits - h.unit_magnitude - (h.sub_bucket_half_count_magnitude + 1)
    sub = values >> (bucket + h.unit_magnitude)
    return ((bucket + 1) << h.sub_bucket_half_count_magnitude) + sub - h.sub_bucket_half_count


def hdr_record(h: HdrHistogram, values: np.ndarray, weights: np.ndarray | None = None) -> np.ndarray | None:
    """Record ``values`` (int64) ``weights`` times each (default 1) into ``h``.

    Returns None when every value fitted, else the mask of values outside the histogram's range, which were
    left out (so the caller's exact sums and out-of-range counts can follow)."""
    if not len(values):
        return None
    values = values.astype(np.int64, copy=False)
    idx = hdr_indices(h, np.maximum(values, 0))
    bad = (values < 0) | (idx < 0) | (idx >= h.counts_len)
    w = np.ones(len(values), dtype=np.int64) if weights is None else weights.astype(np.int64, copy=False)
    dropped = bad if bad.any() else None
    if dropped is not None:
        keep = ~bad
        values, idx, w = values[keep], idx[keep], w[keep]
        if not len(values):
            return dropped
    counts = np.frombuffer(h.counts, dtype=np.int64)
    if len(idx) > DENSE_AFTER:
        counts += np.bincount(idx, weights=w, minlength=h.counts_len).astype(np.int64)
    else:
        np.add.at(counts, idx, w)
    h.total_count += int(w.sum())
    h.min_value = min(h.min_value, int(values.min()))
    h.max_value = max(h.max_value, int(values.max()))
    return dropped


def prom_observe(child: Any, values: np.ndarray, weights: np.ndarray | None = None) -> None:
    """``child.observe(v)`` for every value (``weights[i]`` times), in one pass: a ``prometheus_client``
    ``Histogram`` child keeps one counter per bucket (first upper bound >= value) and a sum."""
    if not len(values):
        return
    bounds = np.asarray(child._upper_bounds, dtype=np.float64)
    w = np.ones(len(values), dtype=np.float64) if weights is None else weights.astype(np.float64, copy=False)
    per = np.bincount(np.searchsorted(bounds, values, side="left"), weights=w, minlength=len(bounds))
    for i in np.flatnonzero(per):
        child._buckets[i].inc(float(per[i]))
    child._sum.inc(float((values * w).sum()))


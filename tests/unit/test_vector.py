"""Vectorised recording equals hdrh's and prometheus_client's own one-value-at-a-time recording, exactly."""

import random
from array import array

import numpy as np
import pytest
from hdrh.histogram import HdrHistogram
from prometheus_client import CollectorRegistry, Histogram, generate_latest

from specwatch.hdr import hdr_quantiles
from specwatch.recorder.stats import HIGHEST_US, Stats, new_histogram, unit
from specwatch.recorder.vector import hdr_indices, hdr_record, prom_observe
from specwatch.records import Outcome, RequestRecord

RNG = random.Random(7)
VALUES = [0, 1, 2, 1023, 1024, 2047, 2048, 2049, 4095, 4096, 10**6, HIGHEST_US - 1, HIGHEST_US] + \
    [int(10 ** RNG.uniform(0, 9.5)) for _ in range(5000)]


@pytest.mark.parametrize("digits", [2, 3])
def test_counts_index_matches_hdrh_for_every_value(digits):
    h = HdrHistogram(1, HIGHEST_US, digits)
    got = hdr_indices(h, np.array(VALUES, dtype=np.int64))
    assert got.tolist() == [h._counts_index_for(v) for v in VALUES]


@pytest.mark.parametrize("digits", [2, 3])
def test_record_matches_record_value_counts_totals_and_extremes(digits):
    weights = [RNG.randint(1, 5) for _ in VALUES]
    ours, theirs = HdrHistogram(1, HIGHEST_US, digits), HdrHistogram(1, HIGHEST_US, digits)
    assert hdr_record(ours, np.array(VALUES, dtype=np.int64), np.array(weights)) is None
    for v, w in zip(VALUES, weights, strict=True):
        theirs.record_value(v, w)
    assert list(ours.counts) == list(theirs.counts)
    assert (ours.get_total_count(), ours.get_min_value(), ours.get_max_value()) == \
        (theirs.get_total_count(), theirs.get_min_value(), theirs.get_max_value())
    assert ours.encode() == theirs.encode()
    qs = (0.5, 0.9, 0.99, 0.999, 1.0)
    assert hdr_quantiles(ours, qs) == [theirs.get_value_at_percentile(q * 100) for q in qs]


def test_values_out_of_range_are_left_out_and_reported():
    h = HdrHistogram(1, 1000, 3)
    values = np.array([5, -1, 10**12, 7], dtype=np.int64)
    dropped = hdr_record(h, values)
    assert dropped is not None and dropped.tolist() == [False, True, True, False]
    assert h.get_total_count() == 2 and h.get_max_value() == 7


def test_prometheus_buckets_and_sum_match_observe_one_by_one():
    values = np.array([RNG.uniform(0, 0.2) for _ in range(2000)] + [0.005, 0.01, 1e9])
    weights = np.array([RNG.randint(1, 4) for _ in values])
    buckets = (0.001, 0.005, 0.01, 0.05, 0.1)
    r1, r2 = CollectorRegistry(), CollectorRegistry()
    h1 = Histogram("x_seconds", "x", ["t"], buckets=buckets, registry=r1).labels("a")
    h2 = Histogram("x_seconds", "x", ["t"], buckets=buckets, registry=r2).labels("a")
    prom_observe(h1, values, weights)
    for v, w in zip(values.tolist(), weights.tolist(), strict=True):
        for _ in range(w):
            h2.observe(v)

    def lines(r):
        return [ln for ln in generate_latest(r).decode().splitlines() if "_created" not in ln]

    ours, theirs = lines(r1), lines(r2)
    assert [ln for ln in ours if "_sum" not in ln] == [ln for ln in theirs if "_sum" not in ln]
    s1, s2 = (float(next(ln for ln in x if "_sum" in ln).split()[-1]) for x in (ours, theirs))
    assert s1 == pytest.approx(s2, rel=1e-9)


def naive(rec: RequestRecord) -> dict[str, HdrHistogram]:
    """The first release's recording: one record_value per sample."""
    hs = {n: new_histogram(n, 3) for n in ("inter_chunk", "itl", "tokens_per_chunk")}
    for a, b, n in zip(rec.chunk_ns, rec.chunk_ns[1:], rec.chunk_tokens[1:], strict=False):
        hs["inter_chunk"].record_value(int((b - a) / 1000))
        if n:
            hs["itl"].record_value(int((b - a) / n / 1000), n)
            hs["tokens_per_chunk"].record_value(n)
    return hs


def test_stats_records_a_request_as_the_per_value_loop_did():
    t, ns, toks = 10**9, array("q"), array("q")
    for i in range(300):
        t += RNG.randint(100_000, 9_000_000)
        ns.append(t)
        toks.append(1 if i == 0 else RNG.randint(0, 5))
    rec = RequestRecord("sglang", "spec", "p", "code", False, 0, 0, t + 1, ns, toks, True, 5, sum(toks), Outcome.OK)
    st = Stats()
    st.add(rec)
    for name, h in naive(rec).items():
        assert st.hists[name].encode() == h.encode(), name
    gaps = np.diff(np.asarray(ns))
    n = np.asarray(toks)[1:]
    assert st.mean("itl") == pytest.approx(float((gaps[n > 0] / 1e9).sum()) / int(n.sum()), rel=1e-12)
    assert st.mean("inter_chunk") == pytest.approx(float(gaps.mean()) / unit("inter_chunk") / 1000, rel=1e-12)

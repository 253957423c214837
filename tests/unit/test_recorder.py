"""Recorder: per-token ITL vs inter-chunk gap, windows, out-of-range accounting, quantiles, hlog."""

import dataclasses
import random

import pytest
from hdrh.histogram import HdrHistogram
from hdrh.log import HistogramLogReader

from specwatch.export.hlog import HlogWriter
from specwatch.recorder.stats import Stats
from specwatch.recorder.windows import Recorder
from specwatch.records import Outcome, RequestRecord, SpecStats

MS = 1_000_000


def record(chunk_gaps_ms, tokens, *, target="spec", warmup=False, outcome=Outcome.OK, verify=None, sent=0,
           intended=0):
    t = sent + 40 * MS
    ns = [t]
    for g in chunk_gaps_ms:
        t += int(g * MS)
        ns.append(t)
    spec = SpecStats(verify) if verify is not None else None
    return RequestRecord("sglang", target, "p", "code", warmup, intended, sent, ns[-1], tuple(ns), tuple(tokens),
                         True, 10, sum(tokens), outcome, 200, "", spec)


def test_a_chunk_of_n_tokens_gives_n_itl_samples_of_gap_over_n():
    st = Stats()
    st.add(record([30, 30, 30], [1, 3, 3, 3], verify=3))
    assert st.count("itl") == 9 and st.count("inter_chunk") == 3
    assert st.mean("itl") == pytest.approx(0.010, rel=1e-3)
    assert st.mean("inter_chunk") == pytest.approx(0.030, rel=1e-3)
    assert st.mean("tokens_per_chunk") == 3.0  # the prefill's first chunk is not counted
    assert st.spec.accept_length == pytest.approx(9 / 3)
    assert st.decode_tokens_per_second == pytest.approx(9 / 0.090)
    assert st.quantiles("ttft", (0.5,))[0.5] == pytest.approx(0.040, rel=1e-3)


def test_failures_are_counted_never_recorded_as_latency():
    st = Stats()
    st.add(record([30], [1, 2], outcome=Outcome.STREAM_ERROR))
    assert st.outcomes["stream_error"] == 1 and st.count("ttft") == 0 and st.output_tokens == 0


def test_e2e_is_from_intended_start_and_lag_is_recorded():
    st = Stats()
    st.add(record([10], [1, 1], sent=500 * MS, intended=0))
    assert st.quantiles("schedule_lag", (0.5,))[0.5] == pytest.approx(0.5, rel=1e-3)
    assert st.quantiles("e2e", (0.5,))[0.5] == pytest.approx(0.55, rel=1e-3)
    assert st.quantiles("service", (0.5,))[0.5] == pytest.approx(0.05, rel=1e-3)


def test_out_of_range_values_are_counted_not_dropped_silently():
    st = Stats()
    st._put("e2e", 10**13)
    assert st.out_of_range["e2e"] == 1 and st.count("e2e") == 0


def test_warmup_is_kept_apart():
    r = Recorder(1, (10,))
    r.record(record([10], [1, 1], warmup=True))
    r.record(record([10, 20], [1, 1, 1]))
    r.tick()
    assert r.cumulative["spec"].requests == 1  # the measured one only


def test_quantiles_match_hdrh_and_mean_is_exact():
    st = Stats()
    values = [random.Random(3).expovariate(1 / 20_000) for _ in range(3000)]
    for v in values:
        st._put("e2e", v)
    h: HdrHistogram = st.hists["e2e"]
    for q in (0.5, 0.9, 0.99, 1.0):
        assert st.quantiles("e2e", (q,))[q] == h.get_value_at_percentile(q * 100) / 1e6
    assert st.mean("e2e") == pytest.approx(sum(values) / len(values) / 1e6)


@pytest.mark.parametrize("seed", range(30))
def test_windows_equal_a_naive_merge_of_the_last_k_intervals(seed):
    rnd = random.Random(seed)
    windows = sorted(rnd.sample(range(1, 60), 3))
    r = Recorder(1, windows)
    vals = []
    for _ in range(rnd.randint(1, 150)):
        v = rnd.randint(1, 1000)
        vals.append(v)
        r.current["spec"]._put("ttft", v)
        r.tick()
    for w in windows:
        got = r.windows[w].get("spec", Stats())
        assert got.sums["ttft"] == sum(vals[-w:])
        assert got.count("ttft") == len(vals[-w:])


def test_hlog_is_readable_by_hdrh_reader(tmp_path):
    path = tmp_path / "x.hlog"
    with path.open("w") as f:
        w = HlogWriter(f, 1000.0)
        r = Recorder(1, ())
        r.record(record([30, 30], [1, 2, 2], verify=2))
        w.write(r.tick())
    reader = HistogramLogReader(str(path), HdrHistogram(1, 3_600_000_000, 3))
    tags = {}
    while (h := reader.get_next_interval_histogram()) is not None:
        tags[h.get_tag()] = h.get_total_count()
    assert tags["spec.itl"] == 4 and tags["spec.inter_chunk"] == 2 and tags["spec.ttft"] == 1


def test_position_acceptance_from_the_servers_accepted_drafts_histogram():
    st = Stats()
    a = record([30], [1, 2], verify=4)
    a = dataclasses.replace(a, spec=SpecStats(4, histogram=(1, 1, 2)))  # rounds with 0, 1, 2 accepted drafts
    st.add(a)
    st.add(a)
    assert st.spec.position_acceptance == (3 / 4, 2 / 4)


@pytest.mark.parametrize(("requests", "client", "mean_of_ratios"), [
    # (completion tokens, verify rounds): SGLang's per-request figure is completion / rounds (first token counted)
    ([(9, 4), (5, 4)], (8 + 4) / 8, (9 / 4 + 5 / 4) / 2),
    ([(101, 40), (3, 2), (51, 25)], (100 + 2 + 50) / 67, (101 / 40 + 3 / 2 + 51 / 25) / 3),
])
def test_the_servers_per_request_figures_pooled_alike_equal_the_clients(requests, client, mean_of_ratios):
    st = Stats()
    for completion, rounds in requests:
        r = record([30] * (completion - 1), [1] * completion, verify=rounds)
        st.add(dataclasses.replace(r, spec=SpecStats(rounds, accept_length=completion / rounds)))
    assert st.spec.accept_length == pytest.approx(client)
    assert st.spec.server_pooled_accept_length == pytest.approx(client)  # like with like
    assert st.spec.server_accept_length == pytest.approx(mean_of_ratios)  # a mean of ratios: another quantity

"""The exporter's label sets stay closed and its gauges never go stale or out of range."""

import pytest

from specwatch.export.prometheus import Exporter, window_label
from specwatch.recorder.stats import Stats
from specwatch.records import ServerSample
from specwatch.server.scrape import dp_label


def samples(e: Exporter, prefix: str) -> dict[tuple, float]:
    return {tuple(sorted(s.labels.items())): s.value for f in e.registry.collect() for s in f.samples
            if s.name == prefix}


def test_positions_that_leave_the_window_are_removed_not_left_stale():
    e = Exporter(("spec",), (60,))
    e.observe_sample(ServerSample("vllm_spec", position_acceptance=(0.9, 0.8, 0.7)), "log")
    e.observe_sample(ServerSample("vllm_spec", position_acceptance=(0.5,)), "log")
    got = samples(e, "specwatch_server_position_acceptance_ratio")
    assert got == {(("position", "1"), ("source", "log")): 0.5}  # 1-based, and positions 2 and 3 are gone


def test_probe_positions_follow_the_window_and_stay_within_0_and_1():
    e = Exporter(("spec",), (60,))
    st = Stats()
    st.spec.rounds_by_accepted = [1, 1, 2]  # rounds with 0, 1, 2 accepted drafts
    e.update_windows("1m", {"spec": st.describe()})
    got = samples(e, "specwatch_probe_position_acceptance_ratio")
    assert sorted(v for v in got.values()) == [0.5, 0.75] and all(0 <= v <= 1 for v in got.values())
    e.update_windows("1m", {"spec": Stats().describe()})
    assert samples(e, "specwatch_probe_position_acceptance_ratio") == {}


@pytest.mark.parametrize(("raw", "label"), [("0", "0"), ("0300", "other"), ("007", "7"), ("63", "63"), ("64", "other"),
                                            ("x", "other"), ("", "other"), ("٣", "other")])
def test_dp_rank_labels_come_from_a_closed_set(raw, label):
    assert dp_label(raw) == label


def test_thousands_of_dp_ranks_make_at_most_65_series():
    e = Exporter(("spec",), (60,))
    for i in range(3000):
        e.observe_sample(ServerSample("sglang_decode", dp_rank=str(i), accept_length=2.0), "log")
    assert len(samples(e, "specwatch_server_accept_length")) == 65


@pytest.mark.parametrize(("seconds", "label"), [(60.0, "1m"), (300.0, "5m"), (300, "5m"), (90.0, "90s"), (30, "30s"),
                                                (2.5, "2.5s"), (604800.0, "10080m"), (None, "cumulative")])
def test_window_labels_are_the_same_for_whole_seconds_typed_as_floats(seconds, label):
    assert window_label(seconds) == label

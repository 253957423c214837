"""Axis ticks: a table of ranges a chart meets (the page's minutes, tok/s far from zero, accept lengths, draft
steps), and Hypothesis over any finite range for the invariants every chart relies on."""

import itertools
import math
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from specwatch.export.ticks import data_ticks, nice_ticks, time_ticks


@pytest.mark.parametrize(("lo", "hi", "labels"), [
    (0, 0.3, ("0.00", "0.05", "0.10", "0.15", "0.20", "0.25", "0.30")),  # never 0.30000000000000004
    (0, 0.6, ("0.0", "0.1", "0.2", "0.3", "0.4", "0.5", "0.6")),
    (0.0667, 0.503, ("0.0", "0.1", "0.2", "0.3", "0.4", "0.5", "0.6")),
    (67, 92, ("65", "70", "75", "80", "85", "90", "95")),
    (1, 5, ("1", "2", "3", "4", "5")),
    (-5, 3, ("-6", "-4", "-2", "0", "2", "4")),
    (0, 1, ("0.0", "0.2", "0.4", "0.6", "0.8", "1.0")),
    (1200, 9800, ("0", "2000", "4000", "6000", "8000", "10000")),
    (90, 90, ("80", "85", "90", "95", "100")),  # one value: a range around it
])
def test_nice_ticks_table(lo, hi, labels):
    assert nice_ticks(lo, hi).labels == labels


@pytest.mark.parametrize(("lo", "hi", "labels", "note"), [
    (67, 92, ("65", "70", "75", "80", "85", "90", "95"), "axis from 65 to 95, not from 0"),  # item 7's page
    (10, 92, ("0", "20", "40", "60", "80", "100"), ""),  # near zero: from zero, no note
    (1.8, 3.2, ("1.5", "2.0", "2.5", "3.0", "3.5"), "axis from 1.5 to 3.5, not from 0"),
    (0, 0, ("0.0", "0.2", "0.4", "0.6", "0.8", "1.0", "1.2"), ""),
    (-92, -67, ("-95", "-90", "-85", "-80", "-75", "-70", "-65"), "axis from -95 to -65, not from 0"),
])
def test_data_ticks_fit_the_data_and_say_when_zero_is_left_out(lo, hi, labels, note):
    t = data_ticks(lo, hi)
    assert t.labels == labels and t.note() == note
    span = hi - lo
    assert t.lo <= lo - 0.05 * span or t.lo == 0 <= lo  # a margin below the data, unless the axis sits on 0
    assert t.hi >= hi + 0.05 * span


@pytest.mark.parametrize(("lo_s", "hi_s", "unit", "labels"), [
    (4, 30, "s", ("0", "5", "10", "15", "20", "25", "30")),
    (4.002, 30.18, "s", ("0", "5", "10", "15", "20", "25", "30", "35")),  # the old "0.0667 … 0.503 minutes"
    (0, 150, "s", ("0", "50", "100", "150")),  # 2.5 minutes: 0, 1, 2, 3 min would leave a sixth empty
    (0, 180, "min", ("0", "1", "2", "3")),
    (0, 600, "min", ("0", "2", "4", "6", "8", "10")),
    (0, 3600, "min", ("0", "10", "20", "30", "40", "50", "60")),
    (0, 2.5 * 3600, "min", ("0", "50", "100", "150")),
    (0, 5 * 3600, "h", ("0", "1", "2", "3", "4", "5")),
    (3, 3, "s", ("3.0", "3.2", "3.4", "3.6", "3.8", "4.0")),  # one sample: a second from it
])
def test_time_ticks_pick_the_unit_by_span_and_whole_numbers(lo_s, hi_s, unit, labels):
    t = time_ticks(lo_s, hi_s)
    assert t.unit == unit and t.ticks.labels == labels
    assert t.ticks.lo * t.seconds <= lo_s and t.ticks.hi * t.seconds >= hi_s


def check(t, lo, hi):
    step = t.step
    mant = step / 10 ** math.floor(math.log10(step) + 1e-9)
    assert min(abs(mant - m) for m in (1, 2, 5)) < 1e-9, step
    assert 3 <= len(t.values) <= 8
    tol = 1e-9 * max(abs(lo), abs(hi), step)
    assert lo - step - tol <= t.lo <= lo + tol and hi - tol <= t.hi <= hi + step + tol  # in range or one step beyond
    assert all(math.isclose(b - a, step, rel_tol=1e-9, abs_tol=tol) for a, b in itertools.pairwise(t.values))
    for v, label in zip(t.values, t.labels, strict=True):
        assert re.fullmatch(r"-?\d+(\.\d+)?", label), label
        assert len(label.partition(".")[2]) == max(0, -math.floor(math.log10(step) + 1e-9))  # no float noise
        assert math.isclose(float(label), v, rel_tol=1e-12, abs_tol=tol)


finite = st.floats(min_value=-1e9, max_value=1e9, allow_nan=False)


@given(finite, st.floats(min_value=1e-3, max_value=1e9))
def test_nice_ticks_any_range(lo, span):
    check(nice_ticks(lo, lo + span), lo, lo + span)


@given(finite, finite)
def test_data_ticks_cover_the_data(a, b):
    lo, hi = min(a, b), max(a, b)
    t = data_ticks(lo, hi)
    assert 3 <= len(t.values) <= 8 and t.lo <= lo and t.hi >= hi
    assert (t.note() == "") == (t.lo <= 0 <= t.hi)


@given(st.floats(min_value=0, max_value=1e6), st.floats(min_value=2, max_value=1e6))
def test_time_ticks_are_whole_numbers_of_their_unit(lo_s, span_s):
    t = time_ticks(lo_s, lo_s + span_s)
    check(t.ticks, lo_s / t.seconds, (lo_s + span_s) / t.seconds)
    assert t.ticks.step >= 1 and all("." not in label for label in t.ticks.labels)

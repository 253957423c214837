"""``specwatch report *.hlog``: each row of the merged interval logs names its own unit (latencies in ms, the
decode rate in tok/s), where one heading once called every row a latency in ms."""

import pytest

from specwatch.commands.report import hlog_text


@pytest.mark.parametrize(("tag", "p50", "unit", "shown"), [
    ("spec.ttft", 0.0123, "ms", "12.300"),  # seconds in the document, ms on screen
    ("spec.itl", 0.004, "ms", "4.000"),
    ("spec.decode_tps", 88.5, "tok/s", "88.500"),  # not scaled as if it were seconds
    ("spec.tokens_per_chunk", 2.25, "tokens/chunk", "2.250"),
    ("spec.accept_length", 2.75, "tokens/round", "2.750"),
])
def test_each_row_says_its_unit(tag, p50, unit, shown):
    text = hlog_text({tag: {"count": 7, "p50": p50, "p90": p50, "p99": p50, "max": p50}}, ["a.hlog"])
    heading, columns, row = text.splitlines()
    assert "ms" not in heading and columns.split()[:3] == ["tag", "unit", "count"]
    assert row.split() == [tag, unit, "7", shown, shown, shown, shown]

"""SSE parsing: split reads, line endings, comments, event lines, multi-line data, missing last blank line."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from specwatch.errors import SSEError
from specwatch.probe.sse import SSEEvent, SSEParser

STREAM = (b'data: {"a": 1}\n\n: keep-alive\n\nevent: sglext_ids\ndata: {"ids": [1]}\n\n'
          b"data: line1\ndata: line2\n\ndata: [DONE]\n\n")
EXPECTED = [SSEEvent("message", b'{"a": 1}'), SSEEvent("sglext_ids", b'{"ids": [1]}'),
            SSEEvent("message", b"line1\nline2"), SSEEvent("message", b"[DONE]")]


def parse_all(chunks: list[bytes]) -> list[SSEEvent]:
    p = SSEParser()
    out = []
    for c in chunks:
        out += p.feed(c)
    return out + p.close()


@pytest.mark.parametrize("ending", [b"\n", b"\r\n", b"\r"])
def test_line_endings(ending):
    assert parse_all([STREAM.replace(b"\n", ending)]) == EXPECTED


@given(st.lists(st.integers(min_value=0, max_value=len(STREAM) * 2), max_size=12),
       st.sampled_from([b"\n", b"\r\n"]))
def test_any_split_of_the_stream_gives_the_same_events(cuts, ending):
    data = STREAM.replace(b"\n", ending)
    points = sorted({c % (len(data) + 1) for c in cuts})
    chunks = [data[a:b] for a, b in zip([0, *points], [*points, len(data)], strict=True)]
    assert parse_all(chunks) == EXPECTED


def test_last_event_without_blank_line_is_dispatched_at_close():
    assert parse_all([b"data: x\n\ndata: tail"]) == [SSEEvent("message", b"x"), SSEEvent("message", b"tail")]


def test_data_without_space_and_unknown_fields():
    assert parse_all([b"data:x\nid: 3\nretry: 10\n\n"]) == [SSEEvent("message", b"x")]


def test_unbounded_line_is_an_error():
    p = SSEParser()
    with pytest.raises(SSEError, match="without a newline"):
        for _ in range(20):
            p.feed(b"x" * (1 << 20))


def test_bare_cr_line_endings_dispatch_each_event_in_the_read_that_ends_it():
    from specwatch.probe.sse import SSEParser

    p = SSEParser()
    assert [e.data for e in p.feed(b"data: 1\r\r")] == [b"1"]  # not a read late
    assert [e.data for e in p.feed(b"data: 2\r")] == []
    assert [e.data for e in p.feed(b"\r")] == [b"2"]
    assert [e.data for e in p.feed(b"data: 3\r")] == []  # CRLF split across reads: the LF is not a blank line
    assert [e.data for e in p.feed(b"\n\r\n")] == [b"3"]
    assert [e.data for e in p.feed(b"data: 4\r\n\r\n")] == [b"4"]

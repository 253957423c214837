"""``probe.limits.Limits`` directly: one stream's caps from the tokens asked, and each refusal by its message
(``test_client_attempt`` checks them through whole events)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from specwatch.errors import StreamError
from specwatch.probe.limits import TOKEN_MARGIN, Limits, as_int, max_event_bytes, max_events


@pytest.mark.parametrize(("max_tokens", "token_cap", "event_cap"), [
    (8, 8 + TOKEN_MARGIN, 2 * (8 + TOKEN_MARGIN) + 16),
    (0, TOKEN_MARGIN, 2 * TOKEN_MARGIN + 16),
    (None, 2**62, 2**63 + 16),
])
def test_the_caps_follow_the_tokens_asked(max_tokens, token_cap, event_cap):
    lim = Limits(max_tokens)
    assert (lim.token_cap, lim.event_cap) == (token_cap, event_cap) and event_cap == max_events(token_cap)


@pytest.mark.parametrize(("data_bytes", "ct", "error"), [
    (10, 10, None),
    (10, 0, None),
    (10, 11, "claims 11 completion tokens after only 10 bytes"),
    (10_000, 8 + TOKEN_MARGIN, None),
    (10_000, 9 + TOKEN_MARGIN, rf"claims {9 + TOKEN_MARGIN} completion tokens, more than the 8 asked \(\+64\)"),
    (10, -1, "completion_tokens is not a non-negative integer: '-1'"),
    (10, True, "completion_tokens is not a non-negative integer: 'True'"),
    (10, 3.0, "completion_tokens is not a non-negative integer: '3.0'"),
    (10, "3", "completion_tokens is not a non-negative integer: '3'"),
    (10, None, "completion_tokens is not a non-negative integer: 'None'"),
])
def test_a_claimed_count_is_an_integer_within_the_bytes_and_the_cap(data_bytes, ct, error):
    lim = Limits(8, data_bytes=data_bytes)
    if error is None:
        assert lim.claim(ct) == ct
    else:
        with pytest.raises(StreamError, match=error):
            lim.claim(ct)


def test_events_are_counted_and_refused_past_the_cap_or_their_size():
    lim = Limits(0)
    for _ in range(lim.event_cap):
        lim.event(b"abc", tokens=0)
    assert (lim.events, lim.data_bytes) == (lim.event_cap, 3 * lim.event_cap)
    with pytest.raises(StreamError, match=f"more than {lim.event_cap} events for 0 tokens asked"):
        lim.event(b"abc", tokens=0)
    big = Limits(8)
    big.event(b"x" * max_event_bytes(2), tokens=2)
    with pytest.raises(StreamError, match=rf"an event of {max_event_bytes(2) + 1} bytes after 2 tokens"):
        big.event(b"x" * (max_event_bytes(2) + 1), tokens=2)
    assert big.data_bytes == max_event_bytes(2)  # a refused event adds nothing


def test_chunks_stop_at_the_token_cap():
    lim = Limits(8)
    lim.chunk(lim.token_cap - 1)
    with pytest.raises(StreamError, match=f"more than {lim.token_cap} chunks for 8 tokens asked"):
        lim.chunk(lim.token_cap)


@given(st.one_of(st.integers(-5, 200), st.booleans(), st.floats(allow_nan=True), st.text(max_size=3), st.none()),
       st.integers(0, 150), st.one_of(st.none(), st.integers(0, 100)))
def test_a_claim_is_accepted_exactly_when_it_is_a_count_within_both_bounds(ct, data_bytes, max_tokens):
    lim = Limits(max_tokens, data_bytes=data_bytes)
    ok = as_int(ct) is not None and 0 <= ct <= min(data_bytes, lim.token_cap)
    try:
        assert lim.claim(ct) == ct and ok
    except StreamError:
        assert not ok

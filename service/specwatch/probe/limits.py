"""What one stream may carry, from the tokens it asked for, and its counts against that: the caps that end a
hostile stream (endless, flooding, claiming absurd counts) as a ``StreamError`` before it costs a core or skews a
histogram. Pure state like ``stream.Attempt``, which holds one ``Limits`` per request; ``h1`` holds the body
between two tokens to ``max_bytes_without_token``."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..errors import StreamError
from ..records import MAX_ACCEPT_LENGTH

TOKEN_MARGIN = int(MAX_ACCEPT_LENGTH)  # a last verify round may overshoot max_tokens by at most one draft
MAX_EVENT_BYTES = 1024 * 1024  # one event's data: this, plus as much per token so far (SGLang's text is
MAX_EVENT_BYTES_PER_TOKEN = 1024  # cumulative, so events grow with the stream, never beyond this)


def as_int(v: Any) -> int | None:
    """``v`` when it is an integer (a bool is not), else None."""
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def max_event_bytes(tokens: int) -> int:
    """The largest event a stream may send after ``tokens`` tokens."""
    return MAX_EVENT_BYTES + tokens * MAX_EVENT_BYTES_PER_TOKEN


def max_events(token_cap: int) -> int:
    """The most data events a stream may send for ``token_cap`` tokens: one per token-bearing chunk, and as many
    again for events that carry none (a role-only first delta, the usage and speculative-stats chunks, SGLang's
    ``sglext_ids``), plus a few. Past it the server repeats itself: the chunk cap never fires on events that
    claim no new token."""
    return 2 * token_cap + 16


def max_bytes_without_token(tokens: int) -> int:
    """The most body bytes a stream may send between two tokens: room for two of its largest events (one that
    carries no token, such as a role-only first chunk or the usage chunk, then one that does) and their
    framing. A server past this floods without progress; the drip rule (no token for ``read_s``) would end it
    only after a read timeout's worth of parsing at full speed."""
    return 2 * max_event_bytes(tokens)


@dataclass(slots=True)
class Limits:
    """One stream's caps, computed once from ``max_tokens`` (None: unbounded), and its counts against them."""

    max_tokens: int | None
    token_cap: int = field(init=False)  # the most tokens (so chunks) it may carry: max_tokens + TOKEN_MARGIN
    event_cap: int = field(init=False)  # the most data events it may carry: max_events(token_cap)
    events: int = 0  # data events so far, [DONE] aside
    data_bytes: int = 0  # event payload bytes so far: no token count may exceed them

    def __post_init__(self) -> None:
        self.token_cap = 2**62 if self.max_tokens is None else self.max_tokens + TOKEN_MARGIN
        self.event_cap = max_events(self.token_cap)

    def event(self, data: bytes, tokens: int) -> None:
        """Count one data event ([DONE] aside) that came after ``tokens`` tokens, before it is parsed."""
        self.events += 1
        if self.events > self.event_cap:
            raise StreamError(f"more than {self.event_cap} events for {self.max_tokens} tokens asked: an endless "
                              "stream")
        if len(data) > max_event_bytes(tokens):
            raise StreamError(f"an event of {len(data)} bytes after {tokens} tokens (no server sends that)")
        self.data_bytes += len(data)

    def claim(self, ct: Any) -> int:
        """A cumulative token count, checked: an integer that never exceeds the bytes received so far (each
        token costs at least one byte of JSON), so an absurd claim cannot cost CPU or skew a histogram."""
        n = as_int(ct)
        if n is None or n < 0:
            raise StreamError(f"completion_tokens is not a non-negative integer: {str(ct)[:40]!r}")
        if n > self.data_bytes:
            raise StreamError(f"claims {n} completion tokens after only {self.data_bytes} bytes")
        if n > self.token_cap:
            raise StreamError(f"claims {n} completion tokens, more than the {self.max_tokens} asked "
                              f"(+{TOKEN_MARGIN})")
        return n

    def chunk(self, kept: int) -> None:
        """Before one more token-bearing chunk beside ``kept``: a stream with more chunks than the tokens it may
        carry is broken."""
        if kept >= self.token_cap:
            raise StreamError(f"more than {self.token_cap} chunks for {self.max_tokens} tokens asked: an endless "
                              "stream")

"""Incremental Server-Sent Events parser. Probe stage, pure: bytes in, events out.

Handles events split across reads, LF / CRLF / CR line endings, ``:`` comments, ``event:`` lines (SGLang
0.5.23 sends ``event: sglext_ids``), multi-line ``data:`` and a last event without its blank line.
"""

from __future__ import annotations

import re
from typing import NamedTuple

from ..errors import SSEError

MAX_PENDING_BYTES = 16 * 1024 * 1024
COMMENT_LINES = re.compile(rb"^:[^\n]*\n", re.MULTILINE)  # a whole ``:`` line, keep-alives included


class SSEEvent(NamedTuple):  # a tuple: built once per streamed chunk, so it must cost next to nothing
    event: str
    data: bytes


class SSEParser:
    """``MAX_PENDING_BYTES`` caps a line without its newline *and* one event's ``data:`` lines together, so
    neither a line that never ends nor an event spread over countless lines can grow memory unbounded."""

    __slots__ = ("_buf", "_data", "_data_bytes", "_event", "_long", "_long_bytes", "_skip_lf")

    def __init__(self) -> None:
        self._buf = b""
        self._long: list[bytes] = []  # pieces of a line that spans reads, joined once its end arrives
        self._long_bytes = 0
        self._data: list[bytes] = []
        self._data_bytes = 0
        self._event = ""
        self._skip_lf = False  # the last read ended in CR: an LF first in the next completes that CRLF

    def feed(self, chunk: bytes) -> list[SSEEvent]:
        if self._skip_lf:
            self._skip_lf = False
            if chunk[:1] == b"\n":
                chunk = chunk[1:]
        if b"\n" not in chunk and b"\r" not in chunk:  # the middle of a long line: keep it, copy nothing
            self._long.append(chunk)
            self._long_bytes += len(chunk)
            if len(self._buf) + self._long_bytes > MAX_PENDING_BYTES:
                raise SSEError(f"an SSE line exceeded {MAX_PENDING_BYTES} bytes without a newline")
            return []
        if self._long:
            self._buf = b"".join([self._buf, *self._long])
            self._long, self._long_bytes = [], 0
        buf = self._buf + chunk if self._buf else chunk
        # a CR that ends the read ends its line now (bare-CR streams would otherwise dispatch every event a read
        # late); if it was half of a CRLF, the LF that opens the next read is dropped
        self._skip_lf = buf.endswith(b"\r")
        if b"\r" in buf:
            buf = buf.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        if buf[:1] == b":" or b"\n:" in buf:  # comment lines mean nothing: dropped whole, in C, not line by line
            buf = COMMENT_LINES.sub(b"", buf)
        events: list[SSEEvent] = []
        if not self._data and not self._event:  # fast path: whole ``data: …`` events, one line each
            buf = buf.lstrip(b"\n")  # blank lines with no event pending dispatch nothing
            blocks = buf.split(b"\n\n")
            buf = blocks.pop()
            for block in blocks:
                if block[:6] == b"data: " and b"\n" not in block:
                    events.append(SSEEvent("message", block[6:]))
                else:  # anything else (event:, several data lines, a stray blank) line by line
                    for line in block.split(b"\n"):
                        self._line(line, events)
                    self._line(b"", events)
        lines = buf.split(b"\n")
        self._buf = lines.pop()
        if len(self._buf) > MAX_PENDING_BYTES:
            raise SSEError(f"an SSE line exceeded {MAX_PENDING_BYTES} bytes without a newline")
        for line in lines:
            self._line(line, events)
        return events

    def close(self) -> list[SSEEvent]:
        """End of stream: dispatch a last event that lacked its terminating blank line."""
        events: list[SSEEvent] = []
        if self._long:
            self._buf = b"".join([self._buf, *self._long])
            self._long, self._long_bytes = [], 0
        if self._buf:
            self._line(self._buf.rstrip(b"\r"), events)
            self._buf = b""
        self._line(b"", events)
        return events

    def _line(self, line: bytes, events: list[SSEEvent]) -> None:
        if not line:
            if self._data:
                events.append(SSEEvent(self._event or "message", b"\n".join(self._data)))
            self._data = []
            self._data_bytes = 0
            self._event = ""
            return
        if line[0] == 0x3A:  # ":" comment / keep-alive
            return
        name, sep, value = line.partition(b":")
        if sep and value[:1] == b" ":
            value = value[1:]
        if name == b"data":
            self._data_bytes += len(value) + 1
            if self._data_bytes > MAX_PENDING_BYTES:
                raise SSEError(f"an SSE event's data exceeded {MAX_PENDING_BYTES} bytes")
            self._data.append(value)
        elif name == b"event":
            self._event = value.decode("utf-8", "replace")

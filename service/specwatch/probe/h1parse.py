"""HTTP/1.1 response framing, as a pure function of the bytes: the head, the body's pieces, its end.

Source stage; no I/O. ``ResponseParser.feed`` takes bytes as they arrive and calls its sink: ``on_head``
once for the final response (1xx interim responses are skipped), ``on_body`` for each piece of the decoded
body (chunked, ``Content-Length`` or close-delimited), ``on_end`` when the body has ended. Anything that is not
a well-formed response raises ``StreamError`` — and nothing else does: sizes and digits are validated
before they are converted (a negative or non-hex chunk size, a status or length of a thousand digits), heads,
chunk-size lines and trailers are bounded, a response that frames its body twice (``Content-Length`` and
``Transfer-Encoding``) or in a coding we never ask for is refused, and bytes that are not HTTP at all fail
on their first five. Statuses 204 and 304 have no body by definition; an unrequested 101 is refused.
"""

from __future__ import annotations

from typing import Protocol

from ..errors import StreamError

MAX_HEAD_BYTES = 64 * 1024  # a head (or the trailer) larger than this is refused
MAX_HEADERS = 100
MAX_SIZE_LINE = 1024  # a chunk-size line, extensions included
MAX_CHUNK_HEX = 8  # chunk sizes up to 4 GiB - 1; a longer size field is refused before it is converted
MAX_LENGTH_DIGITS = 15  # Content-Length up to ~1 PB, refused past that before it is converted
MAX_INTERIM = 10  # 1xx responses before the final one
HEX = frozenset(b"0123456789abcdefABCDEF")
NO_BODY = (204, 304)

HEAD, SIZE, DATA, DATA_CRLF, TRAILER, LENGTH, UNTIL_CLOSE, COMPLETE = range(8)


class Sink(Protocol):
    def on_head(self, status: int, keep_alive: bool, location: str) -> None: ...

    def on_body(self, piece: bytes) -> None: ...

    def on_end(self) -> None: ...


class ResponseParser:
    """One response on one connection. ``keep_alive`` (after the head) says whether the connection may carry
    another request once ``complete``; ``extra`` that bytes arrived after the response ended."""

    __slots__ = ("_buf", "_interim", "_left", "extra", "keep_alive", "sink", "state", "status")

    def __init__(self, sink: Sink) -> None:
        self.sink = sink
        self.state = HEAD
        self.status = 0
        self.keep_alive = True
        self.extra = False
        self._buf = b""
        self._left = 0
        self._interim = 0

    @property
    def complete(self) -> bool:
        return self.state == COMPLETE

    def close(self) -> bool:
        """The connection closed: True when that ended the body (close-delimited) or it had ended already."""
        if self.state == UNTIL_CLOSE:
            self._end()
        return self.state == COMPLETE

    def feed(self, data: bytes) -> None:
        buf = self._buf + data if self._buf else data
        self._buf = b""
        pos, n = 0, len(buf)
        while pos < n:
            st = self.state
            if st == DATA:
                take = min(self._left, n - pos)
                self.sink.on_body(buf[pos:pos + take] if take < n else buf)
                pos += take
                self._left -= take
                if self._left == 0:
                    self.state = DATA_CRLF
            elif st == SIZE:
                pos = self._size(buf, pos)
            elif st == DATA_CRLF:
                if n - pos < 2:
                    self._keep(buf, pos, 2, "")
                    return
                if buf[pos:pos + 2] != b"\r\n":
                    raise StreamError("a chunk did not end with CRLF")
                pos += 2
                self.state = SIZE
            elif st == LENGTH:
                take = min(self._left, n - pos)
                self.sink.on_body(buf[pos:pos + take])
                pos += take
                self._left -= take
                if self._left == 0:
                    self._end()
            elif st == UNTIL_CLOSE:
                self.sink.on_body(buf[pos:] if pos else buf)
                return
            elif st == HEAD:
                pos = self._head_at(buf, pos)
            elif st == TRAILER:
                pos = self._trailer(buf, pos)
            else:  # COMPLETE: bytes after the response are not ours, and the connection is not reusable
                self.extra = True
                self.keep_alive = False
                return

    # ---- framing pieces; each returns where parsing goes on, or keeps the rest and returns len(buf) -----------
    def _size(self, buf: bytes, pos: int) -> int:
        end = buf.find(b"\r\n", pos)
        if end < 0:
            return self._keep(buf, pos, MAX_SIZE_LINE, "a chunk size line")
        if end - pos > MAX_SIZE_LINE:
            raise StreamError(f"a chunk size line exceeded {MAX_SIZE_LINE} bytes")
        field = buf[pos:end].split(b";", 1)[0].strip(b" \t")
        if not field or len(field) > MAX_CHUNK_HEX or not HEX.issuperset(field):
            raise StreamError(f"malformed chunk size {field[:20]!r}")
        size = int(field, 16)
        pos = end + 2
        if size == 0:
            self.state = TRAILER
            self._left = 0  # counts the trailer's bytes
        elif len(buf) - pos >= size + 2 and buf[pos + size:pos + size + 2] == b"\r\n":  # the whole chunk is here
            self.sink.on_body(buf[pos:pos + size])
            pos += size + 2
        else:
            self._left = size
            self.state = DATA
        return pos

    def _trailer(self, buf: bytes, pos: int) -> int:
        """Trailer fields, if any, then the empty line that ends a chunked body."""
        end = buf.find(b"\r\n", pos)
        if end < 0:
            return self._keep(buf, pos, MAX_HEAD_BYTES, "the trailer")
        self._left += end - pos + 2  # trailer bytes so far
        if self._left > MAX_HEAD_BYTES:
            raise StreamError(f"the trailer exceeded {MAX_HEAD_BYTES} bytes")
        if end == pos:
            self._end()
        return end + 2

    def _head_at(self, buf: bytes, pos: int) -> int:
        if not b"HTTP/".startswith(buf[pos:pos + 5]):  # not HTTP at all (TLS, an HTTP/2 preface): at once
            raise StreamError(f"not an HTTP/1.1 response: {buf[pos:pos + 40]!r}")
        end = buf.find(b"\r\n\r\n", pos)
        if end < 0:
            return self._keep(buf, pos, MAX_HEAD_BYTES, "the response head")
        if end - pos > MAX_HEAD_BYTES:
            raise StreamError(f"the response head exceeded {MAX_HEAD_BYTES} bytes")
        self._head(buf[pos:end])
        if self.state == COMPLETE:
            self._end()
        return end + 4

    def _keep(self, buf: bytes, pos: int, limit: int, what: str) -> int:
        rest = buf[pos:]
        if len(rest) > limit:
            raise StreamError(f"{what} exceeded {limit} bytes")
        self._buf = rest
        return len(buf)

    def _head(self, head: bytes) -> None:
        status, f = parse_head(head)
        if f is None:
            self._interim += 1
            if self._interim > MAX_INTERIM:
                raise StreamError(f"more than {MAX_INTERIM} interim (1xx) responses")
            return  # interim: the final response's head follows
        self.status = status
        self.keep_alive = not f.close
        if status in NO_BODY:
            self.state = COMPLETE
        elif f.chunked:
            self.state = SIZE
        elif f.length is not None:
            self._left = f.length
            self.state = LENGTH if f.length else COMPLETE
        else:
            self.state = UNTIL_CLOSE
            self.keep_alive = False
        self.sink.on_head(status, self.keep_alive, f.location)

    def _end(self) -> None:
        self.state = COMPLETE
        self.sink.on_end()


def parse_head(head: bytes) -> tuple[int, Framing | None]:
    """The status and framing of a response head (without its blank line); no framing for an interim 1xx."""
    lines = head.split(b"\r\n")
    if len(lines) > MAX_HEADERS + 1:
        raise StreamError(f"more than {MAX_HEADERS} header lines")
    status, http10 = status_line(lines[0])
    if status == 101:
        raise StreamError("HTTP 101: the server switched protocols, which no probe asked for")
    if 100 <= status < 200:
        return status, None
    return status, Framing.of(lines[1:], http10, status)


def status_line(line: bytes) -> tuple[int, bool]:
    """(status, HTTP/1.0) of ``HTTP/1.x NNN reason``; ``StreamError`` for anything else."""
    parts = line.split(b" ", 2)
    if len(parts) < 2 or parts[0] not in (b"HTTP/1.1", b"HTTP/1.0") or len(parts[1]) != 3 \
            or not parts[1].isdigit() or not parts[1].isascii():
        raise StreamError(f"not an HTTP/1.1 status line: {line[:60]!r}")
    return int(parts[1]), parts[0] == b"HTTP/1.0"


class Framing:
    """What a response's header fields say about its body and its connection."""

    __slots__ = ("chunked", "close", "length", "location")

    def __init__(self, chunked: bool, length: int | None, close: bool, location: str) -> None:
        self.chunked, self.length, self.close, self.location = chunked, length, close, location

    @classmethod
    def of(cls, lines: list[bytes], http10: bool, status: int) -> Framing:
        """An encoded success body is refused (we never ask for one); an error page's is only quoted."""
        chunked, length, close, location = False, None, http10, ""
        for line in lines:
            name, sep, value = line.partition(b":")
            if not sep:
                raise StreamError(f"malformed header line {line[:40]!r}")
            name, value = name.strip().lower(), value.strip()
            if name == b"transfer-encoding":
                if value.lower() != b"chunked":
                    raise StreamError(f"unsupported Transfer-Encoding {value[:40]!r} (only chunked is asked for)")
                chunked = True
            elif name == b"content-length":
                if not value.isdigit() or not value.isascii() or len(value) > MAX_LENGTH_DIGITS:
                    raise StreamError(f"malformed Content-Length {value[:20]!r}")
                if length is not None and int(value) != length:
                    raise StreamError("two different Content-Length values")
                length = int(value)
            elif name == b"content-encoding" and 200 <= status < 300 and value.lower() not in (b"identity", b""):
                raise StreamError(f"unrequested Content-Encoding {value[:40]!r}")
            elif name == b"connection":
                close = value.lower() == b"close" or (close and value.lower() != b"keep-alive")
            elif name == b"location":
                location = value.decode("latin-1")
        if chunked and length is not None:
            raise StreamError("both Content-Length and Transfer-Encoding: chunked (a smuggling signal, refused)")
        return cls(chunked, length, close, location)

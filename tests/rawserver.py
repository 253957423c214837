"""A raw HTTP/1.1 fault server: asyncio streams and bytes, no HTTP library, so it can send what no library
would — close-delimited bodies, trailers, chunk extensions, interim 1xx, negative or non-hex chunk sizes, a
status of a thousand digits, two framings at once, TLS or HTTP/2 bytes, garbage after the response.

    python tests/rawserver.py PORT CASE

Every streaming request (SGLang ``/generate``, OpenAI ``/v1/completions`` and ``/v1/chat/completions``) is
answered with CASE; ``GET /case/NAME`` switches the case (answered with a plain 200, for the daemon's rows),
``GET /active`` counts the endless streams being sent; ``/get_server_info`` and ``/v1/models`` answer as
SGLang does, so ``--api auto`` detects it. A well-formed case streams ``TOKENS`` tokens, one per event, in the
request's API's shape, and ends with ``[DONE]``.
"""

from __future__ import annotations

import asyncio
import json
import sys

TOKENS = 8


def events(api: str) -> list[bytes]:
    """The SSE events of a good stream for ``api`` (``sglang``, ``completions`` or ``chat``)."""
    out = []
    for n in range(1, TOKENS + 1):
        if api == "sglang":
            meta = {"id": "r", "prompt_tokens": 3, "completion_tokens": n, "cached_tokens": 0,
                    "finish_reason": {"type": "length", "length": TOKENS} if n == TOKENS else None}
            doc: dict = {"text": "w " * n, "meta_info": meta}
        else:
            choice = {"index": 0, "finish_reason": "length" if n == TOKENS else None}
            choice |= {"delta": {"content": "w "}} if api == "chat" else {"text": "w "}
            doc = {"id": "c", "object": "chat.completion.chunk" if api == "chat" else "text_completion",
                   "choices": [choice], "usage": {"prompt_tokens": 3, "completion_tokens": n, "total_tokens": 3 + n}}
        out.append(b"data: " + json.dumps(doc).encode() + b"\n\n")
    return [*out, b"data: [DONE]\n\n"]


def chunked(parts: list[bytes], ext: bytes = b"", last: bytes = b"0\r\n\r\n") -> bytes:
    return b"".join(b"%x%s\r\n%s\r\n" % (len(p), ext, p) for p in parts) + last


OK_HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"


def response(case: str, api: str, key: str) -> tuple[bytes, bool]:
    """(the bytes to send, whether to close the connection after them); ``key``: the bearer key the request
    carried, for the cases that echo it."""
    ev = events(api)
    body = b"".join(ev)
    te = OK_HEAD + b"Transfer-Encoding: chunked\r\n\r\n"
    table: dict[str, tuple[bytes, bool]] = {
        "ok": (te + chunked(ev), False),
        "close_delimited": (OK_HEAD + b"Connection: close\r\n\r\n" + body, True),
        "trailers": (te + chunked(ev, last=b"0\r\nX-Checksum: 1\r\nX-Other: 2\r\n\r\n"), False),
        "chunk_extensions": (te + chunked(ev, ext=b";name=value;flag"), False),
        "interim_1xx": (b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </s.css>\r\n\r\n"
                        + te + chunked(ev), False),
        "content_length": (OK_HEAD + b"Content-Length: %d\r\n\r\n" % len(body) + body, False),
        "one_byte_chunks": (te + chunked([body[i:i + 1] for i in range(len(body))]), False),
        "keepalive_closed": (te + chunked(ev), True),  # says keep-alive, closes anyway
        "garbage_after": (te + chunked(ev) + b"HTTP/1.1 200 OK\r\nX: pipelined garbage\r\n\r\n", False),
        "negative_chunk": (te + b"-5\r\nhello\r\n" + chunked(ev), False),
        "nonhex_chunk": (te + b"0x10\r\n" + b"z" * 16 + b"\r\n", False),
        "huge_chunk_size": (te + b"f" * 40 + b"\r\n", False),
        "missing_final_chunk": (te + chunked(ev[:3], last=b""), True),
        "thousand_digit_status": (b"HTTP/1.1 " + b"2" * 1000 + b" OK\r\n\r\n", True),
        "status_beyond_64_bits": (b"HTTP/1.1 18446744073709551617 OK\r\n\r\n", True),
        "thousand_digit_length": (OK_HEAD + b"Content-Length: " + b"9" * 1000 + b"\r\n\r\n", True),
        "negative_length": (OK_HEAD + b"Content-Length: -1\r\n\r\n" + body, True),
        "length_short": (OK_HEAD + b"Content-Length: %d\r\n\r\n" % len(body) + b"".join(ev[:3]), True),
        "length_long": (OK_HEAD + b"Content-Length: %d\r\n\r\n" % (len(body) // 2) + body, False),
        "length_and_chunked": (OK_HEAD + b"Content-Length: 10\r\nTransfer-Encoding: chunked\r\n\r\n" + chunked(ev),
                               False),
        "gzip": (OK_HEAD + b"Content-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n\r\n"
                 + chunked([b"\x1f\x8b\x08\x00" + bytes(40)]), False),
        "tls_bytes": (b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + bytes(64), True),
        "http2_preface": (b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes(9), True),
        "switching_protocols": (b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: h2c\r\nConnection: Upgrade\r\n\r\n",
                                True),
        "no_content": (b"HTTP/1.1 204 No Content\r\n\r\n", False),
        "not_modified": (b"HTTP/1.1 304 Not Modified\r\nTransfer-Encoding: chunked\r\n\r\n", False),
        "bad_last_event_at_close": (OK_HEAD + b"Connection: close\r\n\r\n" + b"".join(ev[:3]) + b"data: {broken",
                                    True),
        "bare_cr": (te + chunked([e.replace(b"\n", b"\r") for e in ev]), False),
        "idle_bytes": (te + chunked(ev), False),  # and, once idle, bytes no request asked for (handle)
        "echo_key_401": (plain("401 Unauthorized", {"error": f"invalid key {key} \x1b[2J"}), False),
        "echo_key_event": (te + chunked([b"data: " + json.dumps({"error": {"message": f"key {key} refused"}})
                                         .encode() + b"\n\n"]), False),
        "echo_key_location": (b"HTTP/1.1 302 Found\r\nLocation: http://elsewhere.invalid/?key=%s\r\n"
                              b"Content-Length: 0\r\n\r\n" % key.encode(), False),
        "control_chars": (plain("500 Internal Server Error", "\x1b[2J\x1b[31mboom\x07\nlevel=ERROR msg=forged"),
                          False),
    }
    return table[case]


EXPECTED = {  # the outcome a well-behaved client records for each case
    **dict.fromkeys(["ok", "close_delimited", "trailers", "chunk_extensions", "interim_1xx", "content_length",
                     "one_byte_chunks", "keepalive_closed", "garbage_after"], "ok"),
    **dict.fromkeys(["negative_chunk", "nonhex_chunk", "huge_chunk_size", "missing_final_chunk",
                     "thousand_digit_status", "status_beyond_64_bits", "thousand_digit_length", "negative_length",
                     "length_short", "length_long", "length_and_chunked", "gzip", "tls_bytes", "http2_preface",
                     "switching_protocols", "bad_last_event_at_close", "echo_key_event", "endless_tokens",
                     "endless_same", "endless_pings"],
                    "stream_error"),
    **dict.fromkeys(["no_content", "not_modified", "echo_key_401", "echo_key_location", "control_chars"],
                    "http_error"),
    **dict.fromkeys(["bare_cr", "idle_bytes"], "ok"),
    "endless_keepalives": "timeout",
}
ENDLESS_S = 60.0  # an endless case stops by itself after this, if the client never hangs up
KEEPALIVE_S = 0.05
API_OF = {"/generate": "sglang", "/v1/completions": "completions", "/v1/chat/completions": "chat"}
INFO = {"/get_server_info": {"speculative_algorithm": None, "version": "raw"},
        "/v1/models": {"object": "list", "data": [{"id": "raw", "object": "model", "owned_by": "sglang"}]}}


async def read_request(reader: asyncio.StreamReader) -> tuple[str, dict[str, str]] | None:
    """The request's path and headers (lower-case names), its body read and dropped; None when the client
    went away."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
        return None
    lines = head.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, _, v in (ln.partition(":") for ln in lines[1:] if ln)}
    length = int(headers["content-length"]) if headers.get("content-length", "").isdigit() else 0
    if length:
        await reader.readexactly(length)
    parts = lines[0].split(" ")
    return (parts[1] if len(parts) > 1 else "/"), headers


async def endless(writer: asyncio.StreamWriter, case: str, api: str) -> None:
    """Stream until the client hangs up (or ``ENDLESS_S``): new tokens at full speed, the same count again
    and again, or keep-alive comments only (at full speed, or one every ``KEEPALIVE_S`` as a stuck server's
    keep-alive timer sends them)."""
    writer.write(OK_HEAD + b"Transfer-Encoding: chunked\r\n\r\n")
    deadline = asyncio.get_running_loop().time() + ENDLESS_S
    n = 0
    while asyncio.get_running_loop().time() < deadline:
        n += 1
        if case == "endless_keepalives":
            part = b": keep-alive\n\n"
            await asyncio.sleep(KEEPALIVE_S)
        elif case == "endless_pings":
            part = b": keep-alive\n\n" * 64
        else:
            doc = events(api)[0] if case == "endless_same" else events(api)[0].replace(b'"completion_tokens": 1',
                                                                                      b'"completion_tokens": %d' % n)
            part = doc * (1 if case == "endless_tokens" else 64)
        writer.write(b"%x\r\n%s\r\n" % (len(part), part))
        await writer.drain()
        await asyncio.sleep(0)


def plain(status: str, doc: object) -> bytes:
    data = json.dumps(doc).encode()
    return b"HTTP/1.1 %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (
        status.encode(), len(data), data)


async def main(port: int, case: str) -> None:
    state: dict[str, str | int] = {"case": case, "active": 0}  # active: endless streams being sent now

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while (req := await read_request(reader)) is not None:
                path, headers = req
                close, case = False, str(state["case"])
                if path == "/active":
                    data = plain("200 OK", {"active": state["active"]})
                elif path.startswith("/case/"):
                    state["case"] = path.removeprefix("/case/")
                    data = plain("200 OK", {"case": state["case"]})
                elif path in INFO:  # SGLang's server args hold its api_key: echoed, as a careless server would
                    key = headers.get("authorization", "").removeprefix("Bearer ")
                    data = plain("200 OK", INFO[path] | ({"api_key": key} if path == "/get_server_info" else {}))
                elif path in API_OF and str(case).startswith("endless"):
                    state["active"] = int(state["active"]) + 1
                    try:
                        await endless(writer, str(case), API_OF[path])
                    finally:
                        state["active"] = int(state["active"]) - 1
                    break
                elif path in API_OF:
                    key = headers.get("authorization", "").removeprefix("Bearer ")
                    data, close = response(case, API_OF[path], key)
                else:
                    data = plain("404 Not Found", {"error": "not found"})
                writer.write(data)
                await writer.drain()
                if close:
                    break
                if path in API_OF and case == "idle_bytes":
                    await asyncio.sleep(0.05)  # the client has the connection back in its pool by now
                    writer.write(b"HTTP/1.1 200 OK\r\nX-Unasked: 1\r\n\r\n")
                    await writer.drain()
        except ConnectionError:
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", port)
    print("ready", flush=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]), sys.argv[2] if len(sys.argv) > 2 else "ok"))

"""A mock streaming server with a ground-truth send log, cheap enough to offer 30k+ chunks/s from one core.

    python streamserver.py PORT [--ttft-ms 50] [--interval-ms 2] [--burst 1] [--usage per_chunk|final]

Raw HTTP/1.1 on a uvloop ``Protocol`` (keep-alive, chunked transfer), not a web framework, so the server's
own cost stays far below the client's. ``POST /generate`` streams SGLang-native events (cumulative
``meta_info.completion_tokens``), ``POST /v1/completions`` and ``/v1/chat/completions`` OpenAI events
(cumulative ``usage`` on every chunk with ``--usage per_chunk``, the total only in the final usage chunk with
``--usage final``). Every chunk carries ``--burst`` tokens (a verify round). Chunks follow an absolute
schedule from the request's arrival: ``ttft`` then one every ``interval``; each write's time is the truth.

``GET /truth`` answers the send log's distributions, exact (numpy, not HDR): TTFT (request arrival → first
chunk written), per-chunk gap and per-token ITL (gap / tokens in the chunk), mean and p99, in ms, plus the
chunks written. ``POST /reset`` clears the log. Truth and client share ``CLOCK_MONOTONIC``.
"""

import argparse
import asyncio
import sys
import time

import numpy as np
import orjson

WORDS = [b" alpha", b" be", b" c", b" delta", b" eps", b" zeta", b" et", b" theta"]  # tokens of unequal length


class Log:
    def __init__(self) -> None:
        self.ttft_ns: list[int] = []
        self.firsts: list[tuple[int, int]] = []  # (arrival, first chunk written), monotonic ns
        self.gaps_ns: list[int] = []  # per chunk after the first
        self.gap_tokens: list[int] = []
        self.chunks = 0

    def truth(self) -> dict[str, float | int | None]:
        def stats(a: np.ndarray, prefix: str) -> dict[str, float | None]:
            if not len(a):
                return {f"{prefix}_mean_ms": None, f"{prefix}_p99_ms": None}
            return {f"{prefix}_mean_ms": float(a.mean()) / 1e6, f"{prefix}_p99_ms": float(np.percentile(a, 99)) / 1e6}

        ttft = np.array(self.ttft_ns, dtype=np.float64)
        gaps = np.array(self.gaps_ns, dtype=np.float64)
        toks = np.array(self.gap_tokens, dtype=np.int64)
        itl = np.repeat(gaps / np.maximum(toks, 1), toks)
        return {"requests": len(self.ttft_ns), "chunks": self.chunks, **stats(ttft, "ttft"), **stats(gaps, "gap"),
                **stats(itl, "itl")}


class Stream(asyncio.Protocol):
    def __init__(self, cfg: argparse.Namespace, log: Log) -> None:
        self.cfg, self.log = cfg, log
        self.buf = b""
        self.transport: asyncio.Transport | None = None
        self.busy = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        """Stamp now, handle after every socket of this loop pass is stamped (a burst of requests must not
        queue behind each other's handling: that delay would be the server's, yet missing from its truth)."""
        PENDING.append((self, data, time.monotonic_ns()))
        if len(PENDING) == 1:
            asyncio.get_running_loop().call_soon(drain)

    def handle(self, data: bytes, arrived: int) -> None:
        self.buf += data
        if self.busy:
            return
        head_end = self.buf.find(b"\r\n\r\n")
        if head_end < 0:
            return
        head = self.buf[:head_end].decode("latin-1")
        length = 0
        for line in head.split("\r\n")[1:]:
            k, _, v = line.partition(":")
            if k.strip().lower() == "content-length":
                length = int(v)
        if len(self.buf) < head_end + 4 + length:
            return
        body, self.buf = self.buf[head_end + 4:head_end + 4 + length], self.buf[head_end + 4 + length:]
        method, path = head.split(" ", 2)[:2]
        if method == "GET" and path == "/firsts":
            self.reply(orjson.dumps(self.log.firsts))
        elif method == "GET" and path == "/truth":
            self.reply(orjson.dumps(self.log.truth()))
        elif method == "POST" and path == "/reset":
            self.log.__init__()  # type: ignore[misc]
            self.reply(b"{}")
        elif method == "GET" and path == "/get_server_info":
            self.reply(b'{"version":"mock","speculative_algorithm":"EAGLE3"}')
        elif method == "POST" and path in ("/generate", "/v1/completions", "/v1/chat/completions"):
            self.stream(path, orjson.loads(body), arrived)
        else:
            self.reply(b'{"error":"not found"}', b"404 Not Found")

    def reply(self, body: bytes, status: bytes = b"200 OK") -> None:
        assert self.transport is not None
        self.transport.write(b"HTTP/1.1 " + status + b"\r\nContent-Type: application/json\r\nContent-Length: "
                             + str(len(body)).encode() + b"\r\n\r\n" + body)

    def stream(self, path: str, req: dict, arrived: int) -> None:
        cfg = self.cfg
        native = path == "/generate"
        n = int(req.get("sampling_params", {}).get("max_new_tokens", 16) if native else req.get("max_tokens", 16))
        chat = path.endswith("chat/completions")
        events = frames(n, cfg.burst, native, chat, cfg.usage == "per_chunk")
        assert self.transport is not None
        self.busy = True
        self.transport.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                             b"Transfer-Encoding: chunked\r\n\r\n")
        loop = asyncio.get_running_loop()
        t0 = loop.time() + (time.monotonic_ns() - arrived) / -1e9  # the loop clock at arrival
        sent: list[int] = []
        state = {"i": 0}
        log = self.log
        transport = self.transport

        def send() -> None:
            i = state["i"]
            if transport.is_closing():
                self.busy = False
                return
            frame, tokens = events[i]
            transport.write(frame)
            now = time.monotonic_ns()
            if tokens:
                if sent:
                    log.gaps_ns.append(now - sent[-1])
                    log.gap_tokens.append(tokens)
                else:
                    log.ttft_ns.append(now - arrived)
                    log.firsts.append((arrived, now))
                sent.append(now)
                log.chunks += 1
            i += 1
            while i < len(events) and events[i][1] == 0:  # usage and [DONE] go out with the last token
                transport.write(events[i][0])
                i += 1
            state["i"] = i
            if i < len(events):
                loop.call_at(t0 + cfg.ttft_ms / 1e3 + i * cfg.interval_ms / 1e3, send)
            else:
                self.busy = False
                if self.buf:
                    self.handle(b"", time.monotonic_ns())

        loop.call_at(t0 + cfg.ttft_ms / 1e3, send)


CACHE: dict[tuple, list[tuple[bytes, int]]] = {}
PENDING: list[tuple[Stream, bytes, int]] = []


def drain() -> None:
    batch = PENDING[:]
    PENDING.clear()
    for stream, data, arrived in batch:
        stream.handle(data, arrived)


def frames(n: int, burst: int, native: bool, chat: bool, usage: bool) -> list[tuple[bytes, int]]:
    """(HTTP chunk frame, tokens it carries) for one response; the first chunk carries one token (prefill)."""
    key = (n, burst, native, chat, usage)
    if key in CACHE:
        return CACHE[key]
    out: list[tuple[bytes, int]] = []
    ct, k = 0, 0
    while ct < n:
        step = min(n - ct, 1 if ct == 0 else burst)
        text = b"".join(WORDS[(k + j) % len(WORDS)] for j in range(step)).decode()
        k += step
        ct += step
        final = ct == n
        if native:
            meta = {"id": "r", "prompt_tokens": 8, "completion_tokens": ct, "cached_tokens": 0,
                    "finish_reason": {"type": "length", "length": ct} if final else None}
            if final:
                meta |= {"spec_verify_ct": max(1, (ct - 1 + burst - 1) // burst), "spec_accept_length": float(burst)}
            obj: dict = {"text": text, "meta_info": meta}
        else:
            choice = ({"index": 0, "delta": {"content": text}, "finish_reason": "length" if final else None} if chat
                      else {"index": 0, "text": text, "finish_reason": "length" if final else None})
            obj = {"id": "c", "object": "chat.completion.chunk" if chat else "text_completion", "model": "m",
                   "choices": [choice]}
            if usage:
                obj["usage"] = {"prompt_tokens": 8, "completion_tokens": ct, "total_tokens": 8 + ct}
        out.append((sse(orjson.dumps(obj)), step))
    if not native:
        out.append((sse(orjson.dumps({"id": "c", "choices": [], "usage": {"prompt_tokens": 8,
                                                                             "completion_tokens": n}})), 0))
    out.append((sse(b"[DONE]") + b"0\r\n\r\n", 0))
    CACHE[key] = out
    return out


def sse(data: bytes) -> bytes:
    event = b"data: " + data + b"\n\n"
    return f"{len(event):x}\r\n".encode() + event + b"\r\n"


async def serve(cfg: argparse.Namespace) -> None:
    log = Log()
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: Stream(cfg, log), "127.0.0.1", cfg.port, backlog=4096)
    print("ready", flush=True)
    async with server:
        await server.serve_forever()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("port", type=int)
    p.add_argument("--ttft-ms", type=float, default=50.0)
    p.add_argument("--interval-ms", type=float, default=2.0)
    p.add_argument("--burst", type=int, default=1)
    p.add_argument("--usage", choices=("per_chunk", "final"), default="per_chunk")
    cfg = p.parse_args()
    import uvloop

    try:
        uvloop.run(serve(cfg))
    except KeyboardInterrupt:
        sys.exit(0)


if __name__ == "__main__":
    main()

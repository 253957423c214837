"""Client CPU per streamed chunk: specwatch's client (SSE parse, JSON decode, token accounting, record)
against a bare aiohttp line-reading loop, on the same local stream, measured side by side in one run.

    .venv/bin/python benchmarks/client_cpu.py [--requests 60] [--tokens 500]

Prints CPU microseconds per chunk for both and the ratio (target <= 1.5x). CPU is this process's
time.process_time(); the server runs in another process.
"""

import argparse
import time

import aiohttp
import orjson

from common import free_port, start_fastserver
from specwatch.probe.client import Timeouts, execute, make_session, make_streams
from specwatch.probe.prompts import Prompt
from specwatch.probe.stream import Attempt, GenParams, Target


async def bare(session: aiohttp.ClientSession, url: str, tokens: int) -> int:
    body = orjson.dumps({"text": "x", "stream": True, "sampling_params": {"max_new_tokens": tokens}})
    chunks = 0
    async with session.post(url + "/generate", data=body) as resp:
        async for line in resp.content:
            if line.startswith(b"data: "):
                chunks += 1
    return chunks


async def raw(session: aiohttp.ClientSession, url: str, tokens: int) -> int:
    """The floor: read bytes, count events, parse nothing."""
    body = orjson.dumps({"text": "x", "stream": True, "sampling_params": {"max_new_tokens": tokens}})
    chunks = 0
    async with session.post(url + "/generate", data=body) as resp:
        async for data in resp.content.iter_any():
            chunks += data.count(b"data: ")
    return chunks


STREAMS = []


async def ours(session: aiohttp.ClientSession, url: str, tokens: int) -> int:
    if not STREAMS:
        STREAMS.append(make_streams(8, Timeouts()))
    a = Attempt(Target("spec", url, "sglang"), Prompt("p", "code", text="x"), False, time.monotonic_ns())
    rec = await execute(STREAMS[0], a, GenParams(max_tokens=tokens))
    assert rec.ok, rec.error
    return len(rec.chunk_ns) + 1  # + the [DONE] event, as the bare loop counts it


async def main(requests: int, tokens: int, rounds: int) -> None:
    port = free_port()
    server = start_fastserver(port)
    try:
        url = f"http://127.0.0.1:{port}"
        async with make_session(Timeouts(), streams=8) as session:
            await bare(session, url, tokens)
            await ours(session, url, tokens)  # warm both paths
            runners = (("bare aiohttp line loop", bare), ("specwatch client", ours), ("raw byte loop (floor)", raw))
            cpu = {name: 0.0 for name, _ in runners}
            chunks = dict.fromkeys(cpu, 0)
            for _ in range(rounds):  # interleaved so all see the same machine state
                for name, fn in runners:
                    t0 = time.process_time()
                    for _ in range(requests):
                        chunks[name] += await fn(session, url, tokens)
                    cpu[name] += time.process_time() - t0
    finally:
        server.terminate()
    per = {k: cpu[k] / chunks[k] * 1e6 for k in cpu}
    for k, v in per.items():
        print(f"{k:<24} {v:8.2f} us CPU per chunk   ({chunks[k]} chunks)")
    ratio = per["specwatch client"] / per["bare aiohttp line loop"]
    print(f"ratio specwatch / bare: {ratio:.2f}x (target <= 1.5x)")


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--requests", type=int, default=60)
    p.add_argument("--tokens", type=int, default=500)
    p.add_argument("--rounds", type=int, default=3)
    a = p.parse_args()
    import uvloop

    uvloop.run(main(a.requests, a.tokens, a.rounds))

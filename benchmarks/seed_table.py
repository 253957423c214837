"""The seed profile's table measured with a plain streaming client, beside the simulator's expected values
and the seed story's numbers.

    .venv/bin/python benchmarks/seed_table.py [--max-tokens 500] [--runs 3]

For each configuration a `specwatch sim --profile seed` is started; the client is a bare aiohttp loop
(POST /generate with stream=true, read to [DONE], take completion_tokens from the last event) that uses
none of specwatch's client code. tok/s = tokens / (send to last chunk), as the seed's script computed it.
"""

import argparse
import asyncio
import json
import socket
import subprocess
import sys
import time

import aiohttp

from common import free_port
from specwatch.sim import model

STORY = {0: 90.0, 2: 94.0, 5: 71.0, 10: 60.0}



async def measure(url: str, max_tokens: int, runs: int) -> tuple[float, float]:
    tps, first_to_last = [], []
    async with aiohttp.ClientSession() as s:
        for i in range(runs):
            body = {"text": f"Write a story number {i}", "stream": True,
                    "sampling_params": {"max_new_tokens": max_tokens, "ignore_eos": True, "temperature": 0}}
            t0 = time.perf_counter()
            first = last = None
            tokens = 0
            async with s.post(url + "/generate", json=body) as r:
                async for line in r.content:
                    if line.startswith(b"data: {"):
                        last = time.perf_counter()
                        first = first or last
                        tokens = json.loads(line[6:])["meta_info"]["completion_tokens"]
            tps.append(tokens / (last - t0))
            first_to_last.append((tokens - 1) / (last - first))
    return sum(tps) / len(tps), sum(first_to_last) / len(first_to_last)


def main(max_tokens: int, runs: int) -> None:
    p = model.PROFILES["seed"]
    print(f"{'config':<10}{'tok/s':>9}{'decode':>9}{'expected decode':>17}{'story':>8}{'vs story':>10}")
    for steps in (0, 1, 2, 3, 5, 10):
        port = free_port()
        flags = ["--speculative-algorithm", "EAGLE3", "--speculative-num-steps", str(steps)] if steps else []
        proc = subprocess.Popen([sys.executable, "-m", "specwatch", "sim", "--profile", "seed", "--quiet", "--port",
                                 str(port), *flags])
        try:
            for _ in range(100):
                try:
                    socket.create_connection(("127.0.0.1", port), 0.2).close()
                    break
                except OSError:
                    time.sleep(0.1)
            tps, decode = asyncio.run(measure(f"http://127.0.0.1:{port}", max_tokens, runs))
        finally:
            proc.terminate()
            proc.wait()
        e = model.explain(p, model.SpecConfig.from_flags("EAGLE3" if steps else None, steps or None, 1, None))
        story = STORY.get(steps)
        vs = f"{100 * (tps / story - 1):+.1f}%" if story else ""
        print(f"{'plain' if not steps else f'{steps} steps':<10}{tps:>9.1f}{decode:>9.1f}{e.tokens_per_second:>17.1f}"
              f"{story or '':>8}{vs:>10}")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--max-tokens", type=int, default=500)
    ap.add_argument("--runs", type=int, default=3)
    a = ap.parse_args()
    main(a.max_tokens, a.runs)

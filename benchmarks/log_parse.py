"""Log lines per second: specwatch's ingest path (tolerant key/value parse, verdicts, samples) against a
bare compiled-regex loop over the same file, measured side by side in one run.

    .venv/bin/python benchmarks/log_parse.py [--lines 200000]

The file mixes the simulator's decode and prefill lines (release 0.5.23 shape) with foreign lines, 1 in 4
being a decode line. The bare loop is one precompiled regex that pulls the accept length out of decode lines
and does nothing else: the floor for any parser.
"""

import argparse
import re
import tempfile
import time

from specwatch.server.ingest import LogIngest
from specwatch.server.logtail import LineSplitter, SourceState
from specwatch.sim import logfmt

BARE = re.compile(r"Decode batch.*?accept len: ([\d.]+)")


def make_file(n: int) -> str:
    d = logfmt.DecodeStats(running=16, used_tokens=7416, token_usage=0.04, accept_tokens=347, forward_ct=100,
                           gen_throughput=1903.12, queued=0, iteration=40, num_steps=5, num_draft_tokens=6,
                           speculative=True)
    p = logfmt.PrefillStats(new_seq=1, new_tokens=187, cached_tokens=0, used_tokens=345, token_usage=0.0,
                            running=0, queued=0, pending_tokens=0, input_throughput=12.47, iteration=1)
    lines = [logfmt.decode_line("0.5.23", d, 1.79e9), logfmt.prefill_line("0.5.23", p, 1.79e9),
             '[2026-04-01 09:20:00] INFO:     127.0.0.1:53422 - "POST /generate HTTP/1.1" 200 OK',
             "[2026-04-01 09:20:01] The server is fired up and ready to roll!"]
    f = tempfile.NamedTemporaryFile("w", suffix=".log", delete=False)
    for i in range(n):
        f.write(lines[i % 4] + "\n")
    f.close()
    return f.name


def ours(data: bytes) -> int:
    samples = []
    ingest = LogIngest(samples.append)
    LineSplitter(ingest, SourceState()).feed(data)
    return len(samples)


def bare(data: bytes) -> int:
    n = 0
    for line in data.decode().splitlines():
        m = BARE.search(line)
        if m:
            float(m.group(1))
            n += 1
    return n


def main(lines: int, rounds: int) -> None:
    with open(make_file(lines), "rb") as f:
        data = f.read()
    best = {"bare regex loop": float("inf"), "specwatch ingest": float("inf")}
    for _ in range(rounds):
        for name, fn in (("bare regex loop", bare), ("specwatch ingest", ours)):
            t0 = time.process_time()
            fn(data)
            best[name] = min(best[name], time.process_time() - t0)
    for name, secs in best.items():
        print(f"{name:<18} {lines / secs:>12,.0f} lines/s")
    print(f"ratio bare / specwatch: {best['specwatch ingest'] / best['bare regex loop']:.2f}x slower "
          f"(a server at 40 decode rounds per line writes a few lines per second)")


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--lines", type=int, default=200_000)
    p.add_argument("--rounds", type=int, default=3)
    a = p.parse_args()
    main(a.lines, a.rounds)

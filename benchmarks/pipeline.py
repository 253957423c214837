"""The whole ``specwatch bench`` pipeline against a bare aiohttp loop (and SGLang's bench_serving client when
given), side by side in one run, at several concurrencies, against a mock server's ground-truth send log.

    .venv/bin/python benchmarks/pipeline.py [--streams 1,64,1000] [--api sglang|completions|chat]
        [--burst 1] [--usage per_chunk|final] [--workers 1,2] [--bench-serving SGLANG_WHEEL]

For each concurrency the mock server (``streamserver.py``, its own process) is reset, then each client runs
in a fresh process of its own, one after another and ``--repeat`` times interleaved (the median run by CPU
per chunk is shown), against the same stream: ``bench`` is
``specwatch.commands.bench.bench`` — the function the command runs, detection, streaming, recording, the
report and ``--json`` all included; its CPU is its process's (and its workers') user+system time over that
call. The bare loop is aiohttp + ``orjson.loads`` per event with one timestamp per event, the floor any
Python client pays. Printed per concurrency: CPU µs per chunk, ratio to the bare loop, sustained chunks/s,
and TTFT and per-token ITL, mean and p99, reported against the server's truth.

Defaults reproduce the issue's cases: 64 streams × 256 tokens, a chunk every 2 ms (≈29k chunks/s offered);
1 stream; 1,000 streams with a chunk every 25 ms (40k chunks/s offered).
"""

import argparse
import ast
import asyncio
import itertools
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

import aiohttp
import orjson

from common import free_port

HERE = Path(__file__).resolve().parent
PATHS = {"sglang": "/generate", "completions": "/v1/completions", "chat": "/v1/chat/completions"}


# ---- clients (each runs in a child process: `pipeline.py --child NAME ...`) -----------------------------

def cpu_s() -> float:
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def body_for(api: str, tokens: int) -> bytes:
    if api == "sglang":
        return orjson.dumps({"text": "x", "stream": True, "sampling_params": {"max_new_tokens": tokens}})
    doc: dict = {"model": "m", "max_tokens": tokens, "stream": True,
                 "stream_options": {"include_usage": True, "continuous_usage_stats": True}}
    doc |= {"messages": [{"role": "user", "content": "x"}]} if api == "chat" else {"prompt": "x"}
    return orjson.dumps(doc)


async def bare(url: str, api: str, streams: int, requests: int, tokens: int) -> dict:
    """aiohttp's line iterator, orjson per event, a monotonic stamp per event: the floor."""
    body = body_for(api, tokens)
    ttft: list[int] = []
    gaps: list[float] = []
    chunks = [0]
    left = [requests]

    async def one(session: aiohttp.ClientSession) -> None:
        stamps: list[int] = []
        t0 = time.monotonic_ns()
        async with session.post(url + PATHS[api], data=body) as resp:
            async for line in resp.content:
                if line.startswith(b"data: ") and line[6:12] != b"[DONE]":
                    now = time.monotonic_ns()
                    obj = orjson.loads(line[6:])
                    if obj.get("choices") != []:
                        stamps.append(now)
        chunks[0] += len(stamps)
        ttft.append(stamps[0] - t0)
        gaps.extend(b - a for a, b in itertools.pairwise(stamps))

    async def worker(session: aiohttp.ClientSession) -> None:
        while left[0] > 0:
            left[0] -= 1
            await one(session)

    conn = aiohttp.TCPConnector(limit=streams + 4)
    async with aiohttp.ClientSession(connector=conn, timeout=aiohttp.ClientTimeout(total=None)) as session:
        c0, w0 = cpu_s(), time.monotonic()
        await asyncio.gather(*(worker(session) for _ in range(streams)))
        cpu, wall = cpu_s() - c0, time.monotonic() - w0
    import numpy as np

    t, g = np.array(ttft, dtype=float), np.array(gaps, dtype=float)
    return {"cpu_s": cpu, "wall_s": wall, "chunks": chunks[0], "ttft_mean_ms": t.mean() / 1e6,
            "ttft_p99_ms": float(np.percentile(t, 99)) / 1e6, "gap_p99_ms": float(np.percentile(g, 99)) / 1e6,
            "itl_mean_ms": None, "itl_p99_ms": None}


def word_tokenizer(path: str) -> str:
    """A tokenizers WordLevel model of the mock server's words: what --tokenizer would be for a real model."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    from streamserver import WORDS

    words = [w.decode().strip() for w in WORDS]
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate([*words, "[UNK]"])}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.save(path)
    return path


async def specwatch_bench(url: str, api: str, streams: int, requests: int, tokens: int, workers: int,
                          tokenizer: bool = False) -> dict:
    from specwatch.commands.bench import bench
    from specwatch.probe.bounded import BenchSpec

    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "bench.json")
        tok = word_tokenizer(os.path.join(d, "tokenizer.json")) if tokenizer else None
        spec = BenchSpec(server_url=url, api=api, max_tokens=tokens, num_runs=requests, warmup=0,
                         concurrency=streams, json=out, tokenizer=tok,
                         **({"workers": workers} if workers > 1 else {}))
        real_stdout = sys.stdout
        with open(os.devnull, "w") as sink:
            sys.stdout = sink
            c0, w0 = cpu_s(), time.monotonic()
            rc = await bench(spec)
            cpu, wall = cpu_s() - c0, time.monotonic() - w0
            sys.stdout = real_stdout
        assert rc == 0, f"bench exited {rc}"
        with open(out, "rb") as f:
            doc = orjson.loads(f.read())
    res = doc["results"]
    lat = res["latency_seconds"]
    chunks = sum(r["chunks"] for r in doc["runs"])
    ms = lambda v: None if v is None else v * 1e3  # noqa: E731
    return {"cpu_s": cpu, "wall_s": wall, "chunks": chunks, "ttft_mean_ms": ms(lat["ttft"]["mean"]),
            "ttft_p99_ms": ms(lat["ttft"]["p99"]), "gap_p99_ms": ms(lat["inter_chunk"]["p99"]),
            "itl_mean_ms": ms(lat["itl"]["mean"]), "itl_p99_ms": ms(lat["itl"]["p99"]),
            "loop_lag": res.get("event_loop_lag"), "approximated": res.get("approximated_token_counts")}


def load_bench_serving(wheel: str) -> dict:
    """SGLang's bench_serving request functions, compiled verbatim from the wheel's
    ``sglang/benchmark/serving.py`` with every top-level definition they reach: the module itself imports
    sglang's runtime (torch, zmq, transformers) at its top, which a client benchmark does not need."""
    with zipfile.ZipFile(wheel) as z:
        src = z.read("sglang/benchmark/serving.py").decode()
        helpers = ast.parse(z.read("sglang/benchmark/utils.py").decode())  # remove_prefix and friends
    tree = ast.parse(src)
    defs: dict[str, ast.stmt] = {}
    for node in helpers.body:
        if isinstance(node, ast.FunctionDef) and node.name in ("remove_prefix", "parse_custom_headers"):
            defs[node.name] = node
            tree.body.insert(0, node)
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            defs[node.name] = node
        elif isinstance(node, ast.Assign) and all(isinstance(t, ast.Name) for t in node.targets):
            for t in node.targets:
                defs[t.id] = node  # type: ignore[union-attr]
    want, todo = set(), ["async_request_sglang_generate", "async_request_openai_completions",
                         "async_request_openai_chat_completions"]
    while todo:
        name = todo.pop()
        if name in want or name not in defs:
            continue
        want.add(name)
        todo += [n.id for n in ast.walk(defs[name]) if isinstance(n, ast.Name)]
    body = [node for node in tree.body if any(defs.get(n) is node for n in want)]
    prelude = ("import asyncio, json, os, sys, time, traceback, copy, importlib, shutil, aiohttp, orjson\n"
               "import numpy as np\n"
               "from dataclasses import dataclass, field, replace\n"
               "from typing import Any, AsyncGenerator, Callable, Dict, List, Optional, Tuple, Union\n"
               "tqdm = object\n"
               "class _Args:\n"
               "    temperature = 0.0; disable_ignore_eos = False; top_p = 1.0; disable_stream = False\n"
               "    return_logprob = False; return_routed_experts = False; logprob_start_len = -1\n"
               "    top_logprobs_num = 0; token_ids_logprob = None; cache_report = False; header = None\n"
               "    backend = 'sglang'\n"
               "    def __getattr__(self, k):\n        return None\n"
               "args = _Args()\n")
    ns: dict = {}
    exec(compile(prelude + ast.unparse(ast.Module(body=body, type_ignores=[])), "bench_serving", "exec"), ns)
    return ns


async def bench_serving(url: str, api: str, streams: int, requests: int, tokens: int, wheel: str) -> dict:
    ns = load_bench_serving(wheel)
    fn = ns[{"sglang": "async_request_sglang_generate", "completions": "async_request_openai_completions",
             "chat": "async_request_openai_chat_completions"}[api]]
    inp = ns["RequestFuncInput"]
    fields = set(inp.__dataclass_fields__)
    prompt = [{"role": "user", "content": "x"}] if api == "chat" else "x"
    kw = {"prompt": prompt, "api_url": url + PATHS[api], "prompt_len": 1, "output_len": tokens, "model": "m",
          "lora_name": None, "image_data": None, "extra_request_body": {}}
    left = [requests]
    outs: list = []

    async def worker() -> None:
        while left[0] > 0:
            left[0] -= 1
            outs.append(await fn(inp(**{k: v for k, v in kw.items() if k in fields})))

    c0, w0 = cpu_s(), time.monotonic()
    await asyncio.gather(*(worker() for _ in range(streams)))
    cpu, wall = cpu_s() - c0, time.monotonic() - w0
    import numpy as np

    ok = [o for o in outs if o.success]
    assert ok, outs[0].error
    t = np.array([o.ttft for o in ok]) * 1e3
    itl = np.array([x for o in ok for x in o.itl]) * 1e3  # per token: a chunk's gap over its tokens
    return {"cpu_s": cpu, "wall_s": wall, "chunks": None, "ttft_mean_ms": t.mean(),
            "ttft_p99_ms": float(np.percentile(t, 99)), "gap_p99_ms": None,
            "itl_mean_ms": float(itl.mean()), "itl_p99_ms": float(np.percentile(itl, 99))}



def child(a: argparse.Namespace) -> None:
    import uvloop

    if a.child == "bare":
        coro = bare(a.url, a.api, a.streams, a.requests, a.tokens)
    elif a.child == "bench_serving":
        coro = bench_serving(a.url, a.api, a.streams, a.requests, a.tokens, a.bench_serving)
    else:
        coro = specwatch_bench(a.url, a.api, a.streams, a.requests, a.tokens, a.workers_one, a.tokenizer)
    print(json.dumps(uvloop.run(coro)))


# ---- the driver -----------------------------------------------------------------------------------------

def http(port: int, method: str, path: str) -> dict:
    import urllib.request

    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", method=method, data=b"" if method == "POST"
                                 else None)
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.loads(r.read())


def run_child(name: str, port: int, a: argparse.Namespace, streams: int, requests: int, workers: int) -> dict:
    http(port, "POST", "/reset")
    cmd = [sys.executable, __file__, "--child", name, "--url", f"http://127.0.0.1:{port}", "--api", a.api,
           "--streams-one", str(streams), "--requests", str(requests), "--tokens", str(a.tokens),
           "--workers-one", str(workers)] + (["--bench-serving", a.bench_serving] if a.bench_serving else []) \
        + (["--tokenizer"] if a.tokenizer else [])
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=900, check=False)
    if out.returncode != 0:
        raise SystemExit(f"{name} failed:\n{out.stderr[-3000:]}")
    res = json.loads(out.stdout.strip().splitlines()[-1])
    res["truth"] = http(port, "GET", "/truth")
    res["chunks"] = res["truth"]["chunks"]  # what the server sent: the same denominator for every client
    return res


def median_run(runs: list[dict]) -> dict:
    """The run with the median CPU per chunk (its latencies and truth stay together)."""
    return sorted(runs, key=lambda r: r["cpu_s"] / r["chunks"])[len(runs) // 2]


def fmt(v: float | None, spec: str = ".2f") -> str:
    return "-" if v is None else format(v, spec)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--streams", default="1,64,1000")
    p.add_argument("--api", choices=tuple(PATHS), default="sglang")
    p.add_argument("--tokens", type=int, default=256)
    p.add_argument("--burst", type=int, default=1, help="tokens per chunk after the first")
    p.add_argument("--usage", choices=("per_chunk", "final"), default="per_chunk")
    p.add_argument("--workers", default="1", help="specwatch bench --workers values to run, e.g. 1,2")
    p.add_argument("--rounds", type=float, default=10, help="requests per stream (fewer at 1,000 streams)")
    p.add_argument("--repeat", type=int, default=3, help="runs per client, interleaved; the median is shown")
    p.add_argument("--tokenizer", action="store_true", help="give bench --tokenizer (a WordLevel model of the "
                   "mock's words), for --usage final")
    p.add_argument("--bench-serving", help="an sglang wheel: also run bench_serving's client, verbatim")
    p.add_argument("--child", help=argparse.SUPPRESS)
    p.add_argument("--url", help=argparse.SUPPRESS)
    p.add_argument("--streams-one", dest="streams_one", type=int, help=argparse.SUPPRESS)
    p.add_argument("--workers-one", dest="workers_one", type=int, default=1, help=argparse.SUPPRESS)
    p.add_argument("--requests", type=int, help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.child:
        a.streams = a.streams_one
        child(a)
        return
    for streams in (int(s) for s in a.streams.split(",")):
        interval = 25.0 if streams >= 500 else 2.0
        requests = max(20, int(streams * (a.rounds if streams < 500 else 2)))
        port = free_port()
        server = subprocess.Popen([sys.executable, str(HERE / "streamserver.py"), str(port), "--interval-ms",
                                   str(interval), "--burst", str(a.burst), "--usage", a.usage],
                                  stdout=subprocess.PIPE, text=True)
        try:
            assert server.stdout is not None and server.stdout.readline().strip() == "ready"
            clients = [("bare aiohttp loop", "bare", 1)]
            clients += [("bench_serving", "bench_serving", 1)] if a.bench_serving else []
            clients += [(f"specwatch bench{f' --workers {w}' if w > 1 else ''}", "specwatch", w)
                        for w in (int(x) for x in a.workers.split(","))]
            runs: dict[str, list[dict]] = {label: [] for label, _, _ in clients}
            for _ in range(a.repeat):  # interleaved, so every client sees the same machine state
                for label, name, w in clients:
                    runs[label].append(run_child(name, port, a, streams, requests, w))
            results = {label: median_run(rs) for label, rs in runs.items()}
        finally:
            server.terminate()
            server.wait()
        offered = streams * 1e3 / interval
        print(f"\n== {streams} stream(s), api {a.api}, {a.tokens} tokens, a chunk every {interval:g} ms "
              f"({offered:,.0f} chunks/s offered), burst {a.burst}, usage {a.usage}, {requests} requests")
        print(f"{'client':<26}{'CPU us/chunk':>13}{'vs bare':>9}{'chunks/s':>10}  "
              f"{'TTFT mean true→rep':>19}{'TTFT p99 true→rep':>19}{'gap p99 true→rep':>18}"
              f"{'ITL mean true→rep':>19}{'ITL p99 true→rep':>18}")
        floor = results["bare aiohttp loop"]["cpu_s"] / results["bare aiohttp loop"]["chunks"]
        for label, r in results.items():
            t = r["truth"]
            per = r["cpu_s"] / r["chunks"]
            print(f"{label:<26}{per * 1e6:>13.2f}{per / floor:>8.2f}x{r['chunks'] / r['wall_s']:>10,.0f}  "
                  f"{fmt(t['ttft_mean_ms']):>9}→{fmt(r['ttft_mean_ms']):<9}{fmt(t['ttft_p99_ms']):>9}→"
                  f"{fmt(r['ttft_p99_ms']):<9}{fmt(t['gap_p99_ms']):>8}→{fmt(r['gap_p99_ms']):<9}"
                  f"{fmt(t['itl_mean_ms'], '.3f'):>9}→{fmt(r['itl_mean_ms'], '.3f'):<9}"
                  f"{fmt(t['itl_p99_ms'], '.3f'):>8}→{fmt(r['itl_p99_ms'], '.3f'):<9}")
            if r.get("loop_lag"):
                lag = r["loop_lag"]
                worst = fmt(lag.get("worst_interval_p99_ms"), ".3f")
                print(f"{'':<26}event-loop lag: worst interval p99 {worst} ms, max "
                      f"{fmt(lag.get('max_ms'), '.3f')} ms, distorted intervals {lag.get('distorted_intervals')}")
        if "bench_serving" in results:
            bs = results["bench_serving"]["cpu_s"] / results["bench_serving"]["chunks"]
            sw = results["specwatch bench"]["cpu_s"] / results["specwatch bench"]["chunks"]
            print(f"specwatch / bench_serving CPU per chunk: {sw / bs:.2f}x")
        if len([k for k in results if k.startswith("specwatch")]) > 1:
            one = results["specwatch bench"]
            base = one["chunks"] / one["wall_s"]
            for k, r in results.items():
                if k.startswith("specwatch bench --workers"):
                    print(f"{k} chunks/s vs one worker: {r['chunks'] / r['wall_s'] / base:.2f}x")


if __name__ == "__main__":
    main()

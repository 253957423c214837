"""Start the real SGLang 0.5.23 server of the real-server tier, as our CPU machines need it, and keep it in the
foreground until SIGTERM. Used by the tier's fixture and as ``sweep --launch``'s command (stdlib only).

    python tests/real/serve_sglang.py --port 30000 [--algorithm none|NGRAM|EAGLE3] [--draft-tokens N]
        [--steps S] [--topk K] [-- extra sglang flags, passed as they are]

The first line it prints is the exact command it runs (``shlex.join``), so a test can prove which flags
started the server; everything after is SGLang's own output (SGLang logs to stderr; the caller captures it).

It adds only what is about the model, the address and this machine: the tier's tiny model, 127.0.0.1 and
the port, the CPU engine and device, no CUDA/CPU graphs, a fixed KV pool (SGLang would size it from the
whole machine's memory), a smaller NGRAM cache (``NGRAM_CAPACITY``; every server is given it, NGRAM or not,
so a printed NGRAM line needs nothing added), one OpenMP thread, ``--sleep-on-idle`` (an idle CPU scheduler
otherwise busy-polls a core), ``--enable-metrics`` and the decode log interval; the environment of
``sglang_env.environment()`` (offline, caches inside the tier's cache, the stand-ins of ``sglang_cpu/`` first on
``PYTHONPATH``). The speculative
flags come only from ``--algorithm``/``--draft-tokens``/``--steps``/``--topk`` or from the raw extras: the
flags specwatch prints (``--speculative-algorithm EAGLE3 --speculative-eagle-topk 1 ...``,
``--speculative-adaptive --speculative-adaptive-config FILE``) are pasted after ``--`` unchanged. An EAGLE
algorithm without ``--speculative-draft-model-path`` is given the tier's SGLang head (the model's own).

SGLang runs in the launcher's process group, which its caller makes its own (the tier's fixture and
``sweep --launch`` start it with a new session): SIGTERM or SIGINT stops SGLang (SIGKILL after 20 s), and
whatever else of the group SGLang left behind is killed before the launcher exits.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import sglang_env

MODEL_NAME = "tiny-llama"
STOP_GRACE_S = 20.0
# NGRAM's trie is allocated whole at start: SGLang's default of 10 million nodes is about 1.5 GB zeroed, and
# two servers zeroing theirs at once took 13-15 s of system time each here (42 s for the pair to start; 30 s
# at 2 million, 2 s each). 2 million nodes is about 400 MB; the tier's busiest NGRAM server serves some tens
# of thousands of tokens, at most 18 nodes each (--speculative-ngram-max-trie-depth)
NGRAM_CAPACITY = 2_000_000


def speculative_flags(algorithm: str, draft_tokens: int | None, steps: int | None, topk: int | None) -> list[str]:
    """The speculative flags for ``--algorithm`` (none: no flags), with the tier's defaults: NGRAM at 4 draft
    tokens on a chain (breadth 1), EAGLE3 at 3 steps, topk 1, steps + 1 draft tokens, on the tier's head."""
    if algorithm == "none":
        if draft_tokens or steps or topk:
            raise SystemExit("serve_sglang: --draft-tokens/--steps/--topk need --algorithm NGRAM or EAGLE3")
        return []
    if algorithm == "NGRAM":
        if steps or topk:
            raise SystemExit("serve_sglang: NGRAM has no --steps/--topk here (its tree is the draft tokens, breadth 1)")
        return ["--speculative-algorithm", "NGRAM", "--speculative-num-draft-tokens", str(draft_tokens or 4),
                "--speculative-ngram-max-bfs-breadth", "1", "--speculative-ngram-min-bfs-breadth", "1"]
    s = steps or 3
    return ["--speculative-algorithm", algorithm, "--speculative-num-steps", str(s), "--speculative-eagle-topk",
            str(topk or 1), "--speculative-num-draft-tokens", str(draft_tokens or s + 1)]


def _value(flags: list[str], name: str) -> str | None:
    """The value of ``name`` among ``flags`` (``--x v`` or ``--x=v``; the last one wins, as argparse)."""
    found = None
    for i, word in enumerate(flags):
        if word == name and i + 1 < len(flags):
            found = flags[i + 1]
        elif word.startswith(name + "="):
            found = word.split("=", 1)[1]
    return found


def command(port: int, spec: list[str], extra: list[str], log_interval: int = 10) -> list[str]:
    cmd = [str(sglang_env.python()), "-m", "sglang.launch_server", "--model-path", str(sglang_env.model_dir()),
           "--served-model-name", MODEL_NAME, "--device", "cpu", "--host", "127.0.0.1", "--port", str(port),
           "--dtype", "bfloat16", "--context-length", "2048", "--cuda-graph-backend-decode", "disabled",
           "--cuda-graph-backend-prefill", "disabled", "--mem-fraction-static", "0.3", "--max-total-tokens",
           "131072", "--max-running-requests", "64", "--speculative-ngram-capacity", str(NGRAM_CAPACITY),
           "--sleep-on-idle", "--enable-metrics", "--decode-log-interval", str(log_interval), *spec, *extra]
    algorithm = (_value(cmd, "--speculative-algorithm") or "").upper()
    if algorithm in ("EAGLE", "EAGLE3") and _value(cmd, "--speculative-draft-model-path") is None:
        cmd += ["--speculative-draft-model-path", str(sglang_env.head_dir())]
    return cmd


def _stat(pid: int | str) -> list[str]:
    return (Path("/proc") / str(pid) / "stat").read_text().rpartition(")")[2].split()


def _leftovers() -> list[int]:
    """The other processes of this process group but this launcher and its ancestors (a ``sh -c`` that runs
    it): what SGLang left behind."""
    keep, pid = {os.getpid()}, os.getpid()
    with contextlib.suppress(OSError, ValueError, IndexError):
        while pid > 1:
            pid = int(_stat(pid)[1])
            keep.add(pid)
    found = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit() and int(d.name) not in keep:
            with contextlib.suppress(OSError, ValueError, IndexError):
                if int(_stat(d.name)[2]) == os.getpgrp():
                    found.append(int(d.name))
    return found


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--algorithm", default="none", choices=["none", "NGRAM", "EAGLE3"],
                   help="speculative decoding (default none); raw --speculative-* flags may come after --")
    p.add_argument("--draft-tokens", type=int, default=None, help="NGRAM: 4; EAGLE3: steps + 1")
    p.add_argument("--steps", type=int, default=None, help="EAGLE3 draft steps (default 3)")
    p.add_argument("--topk", type=int, default=None, help="EAGLE3 branching (default 1: a chain)")
    p.add_argument("--decode-log-interval", type=int, default=10, help="decode batches per 'Decode batch' line")
    p.add_argument("extra", nargs="*", help="sglang flags, after --, passed unchanged")
    a = p.parse_args()
    spec = speculative_flags(a.algorithm, a.draft_tokens, a.steps, a.topk)
    cmd = command(a.port, spec, a.extra, a.decode_log_interval)
    eagle = _value(cmd, "--speculative-draft-model-path") == str(sglang_env.head_dir())
    try:
        sglang_env.ensure(cases=False, head=eagle)
    except sglang_env.SetupError as exc:
        print(f"serve_sglang: {exc}", file=sys.stderr, flush=True)
        return 3
    print(shlex.join(cmd), flush=True)
    # one compute thread: on a CPU without AMX SGLang binds no OpenMP threads (its bootstrap skips
    # init_cpu_threads_env), and torch's two wait on each other whenever one is descheduled (both on one core,
    # an NGRAM server served 37 tok/s where one thread serves 700)
    child = subprocess.Popen(cmd, env={**sglang_env.environment(), "OMP_NUM_THREADS": "1"},
                             stdin=subprocess.DEVNULL)
    stopping: list[float] = []

    def stop(*_: object) -> None:
        if not stopping:
            stopping.append(time.monotonic())
            with contextlib.suppress(ProcessLookupError):
                child.send_signal(signal.SIGTERM)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    while True:
        try:
            rc = child.wait(timeout=0.5)
            break
        except subprocess.TimeoutExpired:
            if stopping and time.monotonic() - stopping[0] > STOP_GRACE_S:
                child.kill()
    for pid in _leftovers():  # SGLang's scheduler and detokenizer, should they outlive it
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    return 0 if stopping else rc


if __name__ == "__main__":
    sys.exit(main())

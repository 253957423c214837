"""Start the real vLLM server of the real-server tier, as our CPU machines need it, and keep it in the
foreground until SIGTERM. Used by the tier's fixture and as ``sweep --launch``'s command (stdlib only).

    python tests/real/serve_vllm.py --port 8000 [--k 3] [--method ngram|eagle3] [-- extra vllm serve flags]

What it does beyond ``vllm serve``: preloads tcmalloc and Intel OpenMP (vLLM warns of a large loss without
them), fixes the KV cache at 256 MiB (``KV_CACHE_BYTES``) and the memory share low (other processes run beside
it), turns off torch.compile (``--enforce-eager``: the tiny model's compute is not what we measure, and it saves
~25 s per start), keeps every cache and temporary file inside the tier's cache directory, and, once ``/health``
answers, pins every EngineCore thread to the Worker's CPU: left unpinned, the EngineCore's busy-wait shares
the other core with the API server and the client and streams arrive in bursts.

``--start-on-last-cpu``: vLLM binds its Worker to CPU 0 before the Worker imports torch and loads the model, so
servers started side by side import one after another on that core (six took 129-180 s). With this flag the
Worker imports on the last CPU (``VLLM_CPU_OMP_THREADS_BIND``) and, once ``/health`` answers, every Worker
thread moves to the CPUs vLLM's own binding gives it (all but the last: the frontend's), where it serves as
any other server here.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes.util
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import vllm_env

MODEL_NAME = "tiny-llama"
# vLLM zeroes its KV cache at start: 1 GiB (VLLM_CPU_KVCACHE_SPACE's least) cost four servers starting side by
# side 12-14 s of system time each here, 75 s for the four; at 256 MiB 4-7 s, 60 s. 256 MiB holds 174,720 tokens
# with the EAGLE-3 head's layer (262,144 without): more than --max-num-seqs x --max-model-len (131,072) can use
KV_CACHE_BYTES = 256 * 2**20
LAST_CPU = (os.cpu_count() or 1) - 1  # the frontend's, which vLLM's automatic binding keeps off the Worker


def speculative_config(k: int, method: str = "ngram") -> dict[str, object]:
    """The tier's config at ``k`` draft tokens (``sweep --speculative-config`` is given the same): ngram, or
    EAGLE-3 with the distilled head (vLLM wants its path absolute)."""
    if method == "eagle3":
        return {"method": "eagle3", "model": str(vllm_env.head_dir().resolve()), "num_speculative_tokens": k}
    return {"method": "ngram", "num_speculative_tokens": k, "prompt_lookup_max": 4, "prompt_lookup_min": 2}


def command(port: int, k: int | None, extra: list[str], method: str = "ngram") -> list[str]:
    cmd = [str(vllm_env.python()), str(vllm_env.shim()), "serve", str(vllm_env.model_dir()), "--host", "127.0.0.1",
           "--port", str(port), "--served-model-name", MODEL_NAME, "--max-model-len", "2048",
           "--gpu-memory-utilization", "0.3", "--enforce-eager", "--max-num-seqs", "64", "--kv-cache-memory-bytes",
           str(KV_CACHE_BYTES)]
    if k:
        cmd += ["--speculative-config", json.dumps(speculative_config(k, method)), "--per-request-spec-decode-metrics",
                "summary"]  # metrics.speculative_decoding on every response: specwatch reads it
    return cmd + extra


def environment(stats_interval_s: float) -> dict[str, str]:
    cache = vllm_env.cache_dir()
    tmp = Path(tempfile.mkdtemp(prefix="vllm-", dir=cache))  # vLLM leaves vllm_dist_* files behind
    # tcmalloc by its soname, as the dynamic loader finds it (Debian's libtcmalloc-minimal4)
    tcmalloc = ctypes.util.find_library("tcmalloc_minimal")
    iomp = vllm_env.venv_dir() / "lib" / "libiomp5.so"
    preload = [*([tcmalloc] if tcmalloc else []), *([str(iomp)] if iomp.exists() else [])]
    # the KV cache's size is the flag's (``command``): vLLM lets this legacy variable override it
    inherited = {k: v for k, v in os.environ.items() if k != "VLLM_CPU_KVCACHE_SPACE"}
    return {**inherited, "LD_PRELOAD": ":".join(preload), "VLLM_LOG_STATS_INTERVAL": str(stats_interval_s),
            "VLLM_CACHE_ROOT": str(cache / "vllm-cache"),
            "TMPDIR": str(tmp), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1",
            "DO_NOT_TRACK": "1", "PYTHONUNBUFFERED": "1"}


def healthy(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
            return bool(r.status == 200)
    except OSError:
        return False


def processes(pgid: int) -> dict[str, int]:
    """Process title → pid for the server's processes (``VLLM::EngineCore``, ``VLLM::Worker``)."""
    found = {}
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_text()
            cmdline = (d / "cmdline").read_bytes().split(b"\0")[0].decode(errors="replace")
        except OSError:
            continue
        fields = stat.rpartition(")")[2].split()
        if int(fields[2]) == pgid and cmdline.startswith("VLLM::"):
            found[cmdline.strip()] = int(d.name)
    return found


def pin_threads(pid: int, cpus: set[int]) -> None:
    """Every thread of process ``pid`` onto ``cpus`` (affinity is per thread)."""
    for tid in os.listdir(f"/proc/{pid}/task"):
        with contextlib.suppress(OSError):  # a thread that ended meanwhile
            os.sched_setaffinity(int(tid), cpus)


def move_worker(pgid: int) -> str:
    """Every Worker thread onto the CPUs vLLM's automatic binding gives the Worker: all but the last."""
    worker = next((pid for name, pid in processes(pgid).items() if name.startswith("VLLM::Worker")), None)
    if worker is None:
        return "Worker not moved: not found"
    cpus = set(range(max(1, LAST_CPU)))
    pin_threads(worker, cpus)
    return f"Worker {worker} moved to CPUs {sorted(cpus)} after its start"


def pin_engine_core(pgid: int) -> str:
    procs = processes(pgid)
    core = next((pid for name, pid in procs.items() if name.startswith("VLLM::EngineCore")), None)
    worker = next((pid for name, pid in procs.items() if name.startswith("VLLM::Worker")), None)
    if core is None or worker is None:
        return f"not pinned: found {sorted(procs)}"
    cpus = os.sched_getaffinity(worker)
    pin_threads(core, cpus)
    return f"EngineCore {core} pinned to the Worker's CPUs {sorted(cpus)}"


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--k", type=int, default=0, help="draft tokens; 0: plain decoding")
    p.add_argument("--method", default="ngram", choices=["ngram", "eagle3"], help="the drafter (default ngram)")
    p.add_argument("--stats-interval", type=float, default=2.0)
    p.add_argument("--ready-timeout", type=float, default=300.0)
    p.add_argument("--start-on-last-cpu", action="store_true", help="the Worker imports on the last CPU, then moves")
    p.add_argument("extra", nargs="*")
    a = p.parse_args()
    try:
        vllm_env.ensure()
    except vllm_env.SetupError as exc:
        print(f"serve_vllm: {exc}", file=sys.stderr, flush=True)
        return 3
    # every CPU to vLLM, whatever this process inherited (a client pinned to CPU 1 that launches it, as a sweep
    # does): vLLM binds its Worker itself, keeping CPU 1 for the frontend, and would otherwise put the Worker
    # on the client's CPU
    os.sched_setaffinity(0, range(os.cpu_count() or 1))
    env = environment(a.stats_interval)
    if a.start_on_last_cpu:
        env["VLLM_CPU_OMP_THREADS_BIND"] = str(LAST_CPU)
    child = subprocess.Popen(command(a.port, a.k, a.extra, a.method), env=env, stdin=subprocess.DEVNULL)
    signal.signal(signal.SIGTERM, lambda *_: child.terminate())
    deadline = time.monotonic() + a.ready_timeout
    while child.poll() is None and not healthy(a.port):
        if time.monotonic() > deadline:
            print(f"serve_vllm: not healthy after {a.ready_timeout:.0f} s", file=sys.stderr, flush=True)
            child.terminate()
            break
        time.sleep(0.5)
    if child.poll() is None and a.start_on_last_cpu:
        print(f"serve_vllm: {move_worker(os.getpgid(child.pid))}", flush=True)
    if child.poll() is None and os.environ.get("PIN_ENGINE_CORE", "1") != "0":
        print(f"serve_vllm: {pin_engine_core(os.getpgid(child.pid))}", flush=True)
    try:
        return child.wait()
    finally:
        shutil.rmtree(env["TMPDIR"], ignore_errors=True)  # this start's own: nothing else writes there


if __name__ == "__main__":
    sys.exit(main())

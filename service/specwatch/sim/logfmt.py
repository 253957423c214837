"""SGLang scheduler log lines ("Prefill batch" / "Decode batch"), per release family. Pure.

Shapes are SGLang's scheduler lines verbatim, release by release, including trailing ", " separators where
a release printed them (tests/golden/logs/ holds a sample of each family). ``FAMILIES`` maps the
``--log-format`` value to the release range it stands for.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

FAMILIES: dict[str, str] = {
    "0.4.3": "0.4.1.post7-0.4.3.post2: 'Decode batch.', always TP0, cache hit rate, no trailing separator",
    "0.4.5": "0.4.3.post3-0.4.5.post3: 'Decode batch.', always TP0, trailing ', '",
    "0.4.8": "0.4.6.post4-0.4.9: no tag at TP=1, cuda graph, no trailing separator",
    "0.4.9.post1": "0.4.9.post1-0.4.9.post2: trailing ISO timestamp field",
    "0.5.3": "0.5.3.post2-0.5.3.post3: accept rate = len/(steps+1), trailing ', '",
    "0.5.4": "0.5.4: 'Decode batch [N],' iteration counter, trailing ', '",
    "0.5.8": "0.5.5.post3-0.5.8.post1: 'Decode batch,', accept rate = len/draft_tokens, trailing ', '",
    "0.5.23": "0.5.11-0.5.23: no trailing separator, #pending-token, accept rate = (len-1)/(draft_tokens-1)",
}
DEFAULT_FAMILY = "0.5.23"


@dataclass(frozen=True, slots=True)
class DecodeStats:
    running: int
    used_tokens: int
    token_usage: float
    accept_tokens: int  # sum over rounds of (accepted drafts + batch size) in the interval
    forward_ct: int  # sum over rounds of batch size in the interval
    gen_throughput: float
    queued: int
    iteration: int
    num_steps: int
    num_draft_tokens: int
    speculative: bool


@dataclass(frozen=True, slots=True)
class PrefillStats:
    new_seq: int
    new_tokens: int
    cached_tokens: int
    used_tokens: int
    token_usage: float
    running: int
    queued: int
    pending_tokens: int
    input_throughput: float
    iteration: int


def prefix(family: str, wall_s: float, log_ms: bool = False) -> str:
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(wall_s))
    if log_ms and family in ("0.5.8", "0.5.23"):
        stamp += f".{int(wall_s * 1000) % 1000:03d}"
    tag = " TP0" if family in ("0.4.3", "0.4.5") else ""
    return f"[{stamp}{tag}] "


def accept_rate(family: str, s: DecodeStats) -> float:
    length = s.accept_tokens / s.forward_ct if s.forward_ct else 0.0
    if family == "0.5.3":
        return length / (s.num_steps + 1)
    if family in ("0.5.4", "0.5.8"):
        return length / s.num_draft_tokens
    return (length - 1.0) / (s.num_draft_tokens - 1) if s.num_draft_tokens > 1 else 0.0


def _iso(wall_s: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(wall_s)) + f".{int(wall_s * 1e6) % 1_000_000:06d}"


def decode_line(family: str, s: DecodeStats, wall_s: float, log_ms: bool = False) -> str:
    old = family in ("0.4.3", "0.4.5", "0.4.8", "0.4.9.post1", "0.5.3")
    head = "Decode batch." if old else (f"Decode batch [{s.iteration}]," if family == "0.5.4" else "Decode batch,")
    parts = [f"#running-req: {s.running}", f"#token: {s.used_tokens}", f"token usage: {s.token_usage:.2f}"]
    if s.speculative:
        length = s.accept_tokens / s.forward_ct if s.forward_ct else 0.0
        parts.append(f"accept len: {length:.2f}")
        if family in ("0.5.3", "0.5.4", "0.5.8", "0.5.23"):
            parts.append(f"accept rate: {accept_rate(family, s):.2f}")
    if family not in ("0.4.3", "0.4.5"):
        parts.append("cuda graph: True")
    parts.append(f"gen throughput (token/s): {s.gen_throughput:.2f}")
    parts.append(f"#queue-req: {s.queued}")
    if family == "0.4.9.post1":
        parts.append(f"timestamp: {_iso(wall_s)}")
    trailing = ", " if family in ("0.4.5", "0.5.3", "0.5.4", "0.5.8") else ""
    return prefix(family, wall_s, log_ms) + head + " " + ", ".join(parts) + trailing


def prefill_line(family: str, s: PrefillStats, wall_s: float, log_ms: bool = False) -> str:
    old = family in ("0.4.3", "0.4.5", "0.4.8", "0.4.9.post1", "0.5.3")
    head = "Prefill batch." if old else (f"Prefill batch [{s.iteration}]," if family == "0.5.4" else "Prefill batch,")
    parts = [f"#new-seq: {s.new_seq}", f"#new-token: {s.new_tokens}", f"#cached-token: {s.cached_tokens}"]
    if family == "0.4.3":
        parts.append("cache hit rate: 0.00%")
    if family == "0.4.9.post1":
        parts.append(f"#token: {s.used_tokens}")
    parts += [f"token usage: {s.token_usage:.2f}", f"#running-req: {s.running}", f"#queue-req: {s.queued}"]
    if family == "0.4.9.post1":
        parts.append(f"timestamp: {_iso(wall_s)}")
    if family == "0.5.23":
        parts += [f"#pending-token: {s.pending_tokens}", "cuda graph: False",
                  f"input throughput (token/s): {s.input_throughput:.2f}"]
    trailing = ", " if family in ("0.4.5", "0.5.3", "0.5.4", "0.5.8") else ""
    return prefix(family, wall_s, log_ms) + head + " " + ", ".join(parts) + trailing

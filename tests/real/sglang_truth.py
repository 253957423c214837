"""What the real SGLang server itself says, read independently of specwatch's parsers: its ``/metrics`` and its
"Decode batch" log lines (plain regular expressions on the shapes in the reference, sglang.md)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from conftest import http_get

DECODE_RE = re.compile(r"Decode batch, #running-req: (\d+),[^\n]*")
ACCEPT_RE = re.compile(r"accept len: ([\d.]+)")
GEN_RE = re.compile(r"gen throughput \(token/s\): ([\d.]+)")


def metrics(url: str) -> dict[str, float]:
    """``sglang:`` values summed over their labels (tp_rank, is_streaming, ...)."""
    status, body = http_get(url + "/metrics")
    assert status == 200, status
    out: dict[str, float] = {}
    for line in body.decode().splitlines():
        if not line.startswith("sglang:"):
            continue
        name = re.split(r"[{ ]", line, maxsplit=1)[0]
        out[name] = out.get(name, 0.0) + float(line.rsplit(" ", 1)[1])
    return out


@dataclass(frozen=True)
class DecodeLine:
    running: int
    accept_length: float | None  # absent without speculation
    gen_throughput: float


def decode_lines(log: Path) -> list[DecodeLine]:
    text = log.read_text(errors="replace")
    out = []
    for m in DECODE_RE.finditer(text):
        accept, gen = ACCEPT_RE.search(m.group(0)), GEN_RE.search(m.group(0))
        assert gen is not None, m.group(0)
        out.append(DecodeLine(int(m.group(1)), float(accept.group(1)) if accept else None, float(gen.group(1))))
    return out

"""What the real vLLM server itself says, read independently of specwatch's parsers: its ``/metrics`` counters
and its own log lines (plain regular expressions on the reference's verbatim shapes)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from conftest import http_get

MEAN_RE = re.compile(r"SpecDecoding metrics: Mean acceptance length: ([\d.]+)")
POS_RE = re.compile(r"Per-position acceptance rate: ([\d., ]+?), Avg")
DRAFTED_RE = re.compile(r"Drafted: (\d+) tokens")
GEN_RE = re.compile(r"Avg generation throughput: ([\d.]+) tokens/s, Running: (\d+) reqs")
STAMP_RE = re.compile(r"INFO (\d\d-\d\d \d\d:\d\d:\d\d) ")


def metrics(url: str) -> dict[str, float]:
    """Counter and gauge values summed over labels, per position as ``name{position}``."""
    status, body = http_get(url + "/metrics")
    assert status == 200
    out: dict[str, float] = {}
    for line in body.decode().splitlines():
        if not line.startswith("vllm:"):
            continue
        name, _, rest = line.partition("{")
        labels, _, value = rest.rpartition("} ")
        pos = re.search(r'position="(\d+)"', labels)
        key = f"{name}{{{pos.group(1)}}}" if pos else name
        out[key] = out.get(key, 0.0) + float(value)
    return out


@dataclass(frozen=True)
class SpecLine:
    mean: float
    positions: tuple[float, ...]
    drafted: int


def spec_lines(log: Path) -> list[SpecLine]:
    out = []
    for line in log.read_text(errors="replace").splitlines():
        m = MEAN_RE.search(line)
        if m:
            pos = POS_RE.search(line)
            out.append(SpecLine(float(m.group(1)), tuple(float(x) for x in pos.group(1).split(", ")) if pos else (),
                                int(DRAFTED_RE.search(line).group(1))))  # type: ignore[union-attr]
    return out


@dataclass(frozen=True)
class EngineLine:
    stamp: str  # MM-DD HH:MM:SS, local time
    generation_tps: float
    running: int


def engine_lines(log: Path) -> list[EngineLine]:
    out = []
    for line in log.read_text(errors="replace").splitlines():
        m = GEN_RE.search(line)
        s = STAMP_RE.search(line)
        if m and s and "Engine 000:" in line:
            out.append(EngineLine(s.group(1), float(m.group(1)), int(m.group(2))))
    return out

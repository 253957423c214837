"""Parsers for server log lines: SGLang "Prefill batch" / "Decode batch", vLLM "SpecDecoding metrics" and its
"Engine 000: Avg prompt throughput" stats line.

Server side, parse stage; pure. Every line gets a ``ParseResult``: ``parsed`` (a ``ServerSample``), ``ignored``
(not one of ours) or ``malformed`` (looks like ours but carries garbage values: no sample is produced).
Fields are read as an unordered key/value map so that every SGLang release family (0.4.1 to 0.5.23, see the
golden files in tests/golden/logs/) parses, and so do variants beyond them: extra or missing fields,
reordering, rank tags, milliseconds, ``[N]`` iteration counters, trailing separators, ANSI colours and
process-manager prefixes. vLLM's lines are read for every generation (V0 "Speculative metrics", V1 and
current "SpecDecoding metrics"; the stats line of V0, V1 and current, GPU or CPU KV cache).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from ..errors import LogLineError
from ..records import MAX_ACCEPT_LENGTH, LogResult, ServerSample

ANSI_RE = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")
SGLANG_RE = re.compile(
    r"(?:\[(?P<ts>\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}:\d{2})(?:[.,]\d{1,6})?(?P<tags>(?: [A-Z][A-Z_]*\d+)*)\]\s*)?"
    r"(?P<kind>Prefill|Decode) batch(?: ?\[(?P<iter>\d+)\])?[.,:]?\s+(?P<body>#.*)$"
)
DP_RE = re.compile(r"\bDP(\d+)\b")
VLLM_ANCHOR = "SpecDecoding metrics:"
VLLM_ENGINE_ANCHOR = "Avg prompt throughput:"
VLLM_ENGINE_RE = re.compile(r"Engine (\d{1,4}): $")
VLLM_V0_ANCHOR = "Speculative metrics:"
VLLM_FIELDS = {
    "mean": re.compile(r"Mean acceptance length: ([-\w.]+)"),
    "accepted": re.compile(r"Accepted: ([-\w.]+) tokens"),
    "drafted": re.compile(r"Drafted: ([-\w.]+) tokens"),
    "rate": re.compile(r"(?:Avg )?Draft acceptance rate: ([-\w.]+)%"),
    "positions": re.compile(r"Per-position acceptance rate: ([-\d., ]+?)(?:, [A-Za-z]|$)"),
    "accepted_tps": re.compile(r"Accepted throughput: ([-\w.]+) tokens/s"),
}
V0_FIELDS = {
    "rate": re.compile(r"Draft acceptance rate: ([-\w.]+)"),
    "k": re.compile(r"Number of speculative tokens: ([-\w.]+)"),
    "accepted": re.compile(r"Number of accepted tokens: ([-\w.]+)"),
    "drafted": re.compile(r"Number of draft tokens: ([-\w.]+)"),
    "emitted": re.compile(r"Number of emitted tokens: ([-\w.]+)"),
}


@dataclass(frozen=True, slots=True)
class ParseResult:
    result: LogResult
    sample: ServerSample | None = None
    reason: str = ""


IGNORED = ParseResult("ignored")


MAX_FLOAT = 1e12  # no tok/s, rate or count a server prints comes near; inf and 1e308 are garbage
MAX_INT = 2**53  # exact in a float (Prometheus) and in JSON (/api/summary)


def _float(v: str, key: str, lo: float = 0.0, hi: float = MAX_FLOAT) -> float:
    try:
        x = float(v.rstrip("%"))
    except ValueError:
        raise LogLineError(f"{key}: {v!r} is not a number") from None
    if not math.isfinite(x) or not lo <= x <= hi:
        raise LogLineError(f"{key}: {v!r} is out of range")
    return x


def _int(v: str, key: str) -> int:
    if not (v.isascii() and v.isdigit()):
        raise LogLineError(f"{key}: {v!r} is not a non-negative integer")
    if len(v) > 16 or int(v) > MAX_INT:
        raise LogLineError(f"{key}: {v[:20]!r} is out of range")
    return int(v)


def split_fields(body: str) -> dict[str, str]:
    fields: dict[str, str] = {}
    for part in body.split(", "):
        key, sep, value = part.partition(": ")
        if sep:
            fields[key] = value
    return fields


def _sglang(m: re.Match[str]) -> ServerSample:
    f = split_fields(m.group("body").rstrip(", \t"))
    if "#running-req" not in f and "#new-seq" not in f:
        raise LogLineError("no #running-req or #new-seq field")
    for key in ("#new-seq", "#new-token", "#cached-token", "#token"):
        if key in f:
            _int(f[key], key)
    dp = DP_RE.search(m.group("tags") or "")
    al = f.get("accept len")
    rate = f.get("accept rate")
    gen = f.get("gen throughput (token/s)")
    usage = f.get("token usage", f.get("full token usage"))
    accept_length = _float(al, "accept len", 0.0, MAX_ACCEPT_LENGTH) if al is not None else None
    return ServerSample(
        source="sglang_decode" if m.group("kind") == "Decode" else "sglang_prefill",
        dp_rank=dp.group(1) if dp else "",
        wall_time=m.group("ts") or "",
        accept_length=accept_length if accept_length else None,  # 0.00 means "no verify round yet"
        accept_rate=_float(rate, "accept rate", 0.0, 1.0) if rate is not None else None,
        gen_throughput=_float(gen, "gen throughput") if gen is not None else None,
        running=_int(f["#running-req"], "#running-req") if "#running-req" in f else None,
        queued=_int(f["#queue-req"], "#queue-req") if "#queue-req" in f else None,
        token_usage=_float(usage, "token usage", 0.0, 1.5) if usage is not None else None,
        iteration=_int(m.group("iter"), "iteration") if m.group("iter") else None,
    )


def _vllm(text: str) -> ServerSample:
    got = {k: r.search(text) for k, r in VLLM_FIELDS.items()}
    vals = {k: g.group(1) for k, g in got.items() if g}
    if not vals:
        raise LogLineError("SpecDecoding line without known fields")
    positions: tuple[float, ...] = ()
    if "positions" in vals:
        try:
            positions = tuple(float(x) for x in vals["positions"].split(",") if x.strip())
        except ValueError:
            raise LogLineError(f"per-position: {vals['positions']!r}") from None
        if any(not 0.0 <= p <= 1.0 for p in positions):
            raise LogLineError("per-position acceptance outside 0..1")
    mean = None
    if "mean" in vals and vals["mean"] != "nan":
        mean = _float(vals["mean"], "mean acceptance length", 1.0, MAX_ACCEPT_LENGTH)
    elif positions:
        mean = 1.0 + sum(positions)
    rate = None
    if "rate" in vals and vals["rate"] != "nan":
        rate = _float(vals["rate"], "draft acceptance rate", 0.0, 100.0) / 100.0
    return ServerSample(
        source="vllm_spec", accept_length=mean, accept_rate=rate,
        accepted_tokens=_int(vals["accepted"], "accepted") if "accepted" in vals else None,
        drafted_tokens=_int(vals["drafted"], "drafted") if "drafted" in vals else None,
        gen_throughput=None, position_acceptance=positions,
    )


def _vllm_v0(text: str) -> ServerSample:
    # V0 ended the line with a period ("Number of emitted tokens: 2850.")
    vals = {k: g.group(1).rstrip(".") for k, r in V0_FIELDS.items() if (g := r.search(text))}
    if "rate" not in vals:
        raise LogLineError("Speculative metrics line without a draft acceptance rate")
    rate = _float(vals["rate"], "draft acceptance rate", 0.0, 1.0)
    mean = None
    if {"k", "drafted", "emitted"} <= vals.keys():
        k, drafted, emitted = (_int(vals[x], x) for x in ("k", "drafted", "emitted"))
        steps = drafted / k if k else 0
        mean = emitted / steps if steps else None
    return ServerSample(source="vllm_spec", accept_length=mean, accept_rate=rate,
                        accepted_tokens=_int(vals["accepted"], "accepted") if "accepted" in vals else None,
                        drafted_tokens=_int(vals["drafted"], "drafted") if "drafted" in vals else None)


def _unit(v: str, unit: str, key: str) -> str:
    if not v.endswith(unit):
        raise LogLineError(f"{key}: {v[:40]!r} does not end in {unit!r}")
    return v[: -len(unit)].strip()


def _vllm_engine(head: str, body: str) -> ServerSample:
    """vLLM's stats line: ``Engine 000: Avg prompt throughput: …, Avg generation throughput: … tokens/s,
    Running: N reqs, Waiting: N reqs, GPU KV cache usage: x%, …`` (V1; ``CPU KV`` on CPU builds), or V0's
    ``Avg prompt throughput: …, Running: N reqs, Swapped: N reqs, Pending: N reqs, GPU KV cache usage: x%, …``.
    Fields are read by name; the ``N Engines Aggregated:`` form has no engine index."""
    f = split_fields("Avg prompt throughput: " + body.strip().rstrip("."))
    if "Avg generation throughput" not in f or "Running" not in f:
        raise LogLineError("stats line without generation throughput or running requests")
    m = VLLM_ENGINE_RE.search(head[-20:])
    usage = f.get("GPU KV cache usage", f.get("CPU KV cache usage", f.get("KV cache usage")))
    waiting = f.get("Waiting", f.get("Pending"))
    return ServerSample(
        source="vllm_engine", dp_rank=str(int(m.group(1))) if m else "",
        gen_throughput=_float(_unit(f["Avg generation throughput"], "tokens/s", "generation throughput"),
                              "generation throughput"),
        running=_int(_unit(f["Running"], "reqs", "running"), "running"),
        queued=_int(_unit(waiting, "reqs", "waiting"), "waiting") if waiting is not None else None,
        token_usage=_float(_unit(usage, "%", "KV cache usage"), "KV cache usage", 0.0, 150.0) / 100.0
        if usage is not None else None,
    )


def parse_line(line: str) -> ParseResult:
    if "\x1b" in line:
        line = ANSI_RE.sub("", line)
    try:
        if " batch" in line:
            m = SGLANG_RE.search(line)
            if m is not None:
                return ParseResult("parsed", _sglang(m))
            if re.search(r"(?:Prefill|Decode) batch[.,\[ ]", line) and "#" in line:
                return ParseResult("malformed", reason="unrecognised batch line shape")
            return IGNORED
        i = line.find(VLLM_ANCHOR)
        if i >= 0:
            return ParseResult("parsed", _vllm(line[i + len(VLLM_ANCHOR):]))
        i = line.find(VLLM_V0_ANCHOR)
        if i >= 0:
            return ParseResult("parsed", _vllm_v0(line[i + len(VLLM_V0_ANCHOR):]))
        i = line.find(VLLM_ENGINE_ANCHOR)
        if i >= 0:
            return ParseResult("parsed", _vllm_engine(line[:i], line[i + len(VLLM_ENGINE_ANCHOR):]))
    except LogLineError as exc:
        return ParseResult("malformed", reason=str(exc))
    return IGNORED

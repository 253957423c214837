"""Records as JSON Lines, losslessly: what ``bench --records`` writes and ``specwatch report`` replays.

One object per line, tagged by ``kind``: ``run`` (a ``RunInfo``), ``request`` (a ``RequestRecord``) or
``sample`` (a ``ServerSample``). Every field is written, so ``decode(encode(r)) == r``. Decoding is strict:
a line with a missing or mistyped field raises ``RecordFileError`` naming the line and the field.
"""

from __future__ import annotations

import dataclasses
import math
from array import array
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import orjson

from .errors import RecordFileError
from .records import Outcome, RequestRecord, RunInfo, ServerSample, SpecStats

Record = RequestRecord | ServerSample | RunInfo
KINDS: dict[type, str] = {RunInfo: "run", RequestRecord: "request", ServerSample: "sample"}


def _plain(v: Any) -> Any:
    return v.tolist() if isinstance(v, array) else v  # the client's per-chunk buffers


def encode(rec: Record) -> bytes:
    doc = {"kind": KINDS[type(rec)]} | {f.name: _plain(getattr(rec, f.name)) for f in dataclasses.fields(rec)}
    return orjson.dumps(doc, option=orjson.OPT_NON_STR_KEYS) + b"\n"


def write(path: str, records: Iterable[Record]) -> None:
    with open(path, "wb") as f:
        f.writelines(encode(r) for r in records)


def _ints(v: Any, key: str) -> tuple[int, ...]:
    if not isinstance(v, list) or not all(isinstance(x, int) and not isinstance(x, bool) for x in v):
        raise RecordFileError(f"{key}: expected a list of integers")
    return tuple(v)


def _floats(v: Any, key: str) -> tuple[float, ...]:
    if not isinstance(v, list) or not all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in v):
        raise RecordFileError(f"{key}: expected a list of numbers")
    return tuple(float(x) for x in v)


REQUEST_TYPES: dict[str, tuple[type, ...]] = {
    **dict.fromkeys(("api", "target", "prompt_id", "domain", "error"), (str,)),
    **dict.fromkeys(("intended_ns", "sent_ns", "done_ns", "prompt_tokens", "output_tokens"), (int,)),
    "warmup": (bool,), "tokens_exact": (bool,), "http_status": (int, type(None)),
}
OPTIONAL_TYPES: dict[str, tuple[type, ...]] = {"chunk_tokens_max": (int, type(None))}  # absent before 0.4.0


def _check(d: dict[str, Any], types: dict[str, tuple[type, ...]]) -> None:
    for key, allowed in types.items():
        if key not in d:
            raise RecordFileError(f"missing field {key!r}")
        v = d[key]
        if not isinstance(v, allowed) or (isinstance(v, bool) and bool not in allowed):
            raise RecordFileError(f"{key}: {v!r} is not of type {' or '.join(t.__name__ for t in allowed)}")


def _request(d: dict[str, Any]) -> RequestRecord:
    _check(d, REQUEST_TYPES)
    _check({k: v for k, v in d.items() if k in OPTIONAL_TYPES}, {k: t for k, t in OPTIONAL_TYPES.items() if k in d})
    spec = d.get("spec")
    if spec is not None:
        if not isinstance(spec, dict):
            raise RecordFileError("spec: expected an object or null")
        _check(spec, {"verify_ct": (int,), "accept_length": (int, float, type(None))})
        spec = SpecStats(verify_ct=spec["verify_ct"], accept_length=spec.get("accept_length"),
                         histogram=_ints(spec.get("histogram", []), "spec.histogram"))
    try:
        outcome = Outcome(d["outcome"])
    except ValueError:
        raise RecordFileError(f"outcome: {d['outcome']!r} is not one of {', '.join(o.value for o in Outcome)}") \
            from None
    texts = d.get("chunk_texts", [])
    if not isinstance(texts, list) or not all(isinstance(t, str) for t in texts):
        raise RecordFileError("chunk_texts: expected a list of strings")
    rec = RequestRecord(**(d | {"chunk_ns": _ints(d["chunk_ns"], "chunk_ns"), "chunk_texts": tuple(texts),
                                "chunk_tokens": _ints(d["chunk_tokens"], "chunk_tokens"),
                                "outcome": outcome, "spec": spec}))
    if len(rec.chunk_ns) != len(rec.chunk_tokens):
        raise RecordFileError("chunk_ns and chunk_tokens differ in length")
    load = rec.server_load
    if load is not None and (isinstance(load, bool) or not isinstance(load, (int, float))
                             or not math.isfinite(load) or not 0 <= load <= 1e7):
        raise RecordFileError(f"server_load: {load!r} is not a load")
    pc = rec.probe_concurrency
    if pc is not None and (isinstance(pc, bool) or not isinstance(pc, int) or not 0 <= pc <= 1_000_000):
        raise RecordFileError(f"probe_concurrency: {pc!r} is not a count")
    return rec


def _sample(d: dict[str, Any]) -> ServerSample:
    return ServerSample(**(d | {"position_acceptance": _floats(d.get("position_acceptance", []),
                                                                "position_acceptance")}))


def _run(d: dict[str, Any]) -> RunInfo:
    return RunInfo(**d)


DECODERS: dict[str, Callable[[dict[str, Any]], Record]] = {"run": _run, "request": _request, "sample": _sample}


def decode(line: bytes) -> Record:
    try:
        doc = orjson.loads(line)
    except orjson.JSONDecodeError as exc:
        raise RecordFileError(f"not JSON: {exc}") from None
    if not isinstance(doc, dict) or doc.get("kind") not in DECODERS:
        raise RecordFileError(f"expected an object whose kind is one of {', '.join(DECODERS)}")
    kind = doc.pop("kind")
    try:
        return DECODERS[kind](doc)
    except KeyError as exc:
        raise RecordFileError(f"{kind}: missing field {exc}") from None
    except TypeError as exc:
        raise RecordFileError(f"{kind}: {exc}") from None


def read(path: str) -> Iterator[Record]:
    """Every record of a file, in order; ``RecordFileError`` names the file and line of the first bad one."""
    with open(path, "rb") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                yield decode(line)
            except RecordFileError as exc:
                raise RecordFileError(f"{path}:{n}: {exc}") from None

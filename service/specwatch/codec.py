"""Records as JSON, losslessly: the JSON Lines ``bench --records`` writes and ``specwatch report`` replays,
and the offline documents (``results``: ``bench --json``, ``sweep.json``).

A records file has one object per line, tagged by ``kind``: ``run`` (a ``RunInfo``), ``request`` (a
``RequestRecord``) or ``sample`` (a ``ServerSample``). Every field is written, so ``decode(encode(r)) == r``.
Documents are decoded by ``load_as`` from the dataclasses' own field types. Decoding is strict: a missing
(and not defaulted), unknown or mistyped field raises ``RecordFileError`` naming the line or the path of the
field.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import types
import typing
from array import array
from collections.abc import Callable, Iterable, Iterator
from typing import Any, TypeVar

import orjson

from .errors import RecordFileError
from .records import (
    APIS,
    SAMPLE_SOURCES,
    TARGETS,
    LoopLag,
    Outcome,
    RequestRecord,
    RunInfo,
    Schedule,
    ServerSample,
    SpecStats,
)
from .results import SWEEP_VERSION, SweepDoc

T = TypeVar("T")

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
OPTIONAL_TYPES: dict[str, tuple[type, ...]] = {"chunk_tokens_max": (int, type(None)),  # absent before 0.4.0
                                               "cached_tokens": (int, type(None))}  # absent before 0.6


def _check(d: dict[str, Any], types: dict[str, tuple[type, ...]]) -> None:
    for key, allowed in types.items():
        if key not in d:
            raise RecordFileError(f"missing field {key!r}")
        v = d[key]
        if not isinstance(v, allowed) or (isinstance(v, bool) and bool not in allowed):
            raise RecordFileError(f"{key}: {v!r} is not of type {' or '.join(t.__name__ for t in allowed)}")


def _one_of(d: dict[str, Any], key: str, allowed: tuple[str, ...]) -> None:
    if d.get(key) not in allowed:
        raise RecordFileError(f"{key}: {d.get(key)!r} is not one of {', '.join(allowed)}")


def _request(d: dict[str, Any]) -> RequestRecord:
    _check(d, REQUEST_TYPES)
    _one_of(d, "api", APIS)
    _one_of(d, "target", TARGETS)
    _check({k: v for k, v in d.items() if k in OPTIONAL_TYPES}, {k: t for k, t in OPTIONAL_TYPES.items() if k in d})
    spec = d.get("spec")
    if spec is not None:
        if not isinstance(spec, dict):
            raise RecordFileError("spec: expected an object or null")
        _check(spec, {"verify_ct": (int,), "accept_length": (int, float, type(None))})
        _check({k: v for k, v in spec.items() if k == "accepted_drafts"}, {"accepted_drafts": (int, type(None))})
        spec = SpecStats(verify_ct=spec["verify_ct"], accept_length=spec.get("accept_length"),
                         histogram=_ints(spec.get("histogram", []), "spec.histogram"),
                         accepted_drafts=spec.get("accepted_drafts"))
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
    _one_of(d, "source", SAMPLE_SOURCES)
    return ServerSample(**(d | {"position_acceptance": _floats(d.get("position_acceptance", []),
                                                                "position_acceptance")}))


def _run(d: dict[str, Any]) -> RunInfo:
    counts = {}
    for key in ("server_running", "server_queued"):
        v = d.get(key, [])
        if not isinstance(v, list) or not all(isinstance(n, int) and not isinstance(n, bool) for n in v):
            raise RecordFileError(f"{key}: expected a list of counts")
        counts[key] = tuple(v)
    return RunInfo(**(d | {"loop_lag": from_json(LoopLag, d.get("loop_lag", {}), "loop_lag"),
                           "schedule": from_json(Schedule, d.get("schedule", {}), "schedule")} | counts))


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


def dumps(doc: Any) -> bytes:
    """A document (a dataclass, or plain data holding them) as indented JSON."""
    return orjson.dumps(doc, default=_plain, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS)


def load_as(cls: type[T], path: str) -> T:
    """The document at ``path`` as ``cls``; ``RecordFileError`` names the file and the field."""
    with open(path, "rb") as f:
        data = f.read()
    try:
        doc = orjson.loads(data)
        if cls is SweepDoc and isinstance(doc, dict) and doc.get("version", 1) not in range(1, SWEEP_VERSION + 1):
            raise RecordFileError(f"version {doc['version']!r}: this specwatch reads sweep.json versions 1 (no "
                                  f"version field) to {SWEEP_VERSION}")
        out: T = from_json(cls, doc, "")
        return out
    except orjson.JSONDecodeError as exc:
        raise RecordFileError(f"{path}: not JSON: {exc}") from None
    except RecordFileError as exc:
        raise RecordFileError(f"{path}: {exc}") from None


_HINTS: dict[type, dict[str, Any]] = {}


def _hints(cls: type) -> dict[str, Any]:
    if cls not in _HINTS:
        _HINTS[cls] = typing.get_type_hints(cls)
    return _HINTS[cls]


def _where(at: str, key: object) -> str:
    return f"{at}.{key}" if at else str(key)


def from_json(tp: Any, v: Any, at: str) -> Any:
    """``v`` (decoded JSON) checked against the type ``tp`` and built into it; ``at`` is the field's path."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if tp is Any:
        return v
    if origin in (typing.Union, types.UnionType):
        if v is None and type(None) in args:
            return None
        inner = [a for a in args if a is not type(None)]
        if len(inner) == 1:
            return from_json(inner[0], v, at)
        if all(a in SCALARS for a in inner):  # e.g. vLLM's request rate: a number or "inf"
            for a in inner:
                with contextlib.suppress(RecordFileError):
                    return _scalar(a, v, at)
            raise RecordFileError(f"{at or 'value'}: {v!r} is not of type {' or '.join(a.__name__ for a in inner)}")
        raise TypeError(f"{at}: unions of several types are not decoded")  # a bug in a record's declaration
    if origin is typing.Literal:
        if v not in args:
            raise RecordFileError(f"{at or 'value'}: {v!r} is not one of {', '.join(map(repr, args))}")
        return v
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return _dataclass(tp, v, at)
    if origin is tuple:
        if not isinstance(v, list):
            raise RecordFileError(f"{at}: expected a list")
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(from_json(args[0], x, f"{at}[{i}]") for i, x in enumerate(v))
        if len(v) != len(args):
            raise RecordFileError(f"{at}: expected {len(args)} items")
        return tuple(from_json(a, x, f"{at}[{i}]") for i, (a, x) in enumerate(zip(args, v, strict=True)))
    if origin is dict:
        if not isinstance(v, dict):
            raise RecordFileError(f"{at}: expected an object")
        return {_key(args[0], k, at): from_json(args[1], x, _where(at, k)) for k, x in v.items()}
    return _scalar(tp, v, at)


SCALARS = (int, float, str, bool)


def _key(tp: Any, k: str, at: str) -> Any:
    if tp is int:
        if not k.lstrip("-").isdecimal() or len(k) > 19:
            raise RecordFileError(f"{at}: key {k!r} is not an integer")
        return int(k)
    return k


def _scalar(tp: Any, v: Any, at: str) -> Any:
    if tp is float:
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            return float(v)
    elif tp is int:
        if isinstance(v, int) and not isinstance(v, bool):
            return v
    elif isinstance(v, tp):
        return v
    raise RecordFileError(f"{at or 'value'}: {v!r} is not of type {getattr(tp, '__name__', tp)}")


def _dataclass(cls: type[T], v: Any, at: str) -> T:
    if not isinstance(v, dict):
        raise RecordFileError(f"{at or cls.__name__}: expected an object")
    fields = {f.name: f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    unknown = sorted(set(v) - set(fields))
    if unknown:
        raise RecordFileError(f"{_where(at, unknown[0])}: unknown field")
    hints = _hints(cls)
    kw = {}
    for name, f in fields.items():
        if name in v:
            kw[name] = from_json(hints[name], v[name], _where(at, name))
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise RecordFileError(f"{_where(at, name)}: missing field")
    return cls(**kw)

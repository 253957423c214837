"""Plain decoding's per-stream decode tok/s as a function of the server's load (running requests): the
baseline the verdict compares with *at the load the server is under*. Analysis stage; pure but for
``load``/``save`` of the curve file.

A curve is a few measured points (``sweep --concurrency …`` against the plain server writes one). Between
points it interpolates linearly in log(load) (per-stream rates fall roughly geometrically with load); below
the first point it holds the first point's value when that point is at load ≤ 1, and beyond the last point
it extrapolates the last segment only up to ``EXTRAPOLATE_FACTOR`` × its load, saying so. Past that the
baseline is unknown, and so is the verdict: never a guess. ``--baseline-tps X`` is the one-point curve
(load 1, X), valid at low load only (up to ``FIXED_VALID_LOAD`` running requests).

File (JSON): ``{"kind": "specwatch.baseline_curve", "version": 1, "load": "running_requests",
"unit": "tokens_per_second_per_stream", "load_measured": true, "points": [{"running": 1.0,
"tokens_per_second": 90.0, "requests": 8, "streams": 1}, …], "source": "…"}``. ``load_measured``: each
point's ``running`` is the server's own median running requests while it was measured (its log lines or
``/metrics``, as the daemon measures load); false (and in files before it existed): the client's stream
count, which a closed loop only approximates (prefill gaps, queueing) — the daemon says it compares against
a nominal curve.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, get_args

import orjson

from ..errors import ConfigError
from ..records import BaselineStatus

KIND = "specwatch.baseline_curve"
EXTRAPOLATE_FACTOR = 1.5
FIXED_VALID_LOAD = 2.0
MAX_POINTS = 64
MAX_LOAD = 1e6
MAX_TPS = 1e9
# how the baseline at a load was obtained: closed set (snapshot field and metric label)
STATUSES: tuple[BaselineStatus, ...] = get_args(BaselineStatus)


@dataclass(frozen=True, slots=True)
class CurvePoint:
    running: float
    tokens_per_second: float
    requests: int = 0
    streams: int | None = None  # the client's closed-loop streams that produced it


@dataclass(frozen=True, slots=True)
class BaselineAt:
    tokens_per_second: float | None
    status: BaselineStatus
    load: float | None  # the load the value stands for


@dataclass(frozen=True, slots=True)
class BaselineCurve:
    points: tuple[CurvePoint, ...]
    source: str = ""
    valid_up_to: float | None = None  # a fixed one-point baseline: valid at low load only
    load_measured: bool = False  # running = the server's measured load (else the nominal stream count)

    @classmethod
    def fixed(cls, tps: float) -> BaselineCurve:
        return cls((CurvePoint(1.0, tps),), "--baseline-tps", FIXED_VALID_LOAD)

    @property
    def max_load(self) -> float:
        last = self.points[-1].running
        return self.valid_up_to if self.valid_up_to is not None else last * EXTRAPOLATE_FACTOR

    def at(self, load: float) -> BaselineAt:
        pts = self.points
        if self.valid_up_to is not None:
            ok = load <= self.valid_up_to
            return BaselineAt(pts[0].tokens_per_second if ok else None, "measured" if ok else "outside", load)
        for p in pts:
            if math.isclose(p.running, load, rel_tol=1e-9):
                return BaselineAt(p.tokens_per_second, "measured", load)
        if load < pts[0].running:
            held = pts[0].running <= 1.0 or load >= pts[0].running / EXTRAPOLATE_FACTOR
            return BaselineAt(pts[0].tokens_per_second if held else None, "held" if held else "outside", load)
        for a, b in itertools.pairwise(pts):
            if a.running <= load <= b.running:
                return BaselineAt(_interp(a, b, load), "interpolated", load)
        if len(pts) >= 2 and load <= self.max_load:
            return BaselineAt(max(0.0, _interp(pts[-2], pts[-1], load)), "extrapolated", load)
        if len(pts) == 1 and load <= self.max_load:
            return BaselineAt(pts[0].tokens_per_second, "extrapolated", load)
        return BaselineAt(None, "outside", load)

    def describe(self) -> str:
        if self.valid_up_to is not None:
            return f"fixed {self.points[0].tokens_per_second:g} tok/s (valid up to {self.valid_up_to:g} running)"
        return (f"curve of {len(self.points)} points, running {self.points[0].running:g}–{self.points[-1].running:g}"
                f" (extrapolated up to {self.max_load:g}; load "
                + ("measured on the server)" if self.load_measured else "nominal: the client's stream counts)"))

    def to_doc(self) -> dict[str, Any]:
        return {"kind": KIND, "version": 1, "load": "running_requests", "unit": "tokens_per_second_per_stream",
                "load_measured": self.load_measured,
                "points": [{"running": p.running, "tokens_per_second": p.tokens_per_second, "requests": p.requests,
                            **({"streams": p.streams} if p.streams is not None else {})} for p in self.points],
                "source": self.source}


def baseline_at(curve: BaselineCurve | None, ab: bool, load: float | None) -> BaselineAt:
    """The baseline the verdict compares with at ``load``: an A/B baseline server (it serves only the probes, so
    it runs at one stream and its tok/s comes from its own window), else the curve at the load (at one stream
    when the load is unknown: the idle comparison), else none."""
    if ab:
        return BaselineAt(None, "ab", 1.0)
    if curve is not None:
        return curve.at(load if load is not None else 1.0)
    return BaselineAt(None, "none", None)


def _interp(a: CurvePoint, b: CurvePoint, load: float) -> float:
    if a.running <= 0 or b.running <= 0 or math.isclose(a.running, b.running):
        return a.tokens_per_second
    f = (math.log(load) - math.log(a.running)) / (math.log(b.running) - math.log(a.running))
    return a.tokens_per_second + f * (b.tokens_per_second - a.tokens_per_second)


def _num(v: Any, where: str, field: str, lo: float, hi: float) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or not lo <= v <= hi:
        raise ConfigError(f"{where}: {field}: {v!r} is not a number from {lo:g} to {hi:g}")
    return float(v)


def from_doc(doc: Any, where: str = "baseline curve") -> BaselineCurve:
    """Validate a curve document; ``ConfigError`` naming the field that is wrong."""
    if not isinstance(doc, dict):
        raise ConfigError(f"{where}: expected a JSON object")
    if doc.get("kind") != KIND:
        raise ConfigError(f"{where}: kind: expected {KIND!r}, got {doc.get('kind')!r}")
    if doc.get("version") != 1:
        raise ConfigError(f"{where}: version: expected 1, got {doc.get('version')!r}")
    if doc.get("load", "running_requests") != "running_requests":
        raise ConfigError(f"{where}: load: expected 'running_requests', got {doc.get('load')!r}")
    if doc.get("unit", "tokens_per_second_per_stream") != "tokens_per_second_per_stream":
        raise ConfigError(f"{where}: unit: expected 'tokens_per_second_per_stream', got {doc.get('unit')!r}")
    raw = doc.get("points")
    if not isinstance(raw, list) or not 1 <= len(raw) <= MAX_POINTS:
        raise ConfigError(f"{where}: points: expected a list of 1 to {MAX_POINTS} points")
    pts = []
    for i, p in enumerate(raw):
        if not isinstance(p, dict):
            raise ConfigError(f"{where}: points[{i}]: expected an object")
        req, streams = p.get("requests", 0), p.get("streams")
        if isinstance(req, bool) or not isinstance(req, int) or req < 0:
            raise ConfigError(f"{where}: points[{i}].requests: {req!r} is not a count")
        if streams is not None and (isinstance(streams, bool) or not isinstance(streams, int) or streams < 1):
            raise ConfigError(f"{where}: points[{i}].streams: {streams!r} is not a stream count")
        pts.append(CurvePoint(_num(p.get("running"), where, f"points[{i}].running", 1e-9, MAX_LOAD),
                              _num(p.get("tokens_per_second"), where, f"points[{i}].tokens_per_second", 1e-9, MAX_TPS),
                              req, streams))
    pts.sort(key=lambda p: p.running)
    if any(math.isclose(a.running, b.running) for a, b in itertools.pairwise(pts)):
        raise ConfigError(f"{where}: points: two points at the same running load")
    source, measured = doc.get("source", ""), doc.get("load_measured", False)
    if not isinstance(measured, bool):
        raise ConfigError(f"{where}: load_measured: expected true or false, got {measured!r}")
    return BaselineCurve(tuple(pts), str(source)[:200], load_measured=measured)


def read(path: str) -> BaselineCurve:
    try:
        raw = Path(path).read_bytes()
    except OSError as exc:
        raise ConfigError(f"--baseline-curve {path}: {exc.strerror}") from None
    try:
        doc = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise ConfigError(f"--baseline-curve {path}: not JSON ({exc})") from None
    return from_doc(doc, f"--baseline-curve {path}")


def save(path: Path, curve: BaselineCurve) -> None:
    path.write_bytes(orjson.dumps(curve.to_doc(), option=orjson.OPT_INDENT_2))

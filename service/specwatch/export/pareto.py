"""The Pareto view of a sweep (``vllm bench sweep plot_pareto``'s picture): per-user tok/s against aggregate
tok/s, a line per configuration across the loads it was measured at, plain decoding included, the schedule's
line (at each load, the point of the configuration picked there, ``analysis.comparisons``' picks), and which
points no other point beats on both axes. Exporter stage; pure (sweep results in, records out), read by
``sweep_plots`` (the PNG and the report's SVG).

Per-user tok/s is per-stream decode tok/s (one stream's tokens after its first ÷ its decode time), the measure
every pick uses; aggregate tok/s is every stream's output tokens ÷ the level's wall time. Up and to the right
is better on both: a point is Pareto-optimal when no other point is at least as good on both axes and better
on one."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..analysis.comparisons import records
from ..results import ConfigResult, plain_of

PER_USER = "per-user tok/s (per-stream decode)"
AGGREGATE = "aggregate output tok/s (all streams)"
SCHEDULE = "schedule: each load's pick"


@dataclass(frozen=True, slots=True)
class ParetoPoint:
    label: str  # the configuration
    concurrency: int  # streams in flight
    per_user_tps: float  # per-stream decode tok/s
    aggregate_tps: float  # every stream's output tokens ÷ wall time


@dataclass(frozen=True, slots=True)
class ParetoLine:
    name: str
    points: tuple[ParetoPoint, ...]  # by concurrency
    plain: bool = False  # plain decoding, the baseline


@dataclass(frozen=True, slots=True)
class Pareto:
    lines: tuple[ParetoLine, ...]  # one per finished configuration, in the sweep's order
    schedule: ParetoLine  # the point of each load's pick, by load (no points: no pick)
    frontier: tuple[ParetoPoint, ...]  # the Pareto-optimal points, by per-user tok/s

    def on_frontier(self, p: ParetoPoint) -> bool:
        return p in self.frontier


def dominates(a: ParetoPoint, b: ParetoPoint) -> bool:
    """``a`` at least as good as ``b`` on both axes and better on one."""
    return (a.per_user_tps >= b.per_user_tps and a.aggregate_tps >= b.aggregate_tps
            and (a.per_user_tps > b.per_user_tps or a.aggregate_tps > b.aggregate_tps))


def frontier(points: Sequence[ParetoPoint]) -> tuple[ParetoPoint, ...]:
    """The points no other point dominates (ties on both axes: each kept), by per-user tok/s."""
    best = [p for p in points if not any(dominates(q, p) for q in points)]
    return tuple(sorted(best, key=lambda p: (p.per_user_tps, -p.aggregate_tps)))


def points_of(r: ConfigResult) -> tuple[ParetoPoint, ...]:
    """A finished configuration's points at every load where both rates were measured."""
    out = []
    for c in r.levels:
        res = r.by_concurrency[c].results
        user, agg = res.stream_decode_tps, res.aggregate_tps
        if user and agg:
            out.append(ParetoPoint(r.label, c, user, agg))
    return tuple(out)


def pareto(results: Sequence[ConfigResult]) -> Pareto:
    plain = plain_of(results)
    lines = tuple(ParetoLine(r.label, points_of(r), r is plain) for r in results if r.ok)
    at = {(p.label, p.concurrency): p for line in lines for p in line.points}
    _, picks = records(results)
    sched = tuple(at[k] for pk in picks if (k := (pk.pick, pk.concurrency)) in at)
    return Pareto(lines, ParetoLine(SCHEDULE, sched), frontier([p for line in lines for p in line.points]))


def frontier_text(p: Pareto) -> str:
    """The frontier in words, and how many of the schedule's points are on it."""
    if not p.frontier:
        return ""
    pts = ", ".join(f"{q.label} at {q.concurrency} stream{'s' if q.concurrency > 1 else ''} "
                    f"({q.per_user_tps:.1f} per user, {q.aggregate_tps:.1f} aggregate)" for q in p.frontier)
    on = sum(p.on_frontier(q) for q in p.schedule.points)
    sched = f"; the schedule's points on it: {on} of {len(p.schedule.points)}" if p.schedule.points else ""
    return f"Pareto-optimal (no point is faster on both axes): {pts}{sched}"

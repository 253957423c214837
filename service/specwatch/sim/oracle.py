"""The simulator's oracle: what its engine will do on an arrival pattern, found by running that engine in
virtual time (``virtual.run``) and reading the run's steady state (``steady.steady``). No second model of
the engine: what ``/explain`` and ``sim --explain`` say is what the served engine does, up to the wall
clock's jitter and the spread of a real client's sends.

Per load it gives the served configuration's figures and plain decoding's (the same engine, the same launch,
speculation off), their ratio on per-stream decode tok/s, the crossover between the loads asked (the daemon's
and the sweep's rule: ``analysis.by_load.crossover``) and the best step count at each load.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from ..analysis.by_load import crossover
from . import model, virtual
from .engine import EngineSettings
from .pattern import Pattern
from .steady import Steady, steady


def at_steps(settings: EngineSettings, steps: int) -> EngineSettings:
    """The same server at a fixed ``steps`` (0: launched without speculation; no step policy either way)."""
    spec = model.with_steps(settings.spec, steps)
    return dataclasses.replace(settings, spec=spec, steps=None, draft_cost=settings.draft_cost if steps else 1.0)


def plain(settings: EngineSettings) -> EngineSettings:
    return at_steps(settings, 0)


def figures(settings: EngineSettings, pattern: Pattern) -> Steady:
    r = virtual.run(settings, pattern)
    closed = pattern.rate_per_s is None
    s = steady(r.requests, r.rounds, r.prefills, pattern.warmup, pattern.streams if closed else None)
    if s is None:
        raise ValueError("the pattern is too short for a steady state: ask for more requests")
    return s


@dataclass(frozen=True, slots=True)
class LoadRow:
    streams: int
    served: Steady  # the configuration as launched (its step policy included)
    plain: Steady

    @property
    def speedup(self) -> float:
        """Per-stream decode tok/s, served over plain."""
        return self.served.decode_tokens_per_second / self.plain.decode_tokens_per_second


def by_load(settings: EngineSettings, pattern: Pattern, loads: list[int]) -> tuple[list[LoadRow], float | None]:
    """The table by load and the crossover between its loads (None: speculation wins at every one; the lowest
    load when it already loses there)."""
    rows = [LoadRow(n, figures(settings, pattern.at(n)), figures(plain(settings), pattern.at(n))) for n in loads]
    cross = crossover([(float(r.streams), r.speedup) for r in rows]) if settings.spec.enabled else None
    return rows, cross


def best_steps(settings: EngineSettings, pattern: Pattern, max_steps: int) -> model.BestSteps:
    """Per-stream decode tok/s of 0 (plain) to ``max_steps`` steps at ``pattern``'s load, and the fastest."""
    rates = tuple(figures(at_steps(settings, s), pattern).decode_tokens_per_second for s in range(max_steps + 1))
    return model.BestSteps(pattern.streams, rates, max(range(len(rates)), key=rates.__getitem__))


def format_by_load(settings: EngineSettings, pattern: Pattern, rows: list[LoadRow], cross: float | None) -> str:
    spec = settings.spec
    mode = f"{spec.algorithm} steps={spec.num_steps} draft_tokens={spec.num_draft_tokens}" if spec.enabled \
        else "plain decoding"
    where = pattern.describe()
    lines = [f"profile {settings.profile.name}: {mode} against plain decoding, by load (the engine in virtual time)",
             f"  arrival pattern: N closed-loop streams started together (bench --concurrency N), {where['prompts']}, "
             f"{pattern.output_tokens} output tokens, steady state ({where['requests']} requests at the lowest load)",
             "  per stream: tok/s = output tokens / (last token - arrival), decode = after the first token; "
             "aggregate: all streams",
             f"  {'streams':>7}  {'tok/s':>8}  {'decode':>8}  {'plain tok/s':>11}  {'decode':>8}  {'speedup':>7}  "
             f"{'aggregate':>9}  {'plain aggregate':>15}"]
    for r in rows:
        a, b = r.served, r.plain
        lines.append(f"  {r.streams:>7}  {a.tokens_per_second:>8.1f}  {a.decode_tokens_per_second:>8.1f}  "
                     f"{b.tokens_per_second:>11.1f}  {b.decode_tokens_per_second:>8.1f}  "
                     f"{r.speedup:>7.3f}  {a.aggregate_tokens_per_second:>9.0f}  "
                     f"{b.aggregate_tokens_per_second:>15.0f}")
    if not spec.enabled:
        return "\n".join(lines)
    if settings.steps is not None:
        lines.append(f"  a step that drafts nothing here (the schedule's or adaptive's 0) costs plain decoding's round "
                     f"+{100 * settings.profile.off_round_tax:.1f}% (off_round_tax): this server is not plain there")
    if cross is None:
        lines.append("  crossover: none among these loads (speculation wins at each)")
    elif cross <= rows[0].streams:
        lines.append(f"  crossover: speculation loses already at {rows[0].streams} stream(s)")
    else:
        lines.append(f"  crossover: ~{cross:.1f} streams (interpolated between the loads above; above it plain "
                     "decoding is faster per stream)")
    return "\n".join(lines)

"""``tune``'s records: OUT/tune.json, written through the codec after every launch (its schema, stable and
documented in the README). Imports nothing from the project but ``results``' ``Check``: plain frozen records."""

from __future__ import annotations

from dataclasses import dataclass, field

from .results import Check


@dataclass(frozen=True, slots=True)
class TuneLaunch:
    """One configuration launched (or resumed from OUT/results/), in the order tune chose them."""

    params: dict[str, str]
    steps: int
    why: str  # the baseline, the start, or the prediction that chose it
    predicted_tok_s: dict[int, float] = field(default_factory=dict)  # per load, before the launch ({}: not chosen
    predicted_interval: dict[int, tuple[float, float]] = field(default_factory=dict)  # by a prediction)
    measured_tok_s: dict[int, float] = field(default_factory=dict)  # per-stream decode tok/s, mean per request
    interval: dict[int, tuple[float, float]] = field(default_factory=dict)  # its 95% interval
    wall_s: float = 0.0  # launch to stop (0: resumed from an earlier run)
    status: str = "ok"  # ok | failed
    error: str = ""


@dataclass(frozen=True, slots=True)
class TuneBest:
    """One load's winner (the sweep's rule, ``analysis.comparisons``) and its gains, each a ratio (1.05 = +5%)."""

    params: dict[str, str]
    steps: int
    tok_s: float
    gain_vs_start: float | None
    gain_vs_start_interval: tuple[float, float] | None
    gain_vs_plain: float | None
    gain_vs_plain_interval: tuple[float, float] | None
    sentence: str


@dataclass(frozen=True, slots=True)
class TuneDoc:
    launches: tuple[TuneLaunch, ...]
    best: dict[int, TuneBest]
    stop_reason: str
    flags: tuple[str, ...]  # each engine's advice, as printed
    speculative_launches: int
    wall_s: float
    exhaustive_launches: int  # a sweep of the same range: every step count, the baseline included
    exhaustive_wall_s: float | None  # estimated from this run's mean launch time
    start: dict[str, str] = field(default_factory=dict)
    loads: tuple[int, ...] = ()
    checks: tuple[Check, ...] = ()  # the honesty checks of every level measured, merged (``analysis.checks``)

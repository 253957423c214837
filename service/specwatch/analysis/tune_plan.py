"""Which configuration ``tune`` launches next, and when it stops. Analysis stage; pure.

At each load the live advisor (``live_advisor.advise_bucket``, one rule for both) predicts every step count
from what this run has measured there: the fastest speculative configuration measured is its "running"
configuration (its cycle time and per-position acceptance), plain decoding its baseline, and once two
speculative configurations are measured, the cycle model fitted to all of them (``cost_model.fit``, plain
decoding included) is its prior — each launch sharpens the cost shape. With one, the shape is the advisor's
range (a round costs between the same and proportionally more), so the intervals are wide and the first
choice is the middle of them.

A step count not measured is worth a launch at a load when its interval reaches above the best mean measured
there: either it is predicted faster (its lower bound above the best), or the intervals overlap and one
launch decides it. The launch goes to the step count with the highest predicted gain over the best measured,
at whichever load it is highest (ties: the smaller step count, the cheaper draft). Nothing worth a launch at
any load: the run stops, saying why at each load.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ..errors import AnalysisError
from ..recorder.load import LoadBucket
from ..results import ConfigResult
from . import advisor, cost_model, engine_flags
from .comparisons import Band
from .live_advisor import Acceptance, Estimate, Prior, advise_bucket, steps_text

Z_95 = 1.96


@dataclass(frozen=True, slots=True)
class Plain:
    """Plain decoding's per-stream decode tok/s at a load, when it is given rather than measured in the run."""

    tokens_per_second: float
    relative_stderr: float | None = None


@dataclass(frozen=True, slots=True)
class Outlook:
    """One load: the best measured and every unmeasured step count's prediction (or why there is none)."""

    load: int
    best_steps: int | None
    best_tps: float | None  # its per-stream decode tok/s (the mean over its requests)
    best_half: float | None  # the 95% half-width of that mean
    predictions: tuple[tuple[int, Estimate], ...]  # unmeasured step counts
    status: str = "ok"
    climb: tuple[int, ...] = ()  # a lookup or tree drafter: the best's unmeasured neighbours (nothing predicted)
    climb_from: int | None = None  # that best speculative step count

    def worth(self) -> list[tuple[int, Estimate]]:
        """The unmeasured step counts whose interval reaches above the best measured; for a lookup or tree
        drafter, the best's unmeasured neighbours, each as good as the best until measured."""
        if self.best_tps is None:
            return []
        if self.climb:
            return [(s, Estimate(self.best_tps, 0.0, math.inf)) for s in self.climb]
        return [(s, e) for s, e in self.predictions if e.upper > self.best_tps]

    def reason(self) -> str:
        """Why nothing is worth a launch here: "2 steps measured 92.9 tok/s ± 0.8; nothing else predicted above
        89.1 (the upper bound, at 3 steps)"."""
        if self.status != "ok" or self.best_steps is None or self.best_tps is None:
            return f"at {_streams(self.load)}: {self.status}"
        head = f"at {_streams(self.load)}: {steps_text(self.best_steps)} measured {self.best_tps:.1f} tok/s" + \
            (f" ± {self.best_half:.1f}" if self.best_half is not None else "")
        if self.climb_from is not None:
            return head + f"; the best speculative step count's neighbours are measured ({MEASURE_EACH})"
        if not self.predictions:
            return head + "; every step count in the range is measured"
        s, e = max(self.predictions, key=lambda p: (p[1].upper, -p[0]))
        return head + f"; nothing else predicted above {e.upper:.1f} (the upper bound, at {steps_text(s)})"


@dataclass(frozen=True, slots=True)
class Next:
    steps: int | None  # None: stop
    reason: str  # why this one, or why stop
    predicted: tuple[tuple[int, Estimate], ...]  # (load, its prediction) for the chosen step count
    outlooks: tuple[Outlook, ...]


def _streams(n: int) -> str:
    return f"{n} stream{'s' if n != 1 else ''}"


def mean_half(values: Sequence[float]) -> tuple[float | None, float | None]:
    """The mean of per-request tok/s and its 95% half-width (None with fewer than two)."""
    if not values:
        return None, None
    mean = statistics.fmean(values)
    if len(values) < 2:
        return mean, None
    return mean, Z_95 * statistics.stdev(values) / math.sqrt(len(values))


def measured(r: ConfigResult, load: int) -> tuple[float | None, float | None]:
    """Per-stream decode tok/s at ``load`` (the tables' token-weighted figure) and its 95% half-width, from the
    per-request spread."""
    tps = r.stream_tps(load)
    mean, half = mean_half(r.per_request(load))
    if tps is None or not mean or half is None:
        return tps, None
    return tps, half * tps / mean


def outlook(results: Sequence[ConfigResult], load: int, space: Sequence[int], plain: Plain | None) -> Outlook:
    """Predictions at ``load`` for every step count of ``space`` the run has not measured there."""
    at = {r.steps: r for r in results if r.ok and r.stream_tps(load) is not None}
    spec = [r for s, r in at.items() if s > 0]
    todo = [s for s in space if s > 0 and s not in at]
    means = {s: measured(r, load) for s, r in at.items()}
    if 0 in at:  # measured in this run: it beats a given rate
        mean0, half0 = means[0]
        plain = Plain(mean0, half0 / Z_95 / mean0 if mean0 and half0 is not None else None) if mean0 else None
    best = max(means, key=lambda s: (means[s][0] or 0.0, -s), default=None)
    best_tps, best_half = means[best] if best is not None else (None, None)
    if best is not None and plain is not None and 0 not in at and plain.tokens_per_second >= (best_tps or 0.0):
        best, best_tps, best_half = 0, plain.tokens_per_second, None  # the given plain rate is the one to beat

    def no(status: str) -> Outlook:
        return Outlook(load, best, best_tps, best_half, (), status)

    if not spec:
        return no("no speculative configuration measured here yet")
    if plain is None:
        return no("no plain-decoding rate here (give --baseline-launch, --baseline-curve or --baseline-tps)")
    anchor = max(spec, key=lambda r: r.stream_tps(load) or 0.0).at(load)
    if not anchor.position_acceptance or not engine_flags.chain_draft(engine_flags.setup_of(results)):
        return climb(load, best, best_tps, best_half, anchor.steps, [s for s in space if s > 0], set(at))
    tps, half = measured(anchor, load)
    bucket = LoadBucket(load, len(anchor.per_request(load)), float(load), tps or 0.0,
                        half / Z_95 / tps if tps and half is not None else None, anchor.accept_length)
    rounds = anchor.results.verify_rounds if anchor.results else 0
    acc = Acceptance(tuple(anchor.position_acceptance[:anchor.steps]), rounds or None, "this run")
    adv = advise_bucket(bucket, plain.tokens_per_second, plain.relative_stderr, acc, prior_of(spec, at, load),
                        max(space), 2)
    if adv.status != "ok":
        return no(adv.status)
    preds = tuple((p.steps, p.tokens_per_second) for p in adv.predictions if p.steps in todo)
    return Outlook(load, best, best_tps, best_half, preds)


MEASURE_EACH = ("a lookup or tree drafter, or no per-position acceptance reported: step counts are measured, "
                "not predicted, climbing from the best to its neighbours")


def climb(load: int, best: int | None, best_tps: float | None, best_half: float | None, top: int,
          steps: Sequence[int], measured: set[int]) -> Outlook:
    """No prediction is valid: the best speculative step count's unmeasured neighbours in the range are the
    candidates (a hill climb, which ends at a step count both of whose neighbours measured lower)."""
    vals = sorted(steps)
    i = vals.index(top) if top in vals else None
    near = tuple(vals[j] for j in ((i - 1, i + 1) if i is not None else ()) if 0 <= j < len(vals)
                 and vals[j] not in measured)
    return Outlook(load, best, best_tps, best_half, (), climb=near, climb_from=top)


def prior_of(spec: Sequence[ConfigResult], at: Mapping[int, ConfigResult], load: int) -> Prior | None:
    """The cycle model fitted to everything measured at ``load`` once two speculative configurations are: the
    cost's shape over step counts, and acceptance along the longest chain measured."""
    if len(spec) < 2:
        return None
    ms = advisor.from_results([r.at(load) for r in at.values()])
    try:
        f = cost_model.fit(ms, max(r.steps for r in spec))
    except AnalysisError:
        return None
    return Prior(f, max(len(m.position_acceptance) for m in ms), "the configurations measured in this run")


def choose(outlooks: Sequence[Outlook]) -> Next:
    """The step count with the highest predicted gain over a load's best measured, among those worth a launch."""
    scored: list[tuple[float, int, int]] = []  # (gain, -steps, load)
    for o in outlooks:
        for s, e in o.worth():
            scored.append((e.value / (o.best_tps or 1.0), -s, o.load))
    if not scored:
        return Next(None, "; ".join(o.reason() for o in outlooks), (), tuple(outlooks))
    gain, neg_s, load = max(scored)
    s = -neg_s
    predicted = tuple((o.load, e) for o in outlooks for st, e in o.predictions if st == s)
    o = next(o for o in outlooks if o.load == load)
    if o.climb:
        why = (f"a neighbour of {steps_text(o.climb_from or 0)}, the best speculative step count at "
               f"{_streams(load)} ({MEASURE_EACH})")
    else:
        why = (f"predicted {_estimate(dict(predicted)[load])} tok/s at {_streams(load)} against "
               f"{steps_text(o.best_steps or 0)}'s measured {o.best_tps:.1f} ({100 * (gain - 1):+.1f}%)")
    return Next(s, why, predicted, tuple(outlooks))


def _estimate(e: Estimate) -> str:
    return f"{e.value:.1f} ({e.lower:.1f}-{e.upper:.1f})"


@dataclass(frozen=True, slots=True)
class Tie:
    """A load's pick that won only a tie (``winner``'s rule: a tie goes to the fewer draft steps) against a rival
    with more draft steps: both are measured again, back to back."""

    rival: str  # the label with more draft steps
    pick: str  # the label that won the tie
    words: str  # the tie, as the run prints it


def tie_to_settle(bands: Sequence[Band], settled: set[str]) -> Tie | None:
    """A load whose pick won a tie against a configuration with more draft steps not yet measured again. Both
    sides are measured again, one after the other: more requests narrow both intervals, and a machine's drift
    between the launches falls on both alike, so a real gain the first measurements could not tell from the
    noise is not given away (measuring the rival alone compares a fresh number with a stale one)."""
    for b in bands:
        if b.winner == b.reference and b.head is not None and b.head_score is not None and b.head_score.tie:
            label, margin = b.head.label, b.head_score  # the best-scored ties the reference (plain decoding)
        elif b.tie is not None and b.best:
            label, margin = b.best, b.tie  # the pick won a tie on steps against the best-scored
        else:
            continue
        if label in settled or label == b.reference or not b.winner:
            continue
        return Tie(label, b.winner, f"at {_streams(b.concurrency)}, {label} ties {b.winner} ({margin.interval_text()})")
    return None


def next_step(results: Sequence[ConfigResult], loads: Sequence[int], space: Sequence[int],
              plain: Mapping[int, Plain]) -> Next:
    return choose([outlook(results, n, space, plain.get(n)) for n in loads])

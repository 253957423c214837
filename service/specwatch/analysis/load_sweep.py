"""A sweep over concurrency: which configuration wins at which load, how sure, where each crosses plain
decoding, the schedule that follows, the baseline curve, and the cost model's batch term. Analysis stage;
pure (sweep results in, numbers and text out).

Per configuration and concurrency the measure is per-stream decode tok/s; each load's pick and every margin
over plain decoding come from ``comparisons`` (derived once, printed alike everywhere).

The batch term extends the single-stream cycle model (``cost_model.Fit``) as the simulator does:
``cycle(s, n) = cycle(s, 1) · (1 + a·(n − 1)) + t·(n − 1)·d`` (``d`` = verify width), fitted by non-negative
least squares to every measured (configuration, concurrency) cell; it predicts per-stream tok/s and the
crossover for step counts and concurrencies the sweep did not run.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

from ..results import ConfigResult, levels, plain_of
from .baseline import BaselineCurve, CurvePoint
from .by_load import crossover
from .comparisons import Band, bands
from .cost_model import Fit
from .engine_flags import EngineAdvice, advise, setup_of, static_advice
from .off_range import LoadRates, weigh


def crossovers(results: Sequence[ConfigResult]) -> dict[str, float | None]:
    """Per speculative configuration: the concurrency where its per-stream rate falls below plain decoding's
    (interpolated in log(load)); 1.0 when it loses from the first level, None when it never does."""
    plain = plain_of(results)
    if plain is None:
        return {}
    out: dict[str, float | None] = {}
    for r in results:
        if r is plain or not r.ok or not r.steps:
            continue
        pts = [(float(c), s / p) for c in levels(results) if (s := r.stream_tps(c)) and (p := plain.stream_tps(c))]
        out[r.label] = crossover(pts)
    return out


def crossing_text(cross: float | None, lowest: int) -> str:
    if cross is None:
        return "never (at the loads measured)"
    return "already at the lowest load" if cross <= lowest else f"at ~{cross:.1f} streams (between the loads measured)"


def schedule(bs: list[Band]) -> list[tuple[int, int, int]]:
    """The bands' schedule (``schedule_of`` the levels that crowned a pick)."""
    return schedule_of([(b.concurrency, b.steps) for b in bs if b.winner])


def schedule_of(picks: Sequence[tuple[int, int]], top: int | None = None) -> list[tuple[int, int, int]]:
    """``[lo, hi, k]`` ranges of batch size from ``(load, k)`` picks in load order: boundaries at the geometric
    middle between the loads, the last up to ``top``, the largest load measured (default the last pick's: no
    range reaches past what was measured); adjacent ranges with the same k merged. The one rule for a sweep's
    levels and the live advisor's load buckets."""
    out: list[tuple[int, int, int]] = []
    for i, (load, k) in enumerate(picks):
        lo = 1 if i == 0 else out[-1][1] + 1
        hi = math.floor(math.sqrt(load * picks[i + 1][0])) if i + 1 < len(picks) else (top or load)
        hi = max(hi, lo)
        if out and out[-1][2] == k:
            out[-1] = (out[-1][0], hi, k)
        else:
            out.append((lo, hi, k))
    return out


def schedule_text(ranges: Sequence[tuple[int, int, int]]) -> str:
    """``1-8: 5, 9-22: 2, 23-32: 0 (measured up to 32)``: the last range ends at the largest load measured."""
    if not ranges:
        return "none (no load crowned a pick)"
    return ", ".join(f"{lo}-{hi}: {k}" for lo, hi, k in ranges) + f" (measured up to {ranges[-1][1]})"


def baseline_curve(results: Sequence[ConfigResult], source: str) -> BaselineCurve | None:
    """Plain decoding's per-stream rate by load. The load is the server's own measured running requests at
    each level when every level has one and they rise with the stream count; else the stream counts, and the
    curve says it is nominal."""
    plain = plain_of(results)
    if plain is None:
        return None
    cells = [(c, tps, plain.by_concurrency[c].server_load) for c in levels(results) if (tps := plain.stream_tps(c))]
    loads = [load for _, _, load in cells if load is not None]
    measured = bool(cells) and len(loads) == len(cells) and all(b > a * 1.0001 for a, b in itertools.pairwise(loads))
    pts = tuple(CurvePoint(load if measured and load is not None else float(c), tps, len(plain.per_request(c)), c)
                for c, tps, load in cells)
    return BaselineCurve(pts, source, load_measured=measured) if pts else None


@dataclass(frozen=True, slots=True)
class BatchFit:
    base: Fit
    a: float  # memory-bound growth per extra running request (fraction of the single-stream cycle)
    t_s: float  # compute per verified token of every extra running request, seconds
    cells: int

    def cycle_s(self, steps: int, n: float) -> float:
        d = steps + 1
        return self.base.cycle_s(steps) * (1.0 + self.a * (n - 1)) + self.t_s * (n - 1) * d

    def stream_tps(self, steps: int, n: float) -> float:
        return self.base.accept_length(steps) / self.cycle_s(steps, n)

    def crossover(self, steps: int) -> float | None:
        al = self.base.accept_length(steps)
        s1, p1 = self.base.cycle_s(steps), self.base.cycle_s(0)
        gap = al * p1 - s1
        if gap <= 0:
            return 1.0
        slope = (s1 * self.a + self.t_s * (steps + 1)) - al * (p1 * self.a + self.t_s)
        return 1.0 + gap / slope if slope > 0 else None


def fit_batch(results: Sequence[ConfigResult], base: Fit) -> BatchFit | None:
    """Least squares of the cells' cycle times for (a, t) ≥ 0, given the single-stream fit."""
    rows: list[tuple[float, float, float]] = []
    for r in results:
        if not r.ok:
            continue
        for c in r.levels:
            cyc = r.at(c).cycle_s
            if cyc is None or c <= 1:
                continue
            c1 = base.cycle_s(r.steps)
            rows.append((cyc / c1 - 1.0, c - 1.0, (c - 1.0) * (r.steps + 1) / c1))
    if not rows:
        return None
    s11 = sum(x1 * x1 for _, x1, _ in rows)
    s12 = sum(x1 * x2 for _, x1, x2 in rows)
    s22 = sum(x2 * x2 for _, _, x2 in rows)
    b1 = sum(y * x1 for y, x1, _ in rows)
    b2 = sum(y * x2 for y, _, x2 in rows)
    det = s11 * s22 - s12 * s12
    a, t = ((b1 * s22 - b2 * s12) / det, (b2 * s11 - b1 * s12) / det) if abs(det) > 1e-18 else (0.0, 0.0)
    if a < 0 or t < 0:  # one of them at zero: fit the other alone
        a1 = max(0.0, b1 / s11) if s11 else 0.0
        t1 = max(0.0, b2 / s22) if s22 else 0.0
        err_a = sum((y - a1 * x1) ** 2 for y, x1, _ in rows)
        err_t = sum((y - t1 * x2) ** 2 for y, _, x2 in rows)
        a, t = (a1, 0.0) if err_a <= err_t else (0.0, t1)
    return BatchFit(base, a, t, len(rows))


def load_rates(results: Sequence[ConfigResult]) -> list[LoadRates]:
    """Per load measured: plain decoding's per-stream rate and each speculative step count's (the best of a
    step count's configurations), for ``off_range.weigh``."""
    plain = plain_of(results)
    if plain is None:
        return []
    out = []
    for c in levels(results):
        base = plain.stream_tps(c)
        by: dict[int, float] = {}
        for r in results:
            if r.ok and r.steps and (tps := r.stream_tps(c)):
                by[r.steps] = max(by.get(r.steps, 0.0), tps)
        if base:
            out.append(LoadRates(c, base, tuple(sorted(by.items()))))
    return out


def engine_advice(results: Sequence[ConfigResult], out_dir: str = "") -> list[EngineAdvice]:
    """The schedule the bands give, as the complete flags of the sweep's engine (``engine_flags``); the best
    single configuration's flags instead when the schedule, its off range priced, does not beat it, and after
    the engine's "no knob" when none runs the schedule (NGRAM, topk > 1, older releases): advice to paste."""
    ranges = schedule(bands(results))
    w = weigh(ranges, load_rates(results)) if ranges else None
    setup = setup_of(results)
    if w is not None and not w.advise_schedule:
        why = f"the schedule does not beat {w.single_name()} once its 0 range is priced"
        return [replace(a, headline=f"{a.headline} ({why})") for a in static_advice(w.single_steps, setup)]
    advice = advise(ranges, setup, out_dir) if ranges else []
    if w is not None and advice and not any(a.flags for a in advice):
        advice += [replace(a, headline=a.headline.replace(": ", ": no knob runs the schedule, so the best single "
                                                                "setting over the loads measured: ", 1))
                   for a in static_advice(w.single_steps, setup)]
    return advice


def report(results: Sequence[ConfigResult], base: Fit | None, predict_steps: range,
           advice: Sequence[EngineAdvice] = ()) -> str:
    """The per-concurrency verdicts, the schedule with the engine flags that apply it, and (with a
    single-stream fit) the batch model."""
    bs = bands(results)
    if not bs:
        return ""
    lines = ["By load (measured; per-stream decode tok/s; the pick: at least 3 requests, the highest lower 95% bound "
             "over plain decoding, a tie to the fewer draft steps):"]
    lines += [f"  concurrency {b.concurrency:>4}: {b.sentence()}" for b in bs]
    measured = crossovers(results)
    for label, cross in measured.items():
        lines.append(f"  {label} crosses plain decoding (measured): {crossing_text(cross, min(levels(results)))}")
    ranges = schedule(bs)
    lines += ["", "Schedule (batch sizes lo-hi: k draft steps, 0 = plain decoding): " + schedule_text(ranges)]
    w = weigh(ranges, load_rates(results)) if ranges else None
    lines += [f"  {ln}" for ln in (w.lines() if w is not None else [])]
    lines += [a.text() for a in advice]
    if base is not None:
        bf = fit_batch(results, base)
        if bf is not None:
            lines += ["", f"Batch term: cycle(s, n) = cycle(s, 1) x (1 + {bf.a:.4f} x (n-1)) + {bf.t_s * 1e3:.4f} ms "
                          f"x (n-1) x (s+1), fitted to {bf.cells} cells", "Crossover predicted by the batch term (a "
                          "measured one stands; where they differ, both are shown):"]
            by_steps = {r.steps: measured[r.label] for r in results if r.label in measured}
            for s in predict_steps:
                cross = bf.crossover(s)
                text = "never" if cross is None else ("loses at one stream" if cross <= 1.0 else f"~{cross:.1f}")
                if s in by_steps:
                    text = f"measured {crossing_text(by_steps[s], min(levels(results)))}; the model predicts {text}"
                lines.append(f"  steps {s:>2}: {text}")
    return "\n".join(lines)

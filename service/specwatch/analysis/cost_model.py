"""The speculation cost model: one speculative cycle, fitted to a sweep's measurements. Analysis stage; pure.

    cycle(s) = s × draft_step + verify(d),   verify(d) = verify_1 + extra × (1 − exp(−(d − 1) / tau))
    accept length(s) = 1 + Σ_{i ≤ s} a_i     (a_i: share of rounds that accept draft position i)
    tok/s(s) = accept length(s) / cycle(s)

``s`` is the number of draft steps and ``d`` the verify width (draft tokens, ``s + 1`` for a chain). The
per-position acceptance ``a_i`` is a property of the draft model on this traffic, not of ``s``: it is pooled
over every measured configuration that drafted position ``i`` (from SGLang's per-request histogram of
accepted drafts, or the per-position rates in vLLM's log lines) and extrapolated geometrically beyond the
longest chain measured. The cycle parameters
come from least squares on the measured cycle times (accept length ÷ decode tok/s), for each ``tau`` on a
grid; the plain-decoding baseline pins ``verify_1``. A verify cost that saturates is what a mixture-of-
experts target shows; a dense target fits with a large ``tau`` (nearly linear).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from ..errors import AnalysisError


@dataclass(frozen=True, slots=True)
class Measurement:
    label: str
    steps: int  # 0 = plain decoding
    draft_tokens: int  # verify width (1 for plain decoding)
    tokens_per_second: float  # the seed's tok/s: output tokens / request time
    decode_tokens_per_second: float
    accept_length: float  # client-side, 1.0 for plain decoding
    position_acceptance: tuple[float, ...] = ()
    verify_rounds: int = 0

    @property
    def cycle_s(self) -> float:
        return self.accept_length / self.decode_tokens_per_second


@dataclass(frozen=True, slots=True)
class Fit:
    draft_step_s: float
    verify_1_s: float
    verify_extra_s: float
    tau: float
    positions: tuple[float, ...]  # pooled per-position acceptance, extrapolated
    rms_rel_error: float
    points: int = 0  # measured cycle times it was fitted to
    loo_rms_rel_error: float | None = None  # each point predicted by the fit to the others (None: too few)

    PARAMETERS = 4  # draft step, verify_1, extra, tau

    @property
    def dof(self) -> int:
        """Degrees of freedom: points less parameters (0 or below: the curve passes through every point)."""
        return self.points - self.PARAMETERS

    def quality(self) -> str:
        """How far to trust it: the residual over its degrees of freedom, and the leave-one-out error."""
        loo = "" if self.loo_rms_rel_error is None else \
            f"; leave-one-out error {100 * self.loo_rms_rel_error:.1f}% rms (each point predicted from the others)"
        if self.dof <= 0:
            return (f"{self.PARAMETERS} parameters to {self.points} points: exact fit, not validated{loo}"
                    if loo else f"{self.PARAMETERS} parameters to {self.points} points: exact fit, not validated "
                    "(measure more configurations to test it)")
        return f"fit error {100 * self.rms_rel_error:.1f}% rms over {self.points} points ({self.dof} degrees of " \
               f"freedom){loo}"

    def verify_s(self, draft_tokens: int) -> float:
        return self.verify_1_s + self.verify_extra_s * (1.0 - math.exp(-(draft_tokens - 1) / self.tau))

    def cycle_s(self, steps: int, draft_tokens: int | None = None) -> float:
        d = steps + 1 if draft_tokens is None else draft_tokens
        return steps * self.draft_step_s + self.verify_s(d)

    def accept_length(self, steps: int) -> float:
        return 1.0 + sum(self.positions[:steps])

    def tokens_per_second(self, steps: int) -> float:
        return self.accept_length(steps) / self.cycle_s(steps)


def pooled_positions(ms: list[Measurement], upto: int) -> tuple[float, ...]:
    sums: list[float] = []
    weights: list[float] = []
    for m in ms:
        w = float(m.verify_rounds or 1)
        for i, a in enumerate(m.position_acceptance):
            if i >= len(sums):
                sums.append(0.0)
                weights.append(0.0)
            sums[i] += a * w
            weights[i] += w
    pos = [s / w for s, w in zip(sums, weights, strict=True) if w > 0]
    if not pos:  # no histograms reported: spread each config's accept length evenly is all we can do
        return ()
    while len(pos) < upto:
        ratio = pos[-1] / pos[-2] if len(pos) > 1 and pos[-2] > 0 else 0.5
        pos.append(pos[-1] * min(1.0, ratio))
    return tuple(pos[:upto])


def _solve(rows: list[list[float]], ys: list[float], ws: list[float], active: list[int]) -> list[float]:
    """Weighted least squares on the active columns (Gaussian elimination on the normal equations)."""
    n = len(active)
    ata = [[sum(w * r[a] * r[b] for r, w in zip(rows, ws, strict=True)) for b in active] for a in active]
    atb = [sum(w * r[a] * y for r, y, w in zip(rows, ys, ws, strict=True)) for a in active]
    for col in range(n):
        piv = max(range(col, n), key=lambda k: abs(ata[k][col]))
        if abs(ata[piv][col]) < 1e-18:
            raise ZeroDivisionError
        ata[col], ata[piv] = ata[piv], ata[col]
        atb[col], atb[piv] = atb[piv], atb[col]
        for k in range(n):
            if k != col:
                f = ata[k][col] / ata[col][col]
                ata[k] = [x - f * y for x, y in zip(ata[k], ata[col], strict=True)]
                atb[k] -= f * atb[col]
    return [atb[i] / ata[i][i] for i in range(n)]


def _nonneg_fit(rows: list[list[float]], ys: list[float], ws: list[float]) -> list[float] | None:
    active = list(range(len(rows[0])))
    while active:
        try:
            sol = _solve(rows, ys, ws, active)
        except ZeroDivisionError:
            active.pop()
            continue
        if all(x >= 0 for x in sol):
            out = [0.0] * len(rows[0])
            for i, x in zip(active, sol, strict=True):
                out[i] = x
            return out
        active = [i for i, x in zip(active, sol, strict=True) if x >= 0] or active[:-1]
    return None


def fit(ms: list[Measurement], max_steps: int = 12) -> Fit:
    """The least-squares fit, with its leave-one-out error where at least three points leave two to fit."""
    f = _fit(ms, max_steps)
    loo = None
    if len(ms) >= 3:
        errs = []
        for i, m in enumerate(ms):
            try:
                g = _fit(ms[:i] + ms[i + 1:], max_steps)
            except AnalysisError:
                continue
            errs.append((g.cycle_s(m.steps, m.draft_tokens) - m.cycle_s) / m.cycle_s)
        loo = math.sqrt(sum(e * e for e in errs) / len(errs)) if errs else None
    return dataclasses.replace(f, points=len(ms), loo_rms_rel_error=loo)


def _fit(ms: list[Measurement], max_steps: int) -> Fit:
    if len(ms) < 2:
        raise AnalysisError("the advisor needs at least two measured configurations")
    spec = [m for m in ms if m.steps > 0]
    upto = max([max_steps, *(m.steps for m in ms)])
    positions = pooled_positions(spec, upto)
    ys = [m.cycle_s for m in ms]
    ws = [1.0 / y**2 for y in ys]  # relative errors
    best: Fit | None = None
    for k in range(121):
        tau = 0.25 * (200.0 / 0.25) ** (k / 120)  # log grid 0.25 .. 200
        rows = [[float(m.steps), 1.0, 1.0 - math.exp(-(m.draft_tokens - 1) / tau)] for m in ms]
        sol = _nonneg_fit(rows, ys, ws)
        if sol is None:
            continue
        pred = [sum(a * b for a, b in zip(r, sol, strict=True)) for r in rows]
        rms = math.sqrt(sum(((p - y) / y) ** 2 for p, y in zip(pred, ys, strict=True)) / len(ys))
        if best is None or rms < best.rms_rel_error - 1e-12:
            best = Fit(sol[0], sol[1], sol[2], tau, positions, rms)
    if best is None:
        raise AnalysisError("could not fit the cycle model to these measurements")
    return best

"""The live advisor: per load bucket, the per-stream decode tok/s every step count 0 (plain) … k_max would give,
the best, and its gain over the running configuration and over plain decoding, each with a 95% interval —
from the running server's own numbers, without a restart. Analysis stage; pure.

Per load bucket ``n`` (the load curve's window, hours: cost is a property of the server and the load) the
running configuration's cycle time ``cycle(k, n)`` (accept length ÷ per-stream decode tok/s of the probes that
ran at that load) and plain decoding's time per token ``plain(n)`` (the baseline curve at the bucket's load, or
the A/B server's window at one stream). From the verdict window (minutes: acceptance is a property of the
traffic) the per-position acceptance ``a_i``, the share of verify rounds that accepted draft position ``i``
(the server's per-position rates when it logs them, else the probes' per-request histograms). With chain
drafting (topk 1) the running ``k`` is the number of positions reported. Then for ``s`` draft steps:

    cycle(s, n)  = plain(n) + (cycle(k, n) − plain(n)) × g(s) / g(k)
    accept(s)    = 1 + Σ_{i ≤ s} a_i
    tok/s(s, n)  = accept(s) / cycle(s, n)

``g(s)`` is the *shape* of a round's cost over a plain step: ``s × draft_step + verify(s+1) − verify(1)``
from a sweep's cycle-model fit (``--advisor-prior sweep.json``): the fit at the sweep's level in the bucket's
load when it ran one (``sweep --concurrency 1,16``: under load the verify's compute grows with batch × draft
tokens and prefill stalls join every round, so the one-stream shape misreads step counts far from ``k`` —
against the simulator's model at 16 streams, mixed profile from k = 2, 6 steps +5% and 10 steps +12%), else
its first level's; the live numbers set its scale at every load. Without a prior the shape is unknown, but a
round's cost rises with ``s`` and no faster than linearly (drafting is linear, verifying saturates), so
``g(s)/g(k)`` lies between ``s/k`` and 1 below ``k`` and between 1 and ``s/k`` above: the estimate is the middle,
the interval the whole range.

Acceptance beyond ``k`` is not measured. With a prior it follows the prior's conditional acceptance along
the chain, scaled by live ÷ prior at position ``k`` (a traffic mix or temperature scales every position's
conditional acceptance); past the prior's own longest chain, and without a prior, each further position's
conditional acceptance lies between 0 and that of position ``k`` held. With a prior the estimate holds it —
the prior's own fit extrapolates so (the offline cost model's geometric tail, one rule for both): a draft
head that keeps pace with the target (on the real tier's EAGLE-3, 0.99 at every position to 5) is predicted
right, and one whose acceptance collapses after ``k`` reads high, inside its interval. Without a prior
nothing is known of the tail or the cost, and each estimate is the middle of its range.

When the probes carry no verify counts (vLLM without ``--per-request-spec-decode-metrics``) a bucket's accept
length is the live acceptance's, ``1 + Σ a_i``: right while acceptance is steady, off for up to one load-curve
window after it changes (the bucket's tok/s is hours of probes, the acceptance minutes).

Intervals: the statistical parts (the bucket's per-request spread of tok/s, the A/B baseline's, binomial
acceptance over the rounds counted, twice the prior fit's rms error on the shape) are each moved by their 95%
half-width and combined in quadrature; the ranges (the shape without a prior, acceptance beyond what is
known) are added at their ends. Each quantity — a step count's tok/s, the best's gain over running, over
plain — is evaluated at every such end itself, so shared inputs cancel where they should. A bucket with too
few probes, no plain rate at its load or no per-position acceptance says so instead of guessing.

The best follows ``winner``'s one rule, as ``sweep`` picks: the step count whose gain over plain decoding has
the highest lower 95% bound (not the highest estimate), and a tie with it (the two's own interval holds 1, or
within 1%) to the fewer steps, plain decoding the fewest. Without a cost shape only plain decoding and the
running k were measured, and the rule picks between those two. A pick that only ties the running k
(``ties_running``) is fewer steps for the same speed: it is reported as a tie ("a tie; 2 steps is as fast and
cheaper"), never as a reason to restart, and it brings no engine flags unless another load's pick needs a
restart anyway (then the flags take the cheaper).
"""

from __future__ import annotations

import contextlib
import functools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from ..errors import AnalysisError
from ..recorder.load import LoadBucket, bucket_of
from ..results import ConfigResult, levels
from . import advisor, cost_model, winner
from .baseline import BaselineCurve
from .compare import Margin
from .cost_model import Fit
from .engine_flags import EngineAdvice, ServerSetup, static_advice
from .engine_flags import advise as schedule_advice
from .load_sweep import schedule_of
from .off_range import LoadRates, weigh
from .spec_profile import SpeculationProfile

Z_95 = 1.96
DEFAULT_MAX_STEPS = 10
MIN_ROUNDS = 20  # verify rounds behind the probes' acceptance before it is used


@dataclass(frozen=True, slots=True)
class Prior:
    """A sweep's cycle-model fit: the shape of a round's cost in the step count, and of acceptance along the
    chain; with ``sweep --concurrency``, the cost's shape at each load it measured too. A speculation profile
    (``spec_profile``) is acceptance only: no ``fit``, its marginal vector in ``acceptance``, and the advisor
    keeps the no-prior bounds on the cost shape."""

    fit: Fit | None  # at the sweep's first level; None: no cost shape (a speculation profile)
    measured_steps: int  # the longest chain the sweep measured acceptance for
    source: str
    by_load: tuple[tuple[int, Fit], ...] = ()  # (load bucket, the fit at that level): cost shape by load
    acceptance: tuple[float, ...] = ()  # without a fit: the marginal acceptance along the chain (index 0 = 1)

    @property
    def positions(self) -> tuple[float, ...]:
        """Acceptance along the chain: the fit's pooled positions, or the profile's marginal vector."""
        return self.fit.positions if self.fit is not None else self.acceptance

    def cost_fit(self, bucket: int | None = None) -> Fit | None:
        """The fit for a bucket's cost shape: the sweep's level in that bucket, else the first level's."""
        return next((f for b, f in self.by_load if b == bucket), self.fit)

    def overhead_s(self, steps: int, bucket: int | None = None) -> float:
        """Cost of a round with ``steps`` over a plain step, as the sweep measured it (at ``bucket``'s load)."""
        f = self.cost_fit(bucket)
        if f is None:
            raise ValueError("a prior without a fit has no cost shape")  # callers check ``fit`` first: a bug
        return f.cycle_s(steps) - f.cycle_s(0)


def prior_of(configs: Sequence[ConfigResult], source: str, max_steps: int) -> Prior:
    """The cycle model fitted to a sweep (``advise --from``'s fit, at the sweep's first level), and at each
    further level whose configurations fit (``sweep --concurrency``); ``AnalysisError`` when the first
    cannot be fitted."""
    ms = advisor.from_results(configs)
    by_load = []
    for n in levels(configs)[1:]:  # the lowest is ``configs``' own results (sweep keeps it there)
        with contextlib.suppress(AnalysisError):  # a level that does not fit keeps the first level's shape
            at_n = [c.at(n) for c in configs if n in c.by_concurrency]
            by_load.append((bucket_of(n), cost_model.fit(advisor.from_results(at_n), max_steps)))
    return Prior(cost_model.fit(ms, max_steps), max((len(m.position_acceptance) for m in ms), default=0), source,
                 tuple(by_load))


def prior_of_profile(p: SpeculationProfile, source: str) -> Prior:
    """A speculation profile as a prior: its marginal acceptance along the chain, no cost shape.
    ``AnalysisError`` when it cannot be one: unmeasured, empty, or ``measured_per_k`` (its k's acceptance
    does not predict another's)."""
    if not p.measured or not p.marginal_accept_rates:
        raise AnalysisError(f"{source}: the profile holds no measured acceptance (measured: false or an empty "
                            "marginal_accept_rates)")
    if not p.chain:
        raise AnalysisError(f"{source}: accept_length_model is measured_per_k (tree, topk > 1, lookup or block "
                            "drafting): one step count's acceptance does not predict another's, so it cannot be a "
                            "prior; measure each step count (specwatch sweep)")
    return Prior(None, len(p.marginal_accept_rates), source, (), tuple(p.marginal_accept_rates))


@dataclass(frozen=True, slots=True)
class Acceptance:
    positions: tuple[float, ...]  # live a_i, index 0 = position 1
    rounds: int | None  # verify rounds they were counted over; None: the server's own (every request)
    source: str  # "server" | "probes"


@dataclass(frozen=True, slots=True)
class Estimate:
    value: float
    lower: float
    upper: float


@dataclass(frozen=True, slots=True)
class StepPrediction:
    steps: int
    tokens_per_second: Estimate
    accept_length: float
    measured: bool  # its tok/s was measured: plain decoding (the baseline) and the running step count


@dataclass(frozen=True, slots=True)
class BucketAdvice:
    bucket: int
    mean_load: float
    requests: int
    status: str  # "ok", or why there is no advice
    predictions: tuple[StepPrediction, ...] = ()
    best_steps: int | None = None
    gain_vs_running: Estimate | None = None  # best ÷ the running configuration
    gain_vs_plain: Estimate | None = None  # best ÷ plain decoding
    # without a prior: step counts never measured whose range reaches above the best measured one; the best is
    # then the best measured, and the rest needs one more configuration measured (``specwatch tune``, or a prior)
    undecided: tuple[int, ...] = ()
    ties_running: bool = False  # the best only ties the running configuration: fewer steps, no reason to restart

    def prediction(self, steps: int) -> StepPrediction | None:
        return next((p for p in self.predictions if p.steps == steps), None)


@dataclass(frozen=True, slots=True)
class Advice:
    running_steps: int | None
    max_steps: int
    prior: str | None  # its source, when one is used
    acceptance: Acceptance | None
    buckets: tuple[BucketAdvice, ...]
    current_bucket: int | None  # the bucket of the server's load now
    engine: tuple[EngineAdvice, ...] = ()  # the flags that run the advice (none: keep the configuration)
    extrapolates: bool = True  # False: a tree, topk > 1 or lookup drafter; no unmeasured step count predicted
    prior_has_cost: bool = False  # the prior gives the cost shape (a sweep), not acceptance alone (a profile)

    def notes(self) -> str:
        """What the advice rests on, for the page: the prior, and whether an unmeasured k may be predicted."""
        if not self.extrapolates:
            return NOT_EXTRAPOLATED
        if self.prior is None:
            return "no --advisor-prior: the cost shape over step counts is a range"
        if self.prior_has_cost:
            return f"cost shape from {self.prior}"
        return f"acceptance along the chain from {self.prior}; no cost shape in it: the cost over step counts " \
               "is a range"


NOT_EXTRAPOLATED = ("this server drafts as a tree (topk > 1) or by lookup (SGLang NGRAM, vLLM ngram/suffix): "
                    "predicting a step count it does not run is not valid (each k must be measured), so only plain "
                    "decoding and the running step count are compared; measure others with `specwatch sweep`")




@dataclass(frozen=True, slots=True)
class _Point:
    """One evaluation point of the model's uncertain inputs."""

    overhead_s: float  # cycle(k, n) − plain(n)
    plain_s: float  # seconds per token of plain decoding
    accept_shift: float  # added to every live a_i (in standard errors × the per-position error)
    shape_rel: float  # relative error on g(s)/g(k)
    shape_w: float  # without a prior: where between its bounds g(s)/g(k) is (0..1)
    tail_w: float  # unknown acceptance: where between 0 and "held" each further position is (0..1)


def acceptance_of(server_positions: Sequence[float], probe_positions: Sequence[float], probe_rounds: int
                  ) -> Acceptance | None:
    """The server's per-position rates (all its traffic) when it logs them, else the probes' histograms."""
    if server_positions:
        return Acceptance(tuple(server_positions), None, "server")
    if probe_positions and probe_rounds >= MIN_ROUNDS:
        return Acceptance(tuple(probe_positions), probe_rounds, "probes")
    return None


def _conditional(a: Sequence[float]) -> list[float]:
    out, prev = [], 1.0
    for x in a:
        out.append(min(1.0, x / prev) if prev > 0 else 0.0)
        prev = x
    return out


class _Chain:
    """Acceptance along the chain up to ``max_steps``: the live positions, then the extrapolated tail."""

    def __init__(self, acc: Acceptance, prior: Prior | None, max_steps: int) -> None:
        self.live = acc.positions
        self.k = len(acc.positions)
        self.rounds = acc.rounds
        cond = _conditional(self.live)
        self.last_cond = cond[-1] if cond else 0.0
        self.shaped: list[float] = []  # the prior-shaped conditional acceptance of positions k+1 … (known part)
        if prior is not None and prior.positions:
            pc = _conditional(prior.positions)
            if self.k <= len(pc) and pc[self.k - 1] > 0:
                scale = self.last_cond / pc[self.k - 1]
                self.shaped = [min(1.0, c * scale) for c in pc[self.k:prior.measured_steps]]
        self.max_steps = max_steps

    def positions(self, p: _Point) -> list[float]:
        err = [math.sqrt(max(0.0, a * (1 - a)) / self.rounds) if self.rounds else 0.0 for a in self.live]
        live = [min(1.0, max(0.0, a + p.accept_shift * e)) for a, e in zip(self.live, err, strict=True)]
        for i in range(1, len(live)):
            live[i] = min(live[i], live[i - 1])
        out = list(live)
        prev = out[-1] if out else 0.0
        held = min(1.0, _conditional(live)[-1]) if live else 0.0
        for j in range(self.k, self.max_steps):
            shaped = j - self.k < len(self.shaped)
            c = self.shaped[j - self.k] if shaped else p.tail_w * held
            prev *= c
            out.append(prev)
        return out

    def measured(self, steps: int) -> bool:
        return steps <= self.k

    def tail_unknown(self, steps: int) -> bool:
        return steps > self.k + len(self.shaped)


def _ratio_bounds(steps: int, k: int) -> tuple[float, float]:
    r = steps / k
    return (r, 1.0) if steps <= k else (1.0, r)


class _Model:
    def __init__(self, chain: _Chain, prior: Prior | None, bucket: int) -> None:
        self.chain, self.bucket = chain, bucket
        self.cost = prior if prior is not None and prior.fit is not None else None  # a prior with a cost shape
        self.g_k = self.cost.overhead_s(chain.k, bucket) if self.cost is not None else 1.0
        self.ok_shape = self.cost is None or self.g_k > 0

    def ratio(self, steps: int, p: _Point) -> float:
        k = self.chain.k
        if steps == k:
            return 1.0
        if self.cost is not None and self.g_k > 0:
            return max(0.0, self.cost.overhead_s(steps, self.bucket) / self.g_k * (1.0 + p.shape_rel))
        lo, hi = _ratio_bounds(steps, k)
        return lo + p.shape_w * (hi - lo)

    def tps(self, steps: int, p: _Point) -> float:
        if steps == 0:
            return 1.0 / p.plain_s
        al = 1.0 + sum(self.chain.positions(p)[:steps])
        cyc = p.plain_s + max(0.0, p.overhead_s) * self.ratio(steps, p)
        return al / cyc


def _interval(q: Callable[[_Point], float], centre: _Point, stat: Sequence[tuple[str, float]],
              ranges: Sequence[tuple[str, float, float]]) -> Estimate:
    """``q`` at the centre; each statistical input moved by ± its 95% half-width (in quadrature), each range
    input to its ends (added)."""
    v = q(centre)
    up2 = down2 = 0.0
    for name, half in stat:
        for sign in (1.0, -1.0):
            d = q(replace(centre, **{name: getattr(centre, name) + sign * half})) - v
            up2, down2 = up2 + max(d, 0.0) ** 2 / 2, down2 + min(d, 0.0) ** 2 / 2
    up, down = math.sqrt(up2), math.sqrt(down2)
    for name, lo, hi in ranges:
        ds = [q(replace(centre, **{name: x})) - v for x in (lo, hi)]
        up += max(0.0, *ds)
        down += -min(0.0, *ds)
    return Estimate(v, max(0.0, v - down), v + up)


def _cycle_or_why(b: LoadBucket, plain_tps: float | None, acc: Acceptance | None, min_requests: int
                  ) -> float | str:
    """The running configuration's cycle time at the bucket's load, or why the bucket cannot be advised."""
    if b.requests < min_requests:
        return f"not enough data: {b.requests} of {min_requests} probes at this load"
    if plain_tps is None or plain_tps <= 0:
        return "no plain-decoding rate at this load (give --baseline-curve covering it)"
    if acc is None or not acc.positions:
        return "no per-position acceptance yet (the server logs none and the probes' histograms are too few)"
    cyc = b.cycle_s
    if cyc is None and b.tokens_per_second > 0:  # vLLM without --per-request-spec-decode-metrics: see above
        cyc = (1.0 + sum(acc.positions)) / b.tokens_per_second
    return cyc if cyc is not None else "the probes at this load measured no decode rate"


def advise_bucket(b: LoadBucket, plain_tps: float | None, plain_rel_stderr: float | None, acc: Acceptance | None,
                  prior: Prior | None, max_steps: int, min_requests: int, extrapolate: bool = True) -> BucketAdvice:
    """``extrapolate`` False (``engine_flags.chain_draft``: a tree, topk > 1, or lookup drafting): predicting a
    step count not measured is not valid, so only plain decoding and the running k are compared."""
    def no(status: str) -> BucketAdvice:
        return BucketAdvice(b.bucket, b.mean_load, b.requests, status)

    cyc = _cycle_or_why(b, plain_tps, acc, min_requests)
    if isinstance(cyc, str):
        return no(cyc)
    assert plain_tps is not None and acc is not None  # _cycle_or_why's checks
    chain = _Chain(acc, prior, max(max_steps, len(acc.positions)))
    model = _Model(chain, prior, b.bucket)
    if not model.ok_shape:
        return no("the prior's fit gives the running configuration no cost over plain decoding")
    plain_s = 1.0 / plain_tps
    centre = _Point(overhead_s=cyc - plain_s, plain_s=plain_s, accept_shift=0.0, shape_rel=0.0, shape_w=0.5,
                    tail_w=1.0 if prior is not None else 0.5)
    stat = [("overhead_s", Z_95 * (b.relative_stderr or 0.0) * cyc)]
    if plain_rel_stderr:
        stat.append(("plain_s", Z_95 * plain_rel_stderr * plain_s))
    if acc.rounds:
        stat.append(("accept_shift", Z_95))
    cost_fit = model.cost.cost_fit(b.bucket) if model.cost is not None else None
    if cost_fit is not None:
        stat.append(("shape_rel", 2.0 * cost_fit.rms_rel_error))
    steps_range = range(0, chain.max_steps + 1) if extrapolate else sorted({0, chain.k})

    def ranges_for(*steps: int) -> list[tuple[str, float, float]]:
        out: list[tuple[str, float, float]] = []
        if cost_fit is None and any(s not in (0, chain.k) for s in steps):
            out.append(("shape_w", 0.0, 1.0))
        if any(s > 0 and chain.tail_unknown(s) for s in steps):
            out.append(("tail_w", 0.0, 1.0))
        return out

    at_centre = chain.positions(centre)
    k = chain.k
    preds = [StepPrediction(s, _interval(functools.partial(model.tps, s), centre, stat, ranges_for(s)),
                            1.0 + sum(at_centre[:s]), s in (0, k)) for s in steps_range]

    def vs(a: int, b: int) -> Estimate:
        return _interval(lambda p: model.tps(a, p) / model.tps(b, p), centre, stat, ranges_for(a, b))

    undecided: tuple[int, ...] = ()
    if cost_fit is None or not extrapolate:  # only plain decoding and k are measured, and no cost shape: the rule
        # picks one of those two
        best, ties_running = _pick((0, k), vs, k)
        top = next(p for p in preds if p.steps == best).tokens_per_second.value
        undecided = tuple(p.steps for p in preds if not p.measured and p.tokens_per_second.upper > top)
    else:
        best, ties_running = _pick([p.steps for p in preds], vs, k)
    return BucketAdvice(b.bucket, b.mean_load, b.requests, "ok", tuple(preds), best, vs(best, k), vs(best, 0),
                        undecided, ties_running)


def _pick(steps: Sequence[int], vs: Callable[[int, int], Estimate], running: int) -> tuple[int, bool]:
    """``winner``'s rule over ``steps``: the highest lower bound against plain decoding, a tie with it to the
    fewest steps; and whether the pick only ties the running ``k`` (no reason to restart for it alone)."""
    cands = [winner.Candidate(str(s), s, winner.EXACT if s == 0 else _ratio(vs(s, 0))) for s in steps]
    chosen = winner.pick(cands, lambda a, b: _ratio(vs(a.steps, b.steps))).chosen
    assert chosen is not None  # every candidate has an interval
    return chosen.steps, chosen.steps != running and _ratio(vs(chosen.steps, running)).tie


def _ratio(e: Estimate) -> Margin:
    """A gain (a ratio) as a margin (the ratio less one), to be judged by ``winner``."""
    return Margin(e.value - 1.0, e.lower - 1.0, e.upper - 1.0)


def advise(buckets: Sequence[LoadBucket], curve: BaselineCurve | None,
           ab_plain: tuple[float | None, float | None] | None,
           acc: Acceptance | None, prior: Prior | None, max_steps: int, min_requests: int,
           current_bucket: int | None, extrapolate: bool = True) -> Advice:
    """``ab_plain``: the A/B baseline server's (tok/s, relative stderr), valid for the one-stream bucket only
    (it serves nothing but the probes); else the curve at each bucket's load. ``extrapolate``: as
    ``advise_bucket``'s."""
    out = []
    for b in sorted(buckets, key=lambda b: b.bucket):
        if ab_plain is not None:
            plain, se = ab_plain if b.bucket == 1 else (None, None)
        else:
            at = curve.at(b.mean_load) if curve is not None else None
            plain, se = (at.tokens_per_second if at is not None else None), None
        out.append(advise_bucket(b, plain, se, acc, prior, max_steps, min_requests, extrapolate))
    return Advice(len(acc.positions) if acc else None, max_steps, prior.source if prior else None, acc, tuple(out),
                  current_bucket, extrapolates=extrapolate, prior_has_cost=prior is not None and prior.fit is not None)


def with_flags(a: Advice, setup: ServerSetup) -> Advice:
    """The engine flags for the advised step counts (``engine_flags``, the sweep's generator): one step count
    at every advised load, or the per-load schedule up to the largest load seen; none while the running
    configuration is the advice, or only ties it (a tie is no reason to restart; once a restart is due for
    another load, the tied loads take the cheaper pick)."""
    ok = [b for b in a.buckets if b.status == "ok" and b.best_steps is not None]
    picks = [(b.bucket, b.best_steps) for b in ok if b.best_steps is not None]
    ks = {k for _, k in picks}
    if not picks or all(b.best_steps == a.running_steps or b.ties_running for b in ok):
        return a
    last = max(ok, key=lambda b: b.bucket)
    top = max(last.bucket, math.floor(last.mean_load))  # the schedule ends at the largest load measured
    if len(ks) == 1:
        return replace(a, engine=tuple(static_advice(ks.pop(), setup)))
    ranges = schedule_of(picks, top)
    # a 0 range priced, weighed over the load the daemon saw (each bucket's requests): the schedule, or the best
    # single step count when the schedule does not beat it (``off_range``)
    w = weigh(ranges, [bucket_rates(b) for b in ok], weights={b.bucket: float(b.requests) for b in ok})
    if w is None or w.advise_schedule:
        return replace(a, engine=tuple(schedule_advice(ranges, setup)))
    if w.single_steps == a.running_steps:
        return a
    why = f"the schedule does not beat {w.single_name()} once its 0 range is priced"
    return replace(a, engine=tuple(replace(e, headline=f"{e.headline} ({why})")
                                   for e in static_advice(w.single_steps, setup)))


def bucket_rates(b: BucketAdvice) -> LoadRates:
    """A bucket's predicted per-stream rates, plain decoding's and each step count's, for ``off_range.weigh``."""
    plain = b.prediction(0)
    return LoadRates(b.bucket, plain.tokens_per_second.value if plain is not None else 0.0,
                     tuple((p.steps, p.tokens_per_second.value) for p in b.predictions if p.steps > 0))


def steps_text(n: int) -> str:
    """"plain decoding", "1 step", "5 steps"."""
    return "plain decoding" if n == 0 else f"{n} step{'s' if n != 1 else ''}"


def _pct(e: Estimate) -> str:
    return f"{100 * (e.value - 1):+.0f}% (95% interval {100 * (e.lower - 1):+.0f}…{100 * (e.upper - 1):+.0f}%)"


def describe(b: BucketAdvice, running: int | None) -> str:
    """One line for the page and the view: "at 8 running requests, 2 steps would give +9% (95% interval
    +4…+14%) over the running 5 steps; +4% over plain decoding", or for a pick that only ties the running k,
    "…, 2 steps ties the running 5 steps (+0% (95% interval -3…+4%)): a tie; 2 steps is as fast and cheaper, no
    reason to restart for it alone"."""
    where = f"at {b.mean_load:.3g} running request{'' if b.mean_load == 1 else 's'}"
    if b.status != "ok" or b.best_steps is None or b.gain_vs_running is None or b.gain_vs_plain is None:
        return f"{where}: {b.status}"
    run = steps_text(running) if running is not None else "the running configuration"
    plain = "" if b.best_steps == 0 else f"; {_pct(b.gain_vs_plain)} over plain decoding"
    more = ""
    if b.undecided:
        top = max((p for p in b.predictions if p.steps in b.undecided), key=lambda p: p.tokens_per_second.upper)
        more = (f"; {_span(b.undecided)} could be faster (up to {top.tokens_per_second.upper:.3g} tok/s at "
                f"{steps_text(top.steps)}): needs one more configuration measured (run `specwatch tune`, or give "
                "--advisor-prior)")
    if b.best_steps == running:
        best_word = "the best measured" if b.undecided else "the best predicted"
        return f"{where}, the running {run} is {best_word}{plain}{more}"
    if b.ties_running:
        return f"{where}, {steps_text(b.best_steps)} ties the running {run} ({_pct(b.gain_vs_running)}): a tie; " \
               f"{steps_text(b.best_steps)} is as fast and cheaper, no reason to restart for it alone{plain}{more}"
    if b.best_steps == 0 and running and b.undecided:
        return f"{where}, plain decoding is the best measured: the running {run} gives " \
               f"{_pct(_inverse(b.gain_vs_running))} against it{more}"
    return f"{where}, {steps_text(b.best_steps)} would give {_pct(b.gain_vs_running)} over the running " \
           f"{run}{plain}{more}"


def _inverse(e: Estimate) -> Estimate:
    return Estimate(1.0 / e.value, 1.0 / e.upper if e.upper else 0.0, 1.0 / e.lower if e.lower else math.inf)


def _span(steps: Sequence[int]) -> str:
    if len(steps) == 1:
        return steps_text(steps[0])
    return f"{steps[0]}-{steps[-1]} steps" if list(steps) == list(range(steps[0], steps[-1] + 1)) else \
        ", ".join(map(str, steps)) + " steps"

"""The daemon's interval tick as analysis: the recorder's windows in, every window's description, the verdict
at the server's load, speedup by load and the live advisor's step counts by load out. Pure but for the
judge's hysteresis state, which it is given.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ..recorder.load import LoadBucket, bucket_of
from ..recorder.stats import Stats
from ..records import ProbeWindow, ServerWindow
from .baseline import BaselineCurve, baseline_at
from .by_load import LoadVerdict, by_load
from .engine_flags import ServerSetup, chain_draft
from .live_advisor import DEFAULT_MAX_STEPS, Advice, Prior, acceptance_of, advise, with_flags
from .verdict import Judge, Verdict, verdict_inputs

Views = dict[str, dict[str, ProbeWindow]]  # by window label, then by target


@dataclass(frozen=True, slots=True)
class TickInputs:
    windows: Mapping[str, Mapping[str, Stats]]  # the recorder's, by window label ("cumulative" included)
    targets: tuple[str, ...]
    verdict_window: str  # the label the verdict is judged over
    server: ServerWindow | None  # the server's samples over the verdict window
    load: float | None  # the server's running requests over the verdict window (None: unknown)
    buckets: list[LoadBucket]  # the load curve's
    curve: BaselineCurve | None
    ab: bool  # a baseline server is probed beside the speculative one
    min_requests: int
    prior: Prior | None = None  # the live advisor's (--advisor-prior)
    advisor_max_steps: int = DEFAULT_MAX_STEPS
    setup: ServerSetup | None = None  # the speculative server as it described itself (None: not yet)


@dataclass(frozen=True, slots=True)
class TickResult:
    views: Views
    verdict: Verdict
    by_load: LoadVerdict
    advice: Advice

    def probe(self, window: str) -> dict[str, ProbeWindow]:
        return self.views[window]


def describe(windows: Mapping[str, Mapping[str, Stats]], targets: tuple[str, ...]) -> Views:
    """Each window's description per target (an empty one where a target had no probe in it)."""
    return {label: {tg: per.get(tg, Stats()).describe() for tg in targets} for label, per in windows.items()}


def tick(t: TickInputs, judge: Judge) -> TickResult:
    views = describe(t.windows, t.targets)
    vw = views[t.verdict_window]
    at = baseline_at(t.curve, t.ab, t.load)
    v = judge.update(verdict_inputs(vw["spec"], vw.get("baseline"), at.tokens_per_second,
                                    t.server.accept_length if t.server else None, t.load, at.status, at.load))
    return TickResult(views, v, by_load(t.buckets, t.curve, t.min_requests, t.load), advice_of(t, vw))


def advice_of(t: TickInputs, vw: Mapping[str, ProbeWindow]) -> Advice:
    """The live advisor over the load curve's buckets, with the verdict window's acceptance."""
    spec, base = vw["spec"], vw.get("baseline")
    acc = acceptance_of(t.server.position_acceptance if t.server else (), spec.position_acceptance,
                        spec.position_rounds)
    ab = None
    if t.ab:
        ab = (base.tokens_per_second, base.tokens_per_second_relative_stderr) if base and base.tokens_per_second \
            else (None, None)
    setup = t.setup or ServerSetup("unknown")
    return with_flags(advise(t.buckets, t.curve, ab, acc, t.prior, t.advisor_max_steps, t.min_requests,
                             bucket_of(t.load) if t.load is not None else None, chain_draft(setup)), setup)

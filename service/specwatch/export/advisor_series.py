"""The live advisor's series: which load buckets and step counts have advice now. Exporter stage, written on
the tick through ``prometheus.Exporter.set_advice``.

Advice comes and goes with the load: a bucket without advice (too few requests, no plain-decoding rate at its
load) has no series, and a step count no longer predicted in a bucket loses its series, so no stale value is
left behind. The label values are closed sets: load buckets are powers of two, step counts at most
``advisor_max_steps``.
"""

from __future__ import annotations

import contextlib

from ..analysis.live_advisor import Advice
from .families import AdvisorFamily


class AdvisorSeries:
    def __init__(self, family: AdvisorFamily) -> None:
        self.family = family
        self._steps_shown: dict[str, frozenset[int]] = {}  # step counts exported, per load bucket label

    def set(self, a: Advice) -> None:
        f = self.family
        f.running_steps.set(float("nan") if a.running_steps is None else a.running_steps)
        shown = set()
        for b in a.buckets:
            if b.status != "ok" or b.best_steps is None or b.gain_vs_running is None or b.gain_vs_plain is None:
                continue
            lb = str(b.bucket)
            shown.add(lb)
            f.best.labels(lb).set(b.best_steps)
            f.gain.labels(lb).set(b.gain_vs_running.value)
            f.gain_lower.labels(lb).set(b.gain_vs_running.lower)
            f.gain_upper.labels(lb).set(b.gain_vs_running.upper)
            f.vs_plain.labels(lb).set(b.gain_vs_plain.value)
            for p in b.predictions:
                f.tps.labels(str(p.steps), lb).set(p.tokens_per_second.value)
            now = frozenset(p.steps for p in b.predictions)  # not always 0..n: a tree drafter's are plain and k only
            self._remove_steps(lb, self._steps_shown.get(lb, frozenset()) - now)
            self._steps_shown[lb] = now
        for lb in [x for x in self._steps_shown if x not in shown]:
            for gauge in f.all:
                with contextlib.suppress(KeyError):
                    gauge.remove(lb)
            self._remove_steps(lb, self._steps_shown.pop(lb))

    def _remove_steps(self, lb: str, steps: frozenset[int]) -> None:
        for s in steps:
            with contextlib.suppress(KeyError):
                self.family.tps.remove(str(s), lb)

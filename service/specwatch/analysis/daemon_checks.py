"""The daemon's honesty checks (``analysis.checks``) on each tick: from its last probes (``recorder.recent``)
and the server's last reports. Analysis stage; pure.

What the daemon can and cannot decide: its probes are a light, steady load, not a rate to reach nor repeats of
one cell, so ``achieved_rate`` and ``repeat_spread`` are not measured here (``bench`` and ``sweep`` measure
them). ``server_queueing`` reads the waiting requests in the server's last log line or scrape;
``acceptance_identity`` each last report that gives both an accept length and per-position rates (vLLM's
spec-decode lines and metrics); the probes always ask ``ignore_eos``, so ``output_length`` is always decided.
"""

from __future__ import annotations

from collections.abc import Iterable

from ..records import ServerSample
from ..results import Check, RecentProbes
from . import checks


def daemon_checks(recent: RecentProbes, last: Iterable[ServerSample], max_tokens: int) -> tuple[Check, ...]:
    """Every check, in ``CHECKS`` order. ``last``: the server's last report per source."""
    reports = list(last)
    return (checks.unmeasured("achieved_rate", "the daemon's probes are a light load, not a rate to reach "
                              "(bench --rate-per-s measures it)"),
            checks.unmeasured("repeat_spread", "the daemon measures windows, not repeats of one cell (bench and "
                              "sweep measure it)"),
            checks.prefix_cache(recent.cached_tokens, recent.reported_prompt_tokens, recent.cached_requests),
            checks.server_queueing([s.queued for s in reports if s.queued is not None],
                                   [s.running for s in reports if s.running is not None and s.is_decode], None, None),
            identity(reports),
            checks.output_length(True, max_tokens, recent.ok_outputs),
            checks.synthetic_prompts(recent.requests, recent.distinct_prompts, recent.random_prompts))


def identity(reports: list[ServerSample]) -> Check:
    """The first report (by source) whose accept length and per-position rates disagree, else the first that
    agrees; not measured when none gives both."""
    got = [checks.acceptance_identity(s.accept_length, s.position_acceptance, f"the server's last {s.source} report")
           for s in sorted(reports, key=lambda s: s.source) if s.accept_length is not None and s.position_acceptance]
    if not got:
        return checks.unmeasured("acceptance_identity", "no server report gives both an accept length and "
                                 "per-position acceptance (vLLM's spec-decode lines and metrics do)")
    return next((c for c in got if c.failed), got[0])

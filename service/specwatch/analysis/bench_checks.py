"""A bench run's honesty checks (``analysis.checks``) from its measured records: the figures each check
needs, computed the one way ``bench``, ``report`` and every ``sweep`` level share. Analysis stage; pure.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ..records import RequestRecord, RunInfo
from ..results import Check
from . import checks


@dataclass(frozen=True, slots=True)
class Asked:
    """What the run asked of the server, and what the server's ``/metrics`` said of its load meanwhile."""

    open_loop: bool
    max_tokens: int
    ignore_eos: bool
    server_running: tuple[int, ...] = ()  # busy samples only
    server_queued: tuple[int, ...] = ()  # every sample

    @classmethod
    def of(cls, info: RunInfo) -> Asked:
        """From the run's schedule and its bench options (``RunInfo.settings``, read here only)."""
        s = info.settings
        return cls(info.schedule.request_rate != "inf", int(s.get("max_tokens") or 0), bool(s.get("ignore_eos")),
                   info.server_running, info.server_queued)


def bench_checks(records: Sequence[RequestRecord], asked: Asked, texts: Mapping[str, str] | None = None
                 ) -> tuple[Check, ...]:
    """Every check, in ``CHECKS`` order. ``records``: the measured ones; ``texts``: prompt id to text where the
    prompts are at hand (None: the random-token test is not run)."""
    ok = [r for r in records if r.ok]
    used = {r.prompt_id for r in records}
    rand = None if texts is None else sum(checks.random_like(texts[p]) for p in used if p in texts)
    ttft_rise, tpot_rise = rises(ok)
    return (checks.achieved_rate(*rates(records) if asked.open_loop else (None, None)),
            checks.repeat_spread(repeat_rates(ok)),
            prefix_cache(records),
            checks.server_queueing(asked.server_queued, asked.server_running, ttft_rise, tpot_rise),
            checks.acceptance_identity(*identity_figures(ok), "the requests' token counts vs the server's "
                                       "per-request histograms, pooled"),
            checks.output_length(asked.ignore_eos, asked.max_tokens, [r.output_tokens for r in ok]),
            checks.synthetic_prompts(len(records), len(used), rand))


def identity_figures(ok: Sequence[RequestRecord]) -> tuple[float | None, tuple[float, ...]]:
    """The accept length from the requests' token counts and the per-position acceptance from their verify-round
    histograms (rounds that accepted at least p drafts / rounds), over the requests that have a histogram. A
    request's last round may be cut short by max_tokens or a stop: the histogram counts the drafts it accepted,
    the output does not hold them. That tail (up to the draft length) is added back to the token count, so the
    two sides differ only where the counts themselves disagree."""
    timed = [(r, r.spec) for r in ok if r.spec is not None and r.spec.histogram and r.spec.verify_ct > 0]
    rounds = sum(sp.verify_ct for _, sp in timed)
    if not rounds:
        return None, ()
    k = max(len(sp.histogram) for _, sp in timed) - 1
    positions = tuple(sum(sum(sp.histogram[p:]) for _, sp in timed) / rounds for p in range(1, k + 1))
    tokens = 0
    for r, sp in timed:
        implied = sp.verify_ct + sum(j * n for j, n in enumerate(sp.histogram))
        tokens += r.spec_tokens + min(max(implied - r.spec_tokens, 0), len(sp.histogram) - 1)
    return tokens / rounds, positions


def rates(records: Sequence[RequestRecord]) -> tuple[float | None, float | None]:
    """Offered and achieved requests per second (see ``analysis.checks``); None where not measurable."""
    if len(records) < 2:
        return None, None
    first = min(r.intended_ns for r in records)
    span = max(r.intended_ns for r in records) - first
    offered = (len(records) - 1) * 1e9 / span if span > 0 else None
    ok = [r for r in records if r.ok]
    if len(ok) < 2:
        return offered, None
    typical = statistics.median(r.e2e_ns for r in ok)
    achieved_span = max(r.done_ns for r in ok) - typical - first
    achieved = (len(ok) - 1) * 1e9 / achieved_span if achieved_span > 0 else None
    return offered, achieved


def repeat_rates(ok: Sequence[RequestRecord]) -> list[float | None]:
    """The run's two repeats of the same work: each prompt sent at least twice, its first sending in repeat 1 and
    its second in repeat 2 (send order); each repeat's token-weighted decode tok/s. Empty when fewer than two
    prompts were sent twice (no repeats to compare); None for a repeat without a decode span."""
    seen: dict[str, list[RequestRecord]] = {}
    for r in sorted(ok, key=lambda r: r.sent_ns):
        seen.setdefault(r.prompt_id, []).append(r)
    twice = [rs for rs in seen.values() if len(rs) >= 2]
    if len(twice) < 2:
        return []
    out: list[float | None] = []
    for i in (0, 1):
        timed = [rs[i] for rs in twice if rs[i].decode_ns > 0]
        ns = sum(r.decode_ns for r in timed)
        out.append(sum(r.decode_tokens for r in timed) * 1e9 / ns if ns > 0 else None)
    return out


def prefix_cache(records: Sequence[RequestRecord]) -> Check:
    told = [r for r in records if r.cached_tokens is not None]
    if not told:
        return checks.prefix_cache(None, 0)
    return checks.prefix_cache(sum(r.cached_tokens or 0 for r in told), sum(r.prompt_tokens for r in told),
                               sum(1 for r in told if r.cached_tokens))


def rises(ok: Sequence[RequestRecord]) -> tuple[float | None, float | None]:
    """The last third's median TTFT and TPOT over the first third's, in send order (None: fewer than six ok
    requests with both)."""
    timed = sorted((r for r in ok if r.ttft_ns and r.decode_tokens > 0 and r.decode_ns > 0), key=lambda r: r.sent_ns)
    if len(timed) < 6:
        return None, None
    third = len(timed) // 3
    head, tail = timed[:third], timed[-third:]

    def ratio(key: str) -> float | None:
        a = statistics.median(_figure(r, key) for r in head)
        return statistics.median(_figure(r, key) for r in tail) / a if a > 0 else None

    return ratio("ttft"), ratio("tpot")


def _figure(r: RequestRecord, key: str) -> float:
    return float(r.ttft_ns or 0) if key == "ttft" else r.decode_ns / r.decode_tokens

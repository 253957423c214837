"""Honesty checks: the ways a benchmark result can be wrong without saying so, each a pure function of a few
figures that returns a typed ``results.Check`` (passed, failed, or not measured with the reason). Analysis stage;
no I/O. ``bench``, ``sweep`` (each level) and the daemon compute the figures from what they hold and call these.

The rules, one per check (thresholds are module constants):

- ``achieved_rate`` (open loop only): the requests completed per second against the rate the schedule offered.
  Offered: (n - 1) / (last intended start - first intended start), the schedule as drawn (a Poisson schedule's
  own spread is not a shortfall). Achieved: (completed - 1) / (last end - median e2e - first intended start):
  a server that keeps up finishes the last request one typical e2e after its start, so the two spans match; one
  that cannot keep up finishes late by the backlog. Fails below ``RATE_SHARE`` (95%) of offered.
- ``repeat_spread``: repeats of the same work, more than ``SPREAD`` (5%) of their mean apart. In a bench run
  (and each sweep level) the repeats are the prompts it sent twice or more: their first sendings are one
  repeat, their second sendings the other, each scored by its token-weighted decode tok/s. Without two prompts
  sent twice it is not measured: requests over different prompts differ by their content (acceptance follows
  the text), which says nothing of whether the run reproduces.
- ``prefix_cache``: the prompt tokens the server says it served from its prefix cache (SGLang's
  ``meta_info.cached_tokens``; ``usage.prompt_tokens_details.cached_tokens`` where the server reports it: vLLM
  with ``--enable-prompt-tokens-details``, SGLang with ``--enable-cache-report``). Fails when more than
  ``CACHED_SHARE`` (10%) of the prompt tokens were cached (a shared chat template's few tokens stay under it):
  TTFT and prefill cost are then understated.
- ``server_queueing``: requests waiting inside the server. From its metrics (``sglang:num_queue_reqs``,
  ``vllm:num_requests_waiting``) when given: it fails when the median waiting count is above zero and above
  ``QUEUE_SHARE`` (5%) of the median running count. A request that arrives during a decode step waits for the
  next one: a closed loop of 2 streams on the simulator showed one waiting in 3 of 10 samples, and a busy server
  always holds a few such; a server that cannot keep up holds them in most samples, and many. Else from the
  requests: the last third's median TTFT more than ``TTFT_RISE`` (2x) the first third's while the median TPOT
  rose less than ``TPOT_RISE`` (1.5x): time spent before the first token grew, not the decoding.
- ``acceptance_identity``: mean accept length = 1 + the sum of per-position acceptance (each round yields its
  accepted drafts plus one). Fails when they differ by more than ``IDENTITY_TOLERANCE`` (0.02; NVIDIA
  Model-Optimizer's bound): one of the two is mis-counted (data-parallel servers under-count positions). A
  bench run compares the requests' token counts with their verify-round histograms
  (``analysis.bench_checks.identity_figures``: a last round cut short by max_tokens is added back).
- ``output_length`` (with ``--ignore-eos`` only): an ok request that ended short of ``max_tokens`` fails it.
- ``synthetic_prompts``: one prompt for every request (n >= 2), or prompts that read as random tokens (fewer
  than ``FUNCTION_WORD_SHARE`` of their words are common English function words, over at least
  ``MIN_WORDS`` words): random-token prompts overstate speculation's throughput by about 23% (SPEED-Bench).
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Iterable, Mapping, Sequence

from ..results import CHECKS, Check, CheckName, ConfigResult

RATE_SHARE = 0.95
SPREAD = 0.05
CACHED_SHARE = 0.10
QUEUE_SHARE = 0.05
TTFT_RISE = 2.0
TPOT_RISE = 1.5
IDENTITY_TOLERANCE = 0.02
FUNCTION_WORD_SHARE = 0.05
MIN_WORDS = 20
# The verdict's figures each check speaks for: a failed one makes the verdict say it is unreliable.
VERDICT_FIGURES: dict[CheckName, str] = {"acceptance_identity": "accept length",
                                         "synthetic_prompts": "tok/s and accept length",
                                         "output_length": "decode tok/s", "repeat_spread": "decode tok/s"}
FUNCTION_WORDS = frozenset(
    "the a an of to and in is are was be for that this with on as it by or from at what how why which who you "
    "your we our i he she they their not if then than but so do does can will would should could into about "
    "each all any some no".split())


def unmeasured(name: CheckName, why: str) -> Check:
    return Check(name, True, f"not measured: {why}", measured=False)


def achieved_rate(offered_per_s: float | None, achieved_per_s: float | None) -> Check:
    if offered_per_s is None:
        return unmeasured("achieved_rate", "a closed loop offers no rate")
    if achieved_per_s is None:
        return unmeasured("achieved_rate", "fewer than two requests completed")
    share = achieved_per_s / offered_per_s
    return Check("achieved_rate", share >= RATE_SHARE, f"achieved {achieved_per_s:.3g} req/s of {offered_per_s:.3g} "
                 f"offered ({100 * share:.0f}%; the floor is {100 * RATE_SHARE:.0f}%)")


def repeat_spread(repeats: Sequence[float | None], what: str = "repeats (prompts sent twice)") -> Check:
    vals = [v for v in repeats if v is not None]
    if len(vals) < 2 or len(vals) < len(repeats):
        return unmeasured("repeat_spread", f"fewer than two {what} with a decode rate")
    mean = statistics.fmean(vals)
    spread = (max(vals) - min(vals)) / mean if mean > 0 else 0.0
    shown = ", ".join(f"{v:.1f}" for v in vals)
    return Check("repeat_spread", spread <= SPREAD, f"decode tok/s of the {what}: {shown} ({100 * spread:.1f}% "
                 f"apart; the limit is {100 * SPREAD:.0f}%)")


def prefix_cache(cached_tokens: int | None, prompt_tokens: int, requests_hit: int = 0) -> Check:
    if cached_tokens is None:
        return unmeasured("prefix_cache", "the server reported no cached prompt tokens (SGLang's meta_info does; "
                          "vLLM with --enable-prompt-tokens-details)")
    if prompt_tokens <= 0:
        return unmeasured("prefix_cache", "no prompt tokens counted")
    share = cached_tokens / prompt_tokens
    return Check("prefix_cache", share <= CACHED_SHARE, f"{cached_tokens} of {prompt_tokens} prompt tokens "
                 f"({100 * share:.0f}%) came from the server's prefix cache, in {requests_hit} request(s); the limit "
                 f"is {100 * CACHED_SHARE:.0f}%: TTFT is understated when it is over")


def server_queueing(queued: Sequence[float], running: Sequence[float], ttft_rise: float | None,
                    tpot_rise: float | None) -> Check:
    """``queued``, ``running``: the server's waiting and running requests at its metrics samples (empty: none
    reported); the rises: the last third's median TTFT and TPOT over the first third's (None: too few requests)."""
    if queued:
        mq = statistics.median(queued)
        mr = statistics.median(running) if running else 0.0
        waiting = sum(1 for q in queued if q > 0)
        return Check("server_queueing", mq <= 0 or mq <= QUEUE_SHARE * mr, f"the server's median waiting "
                     f"requests {mq:g} against {mr:g} running, over {len(queued)} sample(s) ({waiting} with any "
                     f"waiting, up to {max(queued):g}; fails when over 0 and over {100 * QUEUE_SHARE:.0f}% of the "
                     "running)")
    if ttft_rise is None or tpot_rise is None:
        return unmeasured("server_queueing", "no waiting-request figure from the server, and no TTFT trend over "
                          "enough requests")
    rising = ttft_rise > TTFT_RISE and tpot_rise < TPOT_RISE
    return Check("server_queueing", not rising, f"median TTFT {ttft_rise:.2f}x and TPOT {tpot_rise:.2f}x from the "
                 f"run's first third to its last (fails when TTFT rises over {TTFT_RISE:g}x while TPOT stays under "
                 f"{TPOT_RISE:g}x: requests waited in the server)")


def acceptance_identity(accept_length: float | None, positions: Sequence[float], scope: str = "") -> Check:
    if accept_length is None or not positions:
        return unmeasured("acceptance_identity", "accept length and per-position acceptance are not both known")
    implied = 1.0 + sum(positions)
    gap = abs(accept_length - implied)
    where = f" ({scope})" if scope else ""
    return Check("acceptance_identity", gap <= IDENTITY_TOLERANCE, f"accept length {accept_length:.3f} vs 1 + "
                 f"sum of {len(positions)} per-position rates {implied:.3f}{where}: {gap:.3f} apart (the limit is "
                 f"{IDENTITY_TOLERANCE:g})")


def output_length(ignore_eos: bool, max_tokens: int, outputs: Sequence[int]) -> Check:
    """``outputs``: the output tokens of the ok requests."""
    if not ignore_eos:
        return unmeasured("output_length", "--ignore-eos was not asked, so a request may end at its EOS")
    if not outputs:
        return unmeasured("output_length", "no request completed")
    short = [n for n in outputs if n < max_tokens]
    detail = f"{len(short)} of {len(outputs)} request(s) ended short of max_tokens={max_tokens}"
    return Check("output_length", not short, detail + (f" (the shortest at {min(short)})" if short else ""))


def synthetic_prompts(requests: int, distinct: int, random_like: int | None) -> Check:
    """``distinct``: prompts the requests used; ``random_like``: how many of them read as random tokens (None:
    their texts are not at hand)."""
    if requests < 2:
        return unmeasured("synthetic_prompts", "fewer than two requests")
    if distinct <= 1:
        return Check("synthetic_prompts", False, f"one prompt for all {requests} requests: the server may serve "
                     "it from its cache and the drafter sees one text")
    if random_like is None:
        return Check("synthetic_prompts", True, f"{distinct} distinct prompts (their texts were not checked for "
                     "random tokens)")
    bad = 2 * random_like > distinct
    return Check("synthetic_prompts", not bad, f"{random_like} of {distinct} distinct prompts read as random "
                 "tokens" + (": random-token prompts overstate speculation's throughput (by about 23%, SPEED-Bench)"
                             if bad else ""))


WORD_RE = re.compile(r"[^\W\d_]+(?:'[^\W\d_]+)?")


def random_like(text: str) -> bool:
    """Random-token text: at least ``MIN_WORDS`` words and too few of them common function words (prose in
    English has about a third)."""
    words = WORD_RE.findall(text.lower())
    if len(words) < MIN_WORDS:
        return False
    return sum(w in FUNCTION_WORDS for w in words) < FUNCTION_WORD_SHARE * len(words)


def unreliable(checks: Iterable[Check]) -> tuple[str, ...]:
    """The failed checks that touch a figure the verdict uses, as "name (figure)"."""
    return tuple(f"{c.name} ({VERDICT_FIGURES[c.name]})" for c in checks if c.failed and c.name in VERDICT_FIGURES)


def merged(named: Mapping[str, Sequence[Check]]) -> tuple[Check, ...]:
    """Several results' checks (a sweep's levels, by their label) as one per check name: failed where any
    failed (the detail names where), passed where any passed, else not measured."""
    out = []
    for name in CHECKS:
        mine = [(where, c) for where, cs in named.items() for c in cs if c.name == name]
        bad = [f"{where}: {c.detail}" for where, c in mine if c.failed]
        if bad:
            out.append(Check(name, False, "; ".join(bad)))
        elif any(c.measured for _, c in mine):
            out.append(Check(name, True, f"passed in {sum(c.measured for _, c in mine)} of {len(mine)} result(s)"))
        else:
            out.append(unmeasured(name, mine[0][1].detail.removeprefix("not measured: ") if mine else "no result"))
    return tuple(out)


def of_sweep(configs: Sequence[ConfigResult]) -> tuple[Check, ...]:
    """A sweep's checks: every finished configuration's levels, merged (a failed one names its level)."""
    return merged({f"{r.label} at {c} stream(s)": lvl.checks for r in configs if r.ok
                   for c, lvl in sorted(r.by_concurrency.items())})

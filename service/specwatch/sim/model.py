"""The simulator's speculative timing model: pure functions, no I/O.

One decode *round* for a batch of ``bs`` running requests costs

    cycle_ms(bs) = (steps * draft_step_ms + verify_ms(draft_tokens)) * (1 + batch_cost * (bs - 1))
                   + token_ms * (bs - 1) * draft_tokens

The first term is the memory-bound floor (weights and KV cache read once per round, growing slowly with the
batch); the second is compute: every extra request in the batch adds ``draft_tokens`` verified tokens at
``token_ms`` each. At one stream the second term is zero (the seed table holds); under load speculation pays
for every draft token it verifies, accepted or not, so its advantage shrinks and crosses plain decoding at
the batch size ``round_crossover()`` solves for. What a real arrival pattern does on top (prefills that stall
the batch, streams drifting apart) is not a formula here: the oracle runs this engine in virtual time
(``oracle.py``, ``sim --explain --streams``).

where ``verify_ms(d) = base_step_ms + verify_extra_ms * (1 - exp(-(d - 1) / verify_tau))``: one target
pass over ``d`` tokens. With ``d = 1`` it is plain decoding (``base_step_ms``); the cost rises steeply and
then saturates, as with a mixture-of-experts target where more tokens activate more experts until most are
active. Plain decoding (no ``--speculative-algorithm``) costs ``verify_ms(1)`` per round and yields one
token.

Per round each request walks the draft chain: position ``i`` is accepted with conditional probability
``p_i * factor`` given positions ``< i`` were, and the walk stops at the first rejection. The round yields
the accepted drafts plus the bonus token, so

    E[accept length] = 1 + sum_{k=1..steps} prod_{i<=k} p_i

which saturates as steps grow because the tail probabilities are small. ``factor`` is 1 for the ``seed``
profile; the ``mixed`` profile lowers it for creative text and high temperature and raises it for code.
A tree draft (``topk > 1``) accepts more: ``p_eff = 1 - (1 - p) ** sqrt(topk)``.

A round that drafts nothing inside a speculating server (a per-load schedule's 0 range, an adaptive slot at 0)
is not plain decoding: the engine keeps its speculative machinery (the drafter's bookkeeping, the verify path,
graphs sized for drafts), so it costs ``cycle_ms(plain) * (1 + off_round_tax)`` (``off_cycle_ms``). The default,
``OFF_ROUND_TAX``, is vLLM's published K = 0 range: +6.6% per output token at 2 streams against a server
started without speculation (vllm-project/vllm#49548; +21.6% at 189 streams, about 2x on another backend).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field, replace

# a zero-draft round in a speculating server over plain decoding's round (vllm-project/vllm#49548, 2 streams)
OFF_ROUND_TAX = 0.066
# the most a profile's costs may be multiplied by (--cost-scale, /control): the fast profile at 64 streams needs
# over 100 to keep a round at 32 ms, slow enough for two cores to keep its pace
MAX_COST_SCALE = 1000.0
NGRAM_MAX_BFS_BREADTH = 10  # --speculative-ngram-max-bfs-breadth's default (srt/arg_groups/fields/spec.py:256-259)
NGRAM_DEFAULT_DRAFT_TOKENS = 12  # speculative_hook.py:1314-1323
# logged when NGRAM's draft tokens are not given (speculative_hook.py:1320-1323)
NGRAM_DRAFT_TOKENS_WARNING = ("speculative_num_draft_tokens is set to 12 by default for ngram speculative decoding. "
                              "You can override this by explicitly setting --speculative-num-draft-tokens.")


@dataclass(frozen=True, slots=True)
class SpecConfig:
    """Speculative settings, normalised the way SGLang normalises its launch flags."""

    algorithm: str | None = None
    num_steps: int = 0
    topk: int = 1
    num_draft_tokens: int = 1
    # what /server_info and /metrics report when it differs from the simulated chain (NGRAM's tree), else None
    reported_steps: int | None = None
    reported_topk: int | None = None

    @property
    def enabled(self) -> bool:
        return self.algorithm is not None and self.num_steps > 0

    @property
    def server_steps(self) -> int:
        return self.num_steps if self.reported_steps is None else self.reported_steps

    @property
    def server_topk(self) -> int:
        return self.topk if self.reported_topk is None else self.reported_topk

    @classmethod
    def from_flags(
        cls, algorithm: str | None, steps: int | None, topk: int | None, draft_tokens: int | None,
        ngram_max_breadth: int = NGRAM_MAX_BFS_BREADTH,
    ) -> SpecConfig:
        if algorithm is None:
            return cls()
        algorithm = "EAGLE" if algorithm.upper() == "NEXTN" else algorithm.upper()
        if algorithm == "NGRAM":
            return cls.ngram(steps, draft_tokens, ngram_max_breadth)
        if steps is None and topk is None and draft_tokens is None:
            steps, topk, draft_tokens = 3, 1, 4  # SGLang 0.5.23 auto_choose_speculative_params
        steps = 5 if steps is None else steps
        topk = 1 if topk is None else topk
        if steps < 1 or topk < 1:
            raise ValueError("--speculative-num-steps and --speculative-eagle-topk must be >= 1")
        if topk == 1 or draft_tokens is None:
            draft_tokens = steps + 1  # SGLang forces this when topk == 1
        if draft_tokens < 2:
            raise ValueError("--speculative-num-draft-tokens must be >= 2")
        return cls(algorithm, steps, topk, draft_tokens)

    @classmethod
    def ngram(cls, steps: int | None, draft_tokens: int | None, breadth: int) -> SpecConfig:
        """NGRAM as SGLang 0.5.23's ``_handle_ngram`` resolves it (srt/arg_groups/speculative_hook.py:1285-1330):
        topk := --speculative-ngram-max-bfs-breadth, draft tokens 12 unless given, steps := draft tokens // topk
        unless given (--speculative-eagle-topk is overwritten). A verify round checks ``draft_tokens`` tokens: the
        simulator drafts them as a chain of ``draft_tokens - 1`` (exact at breadth 1; a wider tree is simulated as
        that chain), and reports SGLang's steps and topk."""
        if breadth < 1:
            raise ValueError("--speculative-ngram-max-bfs-breadth must be >= 1")
        draft_tokens = NGRAM_DEFAULT_DRAFT_TOKENS if draft_tokens is None else draft_tokens
        if draft_tokens < 2:
            raise ValueError("--speculative-num-draft-tokens must be >= 2")
        return cls("NGRAM", draft_tokens - 1, 1, draft_tokens,
                   reported_steps=draft_tokens // breadth if steps is None else steps, reported_topk=breadth)


@dataclass(frozen=True, slots=True)
class Profile:
    name: str
    description: str
    base_step_ms: float
    draft_step_ms: float
    verify_extra_ms: float
    verify_tau: float
    accept_probs: tuple[float, ...]  # conditional, per draft position; the last repeats
    batch_cost: float = 0.015  # fractional cycle cost per extra running request
    token_ms: float = 0.0  # compute per verified token of every extra running request
    prefill_base_ms: float = 6.0
    prefill_per_token_ms: float = 0.02
    domain_factors: dict[str, float] = field(default_factory=dict)
    temperature_slope: float = 0.0  # factor -= slope * min(temperature, 2)
    max_total_tokens: int = 200_000
    off_round_tax: float = OFF_ROUND_TAX  # a zero-draft round in a speculating server, over plain decoding's

    def with_overrides(self, accept_scale: float = 1.0, cost_scale: float = 1.0) -> Profile:
        return replace(
            self,
            accept_probs=tuple(min(0.99, p * accept_scale) for p in self.accept_probs),
            base_step_ms=self.base_step_ms * cost_scale,
            draft_step_ms=self.draft_step_ms * cost_scale,
            verify_extra_ms=self.verify_extra_ms * cost_scale,
            token_ms=self.token_ms * cost_scale,
            prefill_base_ms=self.prefill_base_ms * cost_scale,
            prefill_per_token_ms=self.prefill_per_token_ms * cost_scale,
        )


PROFILES: dict[str, Profile] = {
    # Fitted to a real tuning story (docs/sim-model.md): one stream, topk 1, plain decoding 90 tok/s,
    # 2 draft steps 94, 5 steps 71 (accept length ~2.1), 10 steps 60.
    "seed": Profile(
        name="seed",
        description="the seed's MoE target: 90 tok/s plain; 2 steps ~93, 5 ~72, 10 ~61 tok/s",
        base_step_ms=1000.0 / 90.0,
        draft_step_ms=0.95,
        verify_extra_ms=14.57,
        verify_tau=1.85,
        accept_probs=(0.62, 0.78, 0.05),
        token_ms=0.06,  # 2 steps win up to ~17 running requests, then plain decoding does
        prefill_base_ms=80.0,  # a large TP8 MoE target: ~80 ms before the first token of a short prompt
        prefill_per_token_ms=0.05,
    ),
    # A dense 8B target with a good EAGLE-3 draft; acceptance depends on domain and temperature.
    "mixed": Profile(
        name="mixed",
        description="dense 8B target, good EAGLE-3 draft; acceptance varies by domain and temperature",
        base_step_ms=8.0,
        draft_step_ms=0.6,
        verify_extra_ms=3.0,
        verify_tau=6.0,
        accept_probs=(0.85, 0.78, 0.72, 0.66, 0.6, 0.55, 0.5),
        domain_factors={"code": 1.1, "math": 1.0, "summary": 1.02, "chat": 0.95, "creative": 0.8},
        temperature_slope=0.15,
        token_ms=0.25,
        prefill_base_ms=15.0,
    ),
    # As fast as the simulator goes: for soak tests and client benchmarks, where the server must not be the
    # bottleneck. Same shape as seed (2 steps win), a hundredth of its costs.
    "fast": Profile(
        name="fast",
        description="seed's shape at 1/100 of its costs: for soak tests and client benchmarks",
        base_step_ms=0.111,
        draft_step_ms=0.0095,
        verify_extra_ms=0.1457,
        verify_tau=1.85,
        accept_probs=(0.62, 0.78, 0.05),
        token_ms=0.0006,
        prefill_base_ms=0.5,
        prefill_per_token_ms=0.0005,
    ),
}


def verify_ms(profile: Profile, draft_tokens: int) -> float:
    extra = 1.0 - math.exp(-(draft_tokens - 1) / profile.verify_tau)
    return profile.base_step_ms + profile.verify_extra_ms * extra


def draft_ms(profile: Profile, spec: SpecConfig, draft_cost: float = 1.0) -> float:
    """Drafting time of one round; ``draft_cost`` 0 for proposers without a model (vLLM's ngram lookup)."""
    return spec.num_steps * profile.draft_step_ms * draft_cost if spec.enabled else 0.0


def cycle_ms(profile: Profile, spec: SpecConfig, batch_size: float = 1, draft_cost: float = 1.0) -> float:
    width = spec.num_draft_tokens if spec.enabled else 1
    single = draft_ms(profile, spec, draft_cost) + verify_ms(profile, width)
    extra = max(0.0, batch_size - 1)
    return single * (1.0 + profile.batch_cost * extra) + profile.token_ms * extra * width


def off_cycle_ms(profile: Profile, batch_size: float = 1) -> float:
    """One decode round that drafts nothing in a server launched with speculation: plain decoding's round and
    the profile's ``off_round_tax`` on top (a schedule's 0 range is not a server started without speculation)."""
    return cycle_ms(profile, SpecConfig(), batch_size) * (1.0 + profile.off_round_tax)


def step_ms(profile: Profile, launched: SpecConfig, spec: SpecConfig, batch_size: float = 1,
            draft_cost: float = 1.0) -> float:
    """A decode round at ``spec`` (this step's draft count) in a server launched with ``launched``: a step that
    drafts nothing in a speculating server pays ``off_cycle_ms``."""
    if launched.enabled and not spec.enabled:
        return off_cycle_ms(profile, batch_size)
    return cycle_ms(profile, spec, batch_size, draft_cost)


def round_crossover(profile: Profile, spec: SpecConfig, draft_cost: float = 1.0, domain: str = "chat",
                    temperature: float = 0.0) -> float | None:
    """The batch size at which one decode round's per-request rate with speculation equals plain decoding's
    (both cycle costs are linear in the batch size, so it is one division); 1.0 when speculation already loses
    at one, None when it never loses. A property of the round alone: where a real arrival pattern crosses over
    (prefills stalling the batch, streams drifting apart) is the oracle's to say (``oracle.by_load``)."""
    if not spec.enabled:
        return None
    al = expected_accept_length(conditional_probs(profile, spec, acceptance_factor(profile, domain, temperature)))
    s1, p1 = cycle_ms(profile, spec, 1, draft_cost), cycle_ms(profile, SpecConfig(), 1)
    ds = cycle_ms(profile, spec, 2, draft_cost) - s1  # cost per extra running request
    dp = cycle_ms(profile, SpecConfig(), 2) - p1
    gap = al * p1 - s1  # > 0: speculation wins at one stream
    if gap <= 0:
        return 1.0
    slope = ds - al * dp  # how fast speculation's cost catches up per extra request
    return 1.0 + gap / slope if slope > 0 else None


def prefill_ms(profile: Profile, new_tokens: int) -> float:
    return profile.prefill_base_ms + profile.prefill_per_token_ms * new_tokens


def acceptance_factor(profile: Profile, domain: str, temperature: float) -> float:
    factor = profile.domain_factors.get(domain, 1.0)
    return max(0.0, factor - profile.temperature_slope * min(max(temperature, 0.0), 2.0))


def conditional_probs(profile: Profile, spec: SpecConfig, factor: float = 1.0) -> list[float]:
    """Per-position conditional acceptance probabilities for this config (length = steps)."""
    if not spec.enabled:
        return []
    probs = profile.accept_probs
    out = []
    for i in range(spec.num_steps):
        p = min(0.99, probs[min(i, len(probs) - 1)] * factor)
        if spec.topk > 1:
            p = 1.0 - (1.0 - p) ** math.sqrt(spec.topk)
        out.append(p)
    return out


def position_acceptance(cond: list[float]) -> list[float]:
    """Unconditional per-position acceptance (vLLM's 'Per-position acceptance rate')."""
    out, prod = [], 1.0
    for p in cond:
        prod *= p
        out.append(prod)
    return out


def expected_accept_length(cond: list[float]) -> float:
    return 1.0 + sum(position_acceptance(cond))


def draw_accepted(rng: random.Random, cond: list[float], drafts: int | None = None) -> int:
    """Accepted drafts in one verify round of ``drafts`` draft tokens (default: one per ``cond`` position; a
    per-step schedule drafts fewer); the bonus token is not counted."""
    n, last = 0, len(cond) if drafts is None else min(drafts, len(cond))
    while n < last and rng.random() < cond[n]:
        n += 1
    return n


@dataclass(frozen=True, slots=True)
class Explanation:
    profile: str
    speculative: bool
    num_steps: int
    topk: int
    num_draft_tokens: int
    batch_size: int
    accept_length: float
    position_acceptance: tuple[float, ...]
    cycle_ms: float
    draft_ms: float
    verify_ms: float
    tokens_per_second: float  # decode tok/s of one stream
    itl_ms: float  # per-token inter-token latency = cycle / accept length
    breakeven_accept_length: float  # accept length at which speculation matches plain decoding
    off_round_tax: float  # a zero-draft round in this speculating server, over plain decoding's (the profile's)
    off_cycle_ms: float | None  # that round at this batch size (None: launched without speculation)


def explain(
    profile: Profile, spec: SpecConfig, batch_size: int = 1, domain: str = "chat", temperature: float = 0.0,
    draft_cost: float = 1.0,
) -> Explanation:
    cond = conditional_probs(profile, spec, acceptance_factor(profile, domain, temperature))
    al = expected_accept_length(cond) if spec.enabled else 1.0
    cyc = cycle_ms(profile, spec, batch_size, draft_cost)
    scale = 1.0 + profile.batch_cost * max(0, batch_size - 1)
    plain = cycle_ms(profile, SpecConfig(), batch_size)
    return Explanation(
        profile=profile.name,
        speculative=spec.enabled,
        num_steps=spec.num_steps,
        topk=spec.topk,
        num_draft_tokens=spec.num_draft_tokens if spec.enabled else 1,
        batch_size=batch_size,
        accept_length=al,
        position_acceptance=tuple(position_acceptance(cond)),
        cycle_ms=cyc,
        draft_ms=draft_ms(profile, spec, draft_cost) * scale,
        verify_ms=cyc - draft_ms(profile, spec, draft_cost) * scale,
        tokens_per_second=1000.0 * al / cyc,
        itl_ms=cyc / al,
        breakeven_accept_length=cyc / plain,
        off_round_tax=profile.off_round_tax,
        off_cycle_ms=off_cycle_ms(profile, batch_size) if spec.enabled else None,
    )


def format_explanation(e: Explanation) -> str:
    mode = f"EAGLE3 steps={e.num_steps} topk={e.topk} draft_tokens={e.num_draft_tokens}" if e.speculative \
        else "plain decoding (no speculation)"
    lines = [
        f"profile {e.profile}: {mode}, batch size {e.batch_size}",
        f"  expected accept length   {e.accept_length:.3f} tokens/round",
        f"  cycle time               {e.cycle_ms:.2f} ms (draft {e.draft_ms:.2f} ms = "
        f"{100 * e.draft_ms / e.cycle_ms:.0f}%, verify {e.verify_ms:.2f} ms = "
        f"{100 * e.verify_ms / e.cycle_ms:.0f}%)",
        f"  decode tok/s per stream  {e.tokens_per_second:.2f}",
        f"  per-token ITL            {e.itl_ms:.3f} ms",
        f"  break-even accept length {e.breakeven_accept_length:.3f}",
    ]
    if e.off_cycle_ms is not None:
        lines.append(f"  zero-draft round         {e.off_cycle_ms:.2f} ms (a schedule's 0 range or an adaptive 0: "
                     f"+{100 * e.off_round_tax:.1f}% over plain decoding's round, the profile's off_round_tax)")
    if e.position_acceptance:
        lines.append("  per-position acceptance  " + ", ".join(f"{p:.3f}" for p in e.position_acceptance))
    return "\n".join(lines)


@dataclass(frozen=True, slots=True)
class BestSteps:
    """Per-stream decode tok/s of every step count at ``streams`` closed-loop streams, steady state, as the
    engine does it (``oracle.best_steps``), and the fastest: what the live advisor should find."""

    streams: int
    tokens_per_second: tuple[float, ...]  # index = draft steps (0: plain decoding)
    best_steps: int


def with_steps(spec: SpecConfig, steps: int) -> SpecConfig:
    """The same draft (algorithm, topk) at ``steps`` steps; 0: plain decoding."""
    if steps <= 0:
        return SpecConfig()
    width = steps + 1 if spec.topk == 1 else max(spec.num_draft_tokens, steps + 1)
    return replace(spec, algorithm=spec.algorithm or "EAGLE3", num_steps=steps, num_draft_tokens=width)


def format_best_steps(rows: list[BestSteps]) -> str:
    lines = ["best step count by load (per-stream decode tok/s of each step count, 0 = plain decoding; the engine's "
             "steady state in virtual time)"]
    for r in rows:
        lines.append(f"  {r.streams:>7} streams: best {r.best_steps} at {r.tokens_per_second[r.best_steps]:.1f} tok/s; "
                     + " ".join(f"{s}:{t:.1f}" for s, t in enumerate(r.tokens_per_second)))
    return "\n".join(lines)

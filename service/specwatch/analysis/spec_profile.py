"""Per-position acceptance in NVIDIA Model-Optimizer's ``speculation_profile.json`` (schema 1.0, written by its
``examples/specdec_bench/specdec_bench/speculation_profile.py``): ``advise --speculation-profile`` writes a
sweep's measured acceptance as one, and ``--advisor-prior`` reads one. Analysis stage; pure but for ``dumps``
and ``parse``, which turn the record into JSON bytes and back.

The schema's two vectors index *draft positions* (entry ``i`` is draft token ``i + 1``):

    marginal_i    = P(the first i + 1 drafts all accepted)      (vLLM's synthetic sampler reads these)
    conditional_i = marginal_i / marginal_{i-1}, marginal_{-1} = 1   (Dynamo's mocker, AIConfigurator)

so ``marginal_i = Π_{j ≤ i} conditional_j``, and the per-step mean accept length is the survival function's
sum: ``1 + Σ marginal``. The mean-consistency check compares that sum with the measured mean (tolerance 0.02,
Model-Optimizer's): it catches a vector cut short of the chain that ran, and per-position counts that do not
describe the accept length (data-parallel servers under-count them). ``accept_length_model`` says whether one
measurement extrapolates to another step count (``chain_analytic``: a chain a model drafts) or each must be
measured (``measured_per_k``: a tree, topk > 1, lookup or block drafting).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import orjson

from .. import codec
from ..errors import AnalysisError, RecordFileError
from ..results import ConfigResult, levels
from . import advisor
from .cost_model import Measurement, pooled_positions
from .engine_flags import ServerSetup, chain_draft, setup_of
from .engine_routing import vllm_method

SCHEMA_VERSION = "1.0"
TOLERANCE = 0.02  # Model-Optimizer's: |1 + Σ marginal − mean accept length|
FILE_NAME = "speculation_profile.json"
AcceptLengthModel = Literal["chain_analytic", "measured_per_k"]
MODELS: tuple[str, ...] = ("chain_analytic", "measured_per_k")


@dataclass(frozen=True, slots=True)
class MeanConsistency:
    implied_mean_accept_length: float  # 1 + Σ marginal
    reported_mean_accept_length: float  # measured, per verify step
    abs_delta: float
    tolerance: float
    passed: bool

    def text(self) -> str:
        word = "passed" if self.passed else "FAILED"
        return (f"mean-consistency check {word}: 1 + sum(marginal) = {self.implied_mean_accept_length:.4f} vs "
                f"measured accept length {self.reported_mean_accept_length:.4f} (|delta| {self.abs_delta:.4f}, "
                f"tolerance {self.tolerance})")


@dataclass(frozen=True, slots=True)
class Violation:
    position: int
    value: float
    previous: float


@dataclass(frozen=True, slots=True)
class Monotonicity:
    passed: bool
    violations: tuple[Violation, ...] = ()


@dataclass(frozen=True, slots=True)
class Validation:
    mean_consistency: MeanConsistency
    marginal_monotonicity: Monotonicity


@dataclass(frozen=True, slots=True)
class SpeculationProfile:
    """The file, key for key in Model-Optimizer's order. ``Any`` fields are free-form there (dicts of what was
    measured) and carried as they are; specwatch reads only the acceptance and its model."""

    schema_version: str
    measured: bool
    method: str | None
    draft_checkpoint: Any
    target_model: Any
    num_speculative_tokens: int
    block_size: int | None
    max_supported_k: int | None
    verification_method: str
    conditional_accept_rates: tuple[float, ...]
    marginal_accept_rates: tuple[float, ...]
    mean_accept_length: float | None  # per verify step
    mean_accept_length_per_request: float | None
    accept_length_model: AcceptLengthModel
    accept_length_by_k: dict[int, float]
    acceptance_length_histogram: Any
    per_category: Any
    measurement_conditions: Any
    validation: Validation | None

    @property
    def chain(self) -> bool:
        return self.accept_length_model == "chain_analytic"


@dataclass(frozen=True, slots=True)
class Measured:
    """What a sweep measured, for ``build``: the marginal acceptance along the chain and the mean it must add
    up to (both at the deepest configuration's step count ``steps``)."""

    marginal: tuple[float, ...]
    steps: int
    mean_accept_length: float
    mean_accept_length_per_request: float | None
    chain: bool
    method: str | None = None
    draft_checkpoint: str | None = None  # an org/model id (``checkpoint_id``), never a machine path
    target_model: str | None = None
    accept_length_by_k: tuple[tuple[int, float], ...] = ()
    conditions: tuple[tuple[str, str | int | float], ...] = ()


def conditional_of(marginal: Sequence[float]) -> tuple[float, ...]:
    """Each position's acceptance given the one before was accepted (0 once none reached it)."""
    out, prev = [], 1.0
    for m in marginal:
        out.append(m / prev if prev > 0 else 0.0)
        prev = m
    return tuple(out)


def marginal_of(conditional: Sequence[float]) -> tuple[float, ...]:
    out, run = [], 1.0
    for c in conditional:
        run *= c
        out.append(run)
    return tuple(out)


def dense(marginal: Sequence[float], steps: int) -> tuple[float, ...]:
    """Exactly ``steps`` entries: cut at the chain that ran, 0.0 where a position was never reached."""
    return tuple(marginal[:steps]) + (0.0,) * max(0, steps - len(marginal))


def consistency(marginal: Sequence[float], mean_accept_length: float, tolerance: float = TOLERANCE
                ) -> MeanConsistency:
    implied = 1.0 + sum(marginal)
    delta = abs(implied - mean_accept_length)
    return MeanConsistency(round(implied, 6), round(mean_accept_length, 6), round(delta, 6), tolerance,
                           delta <= tolerance)


def monotonicity(marginal: Sequence[float]) -> Monotonicity:
    bad = tuple(Violation(i, marginal[i], marginal[i - 1]) for i in range(1, len(marginal))
                if marginal[i] > marginal[i - 1] + 1e-9)
    return Monotonicity(not bad, bad)


def checkpoint_id(path: str | None) -> str | None:
    """A checkpoint path reduced to its last two components (``org/model``), as Model-Optimizer publishes it."""
    parts = [p for p in (path or "").replace("\\", "/").split("/") if p]
    return "/".join(parts[-2:]) if parts else None


def measured_of(configs: Sequence[ConfigResult]) -> Measured:
    """A sweep's acceptance at its deepest speculative configuration (lowest load): for a chain draft the
    per-position acceptance pooled over every configuration that drafted each position, weighted by verify
    rounds (``cost_model.pooled_positions``, the advisor's own), else that configuration's alone (another
    width's acceptance does not describe it); the mean is its measured per-step accept length."""
    ms = [m for m in advisor.from_results(configs) if m.steps > 0 and m.position_acceptance]
    if not ms:
        raise AnalysisError("no speculative configuration measured per-position acceptance (SGLang's per-request "
                            "histograms or vLLM's per-position log lines): no speculation profile to write")
    deepest = max(ms, key=lambda m: (m.steps, m.verify_rounds))
    setup = setup_of(configs)
    chain = chain_draft(setup)
    reached = min(deepest.steps, max(len(m.position_acceptance) for m in ms))  # measured, never extrapolated
    marginal = pooled_positions(ms, reached) if chain else deepest.position_acceptance
    cfg = next(c for c in configs if c.label == deepest.label)
    by_k: dict[int, Measurement] = {}
    for m in sorted(ms, key=lambda m: m.verify_rounds):
        by_k[m.steps] = m
    cs = levels(configs)
    conditions: list[tuple[str, str | int | float]] = [("tool", "specwatch advise"), ("engine", setup.engine)]
    conditions += [("engine_version", setup.version)] if setup.version else []
    conditions += [("concurrency", cs[0])] if cs else []
    conditions += [("topk", setup.topk)] if setup.topk is not None else []
    conditions += [("positions", f"pooled over {len(ms)} configurations" if chain else f"{deepest.label} alone"),
                   ("verify_rounds", sum(m.verify_rounds for m in ms) if chain else deepest.verify_rounds)]
    return Measured(tuple(marginal), deepest.steps, deepest.accept_length,
                    cfg.results.accept_length_server_per_request if cfg.results else None, chain, _method(setup),
                    checkpoint_id(_draft_path(cfg, setup)), checkpoint_id(_str(cfg.server_info.get("model_path"))),
                    tuple(sorted((k, m.accept_length) for k, m in by_k.items())), tuple(conditions))


def _str(v: object) -> str | None:
    return v if isinstance(v, str) and v else None


def _method(setup: ServerSetup) -> str | None:
    if setup.engine == "sglang" and setup.algorithm:
        return setup.algorithm.lower()
    return vllm_method(setup.speculative_config) if setup.speculative_config else None


def _draft_path(cfg: ConfigResult, setup: ServerSetup) -> str | None:
    if setup.speculative_config:
        model = _str(setup.speculative_config.get("model"))
        return None if model in ("ngram", "[ngram]") else model
    return _str(cfg.server_info.get("speculative_draft_model_path"))


def build(m: Measured) -> SpeculationProfile:
    marginal = tuple(round(x, 6) for x in dense(m.marginal, m.steps))
    return SpeculationProfile(
        SCHEMA_VERSION, True, m.method, {"id": m.draft_checkpoint} if m.draft_checkpoint else None,
        {"id": m.target_model} if m.target_model else None, m.steps, None, m.steps, "longest_prefix",
        tuple(round(x, 6) for x in conditional_of(marginal)), marginal, round(m.mean_accept_length, 6),
        None if m.mean_accept_length_per_request is None else round(m.mean_accept_length_per_request, 6),
        "chain_analytic" if m.chain else "measured_per_k",
        {k: round(al, 6) for k, al in m.accept_length_by_k} or {m.steps: round(m.mean_accept_length, 6)},
        None, None, dict(m.conditions) or None,
        Validation(consistency(marginal, m.mean_accept_length), monotonicity(marginal)))


def dumps(p: SpeculationProfile) -> bytes:
    return orjson.dumps(dataclasses.asdict(p), option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS) + b"\n"


def load(path: str) -> SpeculationProfile | None:
    """The profile at ``path``; None when the file is not meant as one (a sweep.json, or not JSON at all: the
    caller's other reader says what it is not). ``RecordFileError`` (naming the file) for a profile that does
    not decode."""
    with open(path, "rb") as f:
        data = f.read()
    try:
        doc = orjson.loads(data)
    except orjson.JSONDecodeError:
        return None
    try:
        return parse(doc) if is_profile(doc) else None
    except RecordFileError as exc:
        raise RecordFileError(f"{path}: speculation profile: {exc}") from None


def is_profile(doc: object) -> bool:
    """Whether a decoded JSON document is meant as a speculation profile (it names the schema's vectors)."""
    return isinstance(doc, dict) and "marginal_accept_rates" in doc


def parse(doc: object) -> SpeculationProfile:
    """A decoded ``speculation_profile.json``: keys this schema version does not define are left out (a later
    1.x adds keys), the ones it defines are checked; ``RecordFileError`` names the key."""
    if not isinstance(doc, dict):
        raise RecordFileError("a speculation profile is a JSON object")
    version = str(doc.get("schema_version", ""))
    if version.split(".")[0] != SCHEMA_VERSION.split(".")[0]:
        raise RecordFileError(f"schema_version: {doc.get('schema_version')!r}: this specwatch reads "
                              f"speculation_profile.json schema 1.x")
    if doc.get("accept_length_model") not in MODELS:
        raise RecordFileError(f"accept_length_model: {doc.get('accept_length_model')!r} is not one of "
                              f"{', '.join(MODELS)}")
    known = {f.name for f in dataclasses.fields(SpeculationProfile)}
    defaults: dict[str, Any] = {
        "block_size": None, "max_supported_k": None, "verification_method": "longest_prefix",
        "mean_accept_length_per_request": None, "accept_length_by_k": {}, "acceptance_length_histogram": None,
        "per_category": None, "measurement_conditions": None, "validation": None, "method": None,
        "draft_checkpoint": None, "target_model": None}
    kept = defaults | {k: v for k, v in doc.items() if k in known}
    if isinstance(kept["validation"], dict):  # a later 1.x may add checks: read the two this one defines
        kept["validation"] = {k: v for k, v in kept["validation"].items()
                              if k in ("mean_consistency", "marginal_monotonicity")}
    out: SpeculationProfile = codec.from_json(SpeculationProfile, kept, "")
    return out

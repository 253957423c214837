"""The speculation advisor: the cost model fitted to a sweep's results, explained and extrapolated. Pure
(sweep results in, text out). What was measured is printed as measured (the sweep's own comparisons, never
a second margin); what the model says is labelled a prediction, and never overrides a measurement of the same
configuration: where the two disagree, one line says both."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ..results import ConfigResult
from .comparisons import Comparison
from .cost_model import Fit, Measurement


def from_results(configs: Sequence[ConfigResult]) -> list[Measurement]:
    """Measurements from a sweep's finished configurations, as measured at the level each ``results`` holds."""
    out = []
    for c in configs:
        tps, decode, al = c.tokens_per_second, c.decode_tokens_per_second, c.accept_length
        if not c.ok or not decode or tps is None or al is None or c.results is None:
            continue
        out.append(Measurement(label=c.label, steps=c.steps, draft_tokens=c.draft_tokens or c.steps + 1,
                               tokens_per_second=tps, decode_tokens_per_second=decode, accept_length=al,
                               position_acceptance=c.position_acceptance, verify_rounds=c.results.verify_rounds))
    return out


def report(ms: list[Measurement], f: Fit, baseline_tps: float | None, predict: range, chain: bool = True,
           measured: Mapping[int, Comparison] | None = None) -> str:
    """The fit and its quality, the measured table and, for a chain draft (``engine_flags.chain_draft``),
    predictions for every step count in ``predict`` not measured; a lookup or tree drafter's widths must each be
    measured, so none is predicted. ``measured``: the sweep's comparison of each measured step count against
    plain decoding (``comparisons``), quoted as it is."""
    measured = measured or {}
    lines = ["Cycle model: cycle(s) = s x draft_step + verify(d), "
             "verify(d) = verify_1 + extra x (1 - exp(-(d-1)/tau))",
             f"  draft step {f.draft_step_s * 1e3:.2f} ms, verify_1 {f.verify_1_s * 1e3:.2f} ms, extra "
             f"{f.verify_extra_s * 1e3:.2f} ms, tau {f.tau:.2f}; {f.quality()}",
             "  per-position acceptance (pooled): " + ", ".join(f"{a:.3f}" for a in f.positions[:10]), "",
             f"{'configuration':<22}{'measured':>9}{'model':>8}{'accept':>8}{'cycle ms':>10}{'draft':>7}{'verify':>8}"
             f"{'break-even':>12}   (decode tok/s per stream; model = the fit at the measured accept length)"]
    for m in sorted(ms, key=lambda m: m.steps):
        cyc = f.cycle_s(m.steps, m.draft_tokens)
        draft = m.steps * f.draft_step_s
        be = f"{cyc * baseline_tps:.2f}" if baseline_tps and m.steps else "-"
        lines.append(f"{m.label:<22}{m.decode_tokens_per_second:>9.1f}{m.accept_length / cyc:>8.1f}"
                     f"{m.accept_length:>8.2f}{cyc * 1e3:>10.2f}{100 * draft / cyc:>6.0f}%"
                     f"{100 * (cyc - draft) / cyc:>7.0f}%{be:>12}")
    best_m = max(ms, key=lambda m: m.decode_tokens_per_second)
    if not chain:
        lines += ["", "Predicted: none. This server drafts by lookup (NGRAM, ngram, suffix) or as a tree (topk > 1): "
                      "one width's acceptance does not extrapolate to another, so predicting a step count the sweep "
                      "did not run is not valid: each must be measured (sweep it); "
                      f"best measured: {best_m.label} at {best_m.decode_tokens_per_second:.1f} tok/s"]
        return "\n".join(lines)
    lines += ["", "Each step count (decode tok/s per stream; measured where the sweep ran it, else predicted):"]
    tested = {m.steps: m for m in ms}
    for s in predict:
        lines.append(f"  steps {s:>2}: " + (_measured_line(tested[s], f, baseline_tps, measured.get(s)) if s in tested
                                           else _predicted_line(s, f, baseline_tps)))
    lines.append(best_line(ms, f, baseline_tps, predict, measured))
    return "\n".join(lines)


def _vs(x: float, base: float | None) -> str:
    return f", {100 * (x / base - 1):+.1f}% vs plain" if base else ""


def _measured_line(m: Measurement, f: Fit, base: float | None, c: Comparison | None) -> str:
    vs = f", {c.text()} vs plain decoding, {c.outcome}" if c is not None and c.margin is not None else ""
    return (f"measured {m.decode_tokens_per_second:.1f} tok/s (accept length {m.accept_length:.2f}){vs}; "
            f"the model: {f.tokens_per_second(m.steps):.1f}")


def _predicted_line(s: int, f: Fit, base: float | None) -> str:
    return (f"predicted {f.tokens_per_second(s):.1f} tok/s (accept length {f.accept_length(s):.2f}, cycle "
            f"{f.cycle_s(s) * 1e3:.2f} ms){_vs(f.tokens_per_second(s), base)}")


def best_line(ms: Sequence[Measurement], f: Fit, base: float | None, predict: range,
              measured: Mapping[int, Comparison]) -> str:
    """The model's best step count, said so that it cannot contradict a measurement: a measured best quotes its
    measured comparison (and the model's figure beside it when they disagree); an unmeasured one is a
    prediction to measure, set against the best measured."""
    best = max(predict, key=f.tokens_per_second)
    model = f.tokens_per_second(best)
    tested = {m.steps: m for m in ms}
    top = max(ms, key=lambda m: m.decode_tokens_per_second)
    if best in tested:
        c = measured.get(best)
        if c is None or c.margin is None:
            return f"Best predicted: {best} steps, measured at {tested[best].decode_tokens_per_second:.1f} tok/s"
        said = {"a tie": "a tie with plain decoding", "faster": "beats plain decoding",
                "slower": "slower than plain decoding"}[c.outcome]
        pred = f"; the model predicts {100 * (model / base - 1):+.1f}%" if base else ""
        return f"Best predicted: {best} steps - measured: {said}, {c.text()}{pred}"
    over = f", {100 * (model / top.decode_tokens_per_second - 1):+.1f}% over the best measured ({top.label})"
    if base and model <= base:
        return f"Best predicted: {best} steps at {model:.1f} tok/s - the model predicts no step count beats plain " \
               "decoding: run without speculation"
    return (f"Best predicted: {best} steps at {model:.1f} tok/s{over} - a prediction, not measured: measure it "
            "before acting on it")

"""The speculation advisor: the cost model fitted to a sweep's results, explained and extrapolated.
Analysis stage; pure (sweep results in, text out)."""

from __future__ import annotations

from collections.abc import Sequence

from ..results import ConfigResult
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


def report(ms: list[Measurement], f: Fit, baseline_tps: float | None, predict: range, chain: bool = True) -> str:
    """The fit, the measured table and, for a chain draft (``engine_flags.chain_draft``), predictions for every
    step count in ``predict``; a lookup or tree drafter's widths must each be measured, so none is predicted."""
    lines = ["Cycle model: cycle(s) = s x draft_step + verify(d), "
             "verify(d) = verify_1 + extra x (1 - exp(-(d-1)/tau))",
             f"  draft step {f.draft_step_s * 1e3:.2f} ms, verify_1 {f.verify_1_s * 1e3:.2f} ms, extra "
             f"{f.verify_extra_s * 1e3:.2f} ms, tau {f.tau:.2f}; fit error {100 * f.rms_rel_error:.1f}% rms",
             "  per-position acceptance (pooled): " + ", ".join(f"{a:.3f}" for a in f.positions[:10]), "",
             f"{'configuration':<22}{'tok/s':>8}{'model':>8}{'accept':>8}{'cycle ms':>10}{'draft':>7}{'verify':>8}"
             f"{'break-even':>12}"]
    for m in sorted(ms, key=lambda m: m.steps):
        cyc = f.cycle_s(m.steps, m.draft_tokens)
        draft = m.steps * f.draft_step_s
        be = f"{cyc * baseline_tps:.2f}" if baseline_tps and m.steps else "-"
        lines.append(f"{m.label:<22}{m.decode_tokens_per_second:>8.1f}{m.accept_length / cyc:>8.1f}"
                     f"{m.accept_length:>8.2f}{cyc * 1e3:>10.2f}{100 * draft / cyc:>6.0f}%"
                     f"{100 * (cyc - draft) / cyc:>7.0f}%"
                     f"{be:>12}")
    if not chain:
        best_m = max(ms, key=lambda m: m.decode_tokens_per_second)
        lines += ["", "Predicted: none. This server drafts by lookup (NGRAM, ngram, suffix) or as a tree (topk > 1): "
                      "one width's acceptance does not extrapolate to another, so each must be measured (sweep it); "
                      f"best measured: {best_m.label} at {best_m.decode_tokens_per_second:.1f} tok/s"]
        return "\n".join(lines)
    tested = {m.steps for m in ms}
    lines += ["", "Predicted (decode tok/s):"]
    for s in predict:
        mark = "" if s not in tested else "  (measured)"
        vs = f"  {100 * (f.tokens_per_second(s) / baseline_tps - 1):+.1f}% vs baseline" if baseline_tps else ""
        lines.append(f"  steps {s:>2}: accept length {f.accept_length(s):.2f}, cycle {f.cycle_s(s) * 1e3:.2f} ms, "
                     f"{f.tokens_per_second(s):.1f} tok/s{vs}{mark}")
    best = max(predict, key=f.tokens_per_second)
    verdict = ""
    if baseline_tps:
        verdict = (" - beats plain decoding" if f.tokens_per_second(best) > baseline_tps
                   else " - no step count beats plain decoding: run without speculation")
    lines.append(f"Best predicted: {best} steps at {f.tokens_per_second(best):.1f} tok/s{verdict}")
    return "\n".join(lines)

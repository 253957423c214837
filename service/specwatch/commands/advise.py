"""``specwatch advise --from sweep.json``: the cost model fitted to a finished sweep, explained, with
predictions for untested step counts (see ``analysis.cost_model``)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .. import codec
from ..analysis import advisor, comparisons, cost_model, engine_flags, load_sweep, spec_profile
from ..errors import AnalysisError, RecordFileError
from ..export import sweep_report
from ..results import SweepDoc, levels

DESCRIPTION = """\
Explains a finished sweep with the cycle model: fits cycle(s) = s x draft_step + verify(d) to the measured
cycle times (accept length / decode tok/s), prints each configuration's draft vs verify share and break-even
accept length, quotes measured step counts as measured and predicts the ones the sweep left out. For a sweep
over load it also prints the schedule by load and the engine flags that apply it. With --speculation-profile
it writes the measured per-position acceptance as NVIDIA Model-Optimizer's speculation_profile.json (schema
1.0: conditional and marginal vectors, the mean-consistency check), which --advisor-prior reads. Reads no
environment variable."""


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="specwatch advise", description=DESCRIPTION,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--from", dest="src", required=True, help="sweep.json written by specwatch sweep (required)")
    p.add_argument("--max-steps", type=int, default=12,
                   help="predict up to this many draft steps (default: 12 steps)")
    p.add_argument("--speculation-profile", metavar="FILE", default=None,
                   help="write the measured per-position acceptance to FILE as Model-Optimizer's "
                        "speculation_profile.json (default: none)")
    a = p.parse_args(argv)
    try:
        doc = codec.load_as(SweepDoc, a.src)
        ms = advisor.from_results(doc.configurations)
        f = cost_model.fit(ms, a.max_steps)
    except OSError as exc:
        print(f"specwatch advise: {a.src}: {exc.strerror}", file=sys.stderr)
        return 2
    except (RecordFileError, AnalysisError) as exc:
        print(f"specwatch advise: {exc}" if isinstance(exc, RecordFileError) else f"specwatch advise: {a.src}: {exc}",
              file=sys.stderr)
        return 2
    base = next((m.decode_tokens_per_second for m in ms if m.steps == 0), None)
    cs = levels(doc.configurations)
    cmp = comparisons.comparisons(doc.configurations)
    measured = {r.steps: cmp[r.label, cs[0]] for r in doc.configurations if cs and (r.label, cs[0]) in cmp}
    print(advisor.report(ms, f, base, range(1, max(a.max_steps, *(m.steps for m in ms)) + 1),
                         chain=engine_flags.chain_draft(engine_flags.setup_of(doc.configurations)), measured=measured))
    if len(levels(doc.configurations)) > 1:  # a sweep over load: its schedule and the flags that apply it
        out = Path(a.src).parent
        advice = load_sweep.engine_advice(doc.configurations, str(out))
        sweep_report.write_advice_files(out, advice)
        print("\n" + load_sweep.report(doc.configurations, None, range(0), advice))
    return write_profile(doc, a.speculation_profile) if a.speculation_profile else 0


def write_profile(doc: SweepDoc, path: str) -> int:
    """``--speculation-profile``: the file, and one line for its consistency check (a failed check still
    writes it, as Model-Optimizer does: the discrepancy stays inspectable)."""
    try:
        prof = spec_profile.build(spec_profile.measured_of(doc.configurations))
        Path(path).write_bytes(spec_profile.dumps(prof))
    except AnalysisError as exc:
        print(f"specwatch advise: --speculation-profile: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"specwatch advise: --speculation-profile {path}: {exc.strerror}", file=sys.stderr)
        return 2
    assert prof.validation is not None  # a measured profile carries its checks
    print(f"\nWrote {path} ({prof.accept_length_model}, {prof.num_speculative_tokens} positions): "
          f"{prof.validation.mean_consistency.text()}")
    return 0

"""``specwatch advise --from sweep.json``: the cost model fitted to a finished sweep, explained, with
predictions for untested step counts (see ``analysis.cost_model``)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .. import codec
from ..analysis import advisor, comparisons, cost_model, engine_flags, load_sweep
from ..errors import AnalysisError, RecordFileError
from ..export import sweep_report
from ..results import SweepDoc, levels

DESCRIPTION = """\
Explains a finished sweep with the cycle model: fits cycle(s) = s x draft_step + verify(d) to the measured
cycle times (accept length / decode tok/s), prints each configuration's draft vs verify share and break-even
accept length, quotes measured step counts as measured and predicts the ones the sweep left out. For a sweep
over load it also prints the schedule by load and the engine flags that apply it. Reads no environment
variable."""


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="specwatch advise", description=DESCRIPTION,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--from", dest="src", required=True, help="sweep.json written by specwatch sweep (required)")
    p.add_argument("--max-steps", type=int, default=12,
                   help="predict up to this many draft steps (default: 12 steps)")
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
    return 0

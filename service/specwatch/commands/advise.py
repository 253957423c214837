"""``specwatch advise --from sweep.json``: the cost model fitted to a finished sweep, explained, with
predictions for untested step counts (see ``analysis.cost_model``)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import orjson

from ..analysis import advisor, cost_model


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="specwatch advise", description=cost_model.__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--from", dest="src", required=True, help="sweep.json written by specwatch sweep")
    p.add_argument("--max-steps", type=int, default=12, help="predict up to this many draft steps (default 12)")
    a = p.parse_args(argv)
    try:
        doc = orjson.loads(Path(a.src).read_bytes())
        ms = advisor.from_results(doc["configurations"])
        f = cost_model.fit(ms, a.max_steps)
    except (OSError, orjson.JSONDecodeError, KeyError, ValueError) as exc:
        print(f"specwatch advise: {a.src}: {exc}", file=sys.stderr)
        return 2
    base = next((m.decode_tokens_per_second for m in ms if m.steps == 0), None)
    print(advisor.report(ms, f, base, range(1, max(a.max_steps, *(m.steps for m in ms)) + 1)))
    return 0

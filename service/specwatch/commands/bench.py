"""``specwatch bench``: a bounded benchmark with the seed script's output shape, plus what it lacked.

Wires the probe (load + client) to a list of records, then replays them through the recorder into the
report (``analysis.bench_results``, shared with ``report`` and ``sweep``): nothing is recorded while streams are
in flight.
``--json`` writes the results document, ``--records`` every record (JSON Lines), ``--hlog`` an HdrHistogram
interval log.
"""

from __future__ import annotations

import argparse
import os
import sys

from .. import options
from ..analysis.bench_results import analyse
from ..errors import AuthError, ConfigError, TargetError, WorkerError
from ..export import bench_report
from ..export.progress import progress_for
from ..probe import prompts as prompt_sets
from ..probe.bounded import DEFAULTS, BenchSpec, collect
from ..probe.tokens import Tokenizer, refine


async def bench(spec: BenchSpec, tokenizer: Tokenizer | None = None, key_source: str = "") -> int:
    """The command; ``tokenizer``: ``spec.tokenizer`` already loaded (``main`` loads it before the run, to
    refuse a bad one at once), else it is loaded here when given."""
    progress = progress_for(spec.num_runs, sys.stderr)
    try:
        info, records = await collect(spec, progress=progress)
    except AuthError as exc:
        print(f"specwatch bench: {exc}: {key_source}", file=sys.stderr)
        return 2
    except (TargetError, WorkerError) as exc:
        print(f"specwatch bench: {exc}", file=sys.stderr)
        return 1
    finally:
        progress.close()
    if spec.tokenizer:  # after the run: exact counts for streams that had only a final usage total
        tok = tokenizer or Tokenizer(spec.tokenizer)
        records = [refine(r, tok) for r in records]
    plist = prompt_sets.read(spec.prompts) if spec.prompts else prompt_sets.builtin()
    a = analyse(info, records, {p.id: p.as_text() for p in plist})  # the texts: for the random-token check
    print(bench_report.text(a.doc, records))
    bench_report.write_outputs(a, info, records, spec.json, spec.records, spec.hlog)
    reasons = a.doc.all_failed()
    if reasons:
        print(f"specwatch bench: every request failed ({reasons})", file=sys.stderr)
        return 1
    return 0

DESCRIPTION = """\
A bounded benchmark: sends --num-runs requests (after --warmup) in a closed loop of --concurrency streams or an
open loop at --rate-per-s, then prints tok/s as the seed script measured it plus TTFT, TPOT, per-token ITL,
inter-chunk gaps, tokens per chunk, accept length and a per-domain breakdown. Takes vllm bench serve's flags
and writes its result keys in --json. --json writes the results document, --records every request (replay
with specwatch report), --hlog an HdrHistogram interval log."""


def parse(argv: list[str]) -> tuple[BenchSpec, str]:
    """The spec, and where its API key came from."""
    p = argparse.ArgumentParser(prog="specwatch bench", description=DESCRIPTION, epilog=options.environment(DEFAULTS),
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    options.add_config_flag(p)
    options.add_flags(p, DEFAULTS)
    values = options.from_flags(p.parse_args(argv), DEFAULTS, os.environ)
    options.require(values, ["server_url"])
    spec = BenchSpec(**(values | {"api_key": options.api_key(values), "api_key_file": None}))
    if spec.prompts:
        prompt_sets.read(spec.prompts)
    return spec, options.key_source(values.get("api_key_file"), spec.api_key)


def main(argv: list[str]) -> int:
    try:
        spec, key_source = parse(argv)
        tok = Tokenizer(spec.tokenizer) if spec.tokenizer else None  # refused before the run, named
    except ConfigError as exc:
        print(f"specwatch bench: {exc}", file=sys.stderr)
        return 2
    import uvloop

    return int(uvloop.run(bench(spec, tok, key_source)))

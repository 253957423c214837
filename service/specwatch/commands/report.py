"""``specwatch report FILE…``: replay records files written by ``bench --records`` through the same
recorder into the same report, results document (``--json``) and interval log (``--hlog``).

Every stage runs offline: a run measured once can be reported again, and several files (bench pods of one
fleet, or half-runs) merge exactly, since HDR histograms merge losslessly. The first file's run info heads
the report.
"""

from __future__ import annotations

import argparse
import sys

from .. import codec, options
from ..errors import RecordFileError
from ..records import RequestRecord, RunInfo
from .bench import analyse, write_outputs


def load(paths: list[str]) -> tuple[RunInfo, list[RequestRecord]]:
    info: RunInfo | None = None
    records: list[RequestRecord] = []
    for path in paths:
        for rec in codec.read(path):
            if isinstance(rec, RunInfo):
                info = info or rec
            elif isinstance(rec, RequestRecord):
                records.append(rec)
    if info is None:
        raise RecordFileError(f"{', '.join(paths)}: no run line (write records with specwatch bench --records)")
    return info, records


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="specwatch report", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("files", nargs="+", help="records files (JSON Lines) from bench --records")
    options.add_flags(p, {"json": None, "hlog": None})
    a = p.parse_args(argv)
    try:
        info, records = load(a.files)
    except OSError as exc:
        print(f"specwatch report: {exc.filename}: {exc.strerror}", file=sys.stderr)
        return 2
    except RecordFileError as exc:
        print(f"specwatch report: {exc}", file=sys.stderr)
        return 2
    result = analyse(info, records)
    print(f"Report of {len(records)} records from {', '.join(a.files)} ({info.server_url}, api {info.api})")
    print(result.text)
    write_outputs(result, info, records, a.json, None, a.hlog)
    return 0

"""``specwatch report FILE…``: replay records files written by ``bench --records`` through the same
recorder into the same report, results document (``--json``) and interval log (``--hlog``); merge
HdrHistogram interval logs (``.hlog``, from ``bench --hlog`` or the daemon's ``--hlog``) into one.

Every stage runs offline: a run measured once can be reported again, and several files (bench pods of one
fleet, or half-runs) merge exactly, since HDR histograms merge losslessly. The first records file's run info
heads the report. Interval logs are merged per tag (``target.metric``) over every interval of every file;
with no records file, ``--hlog`` writes that merge as one interval.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

import orjson
from hdrh.histogram import HdrHistogram

from .. import codec, options
from ..analysis.bench_results import analyse
from ..errors import RecordFileError
from ..export import bench_report, hlog
from ..export.format import fmt
from ..hdr import hdr_quantiles
from ..recorder.stats import LATENCY_METRICS, Stats, unit
from ..recorder.windows import Interval
from ..records import RequestRecord, RunInfo

QS = (0.5, 0.9, 0.99, 1.0)


def is_hlog(path: str) -> bool:
    if path.endswith(".hlog"):
        return True
    with open(path, "rb") as f:
        head = f.read(64).lstrip()
    return head.startswith((b"#[", b"Tag=", b'"StartTimestamp"'))


def describe(merged: dict[str, HdrHistogram]) -> dict[str, dict[str, Any]]:
    """Per tag: count, p50/p90/p99/max and HDR mean, in seconds (latencies) or the metric's own unit."""
    out = {}
    for tag, h in sorted(merged.items()):
        div = unit(tag.partition(".")[2])
        q = [None if v is None else v / div for v in hdr_quantiles(h, QS)]
        out[tag] = {"count": h.get_total_count(), "p50": q[0], "p90": q[1], "p99": q[2], "max": q[3],
                    "mean": h.get_mean_value() / div if h.get_total_count() else None}
    return out


# Each row's unit: latencies are printed in ms, the other histograms in their own unit (``stats.unit``).
UNITS = {"decode_tps": "tok/s", "tokens_per_chunk": "tokens/chunk", "accept_length": "tokens/round"}


def hlog_text(by_tag: dict[str, dict[str, Any]], files: list[str]) -> str:
    rows = [f"  Interval logs merged ({len(files)} file(s))",
            f"    {'tag':<26}{'unit':<14}{'count':>10}{'p50':>10}{'p90':>10}{'p99':>10}{'max':>10}"]
    for tag, d in by_tag.items():
        metric = tag.partition(".")[2]
        scale, name = (1e3, "ms") if metric in LATENCY_METRICS else (1.0, UNITS.get(metric, ""))
        vals = "".join(fmt(None if d[k] is None else d[k] * scale, ">10.3f") for k in ("p50", "p90", "p99", "max"))
        rows.append(f"    {tag:<26}{name:<14}{d['count']:>10}{vals}")
    return "\n".join(rows)


def write_merged_hlog(path: str, merged: dict[str, HdrHistogram]) -> None:
    parts: dict[str, Stats] = {}
    for tag, h in merged.items():
        target, _, metric = tag.partition(".")
        parts.setdefault(target, Stats(h.significant_figures)).hists[metric] = h
    with open(path, "w", encoding="utf-8") as f:
        hlog.HlogWriter(f, start_ns=0).write(Interval(0, 0, parts))


def read_records(paths: list[str]) -> tuple[RunInfo, list[RequestRecord]]:
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

DESCRIPTION = """\
Replays records files written by bench --records into the same report, results document (--json) and interval
log (--hlog) that bench printed and wrote; merges HdrHistogram interval logs (.hlog, from bench --hlog or run
--hlog) into one. Runs offline: a run measured once can be reported again, and several files (bench pods of one
fleet, or half-runs) merge exactly, since HDR histograms merge losslessly. The first records file's run info
heads the report. Interval logs are merged per tag (target.metric) over every interval of every file; with no
records file, --hlog writes that merge as one interval. Reads no environment variable."""


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="specwatch report", description=DESCRIPTION,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("files", nargs="+", help="records files (JSON Lines) from bench --records, and/or .hlog "
                   "interval logs (bench --hlog, run --hlog)")
    options.add_flags(p, {"json": None, "hlog": None})
    a = p.parse_args(argv)
    try:
        logs = [f for f in a.files if is_hlog(f)]
        rec_files = [f for f in a.files if f not in logs]
        result = None
        if rec_files:
            info, records = read_records(rec_files)
            result = analyse(info, records)
        merged_hists = hlog.merge_files(logs) if logs else None
        merged = describe(merged_hists) if merged_hists is not None else None
    except OSError as exc:
        print(f"specwatch report: {exc.filename}: {exc.strerror}", file=sys.stderr)
        return 2
    except RecordFileError as exc:
        print(f"specwatch report: {exc}", file=sys.stderr)
        return 2
    if result is not None:
        print(f"Report of {len(records)} records from {', '.join(rec_files)} ({info.server_url}, api {info.api})")
        print(bench_report.text(result.doc, records))
    if merged is not None:
        print(hlog_text(merged, logs))
    if result is not None:
        doc = orjson.loads(codec.dumps(result.doc)) | ({"interval_logs": merged} if merged is not None else {})
        bench_report.write_outputs(result, info, records, None, None, a.hlog)
    else:
        doc = {"interval_logs": merged, "files": logs}
        if a.hlog and merged_hists is not None:
            write_merged_hlog(a.hlog, merged_hists)
    if a.json:
        with open(a.json, "wb") as f:
            f.write(orjson.dumps(doc, option=orjson.OPT_INDENT_2))
    return 0

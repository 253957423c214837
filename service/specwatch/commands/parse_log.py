"""``specwatch parse-log FILE…``: accept-length statistics of saved server logs, for post-mortems.

Reads plain or gzip files (``-`` for stdin), parses every line with the daemon's parsers and prints
per-source, per-DP-rank statistics: the distribution of each field over lines, and the pooled accept length
(``analysis.server_log``: vLLM lines weighted by drafted tokens, SGLang decode lines equally).
"""

from __future__ import annotations

import argparse
import collections
import gzip
import statistics
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import orjson

from ..analysis.server_log import SamplePool
from ..records import LOG_RESULTS
from ..server.logparse import parse_line
from ..server.logtail import SourceState, file_lines


@dataclass(slots=True)
class Series:
    accept_length: list[float] = field(default_factory=list)
    accept_rate: list[float] = field(default_factory=list)
    gen_throughput: list[float] = field(default_factory=list)
    pool: SamplePool = field(default_factory=SamplePool)
    first: str = ""
    last: str = ""

    def statistics(self) -> dict[str, Any]:
        def stats(xs: list[float]) -> dict[str, float] | None:
            if not xs:
                return None
            qs = statistics.quantiles(xs, n=20, method="inclusive") if len(xs) > 1 else [xs[0]] * 19
            return {"n": len(xs), "mean": statistics.fmean(xs), "min": min(xs), "p5": qs[0],
                    "p50": statistics.median(xs), "p95": qs[18], "max": max(xs)}
        out: dict[str, Any] = {"accept_length": stats(self.accept_length), "accept_rate": stats(self.accept_rate),
               "gen_throughput_tokens_per_second": stats(self.gen_throughput), "first": self.first, "last": self.last}
        if self.pool.draft_acceptance_rate is not None:
            out["draft_acceptance_rate_weighted"] = self.pool.draft_acceptance_rate
        if self.pool.accept_length is not None:
            out["accept_length_weighted"] = self.pool.accept_length
        return out


def _lines(path: str) -> Iterator[bytes]:
    if path == "-":
        yield from sys.stdin.buffer
        return
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        yield from f


def analyse(paths: list[str]) -> dict[str, Any]:
    counts: collections.Counter[str] = collections.Counter()
    series: dict[str, Series] = collections.defaultdict(Series)
    state = SourceState()
    for path in paths:
        for line in file_lines(_lines(path), state):
            v = parse_line(line)
            counts[v.result] += 1
            s = v.sample
            if s is None or s.source == "sglang_prefill":
                continue
            key = f"{s.source}/dp{s.dp_rank or '0'}"
            ser = series[key]
            ser.first = ser.first or s.wall_time
            ser.last = s.wall_time or ser.last
            ser.pool.add(s)
            if s.accept_length is not None:
                ser.accept_length.append(s.accept_length)
            if s.accept_rate is not None:
                ser.accept_rate.append(s.accept_rate)
            if s.gen_throughput is not None:
                ser.gen_throughput.append(s.gen_throughput)
    counts["skipped"] = sum(state.skipped.values())
    return {"lines": {k: counts.get(k, 0) for k in (*LOG_RESULTS, "skipped")},
            "series": {k: v.statistics() for k, v in sorted(series.items())}}


def _fmt(d: dict[str, float] | None, spec: str = ".2f") -> str:
    if d is None:
        return "-"
    return (f"mean {d['mean']:{spec}}  p5 {d['p5']:{spec}}  p50 {d['p50']:{spec}}  p95 {d['p95']:{spec}}  "
            f"min {d['min']:{spec}}  max {d['max']:{spec}}  (n={d['n']})")

DESCRIPTION = """\
Accept-length statistics of saved SGLang or vLLM logs, for post-mortems. Reads plain or gzip files (- for
stdin), parses every line as the daemon does and prints, per source and DP rank, the distribution of each field
over lines (accept length, accept rate, generation throughput: mean, p5, p50, p95, min, max) and the pooled
accept length (vLLM lines weighted by drafted tokens, SGLang decode lines equally). Reads no environment
variable."""


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="specwatch parse-log", description=DESCRIPTION,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("files", nargs="+", help="saved SGLang or vLLM logs, plain or gzip (- for stdin)")
    p.add_argument("--json", action="store_true", help="print one JSON document instead of text (default: off)")
    a = p.parse_args(argv)
    try:
        doc = analyse(a.files)
    except OSError as exc:
        print(f"specwatch parse-log: {exc.filename}: {exc.strerror}", file=sys.stderr)
        return 2
    if a.json:
        sys.stdout.write(orjson.dumps(doc, option=orjson.OPT_INDENT_2).decode() + "\n")
        return 0
    ln = doc["lines"]
    print(f"lines: parsed {ln['parsed']}, ignored {ln['ignored']}, malformed {ln['malformed']}, "
          f"skipped {ln['skipped']}")
    if not doc["series"]:
        print("no decode / SpecDecoding lines found")
    for key, s in doc["series"].items():
        span = f"  ({s['first']} .. {s['last']})" if s["first"] else ""
        print(f"\n{key}{span}")
        print(f"  accept length   {_fmt(s['accept_length'])}")
        if "accept_length_weighted" in s and key.startswith("vllm"):
            print(f"                  weighted by drafted tokens: {s['accept_length_weighted']:.3f}")
        print(f"  accept rate     {_fmt(s['accept_rate'], '.3f')}")
        if "draft_acceptance_rate_weighted" in s:
            print(f"                  accepted / drafted tokens: {s['draft_acceptance_rate_weighted']:.3f}")
        print(f"  gen throughput  {_fmt(s['gen_throughput_tokens_per_second'], '.1f')} tok/s")
    return 0

"""HdrHistogram interval log (.hlog): one tagged line per metric per target per interval, readable by
``hdrh.log.HistogramLogReader`` and mergeable by HDR tools. Exporter stage; written on the tick only.

Values are microseconds (latencies) or thousandths (decode_tps, accept_length). Interval bounds come from
the monotonic clock, offset from the wall-clock start written in the header. ``read`` and ``merge_files``
take such logs back (``specwatch report`` merges many into one).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from typing import IO

from hdrh.histogram import HdrHistogram

from ..errors import RecordFileError
from ..recorder.stats import HDR_METRICS, LATENCY_METRICS, new_histogram, unit
from ..recorder.windows import Interval
from ..records import TARGETS


class HlogWriter:
    def __init__(self, stream: IO[str], start_wall_s: float | None = None, start_ns: int | None = None) -> None:
        self.stream = stream
        self.start_ns = time.monotonic_ns() if start_ns is None else start_ns
        start_wall_s = time.time() if start_wall_s is None else start_wall_s
        stream.write("#[specwatch interval log: latencies in microseconds; decode_tps and accept_length in "
                     "thousandths]\n")
        stream.write(f"#[StartTime: {start_wall_s:.3f} (seconds since epoch)]\n")
        stream.write(f"#[BaseTime: {start_wall_s:.3f} (seconds since epoch)]\n")  # interval stamps are relative
        stream.write('"StartTimestamp","Interval_Length","Interval_Max","Interval_Compressed_Histogram"\n')

    def write(self, interval: Interval) -> None:
        start_s = (interval.start_ns - self.start_ns) / 1e9
        length_s = (interval.end_ns - interval.start_ns) / 1e9
        for target, stats in sorted(interval.parts.items()):
            for name in sorted(stats.hists):
                h = stats.hists[name]
                if h.get_total_count() == 0:
                    continue
                top = h.get_max_value() / unit(name) * (1e3 if name in LATENCY_METRICS else 1)
                self.stream.write(f"Tag={target}.{name},{max(0.0, start_s):.3f},{length_s:.3f},{top:.3f},"
                                  f"{h.encode().decode()}\n")
        self.stream.flush()


MAX_LINE_BYTES = 4 * 1024 * 1024  # one encoded histogram; a longer line is not one of ours


def read(path: str) -> Iterator[tuple[str, HdrHistogram]]:
    """Every tagged interval histogram of a .hlog, in order. ``RecordFileError`` names the file and line of
    the first one that is not a ``Tag=target.metric,start,length,max,histogram`` line we could decode."""
    with open(path, encoding="utf-8", errors="replace") as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line or line.startswith("#") or line.startswith('"StartTimestamp"'):
                continue
            if len(line) > MAX_LINE_BYTES:
                raise RecordFileError(f"{path}:{n}: a line of {len(line)} bytes is not an interval histogram")
            parts = line.split(",")
            if len(parts) != 5 or not parts[0].startswith("Tag="):
                raise RecordFileError(f"{path}:{n}: expected Tag=target.metric,start,length,max,histogram")
            tag = parts[0][4:]
            target, _, metric = tag.partition(".")
            if target not in TARGETS or metric not in HDR_METRICS:
                raise RecordFileError(f"{path}:{n}: tag {tag[:60]!r} is not target.metric with target one of "
                                      f"{', '.join(TARGETS)} and a specwatch metric")
            try:
                h = HdrHistogram.decode(parts[4])
            except Exception as exc:  # hdrh raises its own and zlib's, base64's and struct's errors
                raise RecordFileError(f"{path}:{n}: cannot decode the histogram: {type(exc).__name__}") from None
            yield tag, h


def merge_files(paths: Iterable[str]) -> dict[str, HdrHistogram]:
    """Every interval of every file merged per tag, losslessly: counts add."""
    out: dict[str, HdrHistogram] = {}
    for path in paths:
        for tag, h in read(path):
            acc = out.get(tag)
            if acc is None:
                acc = out[tag] = new_histogram(tag.partition(".")[2], h.significant_figures)
            acc.add(h)
    return out

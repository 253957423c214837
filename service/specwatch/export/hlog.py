"""HdrHistogram interval log (.hlog): one tagged line per metric per target per interval, readable by
``hdrh.log.HistogramLogReader`` and mergeable by HDR tools. Exporter stage; written on the tick only.

Values are microseconds (latencies) or thousandths (decode_tps, accept_length). Interval bounds come from
the monotonic clock, offset from the wall-clock start written in the header.
"""

from __future__ import annotations

import time
from typing import IO

from ..recorder.stats import LATENCY_METRICS, unit
from ..recorder.windows import Interval


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

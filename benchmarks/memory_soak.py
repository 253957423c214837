"""Memory stays bounded however long the daemon runs: RSS after 100k probes against a fast local server,
against RSS after 1k and 10k, in one run. Uses the daemon itself (``Daemon``: recorder, windows, exporter,
verdict) with a 0.05 s interval tick and a 5 s window, so the windows fill within the first ~10k probes and
then roll over hundreds of times; memory held by the windows is bounded by (window / interval) intervals.

    .venv/bin/python benchmarks/memory_soak.py [--requests 100000]
"""

import argparse
import asyncio
from pathlib import Path

from common import free_port, start_fastserver
from specwatch.commands.run import Daemon
from specwatch.config import Config


def marks_for(total: int) -> list[int]:
    return sorted({min(1_000, total), min(10_000, total), total // 2, total})


def rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")



async def main(total: int) -> None:
    port = free_port()
    server = start_fastserver(port)
    try:
        cfg = Config(server_url=f"http://127.0.0.1:{port}", api="sglang", listen=f"127.0.0.1:{free_port()}",
                     interval_s=0.05, verdict_window_s=1, windows_s="5", concurrency=8, pause_s=0, max_tokens=9,
                     baseline_tps=90, view="log")
        with open("/dev/null", "w") as devnull:
            d = Daemon(cfg, out=devnull)
            marks: dict[int, float] = {}

            async def watch() -> None:
                while True:
                    n = sum(st.requests for st in d.recorder.cumulative.values()) + sum(
                        st.requests for st in d.recorder.current.values())
                    for mark in marks_for(total):
                        if n >= mark and mark not in marks:
                            marks[mark] = rss_mib()
                            print(f"{n:>8} probes: RSS {marks[mark]:.1f} MiB", flush=True)
                    if n >= total:
                        d.stop.set()
                        return
                    await asyncio.sleep(0.05)

            watcher = asyncio.create_task(watch())
            await d.main()
            await watcher
    finally:
        server.terminate()
    full = min(10_000, total)
    print(f"RSS after {total} probes / after {full} (windows full): {marks[total] / marks[full]:.2f}x; "
          f"/ after 1000 (windows still filling): {marks[total] / marks[min(1_000, total)]:.2f}x")


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--requests", type=int, default=100_000)
    a = p.parse_args()
    import uvloop

    uvloop.run(main(a.requests))

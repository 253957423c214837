"""Soak: memory, file descriptors, tasks and series stay flat however long the daemon runs.

The daemon itself (``Daemon``: probes, recorder, windows, exporter, verdict, log tailing) runs in this process
against ``specwatch sim --profile fast`` (the seed's shape at 1/100 of its costs) with a 0.05 s interval and a
5 s window, so the windows fill within the first seconds and then roll over hundreds of times, while the
simulator writes a decode log line every verify round (a log flood of thousands of lines a second) that the
daemon follows. At marks it prints RSS, open fds, asyncio tasks and exported series; the verdict is the
growth after warm-up (the 10k mark) to the end.

    .venv/bin/python benchmarks/memory_soak.py [--requests 100000]
"""

import argparse
import asyncio
import gc
import os
import sys
import tempfile
import time
from pathlib import Path

from common import free_port
from specwatch.config import Config
from specwatch.daemon import Daemon, serve
from specwatch.launch import Server, wait_ready

WARMUP_MARK = 10_000


def marks_for(total: int) -> list[int]:
    return sorted({min(1_000, total), min(WARMUP_MARK, total), total // 2, total})


def rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def probes(d: Daemon) -> int:
    return sum(st.requests for st in d.recorder.cumulative.values()) + sum(
        st.requests for st in d.recorder.current.values())


async def main(total: int) -> int:
    port = free_port()
    tmp = Path(tempfile.mkdtemp(prefix="specwatch-soak-"))
    log = tmp / "sim.log"
    sim = Server([sys.executable, "-m", "specwatch", "sim", "--port", str(port), "--profile", "fast",
                  "--speculative-algorithm", "EAGLE3", "--speculative-num-steps", "2", "--speculative-eagle-topk", "1",
                  "--decode-log-interval", "1", "--log-file", str(log), "--quiet"])
    try:
        wait_ready(f"http://127.0.0.1:{port}", sim, 30.0, poll_s=0.1)
        cfg = Config(server_url=f"http://127.0.0.1:{port}", api="sglang", listen=f"127.0.0.1:{free_port()}",
                     interval_s=0.05, verdict_window_s=1, windows_s=(5.0,), concurrency=8, pause_s=0, max_tokens=9,
                     baseline_tps=90, view="log", log_file=str(log))
        with open(os.devnull, "w") as devnull:
            d = Daemon(cfg, out=devnull)
            rows: dict[int, tuple[float, int, int, int, int]] = {}
            t0 = time.monotonic()

            async def watch() -> None:
                while True:
                    n = probes(d)
                    for mark in marks_for(total):
                        if n >= mark and mark not in rows:
                            gc.collect()
                            series = sum(1 for line in d.exporter.render().splitlines()
                                         if line and not line.startswith(b"#"))
                            lines = sum(d.ingest.counts.values())
                            rows[mark] = (rss_mib(), len(os.listdir("/proc/self/fd")), len(asyncio.all_tasks()),
                                          series, lines)
                            print(f"{n:>8} probes {time.monotonic() - t0:6.0f}s: RSS {rows[mark][0]:6.1f} MiB, "
                                  f"{rows[mark][1]} fds, {rows[mark][2]} tasks, {series} series, "
                                  f"{lines} log lines", flush=True)
                    if n >= total:
                        d.stop.set()
                        return
                    await asyncio.sleep(0.05)

            watcher = asyncio.create_task(watch())
            await serve(d)
            await watcher
    finally:
        sim.stop(5.0)
        log.unlink(missing_ok=True)
        os.rmdir(tmp)
    base, end = rows[min(WARMUP_MARK, total)], rows[total]
    growth = end[0] - base[0]
    print(f"after warm-up ({min(WARMUP_MARK, total)} -> {total} probes): RSS {growth:+.1f} MiB, "
          f"fds {end[1] - base[1]:+d}, tasks {end[2] - base[2]:+d}, series {end[3] - base[3]:+d}; "
          f"log lines followed {end[4]}")
    # tasks include the streams in flight at the moment of the mark: bounded by the concurrency, not growing
    ok = growth < 10 and end[1] <= base[1] and end[2] <= base[2] + 2 * cfg.concurrency and end[3] <= base[3]
    print("soak: " + ("flat" if ok else "GROWING"))
    return 0 if ok else 1


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--requests", type=int, default=100_000)
    a = p.parse_args()
    import uvloop

    sys.exit(uvloop.run(main(a.requests)))

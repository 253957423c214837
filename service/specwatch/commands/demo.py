"""``specwatch demo``: two simulators (EAGLE-3 and plain decoding) and the daemon, on this machine.

``--engine vllm`` runs the simulator's vLLM flavour instead (vLLM's flags, streams, stats lines and
``/metrics``, which the daemon then scrapes too).

The simulators run as child processes (``specwatch sim``, seed profile, each in its own session so that
Ctrl-C reaches the daemon first and it drains its probes); the daemon runs in this process with the live
terminal view and serves /metrics. Ctrl-C stops everything.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import sys
import tempfile
from pathlib import Path

from .. import config as config_mod
from ..daemon import Daemon, serve
from ..errors import ConfigError, LaunchError
from ..launch import Server, wait_ready
from ..options import DEFAULT_LISTEN


def simulators(engine: str, steps: int, port: int, log_file: Path) -> list[Server]:
    """The speculative simulator (with its log and control port) and the plain one beside it."""
    sim = [sys.executable, "-m", "specwatch", "sim", "--engine", engine, "--profile", "seed", "--quiet"]
    if engine == "vllm":
        spec = ["--speculative-config", json.dumps({"method": "eagle3", "num_speculative_tokens": steps})]
    else:
        spec = ["--speculative-algorithm", "EAGLE3", "--speculative-num-steps", str(steps),
                "--speculative-eagle-topk", "1"]
    env = {"VLLM_LOG_STATS_INTERVAL": "2"}  # vLLM's default is 10 s: too slow for a demo
    return [Server([*sim, "--port", str(port), *spec, "--log-file", str(log_file), "--control-port", str(port + 2)],
                   env=env),
            Server([*sim, "--port", str(port + 1)], env=env)]

DESCRIPTION = """\
Two simulated servers (EAGLE-3 and plain decoding, the seed profile) and the daemon against them, with the live
terminal view; no GPU, no model. --engine vllm runs the simulator's vLLM flavour instead (vLLM's flags, streams,
stats lines and /metrics, which the daemon then scrapes too). The simulators run as child processes; Ctrl-C
stops everything. Reads no environment variable."""


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="specwatch demo", description=DESCRIPTION,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=5,
                   help="draft steps of the speculative simulator; at 5 the seed profile loses to plain decoding, "
                        "at 2 it wins (default: 5 steps)")
    p.add_argument("--engine", default="sglang", choices=("sglang", "vllm"),
                   help="which server to simulate (default: sglang)")
    p.add_argument("--port", type=int, default=None,
                   help="the speculative simulator's port; plain decoding's is port+1, the control port port+2 "
                        "(default: 30000, vLLM 8000)")
    p.add_argument("--listen", default=DEFAULT_LISTEN,
                   help=f"HOST:PORT for the daemon's page, /metrics and the API (default: {DEFAULT_LISTEN})")
    p.add_argument("--duration", type=float, default=0,
                   help="stop after this many seconds, 0: at Ctrl-C (default: 0 s)")
    p.add_argument("--view", default="auto", choices=("auto", "table", "log"),
                   help="terminal table (auto when stdout is a TTY) or log lines (default: auto)")
    p.add_argument("--advisor-prior", default=None, metavar="FILE",
                   help="sweep.json of a sweep of the simulator (the live advisor's cost shape), or a "
                        "speculation_profile.json (acceptance along the chain only) (default: none)")
    return p


def main(argv: list[str]) -> int:
    a = parser().parse_args(argv)
    vllm = a.engine == "vllm"
    port = a.port or (8000 if vllm else 30000)
    tmp = Path(tempfile.mkdtemp(prefix="specwatch-demo-"))
    log_file = tmp / f"{a.engine}.log"
    spec_url, base_url = f"http://127.0.0.1:{port}", f"http://127.0.0.1:{port + 1}"
    servers = simulators(a.engine, a.steps, port, log_file)
    try:
        for url, server in zip((spec_url, base_url), servers, strict=True):
            wait_ready(url, server, 30.0, poll_s=0.1)
        cfg = config_mod.check(config_mod.Config(
            server_url=spec_url, baseline_url=base_url, log_file=str(log_file), listen=a.listen, interval_s=2.0,
            verdict_window_s=30, pause_s=0.5, max_tokens=200, view=a.view, server_metrics=vllm,
            advisor_prior=a.advisor_prior))
        flavour = "vLLM" if vllm else "SGLang"
        print(f"specwatch demo: simulated {flavour}, EAGLE-3 ({a.steps} steps) at {spec_url}, plain decoding at "
              f"{base_url}")
        print(f"  page:     http://{a.listen}/   metrics: http://{a.listen}/metrics   "
              f"summary: http://{a.listen}/api/summary")
        print(f"  simulate an acceptance collapse: curl -X POST 127.0.0.1:{port + 2}/control "
              "-d '{\"accept_scale\": 0.3}'")
        sys.stdout.flush()
        import uvloop

        daemon = Daemon(cfg)
        daemon.exit_now_hooks += [server.kill_now for server in servers]

        async def run() -> int:
            if a.duration > 0:
                asyncio.get_running_loop().call_later(a.duration, daemon.stop.set)
            return await serve(daemon)

        return int(uvloop.run(run()))
    except (LaunchError, ConfigError) as exc:
        print(f"specwatch demo: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 0
    finally:
        for server in servers:
            server.stop(5.0)
        with contextlib.suppress(OSError):
            log_file.unlink()
            os.rmdir(tmp)

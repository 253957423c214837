"""Helpers shared by the benchmark scripts: a free loopback port and the fast local SSE server."""

import socket
import subprocess
import sys
from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_fastserver(port: int) -> subprocess.Popen[str]:
    """Start benchmarks/fastserver.py in its own process (so its CPU is not counted) and wait until ready."""
    server = subprocess.Popen([sys.executable, str(Path(__file__).with_name("fastserver.py")), str(port)],
                              stdout=subprocess.PIPE, text=True)
    assert server.stdout is not None and server.stdout.readline().strip() == "ready"
    return server

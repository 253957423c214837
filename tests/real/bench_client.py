"""The real tier's measured ``specwatch`` runs in one long-lived client process per placement (pinned to CPU 1
as ``realserver.pinned`` places a client, or not), started at the first run and stopped at the end of the
session (``bench_worker.py``). A run's exit code and output are what the command line gives; a run that takes
longer than its timeout kills the client (the next run starts a fresh one) and raises ``TimeoutExpired`` as
``subprocess.run`` would."""

from __future__ import annotations

import atexit
import json
import selectors
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
_CLIENTS: dict[bool, subprocess.Popen[str]] = {}


def _client(pin: bool) -> subprocess.Popen[str]:
    from realserver import pinned

    proc = _CLIENTS.get(pin)
    if proc is None or proc.poll() is not None:
        cmd = [sys.executable, str(HERE / "bench_worker.py")]
        proc = subprocess.Popen(pinned(cmd) if pin else cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                text=True, bufsize=1)
        _CLIENTS[pin] = proc
    return proc


def run(argv: list[str], timeout_s: float, pin: bool = True) -> subprocess.CompletedProcess[str]:
    """``specwatch *argv`` in the client, as ``subprocess.run(..., capture_output=True, text=True)`` returns it."""
    proc = _client(pin)
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(json.dumps(argv) + "\n")
    proc.stdin.flush()
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stdout, selectors.EVENT_READ)
        if not sel.select(timeout_s):
            stop(pin)
            raise subprocess.TimeoutExpired(["specwatch", *argv], timeout_s)
    line = proc.stdout.readline()
    if not line:
        code = proc.wait()
        _CLIENTS.pop(pin, None)
        return subprocess.CompletedProcess(["specwatch", *argv], 1, "", f"the bench client exited with {code}")
    answer = json.loads(line)
    return subprocess.CompletedProcess(["specwatch", *argv], int(answer["rc"]), answer["stdout"], answer["stderr"])


def stop(pin: bool) -> None:
    proc = _CLIENTS.pop(pin, None)
    if proc is not None and proc.poll() is None:
        proc.kill()
        proc.wait()


@atexit.register
def _stop_all() -> None:
    for pin in list(_CLIENTS):
        stop(pin)

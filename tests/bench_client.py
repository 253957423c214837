"""Measured ``specwatch`` runs in one long-lived client process per placement (a command prefix such as
``taskset -c 1``, or none), started at its first run and stopped at the end of the session
(``bench_worker.py``): the real tier's measuring loops run a hundred-odd benches one after another, and each
would otherwise start an interpreter and import the client again (0.35 s of the client's core). The oracle
table's cells tried it and went back to a process each: with it, plain decoding at 4 streams read 0.5-0.8% off in
two clean-clone runs, but a third without it read the same, so it was not shown to be the cause; on a quiet
machine the two clients read alike (``test_explain_vs_served``). It has not been tried there again.
A run's exit code and output are what the command line gives; a run that takes longer than its
timeout kills the client (the next run starts a fresh one) and raises ``TimeoutExpired`` as ``subprocess.run``
would."""

from __future__ import annotations

import atexit
import json
import selectors
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

HERE = Path(__file__).resolve().parent
_CLIENTS: dict[tuple[str, ...], subprocess.Popen[str]] = {}


def _client(placement: tuple[str, ...]) -> subprocess.Popen[str]:
    proc = _CLIENTS.get(placement)
    if proc is None or proc.poll() is not None:
        proc = subprocess.Popen([*placement, sys.executable, str(HERE / "bench_worker.py")], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, text=True, bufsize=1)
        _CLIENTS[placement] = proc
    return proc


def run(argv: list[str], timeout_s: float, placement: Sequence[str]) -> subprocess.CompletedProcess[str]:
    """``specwatch *argv`` in the client started under ``placement``, as ``subprocess.run(..., capture_output=True,
    text=True)`` returns it."""
    where = tuple(placement)
    proc = _client(where)
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(json.dumps(argv) + "\n")
    proc.stdin.flush()
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stdout, selectors.EVENT_READ)
        if not sel.select(timeout_s):
            stop(where)
            raise subprocess.TimeoutExpired(["specwatch", *argv], timeout_s)
    line = proc.stdout.readline()
    if not line:
        code = proc.wait()
        _CLIENTS.pop(where, None)
        return subprocess.CompletedProcess(["specwatch", *argv], 1, "", f"the bench client exited with {code}")
    answer = json.loads(line)
    return subprocess.CompletedProcess(["specwatch", *argv], int(answer["rc"]), answer["stdout"], answer["stderr"])


def stop(placement: tuple[str, ...]) -> None:
    proc = _CLIENTS.pop(placement, None)
    if proc is not None and proc.poll() is None:
        proc.kill()
        proc.wait()


@atexit.register
def _stop_all() -> None:
    for placement in list(_CLIENTS):
        stop(placement)

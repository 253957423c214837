"""Start a server, wait until it answers, stop it: shared by ``sweep`` (real servers) and ``demo`` (simulators).

Readiness: SGLang's ``/health_generate`` (it runs a one-token generation) where the server has it, else
``/health`` (vLLM and other OpenAI-compatible servers answer 404 on the former). Each launched server runs
in its own process group so that stopping it stops its workers too.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from .errors import LaunchError

TAIL_LINES = 15
READY_PATHS = ("/health_generate", "/health")


class Server:
    """One launched server in its own process group, with its output in a file (or inherited)."""

    def __init__(self, cmd: str | Sequence[str], out_path: Path | None = None,
                 env: Mapping[str, str] | None = None) -> None:
        self.out_path = out_path
        self.fh = out_path.open("wb") if out_path is not None else None
        self.proc = subprocess.Popen(cmd, shell=isinstance(cmd, str), stdout=self.fh,
                                     stderr=subprocess.STDOUT if self.fh else None, stdin=subprocess.DEVNULL,
                                     start_new_session=True, env={**os.environ, **env} if env else None)

    def tail(self, n: int = TAIL_LINES) -> str:
        if self.out_path is None:
            return ""
        lines = self.out_path.read_text(errors="replace").splitlines()
        return "\n".join("    | " + ln for ln in lines[-n:])

    def kill_now(self) -> None:
        """SIGKILL the whole process group, without waiting (for an exit that cannot wait)."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)

    def stop(self, grace_s: float) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(grace_s)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        else:
            with contextlib.suppress(ProcessLookupError):  # children left behind by a shell that exited
                os.killpg(self.proc.pid, signal.SIGKILL)
        if self.fh is not None:
            self.fh.close()


def probe_ready(url: str, paths: list[str], timeout_s: float = 5.0) -> bool:
    """One readiness check. A 404 on the first path drops it from ``paths`` (the server does not have it)."""
    try:
        with urllib.request.urlopen(url + paths[0], timeout=timeout_s) as r:
            return bool(r.status == 200)
    except urllib.error.HTTPError as exc:
        if exc.code == 404 and len(paths) > 1:
            paths.pop(0)
        return False
    except OSError:
        return False


def wait_ready(url: str, server: Server | None, timeout_s: float, say: Callable[[str], None] | None = None,
               poll_s: float = 1.0) -> float:
    """Seconds until ``url`` answered; ``LaunchError`` with the output's tail if the server exits or the
    deadline passes. ``say`` hears progress every 10 s (a TTY gets a live counter)."""
    start = time.monotonic()
    paths = list(READY_PATHS)
    last_report = -10.0
    tty = say is not None and sys.stdout.isatty()
    while True:
        elapsed = time.monotonic() - start
        if server is not None and server.proc.poll() is not None:
            raise LaunchError(f"exited with status {server.proc.returncode} before becoming ready\n{server.tail()}")
        if probe_ready(url, paths):
            if tty:
                print()
            return elapsed
        if elapsed > timeout_s:
            raise LaunchError(f"not ready after {timeout_s:.0f}s" + (f"\n{server.tail()}" if server else ""))
        if tty:
            print(f"\r  waiting for {url}{paths[0]} … {elapsed:.0f}s", end="", flush=True)
        elif say is not None and elapsed - last_report >= 10:
            say(f"  waiting for {url}{paths[0]} … {elapsed:.0f}s")
            last_report = elapsed
        time.sleep(poll_s)

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
        """SIGTERM the process group, SIGKILL what is left after ``grace_s``, and return only when no process
        of the group runs: a shell's ``sh -c CMD`` (dash does not exec CMD) exits on SIGTERM at once, while
        CMD still holds the port the next configuration is launched on."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(grace_s)
        if not wait_group_gone(self.proc.pid, deadline):
            self.kill_now()
            wait_group_gone(self.proc.pid, time.monotonic() + KILL_WAIT_S)
        self.proc.wait()
        if self.fh is not None:
            self.fh.close()


KILL_WAIT_S = 10.0


def group_running(pgid: int) -> bool:
    """Whether a process of group ``pgid`` still runs (a zombie does not: an orphan's zombie waits for an init
    that may never reap it). Without ``/proc``, whether the group can be signalled."""
    proc = Path("/proc")
    if not proc.is_dir():
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            pass  # it exists, owned by another user
        return True
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()  # after "pid (comm) ": state, ppid, pgrp, ...
        if len(fields) > 2 and fields[2] == str(pgid) and fields[0] not in ("Z", "X"):
            return True
    return False


def wait_group_gone(pgid: int, deadline: float, poll_s: float = 0.05) -> bool:
    """True once no process of the group runs, False if one still does at ``deadline``."""
    while group_running(pgid):
        if time.monotonic() >= deadline:
            return False
        time.sleep(poll_s)
    return True


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

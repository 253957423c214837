"""Shared fixtures: free ports, polling with deadlines, and real child processes (simulator, daemon)."""

from __future__ import annotations

import itertools
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "real"))
pytest_plugins = ["lanes", "realserver", "sglangserver"]  # xdist's lanes; the real tiers' fixtures (tests/real/)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--update-golden", action="store_true", help="rewrite golden files from current output")


@pytest.fixture
def update_golden(request: pytest.FixtureRequest) -> bool:
    return bool(request.config.getoption("--update-golden"))


def _tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        pytest.fail(f"{name} not found: install Debian's prometheus package (bash .ci/run does)")
    return path


@pytest.fixture(scope="session")
def promtool() -> str:
    return _tool("promtool")


@pytest.fixture(scope="session")
def prometheus_bin() -> str:
    return _tool("prometheus")


# Ports for the processes a test starts come from a block of their own per xdist worker, below the kernel's
# ephemeral range: a port the kernel picked (bind to port 0) was free only until another process's outgoing
# connection took it as its local port, and a simulator at six workers then failed to listen ("address already in
# use"). Each port is still checked free by binding it.
_WORKER = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw") or 0)
_PORTS = itertools.cycle(range(10000 + 1000 * (_WORKER % 20), 11000 + 1000 * (_WORKER % 20)))


def free_port() -> int:
    for _ in range(1000):
        port = next(_PORTS)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise AssertionError("no free port in this worker's block of 1000")


def free_port_block(n: int) -> int:
    """The first of ``n`` consecutive free ports (the demo takes port, port+1 and port+2): each of them is
    bound at once before any is released, so none is taken by an earlier pick or a connection's local port, and
    the worker's next ``free_port`` picks start after the block (they go in order through the worker's ports)."""
    for _ in range(200):
        first = free_port()
        socks: list[socket.socket] = []
        try:
            for p in range(first, first + n):
                s = socket.socket()
                socks.append(s)
                s.bind(("127.0.0.1", p))
            for _ in range(n - 1):  # the block's other ports, not to be handed out again before it is used
                next(_PORTS)
            return first
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    raise AssertionError(f"no {n} consecutive free ports in 200 tries")


def wait_until(pred: Callable[[], Any], timeout_s: float = 20.0, every_s: float = 0.05, what: str = "condition") -> Any:
    """Poll ``pred`` until it returns something truthy; fail with ``what`` after the deadline."""
    deadline = time.monotonic() + timeout_s
    last_exc: BaseException | None = None
    while time.monotonic() < deadline:
        try:
            value = pred()
            if value:
                return value
        except Exception as exc:
            last_exc = exc
        time.sleep(every_s)
    raise AssertionError(f"timed out after {timeout_s}s waiting for {what}" + (f" (last error: {last_exc!r})"
                                                                               if last_exc else ""))


def http_get(url: str, timeout: float = 5.0) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def http_json(url: str, body: Any = None, timeout: float = 30.0) -> Any:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.loads(r.read())


@dataclass
class Proc:
    popen: subprocess.Popen[bytes]
    out_path: Path
    url: str = ""
    control: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    def output(self) -> str:
        return self.out_path.read_text(errors="replace")

    def stop(self, sig: int = signal.SIGTERM, timeout_s: float = 15.0) -> int:
        if self.popen.poll() is None:
            self.popen.send_signal(sig)
            try:
                self.popen.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait()
        return int(self.popen.returncode)


def specwatch_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "specwatch", *args]


class Procs:
    """Starts real specwatch processes and stops them at teardown."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.procs: list[Proc] = []

    def start(self, args: list[str], name: str, env: dict[str, str] | None = None,
              stdin: int | None = subprocess.DEVNULL) -> Proc:
        out = self.tmp / f"{name}.out"
        fh = out.open("wb")
        popen = subprocess.Popen(args, stdout=fh, stderr=subprocess.STDOUT, stdin=stdin,
                                 env={**os.environ, **(env or {})}, cwd=self.tmp)
        fh.close()
        p = Proc(popen, out)
        self.procs.append(p)
        return p

    def sim(self, *flags: str, name: str = "sim", control: bool = True, env: dict[str, str] | None = None) -> Proc:
        """A simulator (``--engine vllm`` among ``flags`` for vLLM's flavour; its stats lines every 0.5 s)."""
        port = free_port()
        args = ["sim", "--port", str(port), *flags]
        cport = free_port() if control else None
        if cport:
            args += ["--control-port", str(cport)]
        p = self.start(specwatch_cmd(*args), f"{name}-{port}", env={"VLLM_LOG_STATS_INTERVAL": "0.5", **(env or {})})
        p.url = f"http://127.0.0.1:{port}"
        p.control = f"http://127.0.0.1:{cport}" if cport else ""

        def ready() -> bool:
            if p.popen.poll() is not None:
                raise AssertionError(f"sim exited early: {p.output()}")
            return http_get(p.url + "/health", 1)[0] == 200

        wait_until(ready, 20, what=f"simulator {p.url} to answer /health")
        return p

    def stop_all(self) -> None:
        for p in reversed(self.procs):
            p.stop()


@pytest.fixture
def procs(tmp_path: Path) -> Iterator[Procs]:
    ps = Procs(tmp_path)
    try:
        yield ps
    finally:
        ps.stop_all()


def sim_truth(proc: Proc) -> dict[str, Any]:
    return http_json(proc.control + "/truth")


def scrape(url: str) -> dict[str, float]:
    out = {}
    for line in http_get(url + "/metrics")[1].decode().splitlines():
        if line and not line.startswith("#"):
            key, _, value = line.rpartition(" ")
            out[key] = float(value)
    return out


PING = """
import sys, time, urllib.request
url, timeout = sys.argv[1], float(sys.argv[2])
while True:
    t0 = time.monotonic()
    try:
        with urllib.request.urlopen(url + "/healthz", timeout=timeout) as r:
            r.read()
        dt = time.monotonic() - t0
        with urllib.request.urlopen(url + "/metrics", timeout=timeout) as r:
            r.read()
        print(f"ok {t0:.6f} {dt:.6f}", flush=True)
    except OSError as exc:
        print(f"fail {t0:.6f} {exc!r}", flush=True)
    time.sleep(0.02)  # the pace: 50 pings a second
"""


class Pinger:
    """/healthz and /metrics, 50 times a second each, from a process of its own, until stopped. Each ping is
    timed in that process: a thread in pytest's process shared its GIL with the test's own scrapes and JSON, so
    on two busy cores a slow ping measured the test, not the daemon. The child's clock is the system's monotonic
    clock, so a reading is judged by when the ping was sent. A ping unanswered in ``timeout_s`` is a failure."""

    def __init__(self, url: str, timeout_s: float = 2.0) -> None:
        self.proc = subprocess.Popen([sys.executable, "-c", PING, url, str(timeout_s)], stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, text=True)
        self.overall_worst_s = 0.0
        self.failures: list[str] = []
        self.count = 0
        self._worst = 0.0  # of the pings sent since ``_since``
        self._since = time.monotonic()
        self._last_sent = 0.0
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            kind, sent, rest = line.rstrip("\n").split(" ", 2)
            with self._lock:
                self._last_sent = max(self._last_sent, float(sent))
                if kind != "ok":
                    self.failures.append(rest)
                    continue
                self.count += 1
                if float(sent) >= self._since:
                    self._worst = max(self._worst, float(rest))
                else:  # sent before the last reset: the previous measurement's
                    self.overall_worst_s = max(self.overall_worst_s, float(rest))

    def _caught_up(self) -> None:
        """Every ping sent before now has reported."""
        now = time.monotonic()
        wait_until(lambda: self._last_sent >= now or self.proc.poll() is not None, timeout_s=10, every_s=0.01,
                   what="the pinger's report of a ping sent after now")

    @property
    def worst_healthz_s(self) -> float:
        """The slowest /healthz since the last reset (every ping sent until now included)."""
        self._caught_up()
        with self._lock:
            return self._worst

    def reset(self) -> float:
        """Start a new measurement (each fault is judged on its own); returns the worst so far."""
        self._caught_up()
        with self._lock:
            worst, self._worst, self._since = self._worst, 0.0, time.monotonic()
            self.overall_worst_s = max(self.overall_worst_s, worst)
        return worst

    def stop(self) -> None:
        self._caught_up()
        with self._lock:
            self.overall_worst_s = max(self.overall_worst_s, self._worst)
        self.proc.terminate()
        self.proc.wait(5)
        self._thread.join(5)


# the tables xdist's workers ran, for the summary: the fault tables and the oracle's table test's rows
FROM_WORKERS: dict[str, Any] = {"raw": [], "matrix": [], "health": {}, "oracle": []}


def run_tables() -> dict[str, Any]:
    """The fault tables (tests/faults/) and the oracle's table (test_explain_vs_served) this process ran, with
    those its xdist workers sent (``.ci/run`` runs the tiers on workers): the raw server's rows, the matrix's rows,
    each rig's worst /healthz, and /explain against the served engine."""
    raw = getattr(sys.modules.get("raw_rig"), "ROWS", [])  # both raw-HTTP modules (tests/faults/)
    mod = sys.modules.get("test_fault_matrix")
    oracle = getattr(sys.modules.get("test_explain_vs_served"), "TABLE", [])
    return {"raw": [*FROM_WORKERS["raw"], *raw], "matrix": [*FROM_WORKERS["matrix"], *getattr(mod, "MATRIX", [])],
            "health": {**FROM_WORKERS["health"], **getattr(mod, "HEALTH", {})},
            "oracle": [*FROM_WORKERS["oracle"], *oracle]}


def pytest_sessionfinish(session: pytest.Session) -> None:
    out = getattr(session.config, "workeroutput", None)
    if out is not None:  # an xdist worker: its tables go to the controller, which prints the summary
        out["run_tables"] = run_tables()


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: Any) -> None:
    """xdist's controller, as a worker ends: keep the tables it ran."""
    tables = getattr(node, "workeroutput", {}).get("run_tables")
    for key, value in (tables or {}).items():
        if isinstance(value, dict):
            FROM_WORKERS[key].update(value)
        else:
            FROM_WORKERS[key].extend(value)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """The real tiers' timings and comparisons, the oracle's table (/explain against the served engine) and the
    fault matrix (tests/faults/), fault → outcome → recovered, in the summary whether captured or not."""
    real = sys.modules.get("realserver")
    if real is not None and (lines := real.summary_lines()):
        terminalreporter.section("real-server tier (vLLM, SGLang)")
        for line in lines:
            terminalreporter.write_line("  " + line)
    tables = run_tables()
    if tables["oracle"]:
        terminalreporter.section("/explain against the served engine (profile, steps, streams, figure, served, "
                                 "explained, error)")
        for line in sorted(tables["oracle"]):
            terminalreporter.write_line(line)
    if tables["raw"]:
        terminalreporter.section("fault matrix: raw HTTP/1.1 server")
        for case, who, outcome in tables["raw"]:
            terminalreporter.write_line(f"{case:<26} {who:<18} {outcome}")
    if not tables["matrix"]:
        return
    terminalreporter.section("fault matrix")
    terminalreporter.write_line(f"{'fault':<20} {'outcome':<28} recovered")
    for fault, outcome, recovered in tables["matrix"]:
        terminalreporter.write_line(f"{fault:<20} {outcome:<28} {recovered}")
    for line in tables["health"].values():
        terminalreporter.write_line(line)

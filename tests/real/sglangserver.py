"""The real SGLang tier's fixtures: upstream SGLang 0.5.23 on torch's CPU build (``sglang_env.py``), serving
the tiny model the vLLM tier builds, with NGRAM, with EAGLE-3 and without speculation. Nothing is skipped:
when the install or a start fails, the tests fail with that reason. A plugin of the root conftest.

An idle SGLang server busy-polls a core unless ``--sleep-on-idle`` (the launcher passes it), and two cores
hold little beside it: the three servers are started side by side when a test first asks for one, the SGLang
modules run in the order that uses them in one stretch (``MODULE_ORDER``: the modules that start servers of
their own come after it, so no server is stopped and started again), and all are stopped before any test
outside the SGLang modules runs (``_stop_sglang_outside_its_tests``), so the vLLM tier never shares the
machine with an SGLang server.

Start-up is mostly three interpreters importing torch and SGLang (about 24 s of CPU, 20 s alone): two
starts side by side take 28 s, not 40, and four 66 s; so servers that only need to start are started two at
a time (``PrintedServers``), and one command line is started once for every check that prints it."""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from realserver import COMPARISONS, TIMINGS, RealServer, prepared, stop_together

from conftest import free_port, http_get, http_json

HERE = Path(__file__).resolve().parent
import sglang_env  # noqa: E402

START_TIMEOUT_S = 300.0
MODEL_NAME = "tiny-llama"

# every configuration the tier serves, as serve_sglang.py's options (k = draft tokens per verify round)
CONFIGS: dict[str, tuple[str, ...]] = {
    "ngram": ("--algorithm", "NGRAM", "--draft-tokens", "4"),
    "plain": ("--algorithm", "none"),
    "eagle3": ("--algorithm", "EAGLE3", "--steps", "3", "--draft-tokens", "4"),
}
DRAFT_TOKENS = {"ngram": 4, "plain": 0, "eagle3": 4}
_RUNNING: dict[str, RealServer] = {}  # started lazily, stopped before any non-SGLang test
SGLANG_MODULE_PREFIX = "test_sglang"


def serve_command(port: int, *options: str, extra: tuple[str, ...] = ()) -> list[str]:
    return [sys.executable, str(HERE / "serve_sglang.py"), "--port", str(port), *options,
            *(("--", *extra) if extra else ())]


def launch(tmp: Path, name: str, *options: str, extra: tuple[str, ...] = (), env: dict[str, str] | None = None,
           k: int = 0, port: int | None = None) -> RealServer:
    """serve_sglang.py with ``options`` (its own) and ``extra`` SGLang flags as given; its output (SGLang logs
    to stderr) is the server's log file."""
    port = port or free_port()
    log = tmp / f"{name}.log"
    with log.open("ab") as fh:
        popen = subprocess.Popen(serve_command(port, *options, extra=extra), stdout=fh, stderr=subprocess.STDOUT,
                                 stdin=subprocess.DEVNULL, start_new_session=True, env={**os.environ, **(env or {})})
    return RealServer(port, k, log, popen)


def wait_ready(server: RealServer, name: str, t0: float, timeout_s: float = START_TIMEOUT_S, key: str = "") -> None:
    """Until ``/health`` answers and one real ``/generate`` returns its tokens; a clear failure with the log's
    tail if the server exits or never gets there."""
    while True:
        if server.popen.poll() is not None:
            pytest.fail(f"SGLang ({name}) exited with {server.popen.returncode} before it was ready:\n{tail(server)}",
                        pytrace=False)
        with contextlib.suppress(OSError):
            if http_get(server.url + "/health", 2)[0] == 200:
                break
        if time.monotonic() - t0 > timeout_s:
            server.stop()
            pytest.fail(f"SGLang ({name}) not ready after {timeout_s:.0f} s:\n{tail(server)}", pytrace=False)
        time.sleep(0.5)
    smoke(server, name, key)
    TIMINGS[f"start {name} (s)"] = time.monotonic() - t0


def _group_threads(pgid: int) -> list[int]:
    """Every thread of every process in process group ``pgid``: a server's scheduler, detokenizer, HTTP server."""
    tids = []
    for d in Path("/proc").iterdir():
        with contextlib.suppress(OSError, ValueError, IndexError):
            if d.name.isdigit() and int((d / "stat").read_text().rpartition(")")[2].split()[2]) == pgid:
                tids += [int(t) for t in os.listdir(d / "task")]
    return tids


@contextlib.contextmanager
def pinned_servers(servers: list[RealServer], cpu: int = 0) -> Iterator[None]:
    """The servers' every thread on ``cpu`` while the block runs, then back on every CPU. Unpinned, a server
    shares a core with the client now and then: CI measured a warm NGRAM server at 536 tok/s in one run and
    703 ± 64 over three just after. Pinned (its one OpenMP thread, ``serve_sglang.py``), eight runs here spread
    2.5% without a trend, the client on the other CPU (``realserver.pinned``). Servers start unpinned (two side by
    side take 28 s of two cores, not 40 s of one) and are pinned only to be measured."""

    def pin(cpus: set[int]) -> None:
        for server in servers:
            for tid in _group_threads(server.popen.pid):
                with contextlib.suppress(OSError):  # a thread that ended meanwhile
                    os.sched_setaffinity(tid, cpus)

    pin({cpu})
    try:
        yield
    finally:
        pin(set(range(os.cpu_count() or 1)))


def tail(server: RealServer, n: int = 25) -> str:
    return "\n".join(server.output().splitlines()[-n:])


def generate(url: str, text: str, max_new_tokens: int, stream: bool = False, timeout_s: float = 120,
             key: str = "") -> dict:
    """One greedy native ``/generate``: SGLang's answer as it gave it."""
    body = json.dumps({"text": text, "sampling_params": {"max_new_tokens": max_new_tokens, "temperature": 0},
                       "stream": stream}).encode()
    headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {key}"} if key else {})}
    req = urllib.request.Request(url + "/generate", body, headers)
    with urllib.request.urlopen(req, timeout=timeout_s) as r:
        return dict(json.loads(r.read()))


def smoke(server: RealServer, name: str, key: str = "") -> None:
    """One real request after ``/health``: a server whose engine dies on its first batch passes ``/health``."""
    why = ""
    try:
        ok = generate(server.url, "def f(x):", 8, key=key)["meta_info"]["completion_tokens"] == 8
    except (OSError, ValueError, KeyError) as exc:
        ok, why = False, str(exc)
    if not ok or server.popen.poll() is not None:
        server.stop()
        pytest.fail(f"SGLang ({name}) answered /health but its first /generate failed ({why or 'wrong length'}):\n"
                    f"{tail(server)}", pytrace=False)


@pytest.fixture(scope="session")
def sglang_installed() -> dict[str, float]:
    t0 = time.monotonic()
    took = prepared(sglang_env, "SGLang")
    TIMINGS.update({f"sglang {k.removesuffix('_s')} (s, 0 = cached)": v for k, v in took.items()})
    TIMINGS["sglang setup check (s)"] = time.monotonic() - t0
    return took


class SGLangServers:
    """The tier's servers by configuration name, kept while SGLang tests run. With ``all_at_first`` (a run of
    several modules on them: each uses two of the three) the first use starts all three side by side; else,
    and later, one is started when asked for."""

    def __init__(self, tmp: Path, all_at_first: bool) -> None:
        self.tmp = tmp
        self.first = all_at_first

    def _start(self, names: list[str]) -> None:
        t0 = time.monotonic()
        for name in names:
            _RUNNING[name] = launch(self.tmp, f"sglang-{name}", *CONFIGS[name], k=DRAFT_TOKENS[name])
        for name in names:
            wait_ready(_RUNNING[name], f"sglang-{name}", t0)
        if len(names) > 1:
            TIMINGS[f"start sglang {'+'.join(names)} side by side (s)"] = time.monotonic() - t0

    def __getitem__(self, name: str) -> RealServer:
        if self.first:
            self.first = False
            self._start([n for n in CONFIGS if n not in _RUNNING])
        server = _RUNNING.get(name)
        if server is None or server.popen.poll() is not None:  # never started, stopped meanwhile, or died
            self._start([name])
        return _RUNNING[name]


def stop_all() -> None:
    stop_together(_RUNNING.values())
    _RUNNING.clear()


# The SGLang modules in the order they run (``pytest_collection_modifyitems``): the ones on the three servers
# first, then those that start servers of their own with printed flags or through ``sweep`` (each stops the
# three first, two cores). Alphabetical order put the flags between the three's users, which then started
# them again: one start each, about 20 s (the off range's plain server so, after the flags, until it moved up
# among the three's users). A module not listed runs after these.
MODULE_ORDER = ("test_sglang_standins", "test_sglang_names", "test_sglang_daemon", "test_sglang_faults",
                "test_sglang_prometheus", "test_sglang_surface", "test_sglang_advisor", "test_sglang_tune",
                "test_sglang_off_range", "test_sglang_flags", "test_sglang_sweep")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The SGLang tests in ``MODULE_ORDER``, in the places the SGLang tests had; every other test stays put."""
    def module(item: pytest.Item) -> str:
        return getattr(getattr(item, "module", None), "__name__", "")

    places = [i for i, item in enumerate(items) if module(item).startswith(SGLANG_MODULE_PREFIX)]
    ordered = sorted((items[i] for i in places), key=lambda item: MODULE_ORDER.index(module(item))
                     if module(item) in MODULE_ORDER else len(MODULE_ORDER))
    for i, item in zip(places, ordered, strict=True):
        items[i] = item


@pytest.fixture(scope="session")
def sglang(sglang_installed: dict[str, float], tmp_path_factory: pytest.TempPathFactory,
           request: pytest.FixtureRequest) -> Iterator[SGLangServers]:
    users = {item.module.__name__ for item in request.session.items if "sglang" in getattr(item, "fixturenames", ())
             and hasattr(item, "module")}
    try:
        yield SGLangServers(tmp_path_factory.mktemp("sglang"), all_at_first=len(users) > 1)
    finally:
        stop_all()


@pytest.fixture(autouse=True)
def _stop_sglang_outside_its_tests(request: pytest.FixtureRequest) -> None:
    """Two cores: no SGLang server stays up while another module's test measures something."""
    module = getattr(request.node.module, "__name__", "")
    if _RUNNING and not module.startswith(SGLANG_MODULE_PREFIX):
        stop_all()


@pytest.fixture(params=["ngram", "eagle3"])
def speculative_sglang(request: pytest.FixtureRequest, sglang: SGLangServers) -> RealServer:
    """Each speculative SGLang server in turn: NGRAM's lookups, and EAGLE-3's draft head."""
    return sglang[request.param]


class PrintedServers:
    """SGLang started with flags exactly as printed (after the tier's machine flags), for checks that need it
    to start and to say what it runs: one server per command line (checks that print the same line share it;
    a line naming a file names a file of its own), launched two at a time in the order they were added, each
    stopped once its last check is done (``release``)."""

    AT_ONCE = 2  # two starts side by side: 28 s for both; four: 66 s

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.pending: list[str] = []  # command lines not launched yet, in order
        self.flags: dict[str, list[str]] = {}
        self.names: dict[str, str] = {}  # the first check's name: the server's log
        self.users: dict[str, int] = {}
        self.servers: dict[str, RealServer] = {}
        self.starting: dict[str, float] = {}  # launched, not yet seen ready: line -> when

    def add(self, name: str, flags: list[str]) -> None:
        line = shlex.join(flags)
        self.users[line] = self.users.get(line, 0) + 1
        if line not in self.flags:
            self.flags[line], self.names[line] = list(flags), name
            self.pending.append(line)

    def _launch(self, line: str) -> None:
        self.pending.remove(line)
        self.starting[line] = time.monotonic()
        self.servers[line] = launch(self.tmp, self.names[line], extra=tuple(self.flags[line]))

    def _fill(self) -> None:
        while self.pending and len(self.starting) < self.AT_ONCE:
            self._launch(self.pending[0])

    def get(self, name: str, flags: list[str]) -> tuple[RealServer, dict]:
        """The server started with ``flags`` (added before), once it serves; its ``/server_info``."""
        line = shlex.join(flags)
        assert line in self.users, f"{name}: not added to the printed servers: {line}"
        if line in self.pending:  # asked for before its turn
            self._launch(line)
        self._fill()
        server = self.servers[line]
        if line in self.starting:
            wait_ready(server, self.names[line], self.starting.pop(line))
            self._fill()
        first = server.output().splitlines()[0]
        assert line in first, first  # the launcher ran these flags, unchanged
        shared = "" if name == self.names[line] else f" (the server started for {self.names[line]})"
        COMPARISONS.append(f"SGLang started as printed ({name}){shared}: {line}")
        return server, http_json(server.url + "/server_info")

    def release(self, flags: list[str]) -> None:
        line = shlex.join(flags)
        self.users[line] -= 1
        if self.users[line] == 0 and line in self.servers:
            self.servers.pop(line).stop()

    def stop(self) -> None:
        stop_together(self.servers.values())
        self.servers.clear()


def start_printed(tmp: Path, name: str, flags: list[str]) -> tuple[RealServer, dict]:
    """SGLang with the tier's machine flags and ``flags`` exactly as printed, alone (two cores); its
    ``/server_info``. The caller stops it."""
    stop_all()
    printed = PrintedServers(tmp)
    printed.add(name, flags)
    return printed.get(name, flags)

"""The real-server tier's fixtures: a pinned CPU vLLM, installed once into its own cached environment,
serving a tiny model built from local text. Nothing here is skipped: when the install or the start fails,
the tests fail with that reason (CI always runs this tier). A plugin of the root conftest (not a
conftest.py of its own, so that the root conftest stays the one module named ``conftest``)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from conftest import free_port, http_get
from specwatch import codec
from specwatch.records import RequestRecord

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import vllm_env  # noqa: E402

import bench_client  # noqa: E402

START_TIMEOUT_S = 300.0
SLOW_STOP_S = 5.0  # a stop that took longer is in the summary's timings (a server stops in about 1.5 s)
TIMINGS: dict[str, float] = {}  # printed at the end of the run
COMPARISONS: list[str] = []  # specwatch vs the server's own numbers, printed at the end
# Student's t, two-sided 99%, by degrees of freedom: a mean over n rounds is within t99(n) standard errors of the
# truth 99 times in 100. "Twice the standard error" is a normal's 95% and holds only for many rounds: over 5 rounds
# (4 degrees of freedom) twice the standard error is an 88% interval, and a right prediction missed it in CI
T99 = {1: 63.657, 2: 9.925, 3: 5.841, 4: 4.604, 5: 4.032, 6: 3.707, 7: 3.499, 8: 3.355, 9: 3.250, 10: 3.169}


def t99(rounds: int) -> float:
    """Standard errors of a mean over ``rounds`` rounds that hold its truth 99 times in 100."""
    return T99.get(rounds - 1, 2.576)


@dataclass
class RealServer:
    port: int
    k: int
    log: Path
    popen: subprocess.Popen[bytes]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def stop(self) -> None:
        stop_together([self])

    def _signal(self, sig: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.popen.pid, sig)


def stop_together(servers: Iterable[RealServer], timeout_s: float = 30.0) -> None:
    """Every server asked to stop at once (SIGTERM to its process group), then each waited for until
    ``timeout_s`` after the ask and killed if still up; workers left behind are killed. A vLLM and an SGLang
    server each took 1.5 s to stop here: one after the other, the tier's groups of two to six waited that long
    for each."""
    servers = list(servers)
    for s in servers:
        if s.popen.poll() is None:
            s._signal(signal.SIGTERM)
    asked = time.monotonic()
    for s in servers:
        try:
            s.popen.wait(max(0.0, asked + timeout_s - time.monotonic()))
        except subprocess.TimeoutExpired:
            s._signal(signal.SIGKILL)
            s.popen.wait()
        s._signal(signal.SIGKILL)  # workers left behind
        if time.monotonic() - asked > SLOW_STOP_S:
            TIMINGS[f"slow stop: {s.log.stem} (s)"] = time.monotonic() - asked


def pinned(cmd: list[str]) -> list[str]:
    """Clients on CPU 1, beside the API server, off the Worker's CPU 0 (vllm-cpu.md)."""
    return cmd if os.environ.get("REALTIER_PIN_CLIENTS", "1") == "0" else ["taskset", "-c", "1", *cmd]


def serve_command(port: int, k: int, stats_interval_s: float = 2.0, extra: tuple[str, ...] = (),
                  method: str = "ngram", start_last: bool = False) -> list[str]:
    return [sys.executable, str(HERE / "serve_vllm.py"), "--port", str(port), "--k", str(k), "--method", method,
            "--stats-interval", str(stats_interval_s), *(("--start-on-last-cpu",) if start_last else ()),
            *(("--", *extra) if extra else ())]


def prepared(env: Any, tier: str) -> dict[str, float]:
    """``env.ensure()`` of a tier's environment module (``vllm_env``, ``sglang_env``), or the tier's failure with
    the failing step's reason (never a skip)."""
    try:
        return dict(env.ensure())
    except env.SetupError as exc:
        pytest.fail(f"the real {tier} tier cannot be set up here: {exc}", pytrace=False)


@pytest.fixture(scope="session")
def vllm_installed() -> dict[str, float]:
    t0 = time.monotonic()
    took = prepared(vllm_env, "vLLM")
    TIMINGS["install (s, 0 = cached)"] = took["install_s"]
    TIMINGS["model build (s, 0 = cached)"] = took["model_s"]
    TIMINGS["setup check (s)"] = time.monotonic() - t0
    return took


def launch(tmp: Path, k: int, name: str, extra: tuple[str, ...] = (), method: str = "ngram",
           start_last: bool = False) -> RealServer:
    """serve_vllm.py at ``k`` draft tokens of ``method`` (0: plain), with ``extra`` vllm serve flags as given;
    ``start_last``: its Worker imports on the last CPU and then moves to the Worker's (servers started side by
    side, every other one so: serve_vllm.py's ``--start-on-last-cpu``)."""
    port = free_port()
    log = tmp / f"{name}.log"
    with log.open("wb") as fh:
        popen = subprocess.Popen(serve_command(port, k, extra=extra, method=method, start_last=start_last),
                                 stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
    return RealServer(port, k, log, popen)


def wait_ready(server: RealServer, name: str, t0: float) -> None:
    """Until ``/health`` answers and the EngineCore is pinned; a clear failure if it exits or never does."""
    while True:
        if server.popen.poll() is not None:
            tail = "\n".join(server.output().splitlines()[-25:])
            pytest.fail(f"vLLM ({name}) exited with {server.popen.returncode} before it was ready:\n{tail}",
                        pytrace=False)
        if "serve_vllm: EngineCore" in server.output() or "serve_vllm: not pinned" in server.output():
            with contextlib.suppress(OSError):
                if http_get(server.url + "/health")[0] == 200:
                    break
        if time.monotonic() - t0 > START_TIMEOUT_S:
            server.stop()
            tail = "\n".join(server.output().splitlines()[-25:])
            pytest.fail(f"vLLM ({name}) not ready after {START_TIMEOUT_S:.0f} s:\n{tail}", pytrace=False)
        time.sleep(0.5)
    smoke(server, name)
    TIMINGS[f"start {name} (s)"] = time.monotonic() - t0

def start_side_by_side(tmp: Path, servers: dict[str, tuple[str, ...]]) -> dict[str, RealServer]:
    """vLLM servers (name: extra flags) started side by side (their start is mostly imports); a failure stops
    the ones already up."""
    t0 = time.monotonic()
    up = {name: launch(tmp, 0, name, extra, start_last=i % 2 == 1) for i, (name, extra) in enumerate(servers.items())}
    try:
        for name, s in up.items():
            wait_ready(s, name, t0)
    except BaseException:
        stop_together(up.values())
        raise
    TIMINGS[f"start {'+'.join(servers)} side by side (s)"] = time.monotonic() - t0
    return up


def smoke(server: RealServer, name: str) -> None:
    """One real request after ``/health``: an EAGLE-3 head whose aux-layer ids do not fit the target passes
    ``/health`` and kills the engine on its first request, so health alone proves nothing."""
    body = json.dumps({"model": "tiny-llama", "prompt": "def f(x):", "max_tokens": 8, "temperature": 0}).encode()
    req = urllib.request.Request(server.url + "/v1/completions", body, {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            ok = r.status == 200 and json.loads(r.read())["usage"]["completion_tokens"] == 8
    except (OSError, ValueError, KeyError) as exc:
        ok, why = False, str(exc)
    else:
        why = "" if ok else "an answer without 8 completion tokens"
    healthy = False
    with contextlib.suppress(OSError):
        healthy = ok and server.popen.poll() is None and http_get(server.url + "/health")[0] == 200
    if not healthy:
        tail = "\n".join(server.output().splitlines()[-12:])
        server.stop()
        pytest.fail(f"vLLM ({name}) answered /health but its first request failed ({why or 'the engine died'}): "
                    f"an EAGLE-3 head whose aux-layer ids do not fit the target does this\n{tail}", pytrace=False)


LADDER = (1, 2, 5)  # EAGLE-3 step counts served beside the tier's k = 3 (``eagle3_ladder``)
_SERVERS: dict[str, RealServer] = {}  # the session's servers by name, while they run
_LADDER_UP: dict[str, RealServer] = {}  # of those, the ladder's, until no test left needs them


@pytest.fixture(scope="session")
def real_servers(vllm_installed: dict[str, float], tmp_path_factory: pytest.TempPathFactory,
                 request: pytest.FixtureRequest) -> Iterator[dict[str, RealServer]]:
    """vLLM with ngram speculation (k = 3), with EAGLE-3 (the distilled head, k = 3) and without, started side by
    side and kept for the whole tier; the tests use one at a time. When the run holds a test of the EAGLE-3
    ladder (``eagle3_ladder``), EAGLE-3 at 1, 2 and 5 steps are started beside them, so that every step count
    the sweep and the live advisor compare is started once, at the same moment as the others (a start is ~24 s
    of CPU whatever runs beside it, and vLLM binds each Worker to CPU 0 before it imports: every other one
    imports on the last CPU and moves to CPU 0 once it serves, ``launch``'s ``start_last``)."""
    tmp = tmp_path_factory.mktemp("vllm")
    servers = {"spec": launch(tmp, 3, "vllm-ngram-k3", start_last=True), "plain": launch(tmp, 0, "vllm-plain"),
               "eagle3": launch(tmp, 3, "vllm-eagle3-k3", method="eagle3")}
    if any("eagle3_ladder" in getattr(item, "fixturenames", ()) for item in request.session.items):
        _LADDER_UP.update({f"eagle3-k{k}": launch(tmp, k, f"vllm-eagle3-k{k}", method="eagle3", start_last=k != 2)
                           for k in LADDER})
        servers |= _LADDER_UP
    _SERVERS.update(servers)
    t0 = time.monotonic()
    try:
        for server in servers.values():
            wait_ready(server, server.log.stem, t0)
        TIMINGS[f"start {len(servers)} side by side (s)"] = time.monotonic() - t0
        yield _SERVERS
    finally:
        stop_together(servers.values())
        _SERVERS.clear()
        _LADDER_UP.clear()


@pytest.fixture(scope="session")
def eagle3_ladder(real_servers: dict[str, RealServer]) -> dict[int, RealServer]:
    """EAGLE-3 with the distilled head at 1, 2, 3 and 5 steps, all started together (the tier's k = 3 is
    the 3): the seeds story's sweep and the live advisor's prior and truth."""
    return {3: real_servers["eagle3"], **{k: real_servers[f"eagle3-k{k}"] for k in LADDER}}


@pytest.fixture(autouse=True)
def _stop_the_ladder_after_its_tests(request: pytest.FixtureRequest) -> None:
    """EAGLE-3 at 1, 2 and 5 steps stopped once no test left in the run uses them (2.9 GB each)."""
    if not _LADDER_UP:
        return
    items = request.session.items
    later = items[items.index(request.node):] if request.node in items else items
    if not any("eagle3_ladder" in getattr(item, "fixturenames", ()) for item in later):
        stop_together(_LADDER_UP.values())
        for name in _LADDER_UP:
            _SERVERS.pop(name, None)
        _LADDER_UP.clear()


@pytest.fixture(scope="session")
def spec_server(real_servers: dict[str, RealServer]) -> RealServer:
    return real_servers["spec"]


@pytest.fixture(scope="session")
def plain_server(real_servers: dict[str, RealServer]) -> RealServer:
    return real_servers["plain"]


@pytest.fixture(scope="session")
def eagle_server(real_servers: dict[str, RealServer]) -> RealServer:
    return real_servers["eagle3"]


@pytest.fixture(params=["spec", "eagle3"], ids=["ngram", "eagle3"])
def speculative_server(request: pytest.FixtureRequest, real_servers: dict[str, RealServer]) -> RealServer:
    """Each speculative server in turn: ngram's all-or-nothing loops, and EAGLE-3's acceptance that decays with
    the draft position."""
    return real_servers[request.param]


@pytest.fixture(scope="session")
def heldout_prompts(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Code the EAGLE-3 head never saw: snippets from the stdlib files its trainer held out (the same split),
    where a draft model is uncertain right after the prompt, before the output settles into a loop."""
    import hashlib
    import random

    import tiny_model

    files = [p for p in tiny_model.corpus_files() if int(hashlib.sha1(p.name.encode()).hexdigest(), 16) % 10 == 0]
    rng = random.Random(7)
    rows: list[str] = []
    while len(rows) < 24:
        text = rng.choice(files).read_text(encoding="utf-8", errors="replace")
        starts = [0] + [i + 1 for i, ch in enumerate(text) if ch == "\n"]
        snippet = text[(s := rng.choice(starts)):s + 240]
        if len(snippet) >= 200 and snippet.strip():
            rows.append(json.dumps({"text": snippet, "domain": "code"}))
    path = tmp_path_factory.mktemp("prompts") / "heldout.jsonl"
    path.write_text("\n".join(rows) + "\n", encoding="utf-8")
    return path


def bench(url: str, tmp: Path, *flags: str, pin: bool = False) -> tuple[dict, list[RequestRecord]]:
    """``specwatch bench`` greedy against ``url`` (on CPU 1 if ``pin``): its JSON document and its records."""
    out, recs = tmp / "bench.json", tmp / "bench.jsonl"
    p = bench_client.run(["bench", "--server-url", url, "--temperature", "0", "--json", str(out), "--records",
                          str(recs), *flags], timeout_s=300,
                         placement=pinned([]) if pin else [])
    assert p.returncode == 0, p.stdout + p.stderr
    records = [r for r in codec.read(str(recs)) if isinstance(r, RequestRecord)]
    return json.loads(out.read_text()), records


HALVES: dict[str, float] = {}  # wall time of each engine's tests, their fixtures' setup and teardown included


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """Each engine's share of the tier's time (its servers' starts are in its tests' setup)."""
    t0 = time.monotonic()
    yield
    name = item.path.name if item.path.resolve().parent == HERE else ""  # the tier's own modules (tests/real/)
    half = "SGLang" if name.startswith("test_sglang") else "vLLM" if name.startswith("test_vllm") else ""
    if half:
        HALVES[half] = HALVES.get(half, 0.0) + time.monotonic() - t0


def summary_lines() -> list[str]:
    """For the root conftest's terminal summary."""
    return ([f"{name:32s} {value:8.1f}" for name, value in TIMINGS.items()] + COMPARISONS
            + [f"{half + ' tests, wall (s)':32s} {took:8.1f}" for half, took in HALVES.items()])

"""The real SGLang tier's fixtures: upstream SGLang 0.5.23 on torch's CPU build (``sglang_env.py``), serving
the tiny model the vLLM tier builds, with NGRAM, with EAGLE-3 and without speculation. Nothing is skipped:
when the install or a start fails, the tests fail with that reason. A plugin of the root conftest.

An idle SGLang server busy-polls a core unless ``--sleep-on-idle`` (the launcher passes it), and two cores
hold little beside it: servers are started when a test first asks for one and all are stopped before any
test outside the SGLang modules runs (``_stop_sglang_outside_its_tests``), so the vLLM tier never shares the
machine with an SGLang server."""

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
from realserver import COMPARISONS, TIMINGS, RealServer, prepared

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
    """The tier's servers by configuration name, started on first use and kept while SGLang tests run."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp

    def __getitem__(self, name: str) -> RealServer:
        server = _RUNNING.get(name)
        if server is not None and server.popen.poll() is None:
            return server
        t0 = time.monotonic()
        server = launch(self.tmp, f"sglang-{name}", *CONFIGS[name], k=DRAFT_TOKENS[name])
        _RUNNING[name] = server
        wait_ready(server, f"sglang-{name}", t0)
        return server


def stop_all() -> None:
    for server in _RUNNING.values():
        server.stop()
    _RUNNING.clear()


@pytest.fixture(scope="session")
def sglang(sglang_installed: dict[str, float], tmp_path_factory: pytest.TempPathFactory
           ) -> Iterator[SGLangServers]:
    try:
        yield SGLangServers(tmp_path_factory.mktemp("sglang"))
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


def start_printed(tmp: Path, name: str, flags: list[str]) -> tuple[RealServer, dict]:
    """SGLang with the tier's machine flags and ``flags`` exactly as printed; its ``/server_info``."""
    stop_all()  # one server at a time: two cores
    t0 = time.monotonic()
    server = launch(tmp, name, extra=tuple(flags))
    wait_ready(server, name, t0)
    first = server.output().splitlines()[0]
    assert shlex.join(flags) in first, first  # the launcher ran these flags, unchanged
    COMPARISONS.append(f"SGLang started as printed ({name}): {shlex.join(flags)}")
    return server, http_json(server.url + "/server_info")

"""The real-server tier's fixtures: a pinned CPU vLLM, installed once into its own cached environment,
serving a tiny model built from local text. Nothing here is skipped: when the install or the start fails,
the tests fail with that reason (CI always runs this tier). A plugin of the root conftest (not a
conftest.py of its own, so that the root conftest stays the one module named ``conftest``)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from conftest import free_port, http_get

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import vllm_env  # noqa: E402

START_TIMEOUT_S = 300.0
TIMINGS: dict[str, float] = {}  # printed at the end of the run
COMPARISONS: list[str] = []  # specwatch vs the server's own numbers, printed at the end


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
        if self.popen.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.popen.pid, signal.SIGTERM)
            try:
                self.popen.wait(30)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.popen.pid, signal.SIGKILL)
                self.popen.wait()
        with contextlib.suppress(ProcessLookupError):  # workers left behind
            os.killpg(self.popen.pid, signal.SIGKILL)


def serve_command(port: int, k: int, stats_interval_s: float = 2.0, extra: tuple[str, ...] = ()) -> list[str]:
    return [sys.executable, str(HERE / "serve_vllm.py"), "--port", str(port), "--k", str(k),
            "--stats-interval", str(stats_interval_s), *(("--", *extra) if extra else ())]


@pytest.fixture(scope="session")
def vllm_installed() -> dict[str, float]:
    t0 = time.monotonic()
    try:
        took = vllm_env.ensure()
    except vllm_env.SetupError as exc:
        pytest.fail(f"the real vLLM tier cannot be set up here: {exc}", pytrace=False)
    TIMINGS["install (s, 0 = cached)"] = took["install_s"]
    TIMINGS["model build (s, 0 = cached)"] = took["model_s"]
    TIMINGS["setup check (s)"] = time.monotonic() - t0
    return took


def launch(tmp: Path, k: int, name: str, extra: tuple[str, ...] = ()) -> RealServer:
    """serve_vllm.py at ``k`` ngram draft tokens (0: plain), with ``extra`` vllm serve flags as given."""
    port = free_port()
    log = tmp / f"{name}.log"
    with log.open("wb") as fh:
        popen = subprocess.Popen(serve_command(port, k, extra=extra), stdout=fh, stderr=subprocess.STDOUT,
                                 stdin=subprocess.DEVNULL, start_new_session=True)
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
    TIMINGS[f"start {name} (s)"] = time.monotonic() - t0


@pytest.fixture(scope="session")
def real_servers(vllm_installed: dict[str, float], tmp_path_factory: pytest.TempPathFactory
                 ) -> Iterator[dict[str, RealServer]]:
    """vLLM with ngram speculation (k = 3) and without, started side by side (their start is mostly imports
    and the two overlap well on two cores) and kept for the whole tier; the tests use one at a time."""
    tmp = tmp_path_factory.mktemp("vllm")
    servers = {"spec": launch(tmp, 3, "vllm-ngram-k3"), "plain": launch(tmp, 0, "vllm-plain")}
    t0 = time.monotonic()
    try:
        for server in servers.values():
            wait_ready(server, server.log.stem, t0)
        TIMINGS["start both, side by side (s)"] = time.monotonic() - t0
        yield servers
    finally:
        for server in servers.values():
            server.stop()


@pytest.fixture(scope="session")
def spec_server(real_servers: dict[str, RealServer]) -> RealServer:
    return real_servers["spec"]


@pytest.fixture(scope="session")
def plain_server(real_servers: dict[str, RealServer]) -> RealServer:
    return real_servers["plain"]


def summary_lines() -> list[str]:
    """For the root conftest's terminal summary."""
    return [f"{name:32s} {value:8.1f}" for name, value in TIMINGS.items()] + COMPARISONS

"""The shared launcher waits on the endpoint the server has: SGLang's /health_generate, else /health (vLLM and
other OpenAI-compatible servers answer 404 on the former)."""

import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from specwatch.errors import LaunchError
from specwatch.launch import Server, group_running, wait_ready

pytestmark = pytest.mark.integration


def serve(paths: set[str]) -> tuple[ThreadingHTTPServer, list[str]]:
    asked: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            asked.append(self.path)
            self.send_response(200 if self.path in paths else 404)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return httpd, asked


@pytest.mark.parametrize(("paths", "ready_on"), [({"/health_generate", "/health"}, "/health_generate"),
                                                 ({"/health"}, "/health")])
def test_ready_on_the_endpoint_the_server_has(paths, ready_on):
    httpd, asked = serve(paths)
    try:
        wait_ready(f"http://127.0.0.1:{httpd.server_address[1]}", None, timeout_s=10, poll_s=0.01)
    finally:
        httpd.shutdown()
    assert asked[-1] == ready_on
    assert len(asked) <= 2  # a 404 on /health_generate switches at once, no waiting out the timeout


def test_a_server_that_answers_neither_times_out_with_the_reason():
    httpd, asked = serve(set())
    try:
        with pytest.raises(LaunchError, match="not ready after 0s"):
            wait_ready(f"http://127.0.0.1:{httpd.server_address[1]}", None, timeout_s=0.2, poll_s=0.01)
    finally:
        httpd.shutdown()
    assert set(asked) == {"/health_generate", "/health"}


def test_a_launch_that_exits_is_reported_with_its_output(tmp_path):
    server = Server("echo loading weights; echo CUDA error: out of memory; exit 3", tmp_path / "out.log")
    with pytest.raises(LaunchError, match="exited with status 3") as e:
        wait_ready("http://127.0.0.1:9", server, timeout_s=30, poll_s=0.05)
    server.stop(1)
    assert "CUDA error: out of memory" in str(e.value)


CHILD = """
import pathlib, signal, sys, time
out = pathlib.Path(sys.argv[1])
def on_term(*_):
    if sys.argv[2] == "slow":  # a server's shutdown: it still holds its port for a while
        time.sleep(0.5)
        (out / "done").write_text("shut down")
        sys.exit(0)
signal.signal(signal.SIGTERM, on_term)
(out / "ready").write_text("handler installed")
while True:
    time.sleep(1)
"""


def launched_child(tmp_path, how: str) -> Server:
    """A shell command whose last part is a Python child (``true;`` first: dash then cannot exec it), running
    with its SIGTERM handler installed when this returns."""
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    server = Server(f"true; {sys.executable} {script} {tmp_path} {how}", tmp_path / "out.log")
    deadline = time.monotonic() + 30
    while not (tmp_path / "ready").exists():
        assert time.monotonic() < deadline and server.proc.poll() is None, server.tail()
        time.sleep(0.02)
    return server


def test_stop_returns_once_the_shells_child_has_shut_down(tmp_path):
    server = launched_child(tmp_path, "slow")
    server.stop(10)
    # the shell dies on SIGTERM at once; the child's shutdown is what frees the port for the next launch
    assert (tmp_path / "done").read_text() == "shut down"
    assert not group_running(server.proc.pid)


def test_a_child_that_ignores_sigterm_is_killed_after_the_grace(tmp_path):
    server = launched_child(tmp_path, "ignore")
    start = time.monotonic()
    server.stop(0.3)
    assert time.monotonic() - start >= 0.3  # it had its grace
    assert not group_running(server.proc.pid)
    assert not (tmp_path / "done").exists()

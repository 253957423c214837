"""The shared launcher waits on the endpoint the server has: SGLang's /health_generate, else /health (vLLM and
other OpenAI-compatible servers answer 404 on the former)."""

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from specwatch.errors import LaunchError
from specwatch.launch import Server, wait_ready

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

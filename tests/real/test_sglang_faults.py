"""Bad cases on the real SGLang 0.5.23, each a clear, counted outcome: a prompt over the context length, a wrong
API key (``--api-key``), the server killed mid-stream under the daemon, and started again on the same port."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time

import pytest
from realserver import COMPARISONS, stop_together
from sglangserver import CONFIGS, launch, wait_ready

from conftest import Pinger, free_port, http_get, scrape, specwatch_cmd, wait_until

pytestmark = pytest.mark.integration
KEY = "sk-sglang-tier-0123456789abcdef"


def outcomes(url: str) -> dict[str, float]:
    prefix = 'specwatch_probe_requests_total{outcome="'
    return {k[len(prefix):].split('"')[0]: v for k, v in scrape(url).items()
            if k.startswith(prefix) and 'target="spec"' in k}


def test_a_prompt_over_the_context_length_is_a_counted_stream_error(sglang, tmp_path):
    server = sglang["ngram"]
    prompts = tmp_path / "long.jsonl"
    words = " ".join(f"token{i}" for i in range(800))  # ~2,800 tokens: over --context-length 2048
    prompts.write_text(json.dumps({"text": words}) + "\n")
    out = tmp_path / "b.json"
    p = subprocess.run(specwatch_cmd("bench", "--server-url", server.url, "--api", "sglang", "--prompts", str(prompts),
                                     "--num-runs", "2", "--warmup", "0", "--max-tokens", "16", "--json", str(out)),
                       capture_output=True, text=True, timeout=120)
    doc = json.loads(out.read_text())
    runs = doc["runs"]
    # a streamed /generate answers 200, then one error event with SGLang's reason, then [DONE]
    assert [(r["outcome"], r["status"]) for r in runs] == [("stream_error", 200)] * 2, runs
    assert all(re.fullmatch(r"server error event: The input \(\d+ tokens\) is longer than the model's context "
                            r"length \(2048 tokens\)\.", r["error"]) for r in runs), runs
    assert p.returncode != 0 and "every request failed (stream_error" in p.stdout + p.stderr, p.stdout + p.stderr
    # the server is unharmed: the next request is served
    assert http_get(server.url + "/health")[0] == 200
    COMPARISONS.append(f"over the context length: {runs[0]['error'][:160]}")


@pytest.fixture(scope="module")
def keyed(sglang, tmp_path_factory):
    """A plain SGLang server that wants ``--api-key``; the module kills and restarts it."""
    tmp = tmp_path_factory.mktemp("keyed")
    port = free_port()
    servers = []

    def start() -> None:
        t0 = time.monotonic()
        server = launch(tmp, "sglang-keyed", *CONFIGS["plain"], extra=("--api-key", KEY), port=port)
        servers.append(server)
        wait_ready(server, "sglang-keyed", t0, key=KEY)

    start()
    yield servers, start
    stop_together(servers)


def test_a_wrong_api_key_stops_bench_and_the_daemon_at_start(keyed, tmp_path):
    servers, _ = keyed
    url = servers[-1].url
    wrong = {**os.environ, "SPECWATCH_API_KEY": "wrong-" + KEY[::-1]}
    for argv in (["bench", "--server-url", url, "--num-runs", "1"],
                 ["run", "--listen", f"127.0.0.1:{free_port()}", "--server-url", url]):
        p = subprocess.run(specwatch_cmd(*argv), capture_output=True, text=True, timeout=60, env=wrong)
        assert p.returncode == 2, (argv, p.stdout, p.stderr)
        assert "answered HTTP 401: the target refuses the API key from SPECWATCH_API_KEY" in p.stderr, p.stderr
        assert KEY not in p.stdout + p.stderr and KEY[::-1] not in p.stdout + p.stderr
    key_file = tmp_path / "k.key"
    key_file.write_text(KEY)
    out = tmp_path / "b.json"
    p = subprocess.run(specwatch_cmd("bench", "--server-url", url, "--api-key-file", str(key_file), "--num-runs", "2",
                                     "--warmup", "0", "--max-tokens", "16", "--json", str(out)),
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    assert json.loads(out.read_text())["results"]["ok"] == 2 and KEY not in p.stdout + p.stderr


def test_the_server_killed_mid_stream_and_restarted_under_the_daemon(keyed, procs, tmp_path):
    servers, start = keyed
    key_file = tmp_path / "k.key"
    key_file.write_text(KEY)
    port = free_port()
    procs.start(specwatch_cmd("run", "--listen", f"127.0.0.1:{port}", "--server-url", servers[-1].url,
                              "--api-key-file", str(key_file), "--interval-s", "0.5", "--pause-s", "0",
                              "--max-tokens", "1000", "--connect-timeout-s", "1"), "daemon")
    d = f"http://127.0.0.1:{port}"
    wait_until(lambda: http_get(d + "/healthz", 1)[0] == 200, what="daemon up")
    wait_until(lambda: outcomes(d).get("ok", 0) >= 1, timeout_s=120, what="a first whole probe")
    # SGLang's start (its processes loading torch and the model on both cores) once kept a ping unanswered for 2 s
    # in CI: the machine's stall, not the daemon's. A daemon frozen by the fault stays silent for the whole restart
    # (20 s and more), so a ping's limit of 10 s still catches it; the slowest answer is reported
    pinger = Pinger(d, timeout_s=10.0)
    try:
        # a probe of 1000 tokens is streaming now (the daemon sends the next at once): kill the whole server
        before = outcomes(d)
        os.killpg(servers[-1].popen.pid, signal.SIGKILL)
        servers[-1].popen.wait(30)
        lost = wait_until(lambda: (o := outcomes(d)).get("stream_error", 0) > before.get("stream_error", 0) and o,
                          timeout_s=30, what="the cut stream counted")
        wait_until(lambda: outcomes(d).get("connect_error", 0) > before.get("connect_error", 0), timeout_s=30,
                   what="the refused connections counted")
        down = outcomes(d)
        start()  # the same server, the same port
        ok0 = down.get("ok", 0)
        wait_until(lambda: outcomes(d).get("ok", 0) >= ok0 + 2, timeout_s=180, what="probes whole again")
    finally:
        pinger.stop()
    assert pinger.failures == [], pinger.failures[:3]  # the daemon answered throughout
    after = outcomes(d)
    COMPARISONS.append(f"SGLang killed mid-stream under the daemon: stream_error {lost['stream_error']:.0f}, "
                       f"connect_error while down {down['connect_error']:.0f}, ok after the restart "
                       f"{after['ok'] - ok0:.0f} more; the daemon's slowest /healthz "
                       f"{pinger.overall_worst_s * 1000:.0f} ms over {pinger.count} pings")

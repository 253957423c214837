"""``specwatch run`` next to the real SGLang 0.5.23, reading its real log (``--log-file``) and its ``/metrics``
(``--server-metrics``): the three accept-length sources side by side, the running-requests gauge and the step
count, each against what the server itself printed or exported."""

from __future__ import annotations

import math
import re

import pytest
from realserver import COMPARISONS
from sglang_truth import decode_lines, metrics

from conftest import free_port, http_get, specwatch_cmd, wait_until

pytestmark = pytest.mark.integration


def gauge(text: str, name: str, **labels: str) -> float | None:
    """One sample of specwatch's exposition by name and labels (any other labels allowed)."""
    for line in text.splitlines():
        if line.startswith(name + "{") and all(f'{k}="{v}"' in line for k, v in labels.items()):
            return float(line.rsplit(" ", 1)[1])
    return None


def test_daemon_reads_the_real_log_and_metrics(speculative_sglang, procs):
    server = speculative_sglang
    port = free_port()
    d = procs.start(specwatch_cmd("run", "--listen", f"127.0.0.1:{port}", "--server-url", server.url,
                                  "--log-file", str(server.log), "--server-metrics", "--interval-s", "0.5",
                                  "--max-tokens", "96", "--pause-s", "0", "--temperature", "0"), "daemon")
    url = f"http://127.0.0.1:{port}"
    n0 = len([ln for ln in decode_lines(server.log) if ln.accept_length is not None])

    def settled():
        lines = [ln for ln in decode_lines(server.log) if ln.accept_length is not None]
        if len(lines) < n0 + 2:
            return None
        text = http_get(url + "/metrics")[1].decode()
        scraped = metrics(server.url)
        if len([ln for ln in decode_lines(server.log) if ln.accept_length is not None]) != len(lines):
            return None  # a line landed in between: read again
        from_log = gauge(text, "specwatch_server_accept_length", source="log")
        from_scrape = gauge(text, "specwatch_server_accept_length", source="scrape")
        running = gauge(text, "specwatch_server_running_requests", source="log")
        client = gauge(text, "specwatch_probe_accept_length", target="spec", window="cumulative")
        if client is None or math.isnan(client):
            return None  # no probe has finished yet
        if from_log != lines[-1].accept_length or from_scrape != scraped["sglang:spec_accept_length"] \
                or running != lines[-1].running:
            return None  # the daemon has not read the newest line or scrape yet
        return text, lines, scraped

    text, lines, scraped = wait_until(settled, timeout_s=90, every_s=0.3,
                                      what="the daemon on the newest Decode batch line and scrape")
    # the gauge holds the last decode-log window's value: the log line and the scrape say the same
    assert scraped["sglang:spec_accept_length"] == pytest.approx(lines[-1].accept_length, abs=0.006)
    # running requests: the daemon's probe runs one stream, as the newest line says, and the daemon follows it.
    # SGLang's own gauge is no steadier: each "Prefill batch" sets it to that line's #running-req (0 at one
    # stream, the new request not yet running) until the next decode line, so the scrape reads 0 or 1
    assert gauge(text, "specwatch_server_running_requests", source="log") == lines[-1].running == 1
    assert gauge(text, "specwatch_server_running_requests", source="scrape") in (0.0, 1.0)
    # the step count in use is the server's (sglang:spec_num_steps), not a flag the daemon was told
    steps = gauge(text, "specwatch_server_speculative_steps", source="scrape")
    assert steps == scraped["sglang:spec_num_steps"]
    client = gauge(text, "specwatch_probe_accept_length", target="spec", window="cumulative")
    per_request = gauge(text, "specwatch_probe_server_reported_accept_length", target="spec", window="cumulative")
    # the probes' own accept length, (completion - 1) / spec_verify_ct, against SGLang's completion / verify_ct
    # over the same requests: they differ by one token per request, no more than 2% at 96 tokens
    assert client is not None and per_request is not None and client == pytest.approx(per_request, rel=0.02)
    COMPARISONS.append(f"daemon on {server.log.stem}: accept length from the log {lines[-1].accept_length}, the "
                       f"scrape {scraped['sglang:spec_accept_length']}, the probes {client:.3f} (server per "
                       f"request {per_request:.3f}); running {lines[-1].running}; steps {steps} "
                       "(sglang:spec_num_steps)")
    assert re.search(r"specwatch_server_metrics_up 1\.0", text)
    d.stop()

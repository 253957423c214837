"""A target that refuses connections is down in every count the daemon gives: connect_error in /metrics, errors in
/api/summary and its log line; with --api auto (detection never answers) as with a fixed API (probes fail)."""

import pytest
from test_daemon import start_daemon

from conftest import free_port, http_json, scrape, wait_until

pytestmark = pytest.mark.integration
REFUSED = 'specwatch_probe_requests_total{outcome="connect_error",target="spec"}'


@pytest.mark.parametrize("api", ["auto", "completions"])
def test_a_closed_port_counts_as_connect_errors(procs, api):
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there: every connection is refused
    d = start_daemon(procs, "--server-url", url, "--api", api, "--interval-s", "1", "--pause-s", "0.2",
                     "--view", "log")
    m = wait_until(lambda: (s := scrape(d.url)).get(REFUSED, 0) >= 2 and s, timeout_s=30,
                   what="two refused probes")
    assert m['specwatch_probe_requests_total{outcome="ok",target="spec"}'] == 0
    assert m["specwatch_target_up{target=\"spec\"}"] == 0
    summary = wait_until(lambda: (s := http_json(d.url + "/api/summary"))["probe"]["spec"]["errors"] >= 2 and s,
                         timeout_s=30, what="the refusals in the summary window")
    probe = summary["probe"]["spec"]
    assert probe["ok"] == 0 and probe["outcomes"]["connect_error"] == probe["errors"] == probe["requests"]

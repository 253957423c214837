"""The fault matrix's raw-HTTP rows for the daemon against ``tests/rawserver.py``, which speaks HTTP/1.1 by hand
and so reaches what the simulator (aiohttp) never sends: close-delimited bodies, trailers, chunk extensions,
interim 1xx, broken framing, non-HTTP bytes. Each row: the expected outcome counted, no traceback, the API key in
no output, no raw control byte printed; the daemon answers /healthz within 100 ms throughout, its event loop never
lags 0.5 s, and it recovers on the next good response. bench's rows: test_raw_http_bench.py."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import raw_rig
from raw_rig import CONTROL, KEY, ROWS, use

from conftest import Pinger, free_port, http_get, scrape, specwatch_cmd, wait_until
from rawserver import EXPECTED

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def raw(tmp_path_factory):
    yield from raw_rig.serve(tmp_path_factory)


def outcomes(url: str) -> dict[str, float]:
    prefix = 'specwatch_probe_requests_total{outcome="'
    return {k[len(prefix):].split('"')[0]: v for k, v in scrape(url).items() if k.startswith(prefix)}


@pytest.fixture(scope="module")
def daemon(raw):
    procs, server, _tmp = raw
    port = free_port()
    d = procs.start(specwatch_cmd("run", "--listen", f"127.0.0.1:{port}", "--server-url", server.url, "--interval-s",
                                  "0.5", "--pause-s", "0", "--max-tokens", "8", "--read-timeout-s", "2",
                                  "--request-timeout-s", "10", "--drain-timeout-s", "5"), "raw-daemon",
                    env={"SPECWATCH_API_KEY": KEY})
    d.url = f"http://127.0.0.1:{port}"
    wait_until(lambda: http_get(d.url + "/healthz", 1)[0] == 200, what="daemon up")
    pinger = Pinger(d.url)
    yield d, server, pinger
    pinger.stop()


@pytest.mark.parametrize("case", sorted(c for c in EXPECTED if c != "ok"))
def test_the_daemon_against_the_raw_server(daemon, case):
    d, server, pinger = daemon
    use(server, "ok")
    wait_until(lambda: outcomes(d.url).get("ok", 0) > 0, timeout_s=30, what="a good probe first")
    pinger.reset()
    want = EXPECTED[case]
    before = outcomes(d.url)
    use(server, case)
    wait_until(lambda: outcomes(d.url)[want] >= before[want] + 1, timeout_s=40, what=f"{case} counted as {want}")
    use(server, "ok")
    mid = outcomes(d.url)
    wait_until(lambda: outcomes(d.url)["ok"] > mid["ok"], timeout_s=30, what=f"recovery after {case}")
    delta = {k: v - before[k] for k, v in outcomes(d.url).items() if v != before[k]}
    assert set(delta) <= {want, "ok"}, delta  # nothing but the expected outcome, and the good ones
    m = scrape(d.url)
    assert m["specwatch_event_loop_lag_seconds"] < 0.5
    assert d.popen.poll() is None and not pinger.failures
    assert pinger.worst_healthz_s < 0.1, f"/healthz took {pinger.worst_healthz_s * 1000:.0f} ms"
    printed = d.output()
    assert "Traceback" not in printed and not CONTROL.search(printed)
    shown = printed + http_get(d.url + "/metrics")[1].decode() + http_get(d.url + "/api/summary")[1].decode()
    assert KEY not in shown  # the log, the metrics and the summary: whatever the server echoed
    ROWS.append((case, "daemon", f"{want} x{int(delta[want])}, recovered (/healthz worst "
                                 f"{pinger.worst_healthz_s * 1000:.0f} ms, loop lag max "
                                 f"{m['specwatch_event_loop_lag_seconds'] * 1000:.0f} ms)"))


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


@pytest.mark.parametrize("case", ["endless_tokens", "endless_same"])
def test_an_endless_fast_stream_neither_freezes_nor_bloats_the_daemon(daemon, case):
    """Over the daemon's whole request deadline (10 s) of a server streaming as fast as it can: /healthz within
    100 ms, RSS growth under 20 MB, every probe ended (at the token cap, or past the bytes a stream may send
    without a token), none left to the deadline or even to the read timeout."""
    d, server, pinger = daemon
    want = EXPECTED[case]
    first = outcomes(d.url)
    use(server, case)
    wait_until(lambda: outcomes(d.url)[want] > first[want], timeout_s=30, what=f"a first {want}")
    before = outcomes(d.url)  # from here on, every probe met this case
    pinger.reset()
    rss0 = rss_bytes(d.popen.pid)
    samples = []
    wait_until(lambda: samples.append(rss_bytes(d.popen.pid)) or len(samples) > 100, timeout_s=30, every_s=0.1,
               what="10 s of RSS samples")  # 100 samples, 0.1 s apart: the request deadline
    use(server, "ok")
    growth = max(samples) - rss0
    assert growth < 20 * 2**20, f"RSS grew {growth / 2**20:.1f} MB"
    assert pinger.worst_healthz_s < 0.1 and not pinger.failures
    got = {k: v - before[k] for k, v in outcomes(d.url).items() if v != before[k]}
    assert set(got) <= {want, "ok"} and got.get(want, 0) >= 6, got  # ok: the first probe after the switch back;
    # six or more in 10 s: no probe waited for its 2 s read timeout
    ROWS.append((case, "daemon, 10 s", f"{want} x{int(got[want])}, RSS +{growth / 2**20:.1f} MB, "
                                       f"/healthz worst {pinger.worst_healthz_s * 1000:.0f} ms"))


def test_sigterm_stops_the_daemon_within_its_drain_timeout_mid_endless_stream(daemon):
    d, server, _pinger = daemon
    use(server, "endless_keepalives")  # a probe kept alive by keep-alives until its read timeout
    wait_until(lambda: json.loads(http_get(server.url + "/active")[1])["active"] > 0, timeout_s=30,
               what="an endless probe under way")
    t0 = time.monotonic()
    code = d.stop(timeout_s=10)
    took = time.monotonic() - t0
    use(server, "ok")
    assert code == 0 and took < 5 + 2, f"exit {code} after {took:.1f} s"  # the 5 s drain timeout, plus start-up
    ROWS.append(("endless_keepalives", "daemon SIGTERM", f"exit 0 in {took:.1f} s (drain timeout 5 s)"))

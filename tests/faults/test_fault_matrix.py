"""The fault matrix: the real daemon against a real simulator that misbehaves on command (its control port),
and against logs that do. For every fault: the daemon stays up and answers /healthz within 100 ms throughout
(a pinger scrapes /healthz and /metrics 50 times a second), counts the fault under the right outcome,
recovers on the next probe, and no histogram takes a sample the simulator's truth contradicts.
The matrix (fault → outcome → recovered) is printed at the end of the session."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import Pinger, Procs, free_port, http_get, http_json, scrape, specwatch_cmd, wait_until

pytestmark = pytest.mark.integration
MAX_TOKENS = 20
MATRIX: list[tuple[str, str, str]] = []
HEALTH: dict[str, str] = {}  # rig -> its worst /healthz, for the summary


@pytest.fixture(scope="module")
def rig(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("faults")
    procs = Procs(tmp)
    sim = procs.sim("--profile", "seed", "--speculative-algorithm", "EAGLE3", "--speculative-num-steps", "3",
                    "--speculative-eagle-topk", "1", "--quiet", "--enable-metrics")
    port = free_port()
    d = procs.start(specwatch_cmd("run", "--listen", f"127.0.0.1:{port}", "--server-url", sim.url, "--api",
                                  "sglang", "--interval-s", "0.5", "--pause-s", "0", "--max-tokens", str(MAX_TOKENS),
                                  "--read-timeout-s", "2", "--request-timeout-s", "20", "--server-metrics",
                                  "--baseline-tps", "90"), "daemon")
    d.url = f"http://127.0.0.1:{port}"
    wait_until(lambda: http_get(d.url + "/healthz", 1)[0] == 200, what="daemon up")
    pinger = Pinger(d.url)
    yield procs, sim, d, pinger
    pinger.stop()
    procs.stop_all()
    pinger.reset()
    HEALTH["server"] = (f"server faults: /healthz worst {pinger.overall_worst_s * 1000:.1f} ms over {pinger.count} "
                        f"pings (+ as many /metrics scrapes), {len(pinger.failures)} failed")


def outcomes(m: dict[str, float]) -> dict[str, float]:
    prefix = "specwatch_probe_requests_total{outcome=\""
    return {k[len(prefix):].split('"')[0]: v for k, v in m.items() if k.startswith(prefix) and 'target="spec"' in k}


def assert_truthful(m: dict[str, float], sim=None) -> None:
    """Every successful probe produced exactly MAX_TOKENS tokens (ignore_eos), at most 4 per chunk (3 draft
    steps), and the simulator finished at least as many requests as the daemon counts as ok: no absurd claim
    or half-read event reached a counter or a histogram."""
    ok = outcomes(m)["ok"]
    if sim is not None:
        finished = [r for r in http_json(sim.control + "/truth")["requests"] if r["outcome"] == "finished"]
        assert ok <= len(finished) and all(r["completion_tokens"] == MAX_TOKENS for r in finished)
    assert m['specwatch_probe_output_tokens_total{target="spec"}'] == ok * MAX_TOKENS
    assert m['specwatch_probe_tokens_per_chunk_bucket{le="4.0",target="spec"}'] == \
        m['specwatch_probe_tokens_per_chunk_bucket{le="+Inf",target="spec"}']
    assert m['specwatch_probe_ttft_seconds_count{target="spec"}'] == ok
    assert all(v == 0 for k, v in m.items() if k.startswith("specwatch_hdr_out_of_range_total"))


SERVER_FAULTS = [
    ("http_500", "http_error"), ("http_429", "http_error"), ("http_503", "http_error"),
    ("stall", "timeout"), ("drip", "timeout"), ("malformed", "stream_error"), ("truncated", "stream_error"),
    ("reset", "stream_error"), ("oversized", "stream_error"), ("multiline", "stream_error"),
    ("no_done", "stream_error"), ("absurd_tokens", "stream_error"),
]


@pytest.mark.parametrize(("fault", "outcome"), SERVER_FAULTS)
def test_server_fault(rig, fault, outcome):
    _procs, sim, d, pinger = rig
    pinger.reset()
    before = outcomes(scrape(d.url))
    wait_until(lambda: outcomes(scrape(d.url))["ok"] > before["ok"], timeout_s=30, what="a probe before the fault")
    before = outcomes(scrape(d.url))
    http_json(sim.control + "/control", {"fault": fault, "count": 1, "stall_s": 30, "drip_interval_s": 0.05})
    after = wait_until(lambda: (o := outcomes(scrape(d.url)))[outcome] > before[outcome] and o, timeout_s=40,
                       what=f"{fault} counted as {outcome}")
    # recovered: the next probe succeeds, and nothing else failed on the way
    wait_until(lambda: outcomes(scrape(d.url))["ok"] > after["ok"], timeout_s=30, what=f"recovery after {fault}")
    final = outcomes(scrape(d.url))
    assert {k: final[k] - before[k] for k in final if k != "ok" and final[k] != before[k]} == {outcome: 1}
    assert_truthful(scrape(d.url), sim)
    assert http_get(d.url + "/readyz")[0] == 200  # one failed probe among good ones: still ready
    assert d.popen.poll() is None and not pinger.failures
    assert pinger.worst_healthz_s < 0.1, f"/healthz took {pinger.worst_healthz_s * 1000:.0f} ms"
    MATRIX.append((fault, outcome, f"yes (/healthz worst {pinger.worst_healthz_s * 1000:.0f} ms)"))


def test_server_killed_then_restarted(rig):
    procs, sim, d, pinger = rig
    pinger.reset()
    before = outcomes(scrape(d.url))
    http_json(sim.control + "/control", {"fault": "kill", "count": 1})
    wait_until(lambda: sim.popen.poll() is not None, timeout_s=30, what="the simulator to die mid-stream")
    wait_until(lambda: scrape(d.url)['specwatch_target_up{target="spec"}'] == 0, timeout_s=30, what="target down")
    assert http_get(d.url + "/readyz")[0] == 503
    port = sim.url.rsplit(":", 1)[1]
    procs.start(specwatch_cmd("sim", "--port", port, "--profile", "seed", "--speculative-algorithm", "EAGLE3",
                              "--speculative-num-steps", "3", "--speculative-eagle-topk", "1", "--quiet",
                              "--enable-metrics"), "restarted-sim")
    wait_until(lambda: outcomes(scrape(d.url))["ok"] > before["ok"], timeout_s=40, what="probes after the restart")
    wait_until(lambda: http_get(d.url + "/readyz")[0] == 200, timeout_s=30, what="ready again")
    failed = {k: v - before[k] for k, v in outcomes(scrape(d.url)).items() if k != "ok" and v != before[k]}
    assert set(failed) <= {"stream_error", "connect_error"} and failed.get("stream_error", 0) <= 1
    assert_truthful(scrape(d.url))
    assert d.popen.poll() is None and not pinger.failures and pinger.worst_healthz_s < 0.1
    MATRIX.append(("kill+restart", "+".join(sorted(failed)),
                   f"yes (/healthz worst {pinger.worst_healthz_s * 1000:.0f} ms)"))


DECODE = "[2026-04-01 09:20:30] Decode batch, #running-req: 1, #token: 345, token usage: 0.00, accept len: {al}, " \
         "gen throughput (token/s): 41.07, #queue-req: 0\n"


@pytest.fixture(scope="module")
def log_rig(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("logfaults")
    procs = Procs(tmp)
    log = tmp / "server.log"
    log.write_text("")
    port = free_port()
    d = procs.start(specwatch_cmd("run", "--listen", f"127.0.0.1:{port}", "--server-url",
                                  f"http://127.0.0.1:{free_port()}", "--api", "sglang", "--log-file", str(log),
                                  "--interval-s", "0.3"), "log-daemon")
    d.url = f"http://127.0.0.1:{port}"
    wait_until(lambda: scrape(d.url).get("specwatch_log_source_up") == 1, what="log source up")
    pinger = Pinger(d.url)
    yield d, log, pinger
    pinger.stop()
    procs.stop_all()


def parsed(d) -> float:
    return scrape(d.url)['specwatch_log_lines_total{result="parsed"}']


def write_good(d, log: Path, n: int = 3) -> None:
    """Append n decode lines and wait until exactly n more are parsed: the source recovered, nothing lost."""
    base = parsed(d)
    with log.open("a") as f:
        f.writelines(DECODE.format(al=f"2.{i}0") for i in range(n))
    wait_until(lambda: parsed(d) == base + n, timeout_s=20, what=f"{n} lines parsed after the fault")


def replace_with(log: Path, kind: str) -> None:
    log.unlink()
    if kind == "directory":
        log.mkdir()
    elif kind == "fifo":
        import os

        os.mkfifo(log)


@pytest.mark.parametrize("fault", ["rotate", "truncate", "delete", "directory", "fifo", "binary", "long_line"])
def test_log_fault(log_rig, fault):
    d, log, pinger = log_rig
    pinger.reset()
    write_good(d, log)
    m0 = scrape(d.url)
    if fault == "rotate":
        log.rename(log.with_suffix(".1"))
        log.write_text("")
    elif fault == "truncate":
        log.write_text("")
    elif fault in ("delete", "directory", "fifo"):
        replace_with(log, fault)
        wait_until(lambda: scrape(d.url)["specwatch_log_source_up"] == 0, what=f"log source down ({fault})")
        said = "No such file" if fault == "delete" else f"is a {fault.replace('fifo', 'FIFO')}"
        wait_until(lambda: (s := http_json(d.url + "/api/summary")["log"])["up"] is False and said in s["error"],
                   what=f"the summary to say the log is down: {said}")  # written on the tick
        if log.is_dir():
            log.rmdir()
        elif log.exists():
            log.unlink()
        log.write_text("")
    elif fault == "binary":
        with log.open("ab") as f:
            f.write(b"\x00\x01\x02binary junk\xff\xfe\n")
        wait_until(lambda: scrape(d.url)['specwatch_log_lines_skipped_total{reason="binary"}'] ==
                   m0['specwatch_log_lines_skipped_total{reason="binary"}'] + 1, what="binary line skipped")
    elif fault == "long_line":
        with log.open("ab") as f:
            f.write(b"y" * (10 * 1024 * 1024) + b"\n")
        wait_until(lambda: scrape(d.url)['specwatch_log_lines_skipped_total{reason="too_long"}'] ==
                   m0['specwatch_log_lines_skipped_total{reason="too_long"}'] + 1, what="10 MB line skipped")
    write_good(d, log)
    m = scrape(d.url)
    worst = max(pinger.worst_healthz_s, pinger.overall_worst_s)
    HEALTH["log"] = f"log faults: /healthz worst {worst * 1000:.1f} ms over {pinger.count} pings"
    assert m["specwatch_log_source_up"] == 1 and m['specwatch_log_lines_total{result="malformed"}'] == 0
    assert d.popen.poll() is None and not pinger.failures and pinger.worst_healthz_s < 0.1
    MATRIX.append((f"log {fault}", "counted" if fault in ("binary", "long_line") else "reopened",
                   f"yes (/healthz worst {pinger.worst_healthz_s * 1000:.0f} ms)"))


@pytest.mark.parametrize(("cmd", "what"), [("echo " + DECODE.strip().replace(",", "\\,") + "; exit 1", "exits"),
                                           ("/nonexistent/bin/server-logs -f", "never starts")])
def test_log_command_fault(tmp_path, cmd, what):
    procs = Procs(tmp_path)
    port = free_port()
    d = procs.start(specwatch_cmd("run", "--listen", f"127.0.0.1:{port}", "--server-url",
                                  f"http://127.0.0.1:{free_port()}", "--api", "sglang", "--log-cmd", cmd,
                                  "--interval-s", "0.3"), "cmd-daemon")
    d.url = f"http://127.0.0.1:{port}"
    try:
        wait_until(lambda: http_get(d.url + "/healthz", 1)[0] == 200, what="daemon up")
        wait_until(lambda: scrape(d.url)["specwatch_log_source_reopens_total"] >= 2, timeout_s=30,
                   what="the log command restarted")
        summary = json.loads(http_get(d.url + "/api/summary")[1])
        assert summary["log"]["source"] == "command" and cmd not in json.dumps(summary)
        assert cmd not in d.output()  # a command line may carry a secret: never printed
        assert d.popen.poll() is None
        MATRIX.append((f"log cmd {what}", "restarted", "yes"))
    finally:
        procs.stop_all()

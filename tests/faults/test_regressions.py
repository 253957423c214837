"""Each way the daemon (or bench) could once be killed, frozen, flooded or made to lie, reproduced against
a real process: it now stays up, answers, counts the trouble and exports nothing the input did not justify."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import Pinger, Procs, free_port, http_get, scrape, specwatch_cmd, wait_until

pytestmark = pytest.mark.integration
FAULTSERVER = Path(__file__).resolve().parent.parent / "faultserver.py"


def daemon(procs: Procs, *flags: str, name: str = "daemon", **kw):
    port = free_port()
    d = procs.start(specwatch_cmd("run", "--listen", f"127.0.0.1:{port}", *flags), name, **kw)
    d.url = f"http://127.0.0.1:{port}"
    wait_until(lambda: d.popen.poll() is None and http_get(d.url + "/healthz", 1)[0] == 200,
               what=f"{name} /healthz ({d.output()[-300:] if d.popen.poll() is not None else ''})")
    return d


@pytest.fixture
def hostile(procs):
    port = free_port()
    p = procs.start([sys.executable, str(FAULTSERVER), str(port), "hostile"], "hostile")
    wait_until(lambda: "ready" in p.output(), what="hostile server")
    p.url = f"http://127.0.0.1:{port}"
    return p


def test_hostile_openai_server_and_metrics_are_counted_not_fatal(procs, hostile):
    d = daemon(procs, "--server-url", hostile.url, "--server-metrics", "--interval-s", "0.3", "--pause-s", "0",
               "--max-tokens", "5")
    m = wait_until(lambda: (m := scrape(d.url))['specwatch_probe_requests_total{outcome="stream_error",'
                                                 'target="spec"}'] >= 2 and m, what="hostile chunks counted")
    assert m["specwatch_server_metrics_rejected_values_total"] >= 3  # +Inf, NaN, 1e308
    wait_until(lambda: scrape(d.url)["specwatch_server_metrics_up"] == 1, what="the scrape itself works")
    series = [k for k in scrape(d.url) if k.startswith("specwatch_server_accept_length{")]
    assert len(series) <= 65  # dp_rank 0..63 and "other", not 2,000
    assert any('dp_rank="other"' in k for k in series)
    assert d.popen.poll() is None and "Traceback" not in d.output()


def test_bench_survives_a_number_for_text_and_a_redirect(hostile, tmp_path):
    out = tmp_path / "b.json"
    p = subprocess.run(specwatch_cmd("bench", "--server-url", hostile.url, "--num-runs", "2", "--warmup", "0",
                                     "--json", str(out)), capture_output=True, text=True, timeout=60)
    assert p.returncode == 1 and "Traceback" not in p.stderr
    assert {r["outcome"] for r in json.loads(out.read_text())["runs"]} == {"stream_error"}
    assert "chunk text is not a string" in p.stdout
    p = subprocess.run(specwatch_cmd("bench", "--server-url", hostile.url, "--api", "chat", "--num-runs", "1",
                                     "--warmup", "0", "--json", str(out)), capture_output=True, text=True, timeout=60)
    run = json.loads(out.read_text())["runs"][0]
    assert run["outcome"] == "http_error" and run["status"] == 307 and "127.0.0.1:9" in run["error"]


@pytest.mark.parametrize("stdin", ["devnull", "file", "pipe"])
def test_log_stdin_whatever_it_is(procs, tmp_path, stdin):
    """A pipe is read on the loop; /dev/null and a regular file (which once aborted the process) by a thread."""
    lines = "[2026-04-01 09:20:30] Decode batch, #running-req: 1, accept len: 2.50, #queue-req: 0\n" * 5
    src = tmp_path / "in.log"
    src.write_text(lines)
    read_end, write_end = os.pipe()
    with open(os.devnull if stdin == "devnull" else src, "rb") as f:
        d = daemon(procs, "--server-url", f"http://127.0.0.1:{free_port()}", "--api", "sglang", "--log-stdin",
                   "--interval-s", "0.3", stdin=read_end if stdin == "pipe" else f.fileno())
    os.close(read_end)
    if stdin == "pipe":
        os.write(write_end, lines.encode())
    os.close(write_end)
    want = 0 if stdin == "devnull" else 5
    wait_until(lambda: scrape(d.url)['specwatch_log_lines_total{result="parsed"}'] == want and
               json.loads(http_get(d.url + "/api/summary")[1])["log"]["error"] == "stdin closed",
               what="stdin read to its end")
    assert d.popen.poll() is None


def test_from_start_on_a_400k_line_log_keeps_the_daemon_responsive(procs, tmp_path):
    log = tmp_path / "big.log"
    line = "[2026-04-01 09:20:30] Decode batch, #running-req: 1, #token: 345, accept len: 2.50, #queue-req: 0\n"
    log.write_text(line * 400_000)
    d = daemon(procs, "--server-url", f"http://127.0.0.1:{free_port()}", "--api", "sglang", "--log-file", str(log),
               "--from-start", "--interval-s", "0.5")
    pinger = Pinger(d.url)
    try:
        wait_until(lambda: scrape(d.url)['specwatch_log_lines_total{result="parsed"}'] == 400_000, timeout_s=120,
                   every_s=0.5, what="the whole backlog parsed")
    finally:
        pinger.stop()
    assert not pinger.failures and pinger.count > 10
    assert pinger.worst_healthz_s < 0.1, f"/healthz took {pinger.worst_healthz_s * 1000:.0f} ms during the backlog"


def test_hostile_log_values_and_thousands_of_dp_tags(procs, tmp_path):
    log = tmp_path / "hostile.log"
    log.write_text("")
    d = daemon(procs, "--server-url", f"http://127.0.0.1:{free_port()}", "--api", "sglang", "--log-file", str(log),
               "--interval-s", "0.3")
    with log.open("a") as f:
        for i in range(3000):
            f.write(f"[2026-04-01 09:20:30 DP{i:04d}] Decode batch, #running-req: 1, accept len: 2.50, "
                    "#queue-req: 0\n")
        f.write("[2026-04-01 09:20:30] Decode batch, #running-req: 99999999999999999999999, accept len: 2.5\n")
        f.write("[2026-04-01 09:20:30] Decode batch, #running-req: 1, accept len: 2.5, gen throughput "
                "(token/s): inf\n")
        f.write("[2026-04-01 09:20:30] Decode batch [184467440737095516160], #running-req: 1, accept len: 2.5\n")
    m = wait_until(lambda: (m := scrape(d.url))['specwatch_log_lines_total{result="malformed"}'] == 3 and m,
                   what="the hostile lines counted as malformed")
    assert m['specwatch_log_lines_total{result="parsed"}'] == 3000
    assert len([k for k in m if k.startswith("specwatch_server_accept_length{")]) == 65  # 0..63 and "other"
    assert all(v != float("inf") for k, v in m.items() if k.startswith("specwatch_server_gen_throughput"))
    wait_until(lambda: http_get(d.url + "/api/summary")[0] == 200 and
               json.loads(http_get(d.url + "/api/summary")[1])["log"]["lines"]["malformed"] == 3,
               what="a summary that still serialises")


def test_full_disk_under_hlog_is_counted_not_fatal(procs):
    d = daemon(procs, "--server-url", f"http://127.0.0.1:{free_port()}", "--api", "sglang", "--hlog", "/dev/full",
               "--interval-s", "0.2")
    wait_until(lambda: scrape(d.url)["specwatch_hlog_write_errors_total"] >= 3, what="hlog errors counted")
    assert d.popen.poll() is None
    assert d.output().count("cannot write the interval log") == 1  # once a minute, not once a tick


@pytest.mark.parametrize(("how", "message"), [("toml", b"can't decode byte 0xff"),
                                              ("env", b"pause_s: expected float")])
def test_non_utf8_config_is_a_message_not_a_traceback(tmp_path, how, message):
    args = specwatch_cmd("run", "--server-url", "http://127.0.0.1:1")
    env = {os.fsencode(k): os.fsencode(v) for k, v in os.environ.items()}
    if how == "toml":
        cfg = tmp_path / "c.toml"
        cfg.write_bytes(b'pause_s = "\xff\xfe"\n')
        args += ["--config", str(cfg)]
    else:
        env[b"SPECWATCH_PAUSE_S"] = b"\xff\xfe"
    p = subprocess.run(args, capture_output=True, timeout=30, env=env)
    assert p.returncode == 2 and b"Traceback" not in p.stderr
    assert message in p.stderr


def gone(pid: int) -> bool:
    try:
        return "zombie" in Path(f"/proc/{pid}/status").read_text().lower()
    except FileNotFoundError:
        return True


def log_cmd_daemon(procs: Procs, tmp_path: Path, *flags: str):
    pidfile = tmp_path / "child.pid"
    d = daemon(procs, "--log-cmd", f"echo $$ > {pidfile}; exec sleep 600", "--interval-s", "0.3", *flags)
    wait_until(lambda: pidfile.exists() and pidfile.read_text().strip(), what="the log command started")
    return d, int(pidfile.read_text())


def test_sighup_drains_like_sigterm_and_the_log_command_goes_too(procs, tmp_path):
    d, child = log_cmd_daemon(procs, tmp_path, "--server-url", f"http://127.0.0.1:{free_port()}", "--api", "sglang")
    d.popen.send_signal(signal.SIGHUP)
    assert d.popen.wait(30) == 0 and "stopping: draining" in d.output()
    wait_until(lambda: gone(child), timeout_s=10, what="the log command gone with the daemon")


def test_a_second_signal_exits_at_once_and_takes_the_log_command_down(procs, tmp_path):
    sim = procs.sim("--profile", "seed", "--quiet")
    d, child = log_cmd_daemon(procs, tmp_path, "--server-url", sim.url, "--max-tokens", "5000",
                              "--drain-timeout-s", "60")
    wait_until(lambda: json.loads(http_get(sim.url + "/get_server_info")[1])["internal_states"][0]["load"] > 0,
               what="a probe in flight")
    d.popen.send_signal(signal.SIGTERM)
    wait_until(lambda: "stopping: draining" in d.output(), what="the first signal handled")
    d.popen.send_signal(signal.SIGHUP)
    assert d.popen.wait(10) == 130
    wait_until(lambda: gone(child), timeout_s=10, what="the log command killed with the daemon")

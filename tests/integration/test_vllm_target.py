"""The profiler treats vLLM as it treats SGLang, on the simulator's vLLM flavour: ``--api auto`` recognises
it and reads its draft length from ``/metrics``, the daemon reads its stats lines and scrapes its load, a
sweep's template carries vLLM's JSON with ``{k}`` inside and waits on ``/health``, and ``demo --engine
vllm`` comes up with a verdict (as ``demo`` does for SGLang)."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys

import pytest

from conftest import (
    Procs,
    free_port,
    free_port_block,
    http_get,
    http_json,
    scrape,
    sim_truth,
    specwatch_cmd,
    wait_until,
)

pytestmark = pytest.mark.integration


def eagle3(k: int) -> tuple[str, ...]:
    return ("--engine", "vllm", "--speculative-config", json.dumps({"method": "eagle3", "num_speculative_tokens": k}))


def test_bench_recognises_vllm_and_its_draft_length(procs, tmp_path):
    sim = procs.sim("--profile", "fast", *eagle3(4), "--seed", "1")
    out = tmp_path / "b.json"
    p = subprocess.run(specwatch_cmd("bench", "--server-url", sim.url, "--max-tokens", "64", "--num-runs", "4",
                                     "--warmup", "0", "--json", str(out)), capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    doc = json.loads(out.read_text())
    assert doc["api"] == "completions" and doc["server_info"] == {"engine": "vllm", "num_speculative_tokens": 4,
                                                                   "version": "0.33.0"}
    truth = sim_truth(sim)["requests"]
    assert doc["results"]["accept_length_server_lifetime"] == pytest.approx(
        1 + sum(t["accepted_drafts"] for t in truth) / sum(t["verify_ct"] for t in truth))
    assert sum(r["output_tokens"] for r in doc["runs"]) == sum(t["completion_tokens"] for t in truth)
    plain = procs.sim("--profile", "fast", "--engine", "vllm", name="plain")
    p = subprocess.run(specwatch_cmd("bench", "--server-url", plain.url, "--max-tokens", "16", "--num-runs", "1",
                                     "--warmup", "0", "--json", str(out)), capture_output=True, text=True, timeout=60)
    assert json.loads(out.read_text())["server_info"]["num_speculative_tokens"] == 0


def test_daemon_reads_vllms_lines_and_scrapes_its_load(procs, tmp_path):
    log = tmp_path / "vllm.log"
    sim = procs.sim("--profile", "seed", *eagle3(3), "--log-file", str(log), "--quiet", "--seed", "2")
    port = free_port()
    d = procs.start(specwatch_cmd("run", "--listen", f"127.0.0.1:{port}", "--server-url", sim.url, "--log-file",
                                  str(log), "--server-metrics", "--interval-s", "0.5", "--max-tokens", "60",
                                  "--pause-s", "0"), "daemon")
    d.url = f"http://127.0.0.1:{port}"

    def ready():
        last = http_json(d.url + "/api/summary")["server"]["last"]
        return last if {"vllm_spec", "vllm_engine", "scrape"} <= last.keys() \
            and last["scrape"]["position_acceptance"] else None  # the first scrape has no interval yet

    last = wait_until(ready, timeout_s=30, what="log and scrape samples from the vLLM simulator")
    assert len(last["vllm_spec"]["position_acceptance"]) == 3
    assert last["scrape"]["running"] is not None and len(last["scrape"]["position_acceptance"]) == 3
    m = scrape(d.url)
    assert m['specwatch_server_running_requests{dp_rank="0",source="log"}'] in (0.0, 1.0)
    assert m["specwatch_server_metrics_up"] == 1.0
    assert m.get('specwatch_log_lines_total{result="malformed"}', 0) == 0


def test_sweep_templates_vllms_json_config_and_waits_on_health(tmp_path):
    port = free_port()
    # vLLM logs its stats every 10 s by default: a short run would end before its first SpecDecoding line
    sim = (f"VLLM_LOG_STATS_INTERVAL=1 {sys.executable} -m specwatch sim --engine vllm --profile seed "
           f"--cost-scale 0.25 --port {port} --load-seconds 1 --seed 1")
    launch = sim + " --speculative-config '{\"method\": \"eagle3\", \"num_speculative_tokens\": {k}}'"
    p = subprocess.run(specwatch_cmd("sweep", "--out", str(tmp_path / "out"), "--launch", launch, "--param", "k=2,5",
                                     "--baseline-launch", sim, "--server-url", f"http://127.0.0.1:{port}",
                                     "--max-tokens", "300", "--num-runs", "3", "--warmup", "0"),
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr
    doc = json.loads((tmp_path / "out" / "sweep.json").read_text())
    by = {c["label"]: c for c in doc["configurations"]}
    assert [c["status"] for c in doc["configurations"]] == ["ok"] * 3
    assert (by["k=2"]["steps"], by["k=5"]["steps"], by["baseline"]["steps"]) == (2, 5, 0)
    assert '"num_speculative_tokens": 5}' in by["k=5"]["command"]
    # the seed story, behind vLLM's surface: k=5 loses; k=2's +3% over plain decoding is within the noise of three
    # requests (the fewest a pick is crowned on: these three drew -0.6%, -6.1% to +4.9%), so either is the fastest,
    # and the pick is k=2 only where it beats plain decoding outside that noise
    pick = doc["picks"][0]
    outcome = next(c["outcome"] for c in doc["comparisons"] if c["label"] == "k=2")
    assert pick["fastest"] in ("k=2", "baseline")
    assert doc["winner"] == pick["pick"] == ("k=2" if outcome == "faster" else "baseline")
    assert by["k=5"]["log_accept_length"] == pytest.approx(2.1, abs=0.2)


def demo_ports() -> tuple[int, int]:
    """The demo's simulator port (it takes port+1 and port+2 too) and the daemon's, four free in a row: two
    free_port() picks could overlap (CI once timed out on a demo whose daemon never answered)."""
    first = free_port_block(4)
    return first, first + 3


def wait_for_demo(d, url: str) -> None:
    """The demo's daemon answers /healthz; a demo that exits first fails at once, with its output."""
    def up_or_exited() -> bool:
        return d.popen.poll() is not None or http_get(url + "/healthz", 1)[0] == 200

    try:
        wait_until(up_or_exited, timeout_s=60, what="the demo's daemon")
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{d.output()[-3000:]}") from None
    assert d.popen.poll() is None, f"the demo exited ({d.popen.returncode}) before its daemon answered:\n{d.output()}"


@pytest.mark.parametrize("engine", ["sglang", "vllm"])
def test_demo_comes_up_with_a_verdict(tmp_path, engine):
    ps = Procs(tmp_path)
    port, listen = demo_ports()
    d = ps.start(specwatch_cmd("demo", "--engine", engine, "--port", str(port), "--listen", f"127.0.0.1:{listen}",
                               "--view", "log", "--duration", "120"), "demo")
    url = f"http://127.0.0.1:{listen}"
    try:
        wait_for_demo(d, url)
        # 5 steps on the seed profile lose. The first verdict, at 3 probes, may read 0 (not shown below: the
        # interval still reaches 1; CI once) and turns to 1 as probes come: the demo must get there
        wait_until(lambda: scrape(url).get("specwatch_speculation_below_baseline") == 1.0, timeout_s=90,
                   what="the verdict: below the baseline")
        summary = http_json(url + "/api/summary")
        assert summary["server"]["last"]["vllm_spec" if engine == "vllm" else "sglang_decode"]["accept_length"]
        # the seed's 72 vs 90 tok/s, as the verdict reads it once below: over one idle minute the demo's verdict
        # moved 0.78-0.85 (its relative stderr 1-4%), and a CI run's first one read 0.864
        assert summary["verdict"]["speedup"] == pytest.approx(72 / 90, rel=0.12)
    finally:
        d.popen.send_signal(signal.SIGINT)  # one signal: the demo drains, stops its simulators and exits
        assert d.popen.wait(30) == 0
        ps.stop_all()
    # no simulator outlives the demo
    for sim_port in (port, port + 1):
        with pytest.raises(OSError):
            socket.create_connection(("127.0.0.1", sim_port), timeout=1).close()


def test_demo_interrupted_twice_still_stops_its_simulators(tmp_path):
    ps = Procs(tmp_path)
    port, listen = demo_ports()
    d = ps.start(specwatch_cmd("demo", "--engine", "vllm", "--port", str(port), "--listen", f"127.0.0.1:{listen}",
                               "--view", "log"), "demo")
    try:
        wait_for_demo(d, f"http://127.0.0.1:{listen}")
        d.popen.send_signal(signal.SIGINT)
        d.popen.send_signal(signal.SIGINT)  # the second: exit at once
        assert d.popen.wait(30) in (0, 130)
    finally:
        ps.stop_all()

    def closed(p: int) -> bool:
        try:
            socket.create_connection(("127.0.0.1", p), timeout=1).close()
        except OSError:
            return True
        return False

    wait_until(lambda: closed(port) and closed(port + 1), timeout_s=10, what="the simulators gone")

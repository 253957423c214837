"""Honesty checks against `specwatch sim` (real processes): an open loop far above what the simulator can take
trips `achieved_rate` (and `server_queueing`: requests wait in its queue) in the terminal and the JSON; one
prompt for every request trips `synthetic_prompts`; a clean closed loop trips none; a sweep's levels carry
theirs and sweep.json merges them."""

import json
import subprocess

import pytest

from conftest import specwatch_cmd

pytestmark = pytest.mark.integration
SPEC = ("--profile", "seed", "--speculative-algorithm", "EAGLE3", "--speculative-num-steps", "3",
        "--speculative-eagle-topk", "1")


def bench(url, tmp, *flags):
    out = tmp / "bench.json"
    p = subprocess.run(specwatch_cmd("bench", "--server-url", url, "--json", str(out), "--warmup", "0", *flags),
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    return {c["name"]: c for c in json.loads(out.read_text())["checks"]}, p.stdout


def test_an_open_loop_far_above_the_servers_pace_fails_achieved_rate(procs, tmp_path):
    # two requests at a time, each ~0.3 s: about 7 a second; 200 a second are offered
    sim = procs.sim(*SPEC, "--max-running-requests", "2", "--enable-metrics")
    checks, out = bench(sim.url, tmp_path, "--rate-per-s", "200", "--num-runs", "30", "--max-tokens", "24")
    rate = checks["achieved_rate"]
    assert rate["ok"] is False and rate["measured"] is True
    achieved, offered = (float(w) for w in rate["detail"].split()[1:5:3])
    assert offered > 100 and achieved < 0.25 * offered
    assert f"  CHECK FAILED:  achieved_rate: {rate['detail']}\n" in out
    queueing = checks["server_queueing"]  # from sglang:num_queue_reqs, sampled every half second
    assert queueing["ok"] is False and queueing["detail"].startswith("the server's median waiting requests")


def test_an_open_loop_the_server_keeps_up_with_passes_achieved_rate(procs, tmp_path):
    # 48 slots; 4 requests a second of ~0.2 s each. A request that arrives in a decode round waits for its end
    # (about 1 scrape in 10 sees one): 8 s of scrapes, so that a median of waiting requests over 0 is not chance
    sim = procs.sim(*SPEC, "--enable-metrics")
    checks, out = bench(sim.url, tmp_path, "--rate-per-s", "4", "--num-runs", "32", "--max-tokens", "16")
    rate = checks["achieved_rate"]
    assert rate["ok"] is True and rate["measured"] is True, out
    assert checks["server_queueing"]["ok"] is True, checks["server_queueing"]


def test_without_server_metrics_a_rising_ttft_shows_the_queue(procs, tmp_path):
    sim = procs.sim(*SPEC, "--max-running-requests", "2")
    checks, _ = bench(sim.url, tmp_path, "--rate-per-s", "200", "--num-runs", "30", "--max-tokens", "24")
    queueing = checks["server_queueing"]
    assert queueing["ok"] is False and queueing["detail"].startswith("median TTFT ")


def test_a_clean_closed_loop_fails_no_check(procs, tmp_path):
    sim = procs.sim(*SPEC, "--enable-metrics")
    checks, out = bench(sim.url, tmp_path, "--concurrency", "1", "--num-runs", "8", "--max-tokens", "64",
                        "--ignore-eos")
    assert [n for n, c in checks.items() if not c["ok"]] == [], out
    assert "CHECK FAILED" not in out
    assert checks["achieved_rate"]["measured"] is False  # a closed loop offers no rate
    assert checks["acceptance_identity"]["measured"] is True  # the simulator gives per-request histograms
    assert checks["output_length"]["detail"] == "0 of 8 request(s) ended short of max_tokens=64"
    assert checks["prefix_cache"]["detail"].startswith("0 of ")  # SGLang's meta_info.cached_tokens: 0
    assert checks["server_queueing"]["detail"].startswith("the server's median waiting requests 0 against ")


def test_one_prompt_for_every_request_fails_synthetic_prompts(procs, tmp_path):
    sim = procs.sim(*SPEC)
    prompts = tmp_path / "one.jsonl"
    prompts.write_text('{"id": "only", "text": "Tell me about the sea."}\n')
    checks, out = bench(sim.url, tmp_path, "--num-runs", "4", "--max-tokens", "8", "--prompts", str(prompts))
    assert checks["synthetic_prompts"]["ok"] is False
    assert "CHECK FAILED:  synthetic_prompts: one prompt for all 4 requests" in out


def test_a_sweep_level_carries_its_checks_and_sweep_json_merges_them(procs, tmp_path):
    sim = procs.sim(*SPEC)
    out = tmp_path / "out"
    p = subprocess.run(specwatch_cmd("sweep", "--out", str(out), "--targets", sim.url, "--max-tokens", "24",
                                     "--num-runs", "4", "--warmup", "0", "--concurrency", "1,2"),
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr
    doc = json.loads((out / "sweep.json").read_text())
    levels = doc["configurations"][0]["by_concurrency"]
    names = ["achieved_rate", "repeat_spread", "prefix_cache", "server_queueing", "acceptance_identity",
             "output_length", "synthetic_prompts"]
    assert {c: [k["name"] for k in lvl["checks"]] for c, lvl in levels.items()} == {"1": names, "2": names}
    merged = {c["name"]: c for c in doc["checks"]}
    assert list(merged) == names
    for name, c in merged.items():  # failed exactly where some level failed, naming it
        failed = [lvl for lvl in levels.values() for k in lvl["checks"] if k["name"] == name and not k["ok"]]
        assert c["ok"] is not bool(failed)
        assert not failed or " stream(s): " in c["detail"]
    assert "Checks over every level:" in p.stdout
    synthetic = {k["name"]: k for k in levels["1"]["checks"]}["synthetic_prompts"]
    assert synthetic["detail"] == "0 of 4 distinct prompts read as random tokens"  # the texts were checked


def start_daemon(procs, *flags):
    from conftest import free_port, http_get, wait_until
    port = free_port()
    d = procs.start(specwatch_cmd("run", "--listen", f"127.0.0.1:{port}", *flags), f"daemon-{port}")
    d.url = f"http://127.0.0.1:{port}"
    wait_until(lambda: http_get(d.url + "/healthz", 1)[0] == 200, what="daemon /healthz")
    return d


def checks_after(d):
    """The daemon's check gauges and /api/summary from the first tick whose probes decide synthetic_prompts
    (two or more; read twice, so the gauges are that tick's or a later one's)."""
    from conftest import http_json, scrape, wait_until

    def decided():
        got = http_json(d.url + "/api/summary")["checks"]
        return any(c["name"] == "synthetic_prompts" and c["measured"] for c in got)

    wait_until(decided, timeout_s=90, what="a tick with two probes in")
    m = scrape(d.url)
    summary = http_json(d.url + "/api/summary")
    gauges = {k.split('"')[1]: v for k, v in m.items() if k.startswith("specwatch_check_failed{")}
    return gauges, summary


def test_the_daemon_exports_a_gauge_per_check_and_one_prompt_trips_synthetic_prompts(procs, tmp_path):
    from conftest import http_get
    sim = procs.sim(*SPEC, "--cost-scale", "0.3")
    flags = ("--server-url", sim.url, "--interval-s", "1", "--max-tokens", "24", "--pause-s", "0",
             "--baseline-tps", "50")
    clean = start_daemon(procs, *flags)
    prompts = tmp_path / "one.jsonl"
    prompts.write_text('{"id": "only", "text": "Tell me about the sea."}\n')
    one = start_daemon(procs, *flags, "--prompts", str(prompts))
    gauges, summary = checks_after(clean)
    assert gauges == dict.fromkeys(gauges, 0.0) and len(gauges) == 7
    assert {c["name"]: c["ok"] for c in summary["checks"]}["output_length"] is True  # probes ask ignore_eos
    assert summary["verdict"]["unreliable"] == []
    gauges, summary = checks_after(one)
    assert {k: v for k, v in gauges.items() if v} == {"synthetic_prompts": 1.0}
    assert summary["verdict"]["unreliable"] == ["synthetic_prompts (tok/s and accept length)"]
    page = http_get(one.url + "/")[1].decode()
    assert '<li class="down">synthetic_prompts: one prompt for all ' in page
    assert "(UNRELIABLE: check synthetic_prompts (tok/s and accept length) failed)" in page

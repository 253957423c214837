"""`specwatch run` as a real process next to real `specwatch sim` processes: scraped values against the
simulator's truth, the verdict at 10 and 2 draft steps, promtool on a real scrape, lifecycle and bad input."""

import json
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

from conftest import Procs, free_port, http_get, http_json, scrape, sim_truth, specwatch_cmd, wait_until
from specwatch.server.logparse import parse_line
from specwatch.sim import model

pytestmark = pytest.mark.integration


def spec_flags(steps: int) -> tuple[str, ...]:
    return ("--profile", "seed", "--speculative-algorithm", "EAGLE3", "--speculative-num-steps", str(steps),
            "--speculative-eagle-topk", "1", "--decode-log-interval", "10")


def start_daemon(procs: Procs, *flags: str, name: str = "daemon"):
    port = free_port()
    d = procs.start(specwatch_cmd("run", "--listen", f"127.0.0.1:{port}", *flags), name)
    d.url = f"http://127.0.0.1:{port}"
    wait_until(lambda: http_get(d.url + "/healthz", 1)[0] == 200, what="daemon /healthz")
    return d


# the pair runs at half the seed's costs: twice the probes per second, every ratio (speedup, break-even,
# accept length) the same, tok/s twice the seed's; a 10-step round still costs 17.5 ms, plain decoding's 5.6 ms
COST = 0.5


def run_pair(procs: Procs, tmp: Path, steps: int):
    log = tmp / f"sglang-{steps}.log"
    spec = procs.sim(*spec_flags(steps), "--cost-scale", str(COST), "--log-file", str(log), "--quiet",
                     name=f"spec{steps}")
    base = procs.sim("--profile", "seed", "--cost-scale", str(COST), "--quiet", name="plain")
    d = start_daemon(procs, "--server-url", spec.url, "--baseline-url", base.url, "--log-file", str(log),
                     "--interval-s", "1", "--verdict-window-s", "300", "--max-tokens", "120", "--pause-s", "0",
                     "--min-requests", "4", "--hlog", str(tmp / "d.hlog"), name=f"daemon{steps}")
    return spec, base, d, log


@pytest.mark.serial  # a speed near the model's or the baseline's: not beside CPU-bound tests
@pytest.mark.parametrize(("steps", "below"), [(10, 1.0), (2, 0.0)])
def test_scraped_values_match_the_simulators_truth_and_the_verdict(procs, tmp_path, steps, below):
    spec, _base, d, log = run_pair(procs, tmp_path, steps)
    m = wait_until(lambda: (s := scrape(d.url)).get("specwatch_speculation_below_baseline") in (0.0, 1.0)
                   and s.get('specwatch_probe_requests_total{outcome="ok",target="spec"}', 0) >= 8 and s,
                   timeout_s=90, what="a verdict after 8 probes")
    assert m["specwatch_speculation_below_baseline"] == below
    summary = http_json(d.url + "/api/summary")
    truth = [r for r in sim_truth(spec)["requests"] if r["outcome"] == "finished"]
    cum = summary["windows"]["cumulative"]["spec"]
    n = cum["ok"]
    done = truth[:n]  # the daemon saw exactly the first n finished requests
    true_al = sum(t["completion_tokens"] - 1 for t in done) / sum(t["verify_ct"] for t in done)
    true_tps = sum(t["completion_tokens"] - 1 for t in done) / sum(
        (t["last_token_ns"] - t["first_token_ns"]) / 1e9 for t in done)
    assert cum["accept_length"] == pytest.approx(true_al, rel=0.03)
    assert cum["tokens_per_second"] == pytest.approx(true_tps, rel=0.03)
    # server accept length from the log: the gauge is the last decode line the simulator wrote
    last_decode = [v.sample for ln in log.read_text().splitlines() if (v := parse_line(ln)).sample
                   and v.sample.source == "sglang_decode" and v.sample.accept_length]
    wait_until(lambda: scrape(d.url)['specwatch_server_accept_length{dp_rank="0",source="log"}'] in
               {s.accept_length for s in last_decode[-3:]}, what="log gauge to catch up")
    lines = [ln for ln in log.read_text().splitlines() if "Decode batch" in ln]
    window = http_json(d.url + "/api/summary")["server"]["windows"]["5m"]
    seen = int(window["samples"])  # the decode lines the daemon had parsed at its last tick, in file order
    assert 0 < seen <= len(lines)
    true_interval = sum(parse_line(ln).sample.accept_length for ln in lines[:seen]) / seen
    assert window["accept_length"] == pytest.approx(true_interval, rel=0.01)
    # speedup is the ratio of the two windowed tok/s gauges, and it matches the model
    m = scrape(d.url)
    ratio = m['specwatch_probe_tokens_per_second{target="spec",window="5m"}'] / \
        m['specwatch_probe_tokens_per_second{target="baseline",window="5m"}']
    assert m["specwatch_speedup_ratio"] == pytest.approx(ratio, rel=1e-6)
    # against the model, given the acceptance the simulator actually drew: (accept length / cycle) / 90, at the
    # pair's cost scale (cycle x COST, 90 / COST)
    spec_cfg = model.SpecConfig.from_flags("EAGLE3", steps, 1, None)
    cycle_s = model.explain(model.PROFILES["seed"].with_overrides(cost_scale=COST), spec_cfg).cycle_ms / 1e3
    plain_tps = 90.0 / COST
    assert m["specwatch_speedup_ratio"] == pytest.approx(true_al / cycle_s / plain_tps, rel=0.03)
    assert m["specwatch_baseline_tokens_per_second"] == pytest.approx(plain_tps, rel=0.03)
    al = m['specwatch_probe_accept_length{target="spec",window="5m"}']
    assert m["specwatch_breakeven_accept_length"] == pytest.approx(
        al / m['specwatch_probe_tokens_per_second{target="spec",window="5m"}'] * plain_tps, rel=0.03)
    assert m['specwatch_target_up{target="spec"}'] == 1 and m["specwatch_log_source_up"] == 1
    assert m['specwatch_log_lines_total{result="parsed"}'] >= len(lines)
    assert m['specwatch_log_lines_total{result="malformed"}'] == 0
    assert http_get(d.url + "/readyz")[0] == 200
    # first SIGTERM drains and flushes the interval log, exit 0
    assert d.stop(signal.SIGTERM) == 0
    assert "Tag=spec.itl" in (tmp_path / "d.hlog").read_text()


def test_promtool_check_metrics_is_clean_on_a_real_scrape(procs, tmp_path, promtool):
    _, _, d, _ = run_pair(procs, tmp_path, 5)
    wait_until(lambda: scrape(d.url).get('specwatch_probe_requests_total{outcome="ok",target="spec"}', 0) >= 2,
               timeout_s=60, what="two probes")
    body = http_get(d.url + "/metrics")[1]
    p = subprocess.run([promtool, "check", "metrics"], input=body, capture_output=True, timeout=30)
    assert p.returncode == 0, p.stdout + p.stderr
    text = body.decode()
    assert not re.search(r"^specwatch_\w*:", text, re.M)  # no colons in our names


def test_target_down_at_start_then_up_and_log_file_that_appears_later(procs, tmp_path):
    port = free_port()
    log = tmp_path / "later.log"
    d = start_daemon(procs, "--server-url", f"http://127.0.0.1:{port}", "--log-file", str(log), "--interval-s",
                     "0.5", "--baseline-tps", "90", "--max-tokens", "20", "--pause-s", "0")
    m = wait_until(lambda: scrape(d.url), what="a scrape")
    assert m['specwatch_target_up{target="spec"}'] == 0 and m["specwatch_log_source_up"] == 0
    assert http_get(d.url + "/readyz")[0] == 503
    p = procs.start(specwatch_cmd("sim", "--port", str(port), "--log-file", str(log), "--quiet",
                                  "--decode-log-interval", "5", *spec_flags(3)[:-2]), "late-sim")
    wait_until(lambda: scrape(d.url)['specwatch_target_up{target="spec"}'] == 1, timeout_s=30,
               what="target up")
    wait_until(lambda: scrape(d.url)["specwatch_log_source_up"] == 1, what="log source up")
    wait_until(lambda: http_get(d.url + "/readyz")[0] == 200, timeout_s=30, what="ready")
    # the server dies: probes fail as connect errors, the daemon stays up
    p.stop()

    def down() -> bool:  # one scrape: the failed probes are counted as the tick that said the target is down
        m = scrape(d.url)
        return m['specwatch_probe_requests_total{outcome="connect_error",target="spec"}'] > 0 and \
            m['specwatch_target_up{target="spec"}'] == 0

    wait_until(down, timeout_s=20, what="connect errors counted and the target down")
    assert d.popen.poll() is None


def test_garbage_log_lines_are_counted_not_sampled(procs, tmp_path):
    log = tmp_path / "mixed.log"
    log.write_text("")
    d = start_daemon(procs, "--server-url", f"http://127.0.0.1:{free_port()}", "--api", "sglang", "--log-file",
                     str(log), "--interval-s", "0.5")
    wait_until(lambda: scrape(d.url)["specwatch_log_source_up"] == 1, what="log source up")
    golden = Path(__file__).resolve().parent.parent / "golden" / "logs"
    with log.open("ab") as f:
        f.write((golden / "malformed.log").read_bytes())
        f.write((golden / "foreign.log").read_bytes())
        f.write(b"\x00\x01binary\n" + b"x" * 70_000 + b"\n")
        f.write((golden / "sglang_0.5.9-0.5.23.log").read_bytes())
    malformed = len((golden / "malformed.log").read_text().splitlines())
    foreign = len((golden / "foreign.log").read_text().splitlines())

    def counted():
        m = scrape(d.url)
        done = m['specwatch_log_lines_total{result="parsed"}'] == 6
        return done and m['specwatch_log_lines_skipped_total{reason="too_long"}'] == 1 and m  # synced on the tick

    m = wait_until(counted, what="all lines counted")
    assert m['specwatch_log_lines_total{result="malformed"}'] == malformed
    assert m['specwatch_log_lines_total{result="ignored"}'] == foreign
    assert m['specwatch_log_lines_skipped_total{reason="binary"}'] == 1
    assert m['specwatch_log_lines_skipped_total{reason="too_long"}'] == 1
    assert m['specwatch_server_accept_length{dp_rank="1",source="log"}'] == 3.47
    assert m['specwatch_server_accept_length{dp_rank="0",source="log"}'] == 3.95


@pytest.mark.parametrize(("flags", "env", "message"), [
    (("--server-url", "http://x:1", "--concurrency", "-2"), {}, "command line: concurrency: must be > 0"),
    ((), {"SPECWATCH_BOGUS": "1"}, "specwatch: warning: ignoring SPECWATCH_BOGUS"),  # a warning, then the reason
    ((), {}, "server_url is required"),
])
def test_bad_config_stops_start_up_with_a_message(procs, flags, env, message):
    p = procs.start(specwatch_cmd("run", *flags), "badcfg", env=env)
    assert p.popen.wait(30) == 2
    assert message in p.output()


def test_second_signal_exits_at_once(procs, tmp_path):
    spec = procs.sim(*spec_flags(5), "--quiet")
    d = start_daemon(procs, "--server-url", spec.url, "--max-tokens", "2000", "--drain-timeout-s", "60")
    wait_until(lambda: sim_truth(spec)["counters"] or (len(spec.control) and
               http_json(spec.url + "/get_server_info")["internal_states"][0]["load"] > 0), what="a probe in flight")
    d.popen.send_signal(signal.SIGTERM)
    wait_until(lambda: "stopping: draining" in d.output(), what="the first signal handled")
    t0 = time.monotonic()
    d.popen.send_signal(signal.SIGTERM)
    assert d.popen.wait(10) == 130
    assert time.monotonic() - t0 < 5


def test_parse_log_command(tmp_path):
    golden = Path(__file__).resolve().parent.parent / "golden" / "logs"
    p = subprocess.run(specwatch_cmd("parse-log", "--json", str(golden / "sglang_0.5.9-0.5.23.log"),
                                     str(golden / "vllm_all_generations.log")), capture_output=True, text=True,
                       timeout=30)
    doc = json.loads(p.stdout)
    assert doc["lines"] == {"parsed": 15, "ignored": 0, "malformed": 0, "skipped": 0}
    assert doc["series"]["sglang_decode/dp1"]["accept_length"]["mean"] == 3.47
    vllm = doc["series"]["vllm_spec/dp0"]
    accepted = 6760 + 1853 + 1440 + 1100 + 2890 + 2604 + 7000 + 2800
    drafted = 12000 + 7500 + 27000 + 2000 + 6000 + 4000 + 10000 + 4000
    assert vllm["draft_acceptance_rate_weighted"] == pytest.approx(accepted / drafted)


@pytest.mark.parametrize(("metrics", "up"), [(True, 1.0), (False, 0.0)])
def test_server_metrics_scrape_reports_up(procs, metrics, up):
    sim = procs.sim(*spec_flags(3), "--quiet", *(("--enable-metrics",) if metrics else ()))
    d = start_daemon(procs, "--server-url", sim.url, "--server-metrics", "--interval-s", "0.3", "--max-tokens", "20",
                     "--pause-s", "0")
    wait_until(lambda: scrape(d.url)["specwatch_server_metrics_up"] == up, what=f"server metrics up = {up}")
    if metrics:
        wait_until(lambda: scrape(d.url).get('specwatch_server_samples_total{source="scrape"}', 0) > 0,
                   what="scrape samples")
    else:
        wait_until(lambda: "scraping the server's" in d.output() and "HTTP 404" in d.output(),
                   what="the failed scrape logged")
        assert d.output().count("scraping the server's") == 1  # rate-limited, not once per interval

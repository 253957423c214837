"""End to end with a real Prometheus (Debian's package) scraping a real `specwatch run` next to a real
`specwatch sim`: every dashboard query returns data, and SpeculationBelowBaseline fires at 10 draft steps
against a 90 tok/s baseline and stays inactive at 2.

The shipped rules are used as they are, except ``for:``, which ``shorten_for`` rewrites (1 s scrapes and
rule evaluations instead of the production 10 s / 5 m)."""

import json
import math
import re
import urllib.parse
from pathlib import Path

import pytest
import yaml
from test_deploy import RULES, load_build

from conftest import Procs, free_port, http_get, http_json, specwatch_cmd, wait_until

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]


def shorten_for(dst: Path, durations: dict[str, str]) -> Path:
    doc = yaml.safe_load(RULES.read_text())
    for group in doc["groups"]:
        for rule in group["rules"]:
            if rule.get("alert") in durations:
                rule["for"] = durations[rule["alert"]]
    dst.write_text(yaml.safe_dump(doc, sort_keys=False))
    return dst


def prom_query(base: str, expr: str) -> list:
    status, body = http_get(f"{base}/api/v1/query?query={urllib.parse.quote(expr)}")
    doc = json.loads(body)
    assert status == 200 and doc["status"] == "success", (expr, doc)
    return doc["data"]["result"]


def alerts(base: str, name: str) -> list[dict]:
    doc = json.loads(http_get(base + "/api/v1/alerts")[1])
    return [a for a in doc["data"]["alerts"] if a["labels"]["alertname"] == name]


def spec_flags(engine: str, steps: int) -> tuple[str, ...]:
    """The same EAGLE-3 configuration in each server's own flags."""
    if engine == "vllm":
        return ("--engine", "vllm", "--speculative-config",
                json.dumps({"method": "eagle3", "num_speculative_tokens": steps}))
    return ("--speculative-algorithm", "EAGLE3", "--speculative-num-steps", str(steps), "--speculative-eagle-topk",
            "1", "--decode-log-interval", "10")


def stack(procs: Procs, tmp: Path, steps: int, prometheus_bin: str, engine: str = "sglang",
          sim_out: list | None = None, cost_scale: float = 1.0):
    """``cost_scale`` runs the simulator that much faster or slower and scales with it the daemon's baseline
    (90 tok/s at 1) and its verdict window (30 s at 1, whole seconds, rounded up): at least the same probes per
    window, so at least the same statistics."""
    log = tmp / "server.log"
    sim = procs.sim("--profile", "seed", "--cost-scale", str(cost_scale), *spec_flags(engine, steps), "--log-file",
                    str(log), "--quiet", name=f"sim{steps}")
    if sim_out is not None:
        sim_out.append(sim)
    dport = free_port()
    procs.start(specwatch_cmd("run", "--server-url", sim.url, "--log-file", str(log), "--baseline-tps",
                              str(90 / cost_scale), "--listen", f"127.0.0.1:{dport}", "--interval-s", "1",
                              "--verdict-window-s", str(math.ceil(30 * cost_scale)),
                              "--max-tokens", "100", "--pause-s", "0", "--min-requests", "4"), f"daemon{steps}")
    rules = shorten_for(tmp / "rules.yml", {"SpeculationBelowBaseline": "3s", "SpeculationMisconfigured": "5s"})
    cfg = tmp / "prometheus.yml"
    cfg.write_text(yaml.safe_dump({
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(rules)],
        "scrape_configs": [{"job_name": "specwatch", "static_configs": [{"targets": [f"127.0.0.1:{dport}"]}]}],
    }))
    pport = free_port()
    prom = procs.start([prometheus_bin, f"--config.file={cfg}", f"--storage.tsdb.path={tmp / 'tsdb'}",
                 f"--web.listen-address=127.0.0.1:{pport}"], f"prometheus{steps}")
    base = f"http://127.0.0.1:{pport}"
    wait_until(lambda: http_get(base + "/-/ready", 1)[0] == 200, timeout_s=60, what="prometheus ready")
    wait_until(lambda: prom_query(base, 'up{job="specwatch"} == 1'), timeout_s=30, what="specwatch scraped")
    prom.url = f"http://127.0.0.1:{dport}"  # the daemon it scrapes
    return base, prom


# a speed near the model's (the alert's speedup within 8%): not beside CPU-bound tests. Among them, a clean-clone
# run read 0.728 against 0.673 on the vLLM flavour, +8.1%
@pytest.mark.serial
@pytest.mark.parametrize("engine", ["sglang", "vllm"])
def test_dashboards_return_data_and_the_alert_fires_at_10_steps(procs, tmp_path, prometheus_bin, engine):
    """The same dashboards and alerts, unchanged, on an SGLang and on a vLLM target."""
    base, _ = stack(procs, tmp_path, 10, prometheus_bin, engine)
    firing = wait_until(lambda: [a for a in alerts(base, "SpeculationBelowBaseline") if a["state"] == "firing"],
                        timeout_s=120, what="SpeculationBelowBaseline firing")
    assert float(firing[0]["value"]) == pytest.approx(60.6 / 90, rel=0.08)  # the speedup, as the alert shows it
    assert "slower than plain decoding" in firing[0]["annotations"]["summary"]
    build = load_build()
    empty = []
    for path in sorted((ROOT / "grafana" / "dashboards").glob("*.json")):
        for title, expr in build.exprs(json.loads(path.read_text())):
            q = build.substitute(expr, rate_interval="30s")
            if not wait_until(lambda q=q: prom_query(base, q) or None, timeout_s=40, what=f"data for {q}"):
                empty.append(f"{path.name}: {title}: {q}")
    assert empty == []
    # recording rules evaluate on real data too
    assert prom_query(base, "specwatch:probe_itl_seconds:p99_rate5m")


@pytest.mark.serial  # a speed near the model's or the baseline's: not beside CPU-bound tests
def test_the_alert_stays_inactive_at_2_steps(procs, tmp_path, prometheus_bin):
    base, prom = stack(procs, tmp_path, 2, prometheus_bin)
    wait_until(lambda: prom_query(base, "specwatch_speculation_below_baseline == 0"), timeout_s=120,
               what="a verdict of 0 in Prometheus")
    # keep watching for well past the shortened for: (3 s) while new probes arrive
    more_probes(base, 4, timeout_s=60)
    assert alerts(base, "SpeculationBelowBaseline") == []
    history = prom_query(base, "specwatch_speculation_below_baseline[5m]")[0]["values"]
    speedups = prom_query(base, "specwatch_speedup_ratio[5m]")[0]["values"]
    assert {v for _, v in history} - {"NaN"} == {"0"}, (history, speedups)
    speedup = float(prom_query(base, "specwatch_speedup_ratio")[0]["value"][1])
    assert speedup == pytest.approx(92.9 / 90, rel=0.06)
    # Prometheus going away does not affect the sidecar: it keeps probing and serving /metrics
    assert prom.stop() == 0
    daemon = prom.url
    before = _ok_probes(daemon)
    wait_until(lambda: _ok_probes(daemon) >= before + 2, timeout_s=30, what="probes continue without Prometheus")
    assert http_get(daemon + "/healthz")[0] == 200


def more_probes(base: str, n: int, timeout_s: float) -> None:
    """Wait until Prometheus has seen ``n`` more successful probes than now."""
    def ok() -> float:
        return float(prom_query(base, 'sum(specwatch_probe_requests_total{outcome="ok"})')[0]["value"][1])

    n0 = ok()
    wait_until(lambda: ok() >= n0 + n, timeout_s=timeout_s, what=f"{n} more probes")


def _ok_probes(daemon_url: str) -> float:
    text = http_get(daemon_url + "/metrics")[1].decode()
    return float(re.search(r'^specwatch_probe_requests_total\{outcome="ok",target="spec"\} (\S+)$', text,
                           re.M).group(1))


@pytest.mark.serial  # a speed near the model's or the baseline's: not beside CPU-bound tests
def test_misconfigured_is_quiet_at_the_best_step_count_and_fires_after_an_acceptance_collapse(procs, tmp_path,
                                                                                             prometheus_bin):
    """Seed at 2 steps: the advisor's best is the running configuration (gain exactly 1; while the first
    rounds are few it may name another step count, never with a gain that could fire), for well past the
    shortened ``for:``. Then the draft's acceptance collapses (``accept_scale`` 0.3: accept length 2.10 → 1.23):
    plain decoding is measured faster at this load, and SpeculationMisconfigured fires with the advisor's
    best step count (0) in its text."""
    sims: list = []
    # at a quarter of the seed's costs, with a quarter of the verdict window (8 s): a window holds at least the
    # same number of probes (about 16 after the collapse: 100 tokens at 54 tok/s take 1.9 s, 0.47 s here), so the
    # advisor's intervals are as wide as at full cost; tok/s are 4x the seed's, their ratios the same
    cost = 0.25
    base, _ = stack(procs, tmp_path, 2, prometheus_bin, sim_out=sims, cost_scale=cost)
    wait_until(lambda: prom_query(base, 'specwatch_advisor_best_steps{load_bucket="1"} == 2'), timeout_s=120,
               what="the advisor's best is the running 2 steps")
    # quiet for as long as at full cost (8 probes of ~1.15 s there: about twice the shortened for:), 4x the probes
    more_probes(base, int(8 / cost), timeout_s=90)
    assert alerts(base, "SpeculationMisconfigured") == []
    gains = prom_query(base, 'specwatch_advisor_predicted_gain_lower_ratio{load_bucket="1"}[5m]')[0]["values"]
    assert all(float(v) <= 1.05 for _, v in gains), gains
    # the last advice: the running 2 steps (gain exactly 1), or fewer steps that only tie it (winner's rule: a tie
    # goes to the fewer steps; CI once ended on 1 step at 0.96-1.04 of the running 2), never a claimed win
    # one query, so that the three come from the same scrape
    picked = prom_query(base, '{__name__=~"specwatch_advisor_(best_steps|predicted_gain_(lower|upper)_ratio)",'
                              'load_bucket="1"}')
    now = {r["metric"]["__name__"].removeprefix("specwatch_advisor_"): float(r["value"][1]) for r in picked}
    assert (now["best_steps"] == 2 and now["predicted_gain_lower_ratio"] == 1) or (
        now["best_steps"] < 2 and now["predicted_gain_lower_ratio"] <= 1 <= now["predicted_gain_upper_ratio"]), now
    # (a /control change states both scales: each applies to the profile as named, not to the running one)
    collapse = http_json(sims[0].control + "/control", {"accept_scale": 0.3, "cost_scale": cost})
    assert collapse["accept_length"] == pytest.approx(1.2305, abs=0.001)
    firing = wait_until(lambda: [a for a in alerts(base, "SpeculationMisconfigured") if a["state"] == "firing"],
                        timeout_s=180, what="SpeculationMisconfigured firing")
    assert firing[0]["labels"]["load_bucket"] == "1"
    assert "running 0 draft steps" in firing[0]["annotations"]["description"]
    # once the verdict window holds only collapsed rounds, the advice is the model's: plain decoding's 90 tok/s
    # over 2 steps' 1.23 tokens per 22.64 ms round (54.4 tok/s), each at the cost scale
    def settled() -> float | None:
        got = prom_query(base, 'specwatch_advisor_predicted_tokens_per_second{load_bucket="1",steps="2"}')
        v = float(got[0]["value"][1]) if got else None
        return v if v is not None and v == pytest.approx(1.2305 / (0.02264 * cost), rel=0.08) else None

    wait_until(settled, timeout_s=120, what="the advisor's 2-step prediction at the collapsed acceptance")
    gain = float(prom_query(base, 'specwatch_advisor_predicted_gain_ratio{load_bucket="1"}')[0]["value"][1])
    assert gain == pytest.approx(90 / (1.2305 / 0.02264), rel=0.1)

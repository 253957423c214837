"""A real Prometheus (Debian's package) scraping the real SGLang's ``/metrics`` and the daemon beside it, the
daemon comparing the speculative server with the plain one (A/B): every dashboard query returns data and the
shipped alert rules' expressions evaluate on it, as in a deployment (deploy/prometheus/prometheus.yml)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import yaml

from conftest import free_port, http_get, specwatch_cmd, wait_until

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "integration"))
from test_deploy import RULES, load_build  # noqa: E402
from test_prometheus_e2e import prom_query  # noqa: E402

pytestmark = pytest.mark.integration


def test_dashboards_and_rules_evaluate_on_the_real_sglang(sglang, procs, tmp_path, prometheus_bin):
    server, plain = sglang["ngram"], sglang["plain"]
    dport = free_port()
    procs.start(specwatch_cmd("run", "--server-url", server.url, "--baseline-url", plain.url, "--log-file",
                              str(server.log), "--server-metrics", "--listen", f"127.0.0.1:{dport}",
                              "--interval-s", "1", "--verdict-window-s", "30", "--max-tokens", "96", "--pause-s",
                              "0", "--min-requests", "4", "--temperature", "0"), "daemon")
    cfg = tmp_path / "prometheus.yml"
    sglang_target = server.url.removeprefix("http://")
    cfg.write_text(yaml.safe_dump({
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(RULES)],
        "scrape_configs": [{"job_name": "specwatch", "static_configs": [{"targets": [f"127.0.0.1:{dport}"]}]},
                           {"job_name": "sglang", "static_configs": [{"targets": [sglang_target]}]}],
    }))
    pport = free_port()
    procs.start([prometheus_bin, f"--config.file={cfg}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                 f"--web.listen-address=127.0.0.1:{pport}"], "prometheus")
    base = f"http://127.0.0.1:{pport}"
    wait_until(lambda: http_get(base + "/-/ready", 1)[0] == 200, timeout_s=60, what="prometheus ready")
    wait_until(lambda: len(prom_query(base, "up == 1")) == 2, timeout_s=30, what="the daemon and SGLang scraped")
    # the server's own series as Prometheus stores them: Prometheus 2.42 asks for OpenMetrics, in which SGLang's
    # prometheus_client writes sglang:spec_accept_length as sglang_spec_accept_length (the text format keeps the
    # colon); SGLang sets the gauge at its first decode log line, after ten verify rounds of the daemon's probes
    wait_until(lambda: prom_query(base, 'sglang_spec_accept_length{job="sglang"} > 1'), timeout_s=60,
               what="SGLang's accept length in Prometheus")
    assert prom_query(base, '{__name__="sglang:spec_accept_length"}') == []
    build = load_build()
    for path in sorted((ROOT / "grafana" / "dashboards").glob("*.json")):
        for title, expr in build.exprs(json.loads(path.read_text())):
            q = build.substitute(expr, rate_interval="30s")
            wait_until(lambda q=q: prom_query(base, q) or None, timeout_s=60, what=f"{path.name}: {title}: {q}")
    # every alert expression evaluates (an empty vector is a valid answer: not firing); the verdict alert's
    # input exists, so its expression is answered from real data, 0 or 1
    for group in yaml.safe_load(RULES.read_text())["groups"]:
        for rule in group["rules"]:
            prom_query(base, rule["expr"])
    verdict = prom_query(base, "specwatch_speculation_below_baseline")
    assert verdict and verdict[0]["value"][1] in ("0", "1")

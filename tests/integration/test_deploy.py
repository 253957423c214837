"""Static checks of everything in deploy/, grafana/ and the Dockerfile, with the real tools: promtool,
amtool, hadolint, kubernetes-validate; compose files cross-checked; metric names checked against what
specwatch exports."""

import argparse
import importlib.util
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from specwatch import config, options
from specwatch.export.prometheus import Exporter
from specwatch.sim import cli as sim_cli
from specwatch.sim import vllm_cli

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
RULES = DEPLOY / "prometheus" / "rules" / "specwatch.rules.yml"
METRIC_RE = re.compile(r"\b(specwatch_[a-zA-Z0-9_]+)")

pytestmark = pytest.mark.integration


def load_build():
    spec = importlib.util.spec_from_file_location("grafana_build", ROOT / "grafana" / "build.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def exported_names() -> set[str]:
    names = set()
    for fam in Exporter(("spec", "baseline"), (60, 300)).registry.collect():
        suffixes = {"counter": ["_total"], "histogram": ["_bucket", "_sum", "_count"],
                    "summary": ["", "_sum", "_count"], "gauge": [""]}[fam.type]
        names |= {fam.name + s for s in suffixes}
    return names


def rule_exprs() -> list[tuple[str, str]]:
    doc = yaml.safe_load(RULES.read_text())
    return [(r.get("alert") or r.get("record"), r["expr"]) for g in doc["groups"] for r in g["rules"]]


def dashboard_exprs() -> list[tuple[str, str]]:
    build = load_build()
    import json
    out = []
    for path in sorted((ROOT / "grafana" / "dashboards").glob("*.json")):
        out += [(f"{path.name}: {title}", e) for title, e in build.exprs(json.loads(path.read_text()))]
    return out


def unknown_metrics(exprs: list[tuple[str, str]]) -> list[str]:
    known = exported_names()
    return [f"{where}: {name}" for where, e in exprs for name in METRIC_RE.findall(e) if name not in known]


def test_committed_dashboards_match_the_generator():
    assert load_build().main(["--check"]) == 0


def test_every_metric_in_rules_and_dashboards_is_exported():
    exprs = rule_exprs() + dashboard_exprs()
    assert len(exprs) > 40
    assert unknown_metrics(exprs) == []
    # and the check itself catches a misspelt metric
    assert unknown_metrics([("x", "rate(specwatch_probe_request_total[5m])")]) == ["x: specwatch_probe_request_total"]


def test_dashboards_have_template_variables_and_panels_with_queries():
    import json
    for path in (ROOT / "grafana" / "dashboards").glob("*.json"):
        doc = json.loads(path.read_text())
        names = {v["name"] for v in doc["templating"]["list"]}
        assert {"datasource", "instance"} <= names, path.name
        for p in load_build().panels(doc):
            if p["type"] != "row":
                assert p.get("targets"), f"{path.name}: {p['title']} has no query"


def test_promtool_check_and_unit_test_rules(promtool):
    assert subprocess.run([promtool, "check", "rules", str(RULES)], capture_output=True).returncode == 0
    p = subprocess.run([promtool, "test", "rules", "specwatch.rules.test.yml"], cwd=RULES.parent,
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stdout + p.stderr
    p = subprocess.run([promtool, "check", "config", "--syntax-only", str(DEPLOY / "prometheus" / "prometheus.yml")],
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stdout + p.stderr


def test_every_alert_has_summary_description_runbook_and_the_runbook_exists():
    runbooks = (ROOT / "docs" / "runbooks.md").read_text()
    doc = yaml.safe_load(RULES.read_text())
    alerts = [r for g in doc["groups"] for r in g["rules"] if "alert" in r]
    assert {a["alert"] for a in alerts} == {"SpeculationBelowBaseline", "SpeculationLosingAtLoad",
                                           "SpeculationMisconfigured", "AcceptLengthDropped", "SpecwatchProbeFailing",
                                           "SpecwatchLogStale",
                                           "SpecwatchDown"}
    for a in alerts:
        assert {"summary", "description", "runbook_url"} <= set(a["annotations"]), a["alert"]
        anchor = a["annotations"]["runbook_url"].split("#")[1]
        assert f"## {a['alert']}" in runbooks and anchor == a["alert"].lower()


def test_alertmanager_config():
    amtool = shutil.which("amtool")
    if amtool is None:
        pytest.fail("amtool not found: install Debian's prometheus-alertmanager (bash .ci/run does)")
    p = subprocess.run([amtool, "check-config", str(DEPLOY / "alertmanager" / "alertmanager.yml")],
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stdout + p.stderr


def test_dockerfile_is_clean_under_hadolint():
    hadolint = Path(sys.executable).with_name("hadolint")
    p = subprocess.run([str(hadolint), str(ROOT / "Dockerfile")], capture_output=True, text=True)
    assert p.returncode == 0, p.stdout + p.stderr
    text = (ROOT / "Dockerfile").read_text()
    assert "USER 10001" in text and "HEALTHCHECK" in text and "/healthz" in text


@pytest.mark.parametrize("engine", ["", "-vllm"])
def test_kubernetes_manifests_validate_and_the_rule_crd_matches_the_rules_file(engine):
    kv = Path(sys.executable).with_name("kubernetes-validate")
    core = [str(DEPLOY / "k8s" / f"{n}{engine}.yaml") for n in ("deployment", "service")]
    p = subprocess.run([str(kv), "--strict", *core], capture_output=True, text=True)
    assert p.returncode == 0, p.stdout + p.stderr
    rule_crd = yaml.safe_load((DEPLOY / "k8s" / "prometheusrule.yaml").read_text())
    assert rule_crd["kind"] == "PrometheusRule" and rule_crd["spec"] == yaml.safe_load(RULES.read_text())
    pm = yaml.safe_load((DEPLOY / "k8s" / f"podmonitor{engine}.yaml").read_text())
    dep = yaml.safe_load((DEPLOY / "k8s" / f"deployment{engine}.yaml").read_text())
    svc = yaml.safe_load((DEPLOY / "k8s" / f"service{engine}.yaml").read_text())
    labels = dep["spec"]["template"]["metadata"]["labels"]
    assert pm["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert svc["spec"]["selector"].items() <= labels.items()
    ports = {p["name"] for c in dep["spec"]["template"]["spec"]["containers"] for p in c.get("ports", [])}
    assert {e["port"] for e in pm["spec"]["podMetricsEndpoints"]} <= ports
    assert {p["targetPort"] for p in svc["spec"]["ports"]} <= ports
    sidecar = next(c for c in dep["spec"]["template"]["spec"]["containers"] if c["name"] == "specwatch")
    assert sidecar["securityContext"]["readOnlyRootFilesystem"] is True
    check_run_args(sidecar["args"])
    server = next(c for c in dep["spec"]["template"]["spec"]["containers"] if c["name"] != "specwatch")
    server_port = next(p["containerPort"] for p in server["ports"] if p["name"] == "http")
    assert f"http://127.0.0.1:{server_port}" in sidecar["args"]
    # readiness on the endpoint the server has: SGLang's /health_generate, vLLM's /health
    assert server["readinessProbe"]["httpGet"]["path"] == ("/health" if engine else "/health_generate")


def check_run_args(args: list[str]) -> None:
    """The command a manifest gives specwatch must pass specwatch's own strict config validation."""
    if args[0] == "sim":
        engine, rest = sim_cli.pick_engine(args[1:])
        (vllm_cli.parse if engine == "vllm" else sim_cli.parse)(rest)
        return
    assert args[0] == "run"
    p = argparse.ArgumentParser()
    config.add_run_flags(p)
    config.read(p.parse_args(args[1:]), {})


@pytest.mark.parametrize("name", ["docker-compose.yml", "docker-compose.sim.yml", "docker-compose.vllm.yml",
                                  "docker-compose.vllm-sim.yml"])
def test_compose_files_cross_check(name):
    doc = yaml.safe_load((DEPLOY / name).read_text())
    services = doc["services"]
    for svc_name, svc in services.items():
        for vol in svc.get("volumes", []):
            src = vol.split(":")[0]
            if src.startswith("."):
                assert (DEPLOY / src).exists(), f"{name}: {svc_name} mounts missing {src}"
            else:
                assert src in doc["volumes"], f"{name}: {svc_name} uses undeclared volume {src}"
        if "build" in svc:
            assert (DEPLOY / svc["build"]["context"] / svc["build"]["dockerfile"]).exists()
            check_run_args([a.replace("${BASELINE_TPS:-90}", "90") for a in svc["command"]])
    # the sidecar's target and baseline are services of this file, on the ports they listen on
    cmd = services["specwatch"]["command"]
    server_host, server_port = cmd[cmd.index("--server-url") + 1].removeprefix("http://").split(":")
    assert server_host in services
    listen = {"specwatch": 9753, server_host: int(server_port)}
    # Prometheus (the config this file mounts) scrapes services that exist, on the ports they listen on
    mounts = dict(v.split(":")[:2][::-1] for v in services["prometheus"]["volumes"])
    prom = yaml.safe_load((DEPLOY / mounts["/etc/prometheus/prometheus.yml"]).read_text())
    for job in prom["scrape_configs"]:
        for target in job["static_configs"][0]["targets"]:
            host, port = target.split(":")
            assert host in services, f"{name}: prometheus scrapes unknown service {host}"
            assert int(port) == listen[host]
    am = prom["alerting"]["alertmanagers"][0]["static_configs"][0]["targets"][0].split(":")[0]
    assert am in services
    # the rule file Prometheus loads is the one mounted
    for rf in prom["rule_files"]:
        host_dir = mounts[str(Path(rf).parent)]
        assert (DEPLOY / host_dir / Path(rf).name).exists()
    # Grafana's dashboard provider reads where the dashboards are mounted
    provider = yaml.safe_load((ROOT / "grafana" / "provisioning" / "dashboards" / "specwatch.yml").read_text())
    gmounts = {v.split(":")[1]: v.split(":")[0] for v in services["grafana"]["volumes"]}
    assert (DEPLOY / gmounts[provider["providers"][0]["options"]["path"]]).resolve() == ROOT / "grafana" / "dashboards"
    # the specwatch sidecar and the server share the log volume
    spec_logs = [v for v in services["specwatch"]["volumes"] if v.endswith(":ro")]
    assert spec_logs and spec_logs[0].split(":")[0] in {v.split(":")[0] for v in services[server_host]["volumes"]}


def test_every_exported_metric_is_documented_in_the_readme():
    readme = (ROOT / "README.md").read_text()
    families = {f.name for f in Exporter(("spec",), (60,)).registry.collect()}
    documented = set(re.findall(r"`(specwatch_[a-z0-9_]+)`", readme))
    missing = {n for n in families if n not in documented and n + "_total" not in documented}
    assert missing == set()


def test_every_flag_of_bench_and_run_is_in_the_readme():
    from specwatch.commands import bench as bench_cmd

    readme = (ROOT / "README.md").read_text()
    parsers = []
    p = argparse.ArgumentParser()
    config.add_run_flags(p)
    parsers.append(("run", p))
    p = argparse.ArgumentParser()
    options.add_flags(p, bench_cmd.DEFAULTS)
    parsers.append(("bench", p))
    missing = [f"{name} {flag}" for name, parser in parsers for action in parser._actions
               for flag in action.option_strings if flag.startswith("--") and flag != "--help" and flag not in readme]
    assert missing == []

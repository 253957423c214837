"""Regenerate prometheusrule.yaml from deploy/prometheus/rules/specwatch.rules.yml (needs PyYAML)."""

from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
RULES = HERE.parent / "prometheus" / "rules" / "specwatch.rules.yml"
HEADER = ("# Generated from deploy/prometheus/rules/specwatch.rules.yml (tests/integration/test_deploy.py keeps\n"
          "# them identical): python3 deploy/k8s/sync_rules.py\n")


def render() -> str:
    doc = {"apiVersion": "monitoring.coreos.com/v1", "kind": "PrometheusRule",
           "metadata": {"name": "specwatch", "labels": {"app.kubernetes.io/name": "sglang", "role": "alert-rules"}},
           "spec": yaml.safe_load(RULES.read_text())}
    return HEADER + yaml.safe_dump(doc, sort_keys=False, width=110)


if __name__ == "__main__":
    (HERE / "prometheusrule.yaml").write_text(render())

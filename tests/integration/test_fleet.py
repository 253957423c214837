"""Fleets: two sidecars (one per replica) through a real Prometheus, every dashboard query aggregating them
correctly; and the shipped Indexed bench Job's own commands, run as its pods would, merged into one report.

Aggregated queries are recomputed here from the per-instance series Prometheus holds at the same instant:
``sum by`` from the per-instance values, ``histogram_quantile`` over summed buckets with Prometheus'
interpolation, means from summed sums and counts. Per-sidecar queries must keep the ``instance`` label, so
two replicas' series never collapse into one line."""

import json
import math
import os
import re
import subprocess
import sys
import time
import urllib.parse
from collections import defaultdict
from pathlib import Path

import pytest
import yaml
from test_deploy import DEPLOY, load_build

from conftest import Procs, free_port, http_get, specwatch_cmd, wait_until

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
SUM_BY = re.compile(r"^sum(?: by \(([^)]*)\))? ?\((.*)\)$")
QUANTILE = re.compile(r"^histogram_quantile\(([\d.]+), sum by \(([^)]*)\) \((.*)\)\)$")
RATIO = re.compile(r"^(sum by \([^)]*\) \(.*\)) / (sum by \([^)]*\) \(.*\))$")
COUNT = re.compile(r"^count\((.*)\)$")
NEEDS_SERVER_SIDE = r"specwatch_(server_|log_|speedup_by_load|speculation_crossover|advisor_(best|predicted))"
COUNT_ONES = re.compile(r"^count\((.*) == 1\) or vector\(0\)$")


def query(base: str, expr: str, at: float) -> list[dict]:
    status, body = http_get(f"{base}/api/v1/query?query={urllib.parse.quote(expr)}&time={at}")
    doc = json.loads(body)
    assert status == 200 and doc["status"] == "success", (expr, doc)
    return doc["data"]["result"]


def key(labels: dict, by: list[str]) -> tuple:
    return tuple((k, labels.get(k, "")) for k in sorted(by))


def summed(base: str, inner: str, by: list[str], at: float) -> dict[tuple, float]:
    out: dict[tuple, float] = defaultdict(float)
    for r in query(base, inner, at):
        out[key(r["metric"], by)] += float(r["value"][1])
    return dict(out)


def prom_quantile(q: float, buckets: list[tuple[float, float]]) -> float:
    """Prometheus' histogram_quantile over (le, cumulative count) pairs."""
    buckets = sorted(buckets)
    total = buckets[-1][1]
    if total == 0:
        return math.nan
    rank = q * total
    i = next(i for i, (_, c) in enumerate(buckets) if c >= rank)
    if math.isinf(buckets[i][0]):
        return buckets[-2][0]
    start, below = (buckets[i - 1][0], buckets[i - 1][1]) if i > 0 else (0.0, 0.0)
    end, count = buckets[i][0], buckets[i][1] - below
    return end if count == 0 else start + (end - start) * (rank - below) / count


def values(result: list[dict], by: list[str]) -> dict[tuple, float]:
    return {key(r["metric"], by): float(r["value"][1]) for r in result}


def check_aggregate(base: str, expr: str, at: float) -> bool:
    """Recompute an aggregating query from per-instance data; False if it is not an aggregating shape."""
    got = query(base, expr, at)
    if m := QUANTILE.match(expr):
        q, by, inner = float(m[1]), [b.strip() for b in m[2].split(",")], m[3]
        assert "instance" not in by
        groups: dict[tuple, list[tuple[float, float]]] = defaultdict(list)
        for k, v in summed(base, inner, by, at).items():
            le = dict(k)["le"]
            groups[tuple(x for x in k if x[0] != "le")].append((float(le), v))
        want = {k: prom_quantile(q, b) for k, b in groups.items()}
        have = {tuple(x for x in key(r["metric"], by) if x[0] != "le"): float(r["value"][1]) for r in got}
        assert have.keys() == {k for k, v in want.items() if not math.isnan(v)}, (expr, have, want)
        for k in have:
            assert have[k] == pytest.approx(want[k], rel=1e-9), (expr, k)
    elif m := RATIO.match(expr):
        num, den = (SUM_BY.match(part) for part in (m[1], m[2]))
        by = [b.strip() for b in (num[1] or "").split(",") if b.strip()]
        n, d = summed(base, num[2], by, at), summed(base, den[2], by, at)
        want = {k: n[k] / d[k] for k in n if d.get(k)}
        assert values(got, by) == pytest.approx(want, rel=1e-9), expr
    elif m := SUM_BY.match(expr):
        by = [b.strip() for b in (m[1] or "").split(",") if b.strip()]
        assert "instance" not in by
        assert values(got, by) == pytest.approx(summed(base, m[2], by, at), rel=1e-9, nan_ok=True), expr
    elif m := COUNT_ONES.match(expr):  # how many sidecars say 1 (NaN, unknown, is not 1)
        ones = sum(1 for r in query(base, m[1], at) if float(r["value"][1]) == 1.0)
        assert [float(r["value"][1]) for r in got] == [float(ones)], expr
    elif m := COUNT.match(expr):
        assert [float(r["value"][1]) for r in got] == [float(len(query(base, m[1], at)))], expr
    else:
        return False
    assert all("instance" not in r["metric"] for r in got), expr
    return True


def test_two_sidecars_aggregate_correctly_through_the_real_prometheus(procs: Procs, tmp_path, prometheus_bin):
    daemons = []
    for name, steps in (("a", "2"), ("b", "5")):  # two replicas, differently configured
        sim = procs.sim("--profile", "seed", "--speculative-algorithm", "EAGLE3", "--speculative-num-steps", steps,
                        "--speculative-eagle-topk", "1", name=f"sim-{name}")
        port = free_port()
        procs.start(specwatch_cmd("run", "--server-url", sim.url, "--baseline-tps", "90", "--listen",
                                  f"127.0.0.1:{port}", "--interval-s", "1", "--verdict-window-s", "30",
                                  "--max-tokens", "60", "--pause-s", "0", "--concurrency", "2", "--min-requests", "2"),
                    f"daemon-{name}")
        daemons.append(f"127.0.0.1:{port}")
    cfg = tmp_path / "prometheus.yml"
    cfg.write_text(yaml.safe_dump({"global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
                                   "scrape_configs": [{"job_name": "specwatch",
                                                       "static_configs": [{"targets": daemons}]}]}))
    pport = free_port()
    procs.start([prometheus_bin, f"--config.file={cfg}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                 f"--web.listen-address=127.0.0.1:{pport}"], "prometheus")
    base = f"http://127.0.0.1:{pport}"
    wait_until(lambda: http_get(base + "/-/ready", 1)[0] == 200, timeout_s=60, what="prometheus ready")
    ok = 'increase(specwatch_probe_requests_total{outcome="ok",target="spec"}[30s]) > 2'
    wait_until(lambda: len(query(base, ok, time.time())) == 2, timeout_s=120, what="both sidecars probing")
    wait_until(lambda: len(query(base, "specwatch_speedup_ratio", time.time())) == 2, timeout_s=60,
               what="both verdicts")
    at = time.time() - 1  # one instant for every query and its recomputation
    build = load_build()
    aggregated, per_instance = [], []
    for path in sorted((ROOT / "grafana" / "dashboards").glob("*.json")):
        for title, raw in build.exprs(json.loads(path.read_text())):
            expr = build.substitute(raw, rate_interval="30s")
            if check_aggregate(base, expr, at):
                aggregated.append(title)
                continue
            assert not re.match(r"^(sum|count|avg|max|min|histogram_quantile)\b", expr), f"unchecked: {expr}"
            got = query(base, expr, at)
            instances = {r["metric"].get("instance") for r in got}
            assert None not in instances, f"{title}: a per-sidecar query lost its instance label: {expr}"
            if got or not re.search(NEEDS_SERVER_SIDE, expr):  # these need a log or scrape, not configured here
                assert instances == set(daemons), f"{title}: {expr} has {instances}"  # both replicas' lines
            per_instance.append(title)
    assert {"Fleet TTFT p50 / p99", "Fleet Per-token ITL p50 / p99", "Sidecars where speculation loses",
            "Tokens per chunk p50 / p99", "TTFT heatmap"} <= set(aggregated)
    assert "Speedup vs baseline" in per_instance


def test_the_bench_job_manifest_validates_and_its_pods_commands_merge_into_one_report(procs: Procs, tmp_path):
    manifest = DEPLOY / "k8s" / "bench-job.yaml"
    kv = Path(sys.executable).with_name("kubernetes-validate")
    p = subprocess.run([str(kv), "--strict", str(manifest)], capture_output=True, text=True)
    assert p.returncode == 0, p.stdout + p.stderr
    docs = {d["metadata"]["name"]: d for d in yaml.safe_load_all(manifest.read_text())}
    bench_job, merge_job = docs["specwatch-bench"], docs["specwatch-bench-merge"]
    spec = bench_job["spec"]
    assert spec["completionMode"] == "Indexed" and spec["parallelism"] == spec["completions"]
    claim = docs["specwatch-bench-results"]["metadata"]["name"]
    pods = spec["completions"]
    bench_c = bench_job["spec"]["template"]["spec"]["containers"][0]
    merge_c = merge_job["spec"]["template"]["spec"]["containers"][0]
    for job in (bench_job, merge_job):
        assert job["spec"]["template"]["spec"]["volumes"][0]["persistentVolumeClaim"]["claimName"] == claim
    env = {e["name"]: e for e in bench_c["env"]}
    assert "job-completion-index" in env["INDEX"]["valueFrom"]["fieldRef"]["fieldPath"]
    assert {e["name"]: e["value"] for e in merge_c["env"]}["PODS"] == str(pods)

    # run the pods' own shell commands here: the shared volume is a directory, the Service the simulator
    sim = procs.sim("--profile", "fast", "--speculative-algorithm", "EAGLE3", "--speculative-num-steps", "3",
                    "--speculative-eagle-topk", "1")
    results = tmp_path / "results"
    results.mkdir()
    bin_dir = str(Path(sys.executable).parent)

    def shell(container: dict, extra: dict[str, str]) -> subprocess.Popen:
        script = container["args"][0].replace("/results", str(results))
        script = script.replace("--num-runs 200", "--num-runs 12").replace("--max-tokens 256", "--max-tokens 40")
        env = {**os.environ, "PATH": bin_dir + os.pathsep + os.environ["PATH"], **extra}
        return subprocess.Popen(["sh", "-c", script], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True)

    merger = shell(merge_c, {"PODS": str(pods)})  # waits for every pod's marker, as in the cluster
    benches = [shell(bench_c, {"SERVER_URL": sim.url, "INDEX": str(i)}) for i in range(pods)]
    for b in benches:
        _, err = b.communicate(timeout=300)
        assert b.returncode == 0, err
    out, err = merger.communicate(timeout=120)
    assert merger.returncode == 0, err
    merged = json.loads((results / "merged.json").read_text())
    parts = [json.loads((results / f"bench-{i}.json").read_text()) for i in range(pods)]
    assert merged["results"]["ok"] == sum(p["results"]["ok"] for p in parts) == pods * 12
    assert len(merged["runs"]) == pods * 12 and f"Report of {pods * (12 + 2)} records" in out  # with warm-ups
    assert (results / "merged.hlog").read_text().count("Tag=spec.itl") == 1

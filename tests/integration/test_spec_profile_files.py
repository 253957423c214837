"""``advise --speculation-profile`` on a sweep of the simulator writes Model-Optimizer's speculation_profile.json
from what the sweep measured, and the daemon's ``--advisor-prior`` reads it back as acceptance along the chain
(and stops at start, naming both formats, on a file that is neither)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from conftest import free_port, specwatch_cmd
from specwatch.daemon import read_prior

pytestmark = pytest.mark.integration


def test_advise_writes_the_profile_and_the_daemon_reads_it(tmp_path):
    port = free_port()
    sim = f"{sys.executable} -m specwatch sim --profile seed --cost-scale 0.2 --seed 1 --quiet --port {port}"
    out = tmp_path / "out"
    p = subprocess.run(specwatch_cmd(
        "sweep", "--out", str(out), "--launch", sim + " --speculative-algorithm EAGLE3 --speculative-num-steps {steps} "
        "--speculative-eagle-topk 1", "--param", "steps=1,3", "--baseline-launch", sim, "--server-url",
        f"http://127.0.0.1:{port}", "--max-tokens", "128", "--num-runs", "6", "--warmup", "1"),
        capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-2000:]
    path = out / "speculation_profile.json"
    adv = subprocess.run(specwatch_cmd("advise", "--from", str(out / "sweep.json"), "--speculation-profile", str(path)),
                         capture_output=True, text=True, timeout=60)
    assert adv.returncode == 0, adv.stderr
    prof = json.loads(path.read_text())
    sweep = {c["label"]: c for c in json.loads((out / "sweep.json").read_text())["configurations"]}
    one, three = sweep["steps=1"]["results"], sweep["steps=3"]["results"]
    # position 1 pooled over both configurations by verify rounds, positions 2 and 3 the 3-step one's own
    r1, r3 = one["verify_rounds"], three["verify_rounds"]
    pooled = (one["position_acceptance"][0] * r1 + three["position_acceptance"][0] * r3) / (r1 + r3)
    want = [pooled, *three["position_acceptance"][1:3]]
    assert prof["marginal_accept_rates"] == pytest.approx(want, abs=1e-6)
    assert prof["conditional_accept_rates"] == pytest.approx(
        [want[0], want[1] / want[0], want[2] / want[1]], abs=1e-5)
    assert (prof["schema_version"], prof["method"], prof["num_speculative_tokens"], prof["accept_length_model"]) == \
        ("1.0", "eagle3", 3, "chain_analytic")
    assert prof["mean_accept_length"] == pytest.approx(three["accept_length_client"], abs=1e-6)
    check = prof["validation"]["mean_consistency"]
    assert check["implied_mean_accept_length"] == pytest.approx(1 + sum(want), abs=1e-5)
    assert check["passed"] == (abs(1 + sum(want) - three["accept_length_client"]) <= 0.02)
    printed = next(ln for ln in adv.stdout.splitlines() if ln.startswith("Wrote "))
    assert f"1 + sum(marginal) = {check['implied_mean_accept_length']:.4f}" in printed
    # the daemon's --advisor-prior: acceptance along the chain, no cost shape
    prior = read_prior(str(path), 10)
    assert (prior.fit, prior.positions, prior.measured_steps) == (None, tuple(prof["marginal_accept_rates"]), 3)
    assert read_prior(str(out / "sweep.json"), 10).fit is not None
    run = subprocess.run(specwatch_cmd("run", "--server-url", "http://127.0.0.1:9", "--advisor-prior",
                                       str(out / "report.html")), capture_output=True, text=True, timeout=60)
    assert run.returncode == 2
    assert "expected a sweep.json written by specwatch sweep, or a speculation_profile.json" in run.stderr

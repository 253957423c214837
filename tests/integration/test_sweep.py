"""`specwatch sweep` launching real `specwatch sim` servers: the seed's table, the advisor, failures,
resuming, Ctrl-C and already-running targets."""

import json
import signal
import subprocess
import sys

import pytest

from conftest import free_port, specwatch_cmd, wait_until
from specwatch.sim import model

pytestmark = pytest.mark.integration
SIM = f"{sys.executable} -m specwatch sim --profile seed"
SEED_STORY = {"baseline": 90.0, "steps=2": 94.0, "steps=5": 71.0, "steps=10": 60.0}
# the story's servers run at a tenth of the seed's costs: every cost scales together, so each rate is the story's
# times 10 and their order, the accept lengths and the winner are the same; a round at one stream still costs
# 1.1 ms (plain) or more, which the simulator keeps pace with on its absolute deadlines (plain 900.5 tok/s for
# the story's 900; steps=2 +3.6%, +2.1% to +5.2%, as at a fifth of the costs, in half the time)
STORY_COST = 0.1
# RUNS_NOTE: each configuration's 24 requests after a warm-up. The 95% interval on steps=2's gain is mostly its
# requests' own acceptance draws: at 6 requests +2.7% (-0.3% to +5.7%) is a tie; at 12, +3.6% (+2.1% to +5.1%)
# both beside a distillation busy on both cores and quiet, yet a clean-clone CI run read a tie (baseline) there,
# so a shift of some 2% took one side (a first request right after its launch was measured then); at 24 after a
# warm-up +3.9% (+2.7% to +5.1%) in 106 s against 60 s


def sweep(tmp, *flags, timeout=600):
    p = subprocess.run(specwatch_cmd("sweep", "--out", str(tmp / "out"), *flags), capture_output=True, text=True,
                       timeout=timeout)
    doc = json.loads((tmp / "out" / "sweep.json").read_text()) if (tmp / "out" / "sweep.json").exists() else None
    return p, doc


@pytest.mark.serial  # a speed near the model's or the baseline's: not beside CPU-bound tests
def test_seed_sweep_reproduces_the_story_picks_two_steps_and_predicts_left_out_steps(tmp_path):
    port = free_port()
    sim = f"{SIM} --cost-scale {STORY_COST} --port {port}"
    launch = (f"{sim} --seed 1 --speculative-algorithm EAGLE3 --speculative-num-steps {{steps}} "
              f"--speculative-eagle-topk 1 --load-seconds 1")
    p, doc = sweep(tmp_path, "--launch", launch, "--param", "steps=1,2,3,5,10", "--baseline-launch", sim,
                   "--server-url", f"http://127.0.0.1:{port}", "--max-tokens", "500",
                   "--num-runs", "24", "--warmup", "1")  # see RUNS_NOTE
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr
    by = {c["label"]: c for c in doc["configurations"]}
    assert [c["status"] for c in doc["configurations"]] == ["ok"] * 6
    for name, tps in SEED_STORY.items():
        assert by[name]["results"]["overall_tokens_per_second"] == pytest.approx(tps / STORY_COST, rel=0.05), name
    assert doc["winner"] == "steps=2"
    assert by["steps=5"]["results"]["accept_length_client"] == pytest.approx(2.1, abs=0.15)
    assert by["steps=5"]["log_accept_length"] == pytest.approx(by["steps=5"]["results"]["accept_length_client"],
                                                               rel=0.05)
    assert "winner: steps=2" in p.stdout and "Still" not in p.stdout
    assert (tmp_path / "out" / "sweep.png").read_bytes()[:4] == b"\x89PNG"
    assert (tmp_path / "out" / "sweep.csv").read_text().count("\n") == 7
    # the advisor, from the saved results: steps left out of the sweep within 10% of the simulator's truth (at
    # the servers' cost scale)
    profile = model.PROFILES["seed"].with_overrides(cost_scale=STORY_COST)
    adv = subprocess.run(specwatch_cmd("advise", "--from", str(tmp_path / "out" / "sweep.json")), capture_output=True,
                         text=True, timeout=60)
    assert adv.returncode == 0, adv.stderr
    for s in (4, 6, 7, 8):
        truth = model.explain(profile, model.SpecConfig.from_flags("EAGLE3", s, 1, None))
        line = next(ln for ln in adv.stdout.splitlines() if ln.strip().startswith(f"steps {s:>2}:"))
        predicted = float(line.split(" tok/s")[0].split()[-1])
        assert predicted == pytest.approx(truth.tokens_per_second, rel=0.10), line
    assert "Best predicted: 2 steps" in adv.stdout


def test_failing_configurations_are_reported_and_the_sweep_goes_on_then_resumes(tmp_path):
    port = free_port()
    launch = (f"{SIM} --port {port} --speculative-algorithm EAGLE3 --speculative-num-steps {{steps}} "
              f"--load-seconds {{load}}")
    flags = ("--launch", launch, "--param", "steps=2,bad", "--param", "load=0,30", "--server-url",
             f"http://127.0.0.1:{port}", "--max-tokens", "20", "--num-runs", "3", "--warmup", "0",
             "--ready-timeout", "3", "--grace", "2")
    p, doc = sweep(tmp_path, *flags)
    status = {c["label"]: (c["status"], c.get("error", "")) for c in doc["configurations"]}
    assert status["steps=2,load=0"][0] == "ok"
    assert status["steps=2,load=30"][0] == "failed" and status["steps=2,load=30"][1].startswith("not ready after 3s")
    assert "Load weight begin" in status["steps=2,load=30"][1]  # the tail of its output
    err = status["steps=bad,load=0"][1]
    assert err.startswith("exited with status 2 before becoming ready") and "invalid int value: 'bad'" in err
    assert p.returncode == 0 and "winner: steps=2,load=0" in p.stdout
    # rerun: the finished configuration is skipped, the failed ones are tried again
    p2, doc2 = sweep(tmp_path, *flags)
    assert "=== steps=2,load=0 === (done earlier, skipped)" in p2.stdout
    assert [c["status"] for c in doc2["configurations"]] == ["ok", "failed", "failed", "failed"]


def test_unknown_param_in_template_fails_at_start(tmp_path):
    p, _ = sweep(tmp_path, "--launch", "server --steps {steps} --topk {topk}", "--param", "steps=1,2")
    assert p.returncode == 2
    assert "--launch names {topk}, which no --param defines (defined: steps)" in p.stderr


def test_ctrl_c_stops_the_current_server_and_keeps_finished_results(tmp_path):
    port = free_port()
    launch = f"{SIM} --port {port} --speculative-algorithm EAGLE3 --speculative-num-steps 2 --load-seconds {{load}}"
    proc = subprocess.Popen(specwatch_cmd("sweep", "--out", str(tmp_path / "out"), "--launch", launch, "--param",
                                          "load=0,120", "--server-url", f"http://127.0.0.1:{port}", "--max-tokens",
                                          "20", "--num-runs", "1", "--warmup", "0", "--grace", "5"),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    seen = []
    for line in proc.stdout:
        seen.append(line)
        if "=== load=120 ===" in line:
            break
    wait_until(lambda: (tmp_path / "out" / "logs" / "load=120.out").exists()
               and "Load weight begin" in (tmp_path / "out" / "logs" / "load=120.out").read_text(),
               what="the second server loading")
    proc.send_signal(signal.SIGINT)
    rest = proc.stdout.read()
    assert proc.wait(30) == 130, "".join(seen) + rest
    assert "interrupted" in rest
    doc = json.loads((tmp_path / "out" / "sweep.json").read_text())
    assert [c["label"] for c in doc["configurations"]] == ["load=0"]
    assert (tmp_path / "out" / "results" / "load=0.json").exists()
    out = subprocess.run(["pgrep", "-f", f"--port {port} "], capture_output=True, text=True)
    assert out.stdout.strip() == "", "the interrupted server is still running"


def test_targets_that_are_already_running(procs, tmp_path):
    spec = procs.sim("--profile", "seed", "--speculative-algorithm", "EAGLE3", "--speculative-num-steps", "2")
    base = procs.sim("--profile", "seed")
    p, doc = sweep(tmp_path, "--targets", f"{spec.url},{base.url}", "--max-tokens", "60", "--num-runs", "2",
                   "--warmup", "0")
    assert p.returncode == 0, p.stdout[-2000:]
    assert [c["label"] for c in doc["configurations"]] == [f"target={spec.url}", f"target={base.url}"]
    assert doc["configurations"][0]["steps"] == 2 and doc["configurations"][1]["steps"] == 0

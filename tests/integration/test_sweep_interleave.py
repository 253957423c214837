"""``sweep --targets --interleave``: `specwatch sim` servers already running, measured in alternating rounds and
compared with plain decoding paired round by round; a drift that slows every server alike between rounds (the
simulator's cost scale, through its control port) cancels in the paired interval and not in Welch's."""

import json
import subprocess
from itertools import groupby

import pytest

from conftest import http_json, sim_truth, specwatch_cmd
from specwatch import interleaved
from specwatch.analysis import comparisons
from specwatch.analysis.compare import margin
from specwatch.trial import SweepSpec

pytestmark = pytest.mark.integration


def test_rounds_alternate_between_targets_and_the_interval_is_paired(procs, tmp_path):
    spec = procs.sim("--profile", "seed", "--speculative-algorithm", "EAGLE3", "--speculative-num-steps", "2")
    base = procs.sim("--profile", "seed")
    p = subprocess.run(specwatch_cmd("sweep", "--out", str(tmp_path / "out"), "--targets", f"{spec.url},{base.url}",
                                     "--max-tokens", "60", "--num-runs", "6", "--warmup", "0", "--interleave", "3"),
                       capture_output=True, text=True, timeout=600)
    assert p.returncode in (0, 1), p.stdout[-3000:] + p.stderr
    doc = json.loads((tmp_path / "out" / "sweep.json").read_text())
    for cfg in doc["configurations"]:
        assert cfg["status"] == "ok"
        assert [r["round"] for r in cfg["runs"]] == [0, 0, 1, 1, 2, 2], cfg["label"]
    # the servers' own record of when each request arrived: the rounds alternate, the order rotated each round
    # (round 1: spec, base; round 2: base, spec; round 3: spec, base)
    arrivals = sorted([(r["arrival_ns"], "spec") for r in sim_truth(spec)["requests"]]
                      + [(r["arrival_ns"], "base") for r in sim_truth(base)["requests"]])
    measured = arrivals[-12:]  # readiness may have sent each a request first
    assert [(k, len(list(g))) for k, g in groupby(n for _, n in measured)] == \
        [("spec", 2), ("base", 4), ("spec", 4), ("base", 2)]
    assert "paired over 3 rounds" in p.stdout
    vs = {c["label"]: c for c in doc["comparisons"]}
    assert vs[f"target={spec.url}"]["rounds"] == 3 and vs[f"target={spec.url}"]["low"] is not None


DRIFT = [1.0, 2.5, 1.0, 2.0, 1.0]  # the machine's speed by round: every server's costs scaled alike


@pytest.mark.serial  # a speed near the model's or the baseline's: not beside CPU-bound tests
def test_drift_between_rounds_cancels_in_the_paired_margin(procs, tmp_path, monkeypatch, capsys):
    spec = procs.sim("--profile", "seed", "--speculative-algorithm", "EAGLE3", "--speculative-num-steps", "5",
                     "--speculative-eagle-topk", "1")
    base = procs.sim("--profile", "seed")
    real = interleaved.collect
    calls: list[str] = []

    async def drifting(one, **kw):  # at each round's start, the whole machine slows or recovers
        if len(calls) % 2 == 0:
            for s in (spec, base):
                http_json(s.control + "/control", {"cost_scale": DRIFT[len(calls) // 2]})
        calls.append(one.server_url)
        return await real(one, **kw)

    monkeypatch.setattr(interleaved, "collect", drifting)
    # five rounds of three requests: the t interval over the rounds (4 degrees of freedom) is narrow enough to
    # see the difference through the simulated acceptance's own spread from round to round
    sw = SweepSpec(targets=f"{spec.url},{base.url}", interleave=5, num_runs=15, warmup=0, max_tokens=60)
    todo = [(f"target={u}", {}, None, u) for u in (spec.url, base.url)]
    results = interleaved.run_interleaved(sw, sw.bench, todo)
    capsys.readouterr()
    assert calls == [spec.url, base.url, base.url, spec.url] * 2 + [spec.url, base.url]
    assert [r.status for r in results] == ["ok", "ok"] and [r.steps for r in results] == [5, 0]
    paired = comparisons.comparisons(results)[results[0].label, 1].margin
    welch = margin(results[0].per_request(1), results[1].per_request(1))
    assert paired is not None and paired.rounds == 5 and paired.low is not None and paired.high is not None
    assert welch is not None and welch.low is not None and welch.high is not None
    # five steps are slower than plain decoding on the seed profile (71 against 90 tok/s): the paired interval
    # says so through the drift, and is narrower than Welch's over the pooled requests, which the drift spreads
    # (three runs: -21.3% (-24.4..-18.1), -20.0% (-28.3..-11.6), -23.2% (-28.9..-17.5) paired; Welch's a tie
    # every time, -46.8..+3.7, -45.6..+7.1, -48.7..+0.2); three rounds of two were too few (t = 4.3, one run a tie)
    assert paired.high < 0, paired.text()
    assert paired.high - paired.low < welch.high - welch.low, (paired.text(), welch.text())

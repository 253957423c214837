"""Real EAGLE-3 on the CPU: the health check that lies, and the seed's tuning story replayed on a real server.

The head is the tier's distilled one (``eagle3_head.py``, cached beside the vLLM environment). Greedy
acceptance is deterministic run to run, so acceptance is asserted; tok/s is what the sweep measures and
the advisor predicts, never "speculation is faster"."""

from __future__ import annotations

import itertools
import json
import re
import subprocess
import time

import pytest
import vllm_env
from realserver import COMPARISONS, HERE, TIMINGS, launch, pinned, wait_ready

from conftest import specwatch_cmd

pytestmark = pytest.mark.integration
KS = (1, 2, 3, 5)
HELD_OUT = 3  # the advisor is fitted without it, then predicts it


def test_a_head_whose_aux_ids_do_not_fit_passes_health_and_fails_the_smoke_check(vllm_installed, tmp_path):
    head = tmp_path / "bad-head"
    subprocess.run([str(vllm_env.python()), str(HERE / "eagle3_head.py"), str(vllm_env.model_dir()), str(head),
                    "--random", "--no-aux-pin"], check=True, capture_output=True, timeout=600)
    cfg = json.dumps({"method": "eagle3", "model": str(head.resolve()), "num_speculative_tokens": 2})
    t0 = time.monotonic()
    server = launch(tmp_path, 0, "vllm-eagle3-bad-aux", ("--speculative-config", cfg))
    try:
        with pytest.raises(pytest.fail.Exception, match="answered /health but its first request failed"):
            wait_ready(server, "vllm-eagle3-bad-aux", t0)  # its /health is 200: only the request tells
        # two aux states (512 wide) reach an fc that expects three (768): the engine dies on the request. vLLM
        # 0.32 words it by the path the first request takes: a matmul's shapes, or a reshape of n tokens x 512
        out = server.output()
        reshaped = re.search(r"shape '\[-1, 768\]' is invalid for input of size (\d+)", out)
        assert re.search(r"512 vs 768|x512 and 768x", out) or (
            reshaped and int(reshaped[1]) % 512 == 0 and int(reshaped[1]) % 768 != 0), out[-3000:]
    finally:
        server.stop()
    TIMINGS["EAGLE-3 head with wrong aux ids, start to refusal (s)"] = time.monotonic() - t0


def test_the_seeds_story_replayed_on_real_eagle3(eagle3_ladder, plain_server, heldout_prompts, tmp_path):
    """``sweep`` over num_speculative_tokens 1, 2, 3, 5 and plain decoding, at 1 and 4 streams; then ``advise``
    fitted without k=3 predicts it: its accept length exactly (greedy acceptance is deterministic); its tok/s
    against the measurement is printed. The servers are the tier's (``sweep --targets``): the live advisor's
    test compares the same step counts, and starting each twice cost five vLLM starts here (150 s of the
    tier's 28 minutes); ``sweep --launch`` starting and stopping a real server per configuration is
    test_sglang_sweep's, and vLLM's command template and ``/health`` wait are tested on the simulator's vLLM
    flavour (tests/integration/test_vllm_target.py)."""
    urls = {"baseline": plain_server.url, **{f"k={k}": eagle3_ladder[k].url for k in KS}}
    out = tmp_path / "sweep"
    t0 = time.monotonic()
    p = subprocess.run(pinned(specwatch_cmd(
        "sweep", "--targets", ",".join(urls.values()), "--concurrency", "1,4", "--max-tokens", "96", "--num-runs",
        "12", "--warmup", "1", "--temperature", "0", "--prompts", str(heldout_prompts), "--out", str(out))),
        capture_output=True, text=True, timeout=1500)
    TIMINGS["EAGLE-3 sweep, 5 targets x 2 loads (s)"] = time.monotonic() - t0
    assert p.returncode == 0, p.stdout[-4000:] + p.stderr[-2000:]
    doc = json.loads((out / "sweep.json").read_text())
    labels = {f"target={url}": label for label, url in urls.items()}  # the sweep's label of each target
    by = {labels[c["label"]]: c for c in doc["configurations"]}
    assert sorted(by) == sorted(urls) and all(c["status"] == "ok" for c in by.values()), \
        {k: c["error"] for k, c in by.items()}
    assert [by[f"k={k}"]["steps"] for k in KS] == list(KS)  # the draft length from vLLM's own /metrics

    def al(k):
        return by[f"k={k}"]["results"]["accept_length_client"]

    def tps(label, c=1):
        return by[label]["by_concurrency"][str(c)]["results"]["decode_tokens_per_second"]

    lengths = [al(k) for k in KS]
    assert all(b > a for a, b in itertools.pairwise(lengths)), lengths  # grows with k
    assert al(3) >= 2.0
    assert re.search(r"^winner: \S+ at [\d.]+ tok/s", p.stdout, re.M), p.stdout[-3000:]
    assert "Cycle model:" in p.stdout and "draft" in p.stdout and "verify" in p.stdout
    # the advisor without k=3: its prediction for k=3 against what the sweep measured there
    reduced = dict(doc, configurations=[c for c in doc["configurations"] if c is not by[f"k={HELD_OUT}"]])
    (tmp_path / "without.json").write_text(json.dumps(reduced))
    a = subprocess.run(specwatch_cmd("advise", "--from", str(tmp_path / "without.json")), capture_output=True,
                       text=True, timeout=120)
    assert a.returncode == 0, a.stderr
    m = re.search(rf"steps\s+{HELD_OUT}: predicted ([\d.]+) tok/s \(accept length ([\d.]+), cycle ([\d.]+) ms\)",
                  a.stdout)
    assert m, a.stdout
    predicted, measured = float(m.group(1)), tps(f"k={HELD_OUT}")
    rows = [f"  {'config':<9}{'accept':>8}{'tok/s c=1':>11}{'vs plain':>9}{'tok/s c=4':>11}{'vs plain':>9}"]
    for label in ["baseline", *(f"k={k}" for k in KS)]:
        a1 = by[label]["results"]["accept_length_client"] or 1.0
        rows.append(f"  {label:<9}{a1:>8.2f}{tps(label):>11.1f}{tps(label) / tps('baseline'):>8.2f}x"
                    f"{tps(label, 4):>11.1f}{tps(label, 4) / tps('baseline', 4):>8.2f}x")
    COMPARISONS.extend(["EAGLE-3 sweep (greedy, 96 tokens, held-out code):", *rows,
                        f"  advisor without k={HELD_OUT}: predicts {predicted:.1f} tok/s, measured {measured:.1f} "
                        f"({100 * (predicted / measured - 1):+.1f}%)"])
    (HERE.parent.parent / "artifacts").mkdir(exist_ok=True)
    (HERE.parent.parent / "artifacts" / "eagle3-sweep.txt").write_text(p.stdout + "\n\n--- advise without k=3\n"
                                                                       + a.stdout)
    # the accept length of the k it never saw follows from the per-position rates of the others: deterministic
    assert float(m.group(2)) == pytest.approx(al(HELD_OUT), rel=0.02), (m.group(2), al(HELD_OUT))
    # tok/s is printed, not asserted: the sweep benches one configuration after another, and on 2 shared cores a
    # server's speed drifts over those minutes (CI runs of this comparison, when each configuration was started
    # in turn: +4.0%, +29.6%, -36.6%); the live advisor's test compares its predictions with servers measured
    # interleaved (test_vllm_live_advisor)

"""``specwatch sweep`` launching the real vLLM server per configuration: the template carries vLLM's JSON
``--speculative-config`` with a ``{k}`` inside it, readiness is vLLM's ``/health``, the draft length comes
from the server's own metrics, and the sweep's accept length is the server's own lines pooled."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys

import pytest
from realserver import COMPARISONS, HERE, TIMINGS
from vllm_truth import MEAN_RE

from conftest import free_port, specwatch_cmd

pytestmark = pytest.mark.integration


def test_sweep_launches_real_vllm_per_configuration(vllm_installed, tmp_path):
    port = free_port()
    serve = f"{shlex.quote(sys.executable)} {shlex.quote(str(HERE / 'serve_vllm.py'))} --port {port}"
    launch = serve + " -- --speculative-config '{\"method\": \"ngram\", \"num_speculative_tokens\": {k}}'"
    out = tmp_path / "sweep"
    p = subprocess.run(specwatch_cmd("sweep", "--launch", launch, "--param", "k=3", "--baseline-launch", serve,
                                     "--server-url", f"http://127.0.0.1:{port}", "--max-tokens", "128",
                                     "--num-runs", "4", "--warmup", "1", "--temperature", "0", "--ready-timeout-s",
                                     "300", "--concurrency", "1,4,16,32", "--out", str(out)),
                       capture_output=True, text=True, timeout=1200)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-2000:]
    (tmp_path / "sweep.stdout").write_text(p.stdout)
    doc = json.loads((out / "sweep.json").read_text())
    by = {c["label"]: c for c in doc["configurations"]}
    assert set(by) == {"baseline", "k=3"} and all(c["status"] == "ok" for c in by.values())
    assert (by["k=3"]["steps"], by["k=3"]["draft_tokens"]) == (3, 4)  # read from vLLM's /metrics
    assert by["baseline"]["steps"] == 0
    assert "num_speculative_tokens\": 3" in by["k=3"]["command"]
    # the sweep's accept length is the server's own lines of that run, weighted by drafted tokens
    log = (out / "logs" / "k=3.out").read_text(errors="replace")
    means = [float(m.group(1)) for m in MEAN_RE.finditer(log)]
    assert means and min(means) <= by["k=3"]["log_accept_length"] <= max(means)
    assert doc["winner"] == "k=3"  # greedy ngram on a looping model: ~2.5x plain decoding
    spec_tps = by["k=3"]["results"]["overall_tokens_per_second"]
    base_tps = by["baseline"]["results"]["overall_tokens_per_second"]
    assert spec_tps > 1.3 * base_tps
    TIMINGS["sweep, 2 launches x 4 loads (s)"] = by["k=3"]["finished"] - by["baseline"]["started"]
    COMPARISONS.append(f"sweep: k=3 {spec_tps:.0f} tok/s vs plain {base_tps:.0f} ({spec_tps / base_tps:.2f}x) at one "
                       f"stream, log accept length {by['k=3']['log_accept_length']:.2f}")
    # by load: per-stream decode tok/s at each concurrency, the crossover the sweep finds, the schedule
    for c in (1, 4, 16, 32):
        s_c = by["k=3"]["by_concurrency"][str(c)]["results"]["decode_tokens_per_second"]
        p_c = by["baseline"]["by_concurrency"][str(c)]["results"]["decode_tokens_per_second"]
        COMPARISONS.append(f"  concurrency {c:>2}: k=3 {s_c:7.1f} vs plain {p_c:7.1f} per-stream decode tok/s "
                           f"({s_c / p_c:.2f}x)")
    cross = next((ln.strip() for ln in p.stdout.splitlines() if ln.strip().startswith("k=3 crosses")), "")
    sched = next((ln.strip() for ln in p.stdout.splitlines() if "num_speculative_tokens_per_batch_size" in ln), "")
    assert cross and sched, p.stdout[-3000:]
    COMPARISONS.extend(["  " + cross, "  " + sched])
    assert (out / "baseline-curve.json").exists()
    first = by["k=3"]["by_concurrency"]["1"]["results"]["decode_tokens_per_second"] / \
        by["baseline"]["by_concurrency"]["1"]["results"]["decode_tokens_per_second"]
    assert first > 1.3  # speculation wins at one stream; where it stops winning is the sweep's finding

"""``specwatch sweep`` over concurrency against the real vLLM servers: the draft length comes from the
server's own metrics, and the sweep reports per-load winners, the crossover and the schedule."""

from __future__ import annotations

import json
import subprocess
import time

import pytest
from realserver import COMPARISONS, TIMINGS

from conftest import specwatch_cmd

pytestmark = pytest.mark.integration


def test_sweep_over_concurrency_against_the_real_servers(spec_server, plain_server, tmp_path):
    """``sweep --targets`` (the servers already run: launching per configuration, vLLM's JSON template with
    ``{k}`` and the ``/health`` wait are tested on the simulator's vLLM flavour, where they cost no minute per
    start) at 1, 4, 16 and 32 streams: per-load winners, the crossover, the schedule, the baseline curve."""
    out = tmp_path / "sweep"
    t0 = time.monotonic()
    p = subprocess.run(specwatch_cmd("sweep", "--targets", f"{spec_server.url},{plain_server.url}", "--max-tokens",
                                     "128", "--num-runs", "4", "--warmup", "1", "--temperature", "0",
                                     "--concurrency", "1,4,16,32", "--out", str(out)),
                       capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-2000:]
    TIMINGS["sweep, 2 targets x 4 loads (s)"] = time.monotonic() - t0
    doc = json.loads((out / "sweep.json").read_text())
    spec = next(c for c in doc["configurations"] if spec_server.url in c["label"])
    plain = next(c for c in doc["configurations"] if plain_server.url in c["label"])
    assert spec["status"] == plain["status"] == "ok"
    assert (spec["steps"], spec["draft_tokens"], plain["steps"]) == (3, 4, 0)  # read from vLLM's /metrics
    rows = []
    for c in (1, 4, 16, 32):
        s_c = spec["by_concurrency"][str(c)]["results"]["decode_tokens_per_second"]
        p_c = plain["by_concurrency"][str(c)]["results"]["decode_tokens_per_second"]
        rows.append(f"  concurrency {c:>2}: ngram k=3 {s_c:7.1f} vs plain {p_c:7.1f} per-stream decode tok/s "
                    f"({s_c / p_c:.2f}x)")
    cross = next((ln.strip() for ln in p.stdout.splitlines() if " crosses plain decoding " in ln), "")
    sched = next((ln.strip() for ln in p.stdout.splitlines() if "num_speculative_tokens_per_batch_size" in ln), "")
    assert cross and sched, p.stdout[-3000:]
    COMPARISONS.extend(["sweep --targets, by load:", *rows, "  " + cross, "  " + sched])
    curve = json.loads((out / "baseline-curve.json").read_text())
    assert [pt["running"] for pt in curve["points"]] == [1, 4, 16, 32]
    first = spec["by_concurrency"]["1"]["results"]["decode_tokens_per_second"] / \
        plain["by_concurrency"]["1"]["results"]["decode_tokens_per_second"]
    assert first > 1.3  # speculation wins at one stream; where it stops winning is the sweep's finding

"""``specwatch tune`` on the real SGLang 0.5.23 with NGRAM: a lookup drafter, whose draft widths cannot be
predicted from one another (``engine_flags.chain_draft``), so tune climbs from the start to the best's
neighbours instead. Over plain decoding and NGRAM at 2, 3 and 4 draft tokens (the tier's NGRAM server at 4 and
plain server, two more started beside them), from 2 draft tokens; then ``sweep --targets`` over the same four:
tune's pick is the sweep's best, or measured by the sweep within 10% of it (a sequential sweep on two shared
cores, the vLLM tier's resolution), in at most three speculative launches."""

from __future__ import annotations

import json
import subprocess
import time

import pytest
from realserver import COMPARISONS, TIMINGS
from sglangserver import launch, wait_ready

from conftest import specwatch_cmd

pytestmark = pytest.mark.integration
TOLERANCE = 0.10


def test_tune_climbs_ngram_draft_tokens_to_the_sweeps_best(sglang, tmp_path):
    t0 = time.monotonic()
    extra = {d: launch(tmp_path, f"sglang-ngram-{d}", "--algorithm", "NGRAM", "--draft-tokens", str(d), k=d)
             for d in (2, 3)}
    try:
        for d, server in extra.items():
            wait_ready(server, f"sglang-ngram-{d}", t0)
        TIMINGS["start sglang ngram 2+3 side by side (s)"] = time.monotonic() - t0
        # SGLang NGRAM on a chain (breadth 1): k draft tokens are k steps (engine_flags.ngram_advice)
        urls = {0: sglang["plain"].url, 2: extra[2].url, 3: extra[3].url, 4: sglang["ngram"].url}
        targets = ",".join(urls[s] for s in sorted(urls))
        common = ("--max-tokens", "96", "--num-runs", "8", "--warmup", "1", "--temperature", "0")
        t0 = time.monotonic()
        p = subprocess.run(specwatch_cmd("tune", "--targets", targets, "--param", "steps=0,2,3,4", "--start",
                                         "steps=2", "--max-launches", "3", "--out", str(tmp_path / "tune"), *common),
                           capture_output=True, text=True, timeout=900)
        assert p.returncode == 0, p.stdout[-4000:] + p.stderr[-2000:]
        TIMINGS["sglang tune --targets of 4 (s)"] = time.monotonic() - t0
        t0 = time.monotonic()
        s = subprocess.run(specwatch_cmd("sweep", "--targets", targets, "--out", str(tmp_path / "sweep"), *common),
                           capture_output=True, text=True, timeout=900)
        assert s.returncode in (0, 1), s.stdout[-4000:] + s.stderr[-2000:]
        TIMINGS["sglang sweep --targets of 4, tune's truth (s)"] = time.monotonic() - t0
    finally:
        for server in extra.values():
            server.stop()
    doc = json.loads((tmp_path / "tune" / "tune.json").read_text())
    sweep = json.loads((tmp_path / "sweep" / "sweep.json").read_text())
    by_url = {c["label"].removeprefix("target="): c for c in sweep["configurations"] if c["status"] == "ok"}
    tps = {s: by_url[u]["results"]["decode_tokens_per_second"] for s, u in urls.items() if u in by_url}
    chosen, best = doc["best"]["1"]["steps"], max(tps, key=tps.__getitem__)
    COMPARISONS.extend([
        "tune on real SGLang NGRAM (greedy, from 2 draft tokens, over plain and 2, 3, 4) against a sweep of the same:",
        "  tune: " + "; ".join(f"{la['steps']} draft tokens {la['measured_tok_s'].get('1', 0):.1f}"
                               for la in doc["launches"]),
        "  sweep: " + "; ".join(f"{s} draft tokens {v:.1f}" for s, v in sorted(tps.items())),
        f"  tune's pick {chosen} draft tokens in {doc['speculative_launches']} launches; the sweep's best {best}"])
    assert all(not la["predicted_tok_s"] for la in doc["launches"])  # a lookup drafter: measured, not predicted
    assert any("a neighbour of" in la["why"] for la in doc["launches"]), doc["launches"]
    assert doc["speculative_launches"] <= 3, doc["launches"]
    assert tps[chosen] >= (1 - TOLERANCE) * tps[best], (chosen, best, tps, doc["launches"])
    if chosen:  # its flags name its draft tokens
        assert f"--speculative-algorithm NGRAM --speculative-num-draft-tokens {chosen}" in "\n".join(doc["flags"])

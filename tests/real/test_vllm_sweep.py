"""``specwatch sweep`` over concurrency against the real vLLM servers: the draft length comes from the
server's own metrics, and the sweep reports per-load winners, the crossover and the schedule."""

from __future__ import annotations

import json
import shlex
import subprocess
import time

import pytest
from realserver import COMPARISONS, TIMINGS, launch, wait_ready
from serve_vllm import speculative_config
from vllm_truth import metrics

from conftest import specwatch_cmd
from specwatch.analysis import engine_flags
from specwatch.analysis.engine_flags import ServerSetup

PRINTED: dict[str, str] = {}  # the sweep's printed vLLM flags, for the test that starts vLLM with them

pytestmark = pytest.mark.integration


def test_sweep_over_concurrency_against_the_real_servers(spec_server, plain_server, tmp_path):
    """``sweep --targets`` (the servers already run: launching per configuration, vLLM's JSON template with
    ``{k}`` and the ``/health`` wait are tested on the simulator's vLLM flavour, where they cost no minute per
    start) at 1, 4, 16 and 32 streams: per-load winners, the crossover, the schedule, the baseline curve. 256 tokens
    a request: at 128 a level at 16 streams lasted about a second, two of the load sampler's half-second reads,
    and a CI run read 1 running request there (the ramp's tail) where the server ran 16."""
    out = tmp_path / "sweep"
    t0 = time.monotonic()
    p = subprocess.run(specwatch_cmd("sweep", "--targets", f"{spec_server.url},{plain_server.url}", "--max-tokens",
                                     "256", "--num-runs", "4", "--warmup", "1", "--temperature", "0",
                                     "--concurrency", "1,4,16,32", "--out", str(out), "--speculative-config",
                                     json.dumps(speculative_config(3))),
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
    lines = [ln.strip() for ln in p.stdout.splitlines()]
    sched = next((ln for ln in lines if ln.startswith("Schedule (batch sizes")), "")
    head = next((i for i, ln in enumerate(lines) if ln.startswith("vLLM")), None)
    assert cross and sched and head is not None, p.stdout[-3000:]
    assert "(this server: 0.32.0+cpu)" in lines[head] or "no schedule needed" in lines[head], lines[head]
    if lines[head + 1].startswith("--speculative-config "):
        PRINTED["flags"] = lines[head + 1]
    COMPARISONS.append("  " + lines[head])
    COMPARISONS.extend(["sweep --targets, by load:", *rows, "  " + cross, "  " + sched])
    curve = json.loads((out / "baseline-curve.json").read_text())
    # measured on the server: vLLM's num_requests_running while each level ran (no log given: its /metrics)
    assert curve["load_measured"] and [pt["streams"] for pt in curve["points"]] == [1, 4, 16, 32]
    assert all(0.7 * n <= pt["running"] <= n for pt, n in zip(curve["points"], (1, 4, 16, 32), strict=True)), curve
    COMPARISONS.append("  baseline curve load, measured: " + ", ".join(
        f"{pt['streams']} streams -> {pt['running']:g} running" for pt in curve["points"]))
    first = spec["by_concurrency"]["1"]["results"]["decode_tokens_per_second"] / \
        plain["by_concurrency"]["1"]["results"]["decode_tokens_per_second"]
    assert first > 1.3  # speculation wins at one stream; where it stops winning is the sweep's finding


def test_the_printed_vllm_flags_start_vllm_and_its_counters_show_the_schedule(tmp_path):
    """vLLM started with the sweep's printed ``--speculative-config`` exactly as printed: it starts (a JSON
    holding only the schedule would not), and its own counters show each range's K: draft tokens per draft
    at one stream, none (or the range's K) where the schedule says so. Should the sweep have found no
    crossover on this run (the schedule is then one K and nothing is printed), the same generator's output
    for a schedule with a 0 range is started instead, so the engine's refusal or acceptance is still tested."""
    flags = PRINTED.get("flags")
    source = "the sweep's printed flags"
    if flags is None:
        source = "engine_flags for [[1, 1, 3], [2, 64, 0]] (the sweep found one K at every load)"
        flags = engine_flags.vllm_advice([(1, 1, 3), (2, 64, 0)],
                                         ServerSetup("vllm", "0.32.0+cpu", speculative_config(3))).flags
    words = shlex.split(flags)
    cfg = json.loads(words[1])
    assert cfg["method"] == "ngram" and cfg["num_speculative_tokens"] == max(k for _, _, k in
                                                                              cfg["num_speculative_tokens_per_batch_size"])
    t0 = time.monotonic()
    server = launch(tmp_path, 0, "vllm-scheduled", tuple(words))
    try:
        wait_ready(server, "vllm-scheduled", t0)
        ranges = cfg["num_speculative_tokens_per_batch_size"]
        rows = []
        for lo, hi, k in ranges[:3]:
            c = min(max(lo, 1 if lo == 1 else lo + 2), hi, 32)
            before = metrics(server.url)
            p = subprocess.run(specwatch_cmd("bench", "--server-url", server.url, "--concurrency", str(c), "--num-runs",
                                             str(max(3, 2 * c)), "--warmup", "0", "--max-tokens", "96", "--temperature",
                                             "0"), capture_output=True, text=True, timeout=600)
            assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
            after = metrics(server.url)

            def delta(name, before=before, after=after):
                return after.get(name, 0.0) - before.get(name, 0.0)

            drafts = delta("vllm:spec_decode_num_drafts_total")
            tokens = delta("vllm:spec_decode_num_draft_tokens_total")
            rows.append((c, k, drafts, tokens, delta("vllm:generation_tokens_total")))
            if k > 0:  # every draft is the range's K tokens
                assert drafts > 0 and k - 0.5 < tokens / drafts <= k + 0.01, rows
        first = rows[0][2] / rows[0][4]  # drafts per generated token where the first range drafts
        for _c, k, drafts, _tokens, gen in rows:
            if k == 0:  # no step at this batch size drafts: only the ramp, below the range, may
                assert drafts / gen < 0.2 * first, rows
        COMPARISONS.append(f"vLLM started with {source}: {flags}")
        COMPARISONS.extend(f"  {c} streams, scheduled k={k}: {d:.0f} drafts, {t:.0f} draft tokens, {g:.0f} generated"
                           for c, k, d, t, g in rows)
    finally:
        server.stop()

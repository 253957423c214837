"""bench --json read by a script written for `vllm bench serve`'s result file: the keys it reads give the TTFT,
TPOT, ITL and throughput specwatch's own report prints, and the numbers vLLM's definitions give for the
requests in the records file. Also: vLLM's traffic flags, and the progress that replaced the per-request lines."""

import json
import re

import numpy as np
import pytest
from test_bench import SPEC5, bench

from specwatch.probe.schedule import GammaPacer

pytestmark = pytest.mark.integration


def vllm_script(doc: dict) -> dict[str, float]:
    """What a typical reader of vLLM's JSON does: take the headline keys, as vLLM names them."""
    return {"ttft_median_ms": doc["median_ttft_ms"], "tpot_mean_ms": doc["mean_tpot_ms"],
            "tpot_median_ms": doc["median_tpot_ms"], "tpot_p99_ms": doc["p99_tpot_ms"],
            "itl_median_ms": doc["median_itl_ms"], "req_per_s": doc["request_throughput"],
            "tok_per_s": doc["output_throughput"], "completed": doc["completed"], "failed": doc["failed"]}


def printed(out: str) -> dict[str, float]:
    def num(pattern: str) -> float:
        m = re.search(pattern, out)
        assert m, (pattern, out)
        return float(m.group(1))
    return {"ttft_median_ms": num(r"TTFT: +p50 ([\d.]+) ms"), "tpot_mean_ms": num(r"TPOT: +mean ([\d.]+) ms"),
            "tpot_median_ms": num(r"TPOT: .*median ([\d.]+) ms"), "tpot_p99_ms": num(r"TPOT: .*p99 ([\d.]+) ms"),
            "itl_median_ms": num(r"Inter-chunk: +p50 ([\d.]+) ms"), "req_per_s": num(r"Requests/s: +([\d.]+) req/s"),
            "tok_per_s": num(r"Overall tok/s: ([\d.]+)"), "completed": num(r"Requests: +(\d+) completed"),
            "failed": num(r"completed, (\d+) failed")}


def vllm_definitions(records_path) -> dict[str, float]:
    """vLLM 0.32's calculate_metrics over the recorded requests, written out here independently."""
    lines = [json.loads(x) for x in records_path.read_text().splitlines()]
    reqs = [r for r in lines if r["kind"] == "request" and not r["warmup"]]
    ok = [r for r in reqs if r["outcome"] == "ok" and r["chunk_ns"]]
    ttft = [(r["chunk_ns"][0] - r["sent_ns"]) / 1e9 for r in ok]
    lat = [(r["chunk_ns"][-1] - r["sent_ns"]) / 1e9 for r in ok]
    tpot = [(la - t) / (r["output_tokens"] - 1) for r, la, t in zip(ok, lat, ttft, strict=True)
            if r["output_tokens"] > 1]
    itl = [(b - a) / 1e9 for r in ok for a, b in zip(r["chunk_ns"], r["chunk_ns"][1:], strict=False)]
    dur = (max(r["done_ns"] for r in reqs) - min(r["intended_ns"] for r in reqs)) / 1e9
    return {"ttft_median_ms": np.median(ttft) * 1e3, "tpot_mean_ms": np.mean(tpot) * 1e3,
            "tpot_median_ms": np.median(tpot) * 1e3, "tpot_p99_ms": np.percentile(tpot, 99) * 1e3,
            "itl_median_ms": np.median(itl) * 1e3, "req_per_s": len(ok) / dur,
            "tok_per_s": sum(r["output_tokens"] for r in ok) / dur, "completed": len(ok), "failed": len(reqs) - len(ok)}


def test_a_script_for_vllms_keys_reads_what_specwatch_reports(procs, tmp_path):
    sim = procs.sim(*SPEC5, "--seed", "5")
    records = tmp_path / "run.jsonl"
    doc, out = bench(sim.url, tmp_path, "--api", "completions", "--num-prompts", "9", "--max-concurrency", "3",
                     "--warmup", "1", "--max-tokens", "60", "--records", str(records))
    got = vllm_script(doc)
    assert got == pytest.approx(vllm_definitions(records), rel=1e-9)  # vLLM's definitions, exactly
    # specwatch's own report prints the same numbers (HDR quantiles within 0.1%, two decimals; the aggregate
    # tok/s runs from the first send, vLLM's duration from the first intended start: the same in a closed loop)
    shown = printed(out)
    assert shown == pytest.approx(got, rel=0.01, abs=0.006)
    assert got["completed"] == 9 and got["failed"] == 0
    assert (doc["num_prompts"], doc["request_rate"], doc["burstiness"], doc["max_concurrency"]) == (9, "inf", 1.0, 3)
    # per-chunk ITL (vLLM) against specwatch's per-token split: a chunk carries a whole verify round
    assert doc["mean_itl_ms"] / (doc["results"]["latency_seconds"]["itl"]["mean"] * 1e3) == \
        pytest.approx(doc["results"]["tokens_per_chunk"]["mean"], rel=0.05)
    # no per-request lines without --verbose; the progress says how far the run got
    assert "Run 1/" not in out and "  progress: 9/9 requests (0 failed)" in out


def test_vllms_gamma_arrivals_at_its_request_rate(procs, tmp_path):
    sim = procs.sim("--profile", "fast")
    records = tmp_path / "run.jsonl"
    doc, _ = bench(sim.url, tmp_path, "--num-prompts", "40", "--request-rate", "40", "--burstiness", "0.5",
                   "--warmup", "0", "--max-tokens", "4", "--records", str(records))
    assert (doc["request_rate"], doc["burstiness"], doc["completed"]) == (40.0, 0.5, 40)
    intended = sorted(json.loads(x)["intended_ns"] for x in records.read_text().splitlines()[1:])
    pacer = GammaPacer(40.0, 0.5, seed=0, total=40)  # the requests went out on the pacer's schedule, to the ns
    assert [t - intended[0] for t in intended] == [pacer.offset_ns(i) - pacer.offset_ns(0) for i in range(40)]
    assert pacer.offset_ns(39) == pytest.approx(1e9, abs=1)  # vLLM scales the 40 gaps to 40 / rate

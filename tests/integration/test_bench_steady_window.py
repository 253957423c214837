"""`specwatch bench` at 16 streams against `specwatch sim` (real processes): its steady window holds 16 requests
in flight, and its per-stream figures are what the simulator's oracle (`/explain`) says at 16 streams for the
same arrival pattern; at one stream every measured request is in the window."""

import json
import subprocess
from pathlib import Path

import pytest

from conftest import http_json, specwatch_cmd

pytestmark = [pytest.mark.integration, pytest.mark.serial]
SEED5 = ("--profile", "seed", "--speculative-algorithm", "EAGLE3", "--speculative-num-steps", "5",
         "--speculative-eagle-topk", "1", "--seed", "11")


def bench(url: str, tmp: Path, *flags: str) -> tuple[dict, str]:
    out = tmp / "bench.json"
    p = subprocess.run(specwatch_cmd("bench", "--server-url", url, "--json", str(out), *flags), capture_output=True,
                       text=True, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    return json.loads(out.read_text()), p.stdout


def test_a_bench_at_16_streams_measures_16_streams_as_the_oracle_does(procs, tmp_path):
    streams, requests, tokens = 16, 96, 200  # 96: /explain's own count at 16 streams (6 per stream)
    # half the seed's costs: a round of 16 still costs ~20 ms, so 2 cores keep pace with the wall clock
    sim = procs.sim(*SEED5, "--cost-scale", "0.5", "--enable-metrics")
    doc, out = bench(sim.url, tmp_path, "--concurrency", str(streams), "--num-runs", str(requests), "--warmup", "1",
                     "--max-tokens", str(tokens))
    w = doc["results"]["steady"]
    assert w["steady"] and w["reason"] == "" and w["streams"] == streams
    # the first wave but its last send is ramp-up, the last wave but its first end is drain
    assert (w["ramp_up"], w["drain"], w["requests"]) == (streams - 1, streams - 1, requests - 2 * (streams - 1))
    assert [r["phase"] for r in doc["runs"]].count("steady") == w["requests"]
    assert w["mean_in_flight"] == pytest.approx(streams, rel=0.03)
    assert w["server_running"] == pytest.approx(streams, abs=0.5)  # the median of its /metrics while busy
    explained = http_json(f"{sim.control}/explain?streams={streams}&output_tokens={tokens}&requests={requests}"
                          "&warmup=1&max_steps=0", timeout=120)["loads"][0]["served"]
    assert explained["mean_in_flight"] == pytest.approx(streams, rel=0.03)
    assert w["tokens_per_second"] == pytest.approx(explained["tokens_per_second"], rel=0.03)
    assert w["decode_tokens_per_second"] == pytest.approx(explained["decode_tokens_per_second"], rel=0.03)
    assert (f"Steady window: {w['window_s']:.1f} s with {w['mean_in_flight']:.1f} requests in flight on average "
            f"(ramp-up {streams - 1} request(s), drain {streams - 1} recorded apart; the server reported "
            f"{w['server_running']:g} running (median))") in out


def test_at_one_stream_every_measured_request_is_in_the_window(procs, tmp_path):
    sim = procs.sim(*SEED5, "--cost-scale", "0.25")
    doc, out = bench(sim.url, tmp_path, "--concurrency", "1", "--num-runs", "3", "--warmup", "1", "--max-tokens",
                     "40")
    w = doc["results"]["steady"]
    assert (w["steady"], w["requests"], w["ramp_up"], w["drain"]) == (True, 3, 0, 0)
    assert [r["phase"] for r in doc["runs"]] == ["steady"] * 3
    assert w["mean_in_flight"] == pytest.approx(1.0, rel=0.03)
    assert "ramp-up 0 request(s), drain 0 recorded apart" in out

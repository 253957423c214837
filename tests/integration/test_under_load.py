"""Exact under load, against the real simulator: --workers for bench and the daemon, token counts from a
final-only usage total (exact with a tokenizer, flagged within its bound without), and the event-loop lag
the daemon exports."""

import json
import signal
import subprocess
import time
from pathlib import Path

import pytest
from test_bench import bench
from test_daemon import spec_flags, start_daemon

from conftest import Procs, http_json, scrape, sim_truth, specwatch_cmd, wait_until

pytestmark = pytest.mark.integration


def finished(sim) -> list[dict]:
    return [r for r in sim_truth(sim)["requests"] if r["outcome"] == "finished"]


def test_bench_workers_split_the_schedule_and_merge_into_one_report(procs: Procs, tmp_path):
    sim = procs.sim(*spec_flags(3), "--seed", "3")
    records = tmp_path / "run.jsonl"
    doc, out = bench(sim.url, tmp_path, "--workers", "2", "--concurrency", "4", "--num-runs", "12", "--warmup", "2",
                     "--max-tokens", "60", "--records", str(records), "--verbose")
    res = doc["results"]
    truth = finished(sim)
    assert res["ok"] == 12 and len(doc["runs"]) == 12 and len(truth) == 12 + 2
    # every token the simulator generated for a measured request is in the merged report
    measured = [json.loads(line) for line in records.read_text().splitlines()[1:]]
    assert sum(1 for r in measured if r["warmup"]) == 2
    assert sum(r["output_tokens"] for r in measured if not r["warmup"]) == \
        sum(t["completion_tokens"] for t in truth) - sum(r["output_tokens"] for r in measured if r["warmup"])
    assert max(r["probe_concurrency"] for r in measured) <= 2  # each worker ran its own share of 4 streams
    lag = res["event_loop_lag"]
    assert lag["intervals"] >= 2 and lag["samples"] > 0  # both workers' monitors reported
    assert "Run 12/12" in out


def word_tokenizer(path: Path) -> str:
    from tokenizers import Tokenizer, models, pre_tokenizers

    from specwatch.sim.text import _WORDS

    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate([*_WORDS, "[UNK]"])}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.save(str(path))
    return str(path)


@pytest.mark.parametrize("api", ["completions", "chat"])
def test_four_token_chunks_without_per_chunk_usage(procs: Procs, tmp_path, api):
    """A server that ignores continuous_usage_stats and sends four tokens a chunk: with the model's tokenizer
    every chunk's count is the simulator's; without, every request is flagged and the bound holds."""
    sim = procs.sim("--profile", "fast", "--stream-interval", "4", "--ignore-continuous-usage-stats")
    flags = ("--api", api, "--num-runs", "4", "--warmup", "0", "--max-tokens", "41")
    exact, _ = bench(sim.url, tmp_path, *flags, "--tokenizer", word_tokenizer(tmp_path / "tokenizer.json"),
                     "--records", str(tmp_path / "exact.jsonl"))
    rec = [json.loads(line) for line in (tmp_path / "exact.jsonl").read_text().splitlines()[1:]]
    assert all(r["tokens_exact"] and r["chunk_tokens"] == [1] + [4] * 10 for r in rec), rec[0]["chunk_tokens"]
    sent = rec[0]["chunk_tokens"]  # what the server sent, counted exactly with its tokenizer
    assert exact["results"]["approximated_token_counts"] == 0
    assert exact["results"]["tokens_per_chunk"]["mean"] == 4.0

    approx, out = bench(sim.url, tmp_path, *flags, "--records", str(tmp_path / "approx.jsonl"))
    rec = [json.loads(line) for line in (tmp_path / "approx.jsonl").read_text().splitlines()[1:]]
    assert approx["results"]["approximated_token_counts"] == 4 and not any(r["tokens_exact"] for r in rec)
    bound = approx["results"]["tokens_per_chunk_bound"]
    assert bound == 41 - 11 + 1 and all(r["chunk_tokens_max"] == bound for r in rec)
    assert all(1 <= n <= bound for r in rec for n in r["chunk_tokens"])  # what we counted, and
    assert all(1 <= n <= bound for n in sent)  # what the server sent, both within the bound
    assert all(sum(r["chunk_tokens"]) == 41 and len(r["chunk_tokens"]) == 11 for r in rec)  # totals stay exact
    # the decode chunks' mean (the first chunk left out) can only be off by the first chunk's share
    assert (41 - bound) / 10 <= approx["results"]["tokens_per_chunk"]["mean"] <= 40 / 10
    assert "Approximated:" in out and f"1..{bound} tokens" in out


def test_one_token_per_chunk_is_exact_without_per_chunk_usage(procs: Procs, tmp_path):
    sim = procs.sim("--profile", "fast", "--ignore-continuous-usage-stats")
    doc, out = bench(sim.url, tmp_path, "--api", "completions", "--num-runs", "2", "--warmup", "0",
                     "--max-tokens", "20")
    assert doc["results"]["approximated_token_counts"] == 0 and "Approximated" not in out


def test_daemon_exports_its_loop_lag_and_runs_probe_workers(procs: Procs, tmp_path):
    sim = procs.sim(*spec_flags(2))
    d = start_daemon(procs, "--server-url", sim.url, "--workers", "2", "--concurrency", "2", "--interval-s", "1",
                     "--max-tokens", "40", "--pause-s", "0")
    wait_until(lambda: scrape(d.url).get('specwatch_probe_requests_total{outcome="ok",target="spec"}', 0) >= 6,
               timeout_s=60, what="probes from both workers")
    m = scrape(d.url)
    assert "specwatch_event_loop_lag_p99_seconds" in m and "specwatch_distorted_intervals_total" in m
    # a real lag: the daemon's process frozen for 300 ms (the fault's length, not a wait), its loop's timer late
    # by as much; the interval that holds it exports it as its largest sample (one sample of ~100 an interval:
    # its p99, and so "distorted", need not move), and the next intervals do not keep it
    d.popen.send_signal(signal.SIGSTOP)
    time.sleep(0.3)
    d.popen.send_signal(signal.SIGCONT)
    hit = wait_until(lambda: (x := scrape(d.url))["specwatch_event_loop_lag_seconds"] >= 0.25 and x, timeout_s=10,
                     every_s=0.05, what="the frozen interval's lag exported")
    assert hit["specwatch_event_loop_lag_p99_seconds"] <= hit["specwatch_event_loop_lag_seconds"] < 5
    wait_until(lambda: scrape(d.url)["specwatch_event_loop_lag_seconds"] < 0.25, timeout_s=10,
               what="the lag gauge back to the next interval's")
    summary = http_json(d.url + "/api/summary")
    assert summary["client_lag"]["samples"] > 0 and "distorted" in summary["client_lag"]
    ok = m['specwatch_probe_requests_total{outcome="ok",target="spec"}']
    assert ok <= len(finished(sim))  # every probe the daemon counted, the simulator served
    d.popen.send_signal(signal.SIGTERM)
    assert d.popen.wait(60) == 0, d.output()[-2000:]
    out = d.output()
    assert "probe workers ended" not in out and "Traceback" not in out


def test_bad_worker_and_tokenizer_values_stop_at_start(tmp_path):
    for flags, message in ((("--workers", "0"), "workers: must be > 0"),
                           (("--tokenizer", str(tmp_path / "missing.json")), "cannot load")):
        p = subprocess.run(specwatch_cmd("bench", "--server-url", "http://127.0.0.1:9", *flags), capture_output=True,
                           text=True, timeout=30)
        assert p.returncode == 2 and message in p.stderr, p.stderr

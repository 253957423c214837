"""vllm bench serve's result keys from specwatch's records: the numbers its calculate_metrics (vLLM 0.32) gives for
the same requests, worked out by hand here; and bench --json carries them flat at the top level."""

from __future__ import annotations

import json

import pytest

from specwatch import codec
from specwatch.analysis.bench_results import analyse
from specwatch.analysis.serve_metrics import serve_metrics
from specwatch.records import Outcome, RequestRecord, RunInfo, Schedule

MS = 1_000_000  # ns


def rec(intended_ms: float, sent_ms: float, chunks_ms: list[float], tokens: list[int], *, out: int | None = None,
        prompt: int = 10, outcome: Outcome = Outcome.OK, done_ms: float | None = None) -> RequestRecord:
    return RequestRecord(api="completions", target="spec", prompt_id="p", domain="chat", warmup=False,
                         intended_ns=int(intended_ms * MS), sent_ns=int(sent_ms * MS),
                         done_ns=int((done_ms if done_ms is not None else (chunks_ms or [sent_ms])[-1] + 1) * MS),
                         chunk_ns=[int(c * MS) for c in chunks_ms], chunk_tokens=tokens, tokens_exact=True,
                         prompt_tokens=prompt, output_tokens=sum(tokens) if out is None else out, outcome=outcome)


# request A: sent at 0, chunks at 100 (1 token), 120 (3 tokens), 150 (2 tokens): 6 tokens
#   ttft 100, e2el 150, tpot (150 - 100) / 5 = 10, itl (per chunk gap) 20, 30
# request B: intended 0, sent 10, chunks at 60 (1), 80 (1): 2 tokens, done at 90
#   ttft 50, e2el 70, tpot 20 / 1 = 20, itl 20
# request C: a connect error; D: ok but one token only (no TPOT)
A = rec(0, 0, [100, 120, 150], [1, 3, 2])
B = rec(0, 10, [60, 80], [1, 1], done_ms=90)
C = rec(5, 5, [], [], outcome=Outcome.CONNECT_ERROR, done_ms=6, prompt=0)
D = rec(200, 200, [230], [1], prompt=4, done_ms=240)


@pytest.mark.parametrize(("records", "expected"), [
    ([A, B], {"completed": 2, "failed": 0, "duration": 0.151, "total_input_tokens": 20, "total_output_tokens": 8,
              "mean_ttft_ms": 75.0, "median_ttft_ms": 75.0, "std_ttft_ms": 25.0, "p99_ttft_ms": 99.5,
              "mean_tpot_ms": 15.0, "median_tpot_ms": 15.0, "std_tpot_ms": 5.0, "p99_tpot_ms": 19.9,
              "mean_itl_ms": 70 / 3, "median_itl_ms": 20.0, "p99_itl_ms": 29.8,
              "mean_e2el_ms": 110.0, "median_e2el_ms": 110.0, "std_e2el_ms": 40.0, "p99_e2el_ms": 149.2}),
    ([A, B, C, D], {"completed": 3, "failed": 1, "duration": 0.240, "total_input_tokens": 24,
                    "total_output_tokens": 9, "mean_ttft_ms": 60.0, "median_ttft_ms": 50.0,
                    "mean_tpot_ms": 15.0,  # D has one token: no TPOT, as in vLLM
                    "mean_itl_ms": 70 / 3, "mean_e2el_ms": 250 / 3, "median_e2el_ms": 70.0}),
    ([C], {"completed": 0, "failed": 1, "total_output_tokens": 0, "mean_ttft_ms": 0.0, "p99_itl_ms": 0.0,
           "request_throughput": 0.0, "output_throughput": 0.0, "total_token_throughput": 0.0}),
])
def test_the_numbers_vllm_computes(records, expected):
    m = serve_metrics(records, Schedule(len(records), "inf", 1.0, 4))
    got = {k: getattr(m, k) for k in expected}
    assert got == pytest.approx(expected, rel=1e-9, abs=1e-9)
    if m.duration:
        assert m.request_throughput == pytest.approx(m.completed / m.duration)
        assert m.output_throughput == pytest.approx(m.total_output_tokens / m.duration)
        assert m.total_token_throughput == pytest.approx((m.total_input_tokens + m.total_output_tokens) / m.duration)


@pytest.mark.parametrize(("records", "total"), [
    ([A, rec(0, 0, [10], [1], prompt=0)], None),  # a server that gave no prompt count: not computable
    ([A], 16 / 0.151),
])
def test_total_token_throughput_only_when_every_prompt_was_counted(records, total):
    assert serve_metrics(records, Schedule()).total_token_throughput == (None if total is None else
                                                                          pytest.approx(total))


def test_a_missing_usage_count_is_one_token_as_in_vllm():
    m = serve_metrics([rec(0, 0, [10, 20], [0, 0], out=0)], Schedule())
    assert m.total_output_tokens == 1 and m.mean_tpot_ms == 0.0 and m.mean_itl_ms == 10.0


def test_bench_json_carries_vllms_keys_flat_at_the_top_and_reads_back(tmp_path):
    info = RunInfo("http://x:1", "completions", "m", schedule=Schedule(4, 2.5, 0.5, 8))
    doc = analyse(info, [A, B, C, D]).doc
    path = tmp_path / "bench.json"
    path.write_bytes(codec.dumps(doc))
    flat = json.loads(path.read_text())
    assert {k: flat[k] for k in ("num_prompts", "request_rate", "burstiness", "max_concurrency", "completed",
                                 "failed")} == {"num_prompts": 4, "request_rate": 2.5, "burstiness": 0.5,
                                                "max_concurrency": 8, "completed": 3, "failed": 1}
    assert flat["mean_ttft_ms"] == pytest.approx(60.0) and flat["results"]["ok"] == 3
    assert codec.load_as(type(doc), str(path)) == doc
    closed = analyse(RunInfo("http://x:1", "completions", "m", schedule=Schedule(4, "inf", 1.0, 2)), [A]).doc
    path.write_bytes(codec.dumps(closed))
    assert json.loads(path.read_text())["request_rate"] == "inf"  # vLLM's spelling
    assert codec.load_as(type(doc), str(path)).request_rate == "inf"

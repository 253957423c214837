"""specwatch's SGLang surface against the real SGLang 0.5.23: ``bench`` over the native streaming ``/generate``
(cumulative events, the final ``meta_info``) and over the OpenAI endpoints, each number checked against what the
server itself counted (its ``/metrics`` counters, its per-request ``meta_info``)."""

from __future__ import annotations

import contextlib

import pytest
from realserver import COMPARISONS, bench
from sglang_truth import metrics

from conftest import wait_until

pytestmark = pytest.mark.integration


def counted(url: str, before: dict[str, float], name: str, want: float) -> float:
    """The server's counter ``name`` moved by ``want`` since ``before``, or what it did move by after 10 s
    (SGLang counts a request when it finishes, a moment after the client read its last event)."""
    def delta() -> float:
        return metrics(url).get(name, 0.0) - before.get(name, 0.0)

    with contextlib.suppress(AssertionError):
        wait_until(lambda: delta() == want, timeout_s=10, every_s=0.2, what=f"{name} to move by {want}")
    return delta()


def settled(url: str) -> dict[str, float]:
    """The server's metrics once its counters stop moving: a request that finished just before (the start's smoke
    request) is counted a moment after its answer, and would otherwise land inside the next measurement."""
    last: dict[str, float] = {}

    def same() -> dict[str, float] | None:
        nonlocal last
        now = metrics(url)
        steady = now.get("sglang:generation_tokens_total") == last.get("sglang:generation_tokens_total", -1.0)
        last = now
        return now if steady else None

    return wait_until(same, timeout_s=10, every_s=0.5, what="SGLang's counters to settle")


def test_generate_counts_what_the_server_counted_and_a_chunk_is_a_verify_round(speculative_sglang, tmp_path):
    server = speculative_sglang
    before = settled(server.url)
    doc, records = bench(server.url, tmp_path, "--api", "sglang", "--max-tokens", "128", "--num-runs", "8",
                         "--warmup", "1")
    info = doc["server_info"]
    assert info["speculative_algorithm"] in ("NGRAM", "EAGLE3") and info["speculative_num_draft_tokens"] == 4
    assert all(r.ok and r.tokens_exact and r.spec is not None for r in records), [r.error for r in records]
    tokens = sum(r.output_tokens for r in records)
    assert counted(server.url, before, "sglang:generation_tokens_total", tokens) == tokens
    rounds = sum(r.spec.verify_ct for r in records)
    assert counted(server.url, before, "sglang:spec_verify_calls_total", rounds) == rounds
    # the server's per-request accept length is its completion_tokens / spec_verify_ct
    assert all(r.spec.accept_length == pytest.approx(r.output_tokens / r.spec.verify_ct, abs=1e-3) for r in records)
    client = doc["results"]["accept_length_client"]
    server_al = doc["results"]["accept_length_server_per_request"]
    assert client == pytest.approx(server_al, rel=0.02), (client, server_al)
    # one event per verify round after the prefill's first token (stream interval 1): a chunk's tokens are one
    # round's accepted drafts plus its bonus token; events the HTTP handler coalesced only merge rounds
    chunks = sum(len(r.chunk_tokens) - 1 for r in records)
    assert 0.9 * rounds <= chunks <= rounds, (chunks, rounds)
    # every token is in a chunk (the first chunk is the prefill's token, or more when the handler coalesced the
    # first verify round into it)
    assert all(sum(r.chunk_tokens) == r.output_tokens and r.chunk_tokens[0] >= 1 for r in records)
    name = server.log.stem
    COMPARISONS.append(f"bench {name} /generate: tokens {tokens} = sglang:generation_tokens_total; verify rounds "
                       f"{rounds} = sglang:spec_verify_calls_total; chunks {chunks}; accept length client "
                       f"{client:.3f} vs server per request {server_al:.3f}")


@pytest.mark.parametrize("api", ["completions", "chat"])
def test_openai_endpoints_count_what_the_server_counted(sglang, api, tmp_path):
    server = sglang["ngram"]
    before = settled(server.url)
    doc, records = bench(server.url, tmp_path, "--api", api, "--max-tokens", "96", "--num-runs", "6",
                         "--warmup", "1")
    assert all(r.ok for r in records), [r.error for r in records]
    assert all(r.tokens_exact for r in records)  # continuous usage: every chunk's count is the server's
    tokens = sum(r.output_tokens for r in records)
    assert counted(server.url, before, "sglang:generation_tokens_total", tokens) == tokens
    later = [n for r in records for n in r.chunk_tokens[1:]]
    assert sum(later) / len(later) > 1.5  # several tokens per chunk: a chunk is a verify round here too
    COMPARISONS.append(f"bench {server.log.stem} /v1/{api}: tokens {tokens} = sglang:generation_tokens_total; "
                       f"tokens per chunk {sum(later) / len(later):.2f}; accept length client "
                       f"{doc['results']['accept_length_client']}")


def test_detection_asks_server_info_and_leaves_no_deprecation_warning(sglang, tmp_path):
    """0.5.23 logs a deprecation warning on every call of /get_server_info: specwatch asks /server_info."""
    server = sglang["ngram"]
    n0 = len(server.output())
    bench(server.url, tmp_path, "--max-tokens", "16", "--num-runs", "1", "--warmup", "0")
    assert "Endpoint '/get_server_info' is deprecated" not in server.output()[n0:]
    assert "/server_info HTTP/1.1\" 200" in server.output()[n0:]

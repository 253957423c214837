"""Forced acceptance as the real SGLang tier's ground truth (issue 37 item 2): SGLang 0.5.23's
``SGLANG_SIMULATE_ACC_LEN`` on EAGLE-3 (the tier's head, 3 steps, topk 1, 4 draft tokens), which works on the
CPU as shipped (its non-CUDA path is plain torch).

With the default method (``match-expected``) each verify call draws its accept length as the floor or the
ceiling of the set value, the ceiling with probability equal to its fraction ``f``; at one stream one call is
one request's round, so over ``N`` rounds the mean accept length has standard error ``sqrt(f(1-f)/N)``.
``SGLANG_SIMULATE_ACC_TOKEN_MODE=real-draft-token`` keeps the draft chain's real tokens (the default, ``fixed``,
repeats one token id), so the text and the prompts stay real.

The client's count (``bench --api sglang``: completion tokens after the first over the per-request
``spec_verify_ct``) must lie within ``Z`` = 3.5 standard errors of the set value, less at most 3 tokens per
request that ``max_tokens`` cuts from a last round (the only bias the count has)."""

from __future__ import annotations

import math
import time
from collections.abc import Iterator

import pytest
from realserver import COMPARISONS, TIMINGS, RealServer, bench
from sglangserver import launch, stop_all, wait_ready

from specwatch.trial import log_size, log_stats

pytestmark = pytest.mark.integration
SET_ACCEPT_LENGTH = 2.3  # rounds of 2 and 3 accepted tokens, 3 in 30%
DRAFT_TOKENS = 4
Z = 3.5


@pytest.fixture(scope="module")
def forced_sglang(sglang_installed, tmp_path_factory) -> Iterator[RealServer]:
    """SGLang EAGLE-3 with acceptance forced, alone on the machine (the tier's servers stopped first)."""
    stop_all()
    t0 = time.monotonic()
    server = launch(tmp_path_factory.mktemp("sglang-forced"), "sglang-eagle3-forced", "--algorithm", "EAGLE3",
                    "--steps", str(DRAFT_TOKENS - 1), "--draft-tokens", str(DRAFT_TOKENS), k=DRAFT_TOKENS,
                    env={"SGLANG_SIMULATE_ACC_LEN": str(SET_ACCEPT_LENGTH),
                         "SGLANG_SIMULATE_ACC_TOKEN_MODE": "real-draft-token"})
    try:
        wait_ready(server, "sglang-eagle3-forced", t0)
        TIMINGS["start sglang-eagle3-forced (s)"] = time.monotonic() - t0
        yield server
    finally:
        server.stop()


def test_the_client_accept_length_is_the_forced_one(forced_sglang, heldout_prompts, tmp_path):
    offset = log_size(forced_sglang.log)
    doc, records = bench(forced_sglang.url, tmp_path, "--api", "sglang", "--max-tokens", "256", "--num-runs", "12",
                         "--warmup", "1", "--prompts", str(heldout_prompts))
    assert all(r.ok and r.spec is not None for r in records), [r.error for r in records]
    log_al, _ = log_stats(forced_sglang.log, offset)  # its "Decode batch" lines, as sweep pools them (printed)
    assert log_al is not None
    res = doc["results"]
    client, rounds = res["accept_length_client"], res["verify_rounds"]
    requests = len([r for r in records if not r.warmup])
    f = SET_ACCEPT_LENGTH % 1
    bound = Z * math.sqrt(f * (1 - f) / rounds)
    cut = (DRAFT_TOKENS - 1) * requests / rounds
    COMPARISONS.append(
        f"forced acceptance, SGLang EAGLE-3 (SGLANG_SIMULATE_ACC_LEN={SET_ACCEPT_LENGTH}, real-draft-token, "
        f"{DRAFT_TOKENS} draft tokens): client accept length {client:.3f} over {rounds} rounds (bound "
        f"-{bound + cut:.3f}/+{bound:.3f}: {Z} se binomial, and max_tokens' cut); server per request "
        f"{res['accept_length_server_per_request']:.3f}, its log's \"accept len\" lines pooled {log_al:.3f}")
    assert SET_ACCEPT_LENGTH - bound - cut <= client <= SET_ACCEPT_LENGTH + bound, (client, rounds, requests)
    # like with like: the server's per-request figures (completion / rounds) pooled as the client pools its own
    # equal it to four digits; its per-request mean is another quantity and is labelled so
    assert res["accept_length_server_pooled"] == pytest.approx(client, abs=5e-4), res


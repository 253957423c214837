"""The off range's price on the real SGLang 0.5.23: an adaptive slot of ``[0]`` against plain decoding.

``--speculative-adaptive`` with ``{"1": {"candidate_steps": [0]}, "64": {"candidate_steps": [3]}}`` and
``--speculative-num-steps 3`` (SGLang wants the launch step among the candidates): every batch the tier runs
(``--max-running-requests`` 48 under speculation never reaches the 64 slot) is in the slot whose only step is 0,
so no round drafts, inside a server launched with EAGLE-3 and the tier's head. Measured against the tier's
plain SGLang server, alternating (``off_range_bench``), at 1 and 4 streams; the cost is printed among the
tier's comparisons and quoted in docs/sim-model.md."""

from __future__ import annotations

import json
import time

import off_range_bench
import pytest
from realserver import COMPARISONS, TIMINGS
from sglang_truth import metrics
from sglangserver import launch, wait_ready

pytestmark = pytest.mark.integration
LOADS = (1, 4)
ROUNDS = off_range_bench.ROUNDS
SLOTS = {"1": {"candidate_steps": [0]}, "64": {"candidate_steps": [3]}}


def test_an_adaptive_slot_at_zero_costs_against_plain_decoding(sglang, tmp_path):
    path = tmp_path / "adaptive.json"
    path.write_text(json.dumps(SLOTS))
    t0 = time.monotonic()
    server = launch(tmp_path, "sglang-off-range", "--algorithm", "EAGLE3", "--steps", "3", "--draft-tokens", "4",
                    extra=("--speculative-adaptive", "--speculative-adaptive-config", str(path)), k=4)
    try:
        # the tier's plain server, started beside it when the modules before stopped it (a start is mostly
        # imports: two side by side take 28 s, one after the other 34 s)
        plain = sglang["plain"]
        wait_ready(server, "sglang-off-range", t0)
        costs = off_range_bench.measure(server.url, plain.url, LOADS, ROUNDS, tmp_path)
        steps = metrics(server.url).get("sglang:spec_num_steps")
    finally:
        server.stop()
    assert steps == 0.0, steps  # the running step count, SGLang's own gauge: the slot's 0
    TIMINGS[f"sglang off range vs plain, {len(LOADS)} loads x {ROUNDS} rounds (s)"] = time.monotonic() - t0
    COMPARISONS.extend(off_range_bench.lines('SGLang adaptive slot [0] (EAGLE-3, steps 3, {"1": [0]})', costs,
                                             ROUNDS))
    for c in costs.values():
        assert -0.5 < off_range_bench.interval(c)[0] < 3.0, costs  # a measurement, not a claim: only absurd fails

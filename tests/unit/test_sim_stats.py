"""The vLLM simulator's stats loop, driven interval by interval (no wall clock): a block per active interval,
one block with zero throughput when the engine goes idle, then silence, as vLLM logs idle blocks at DEBUG."""

from __future__ import annotations

import pytest

from specwatch.sim import model
from specwatch.sim.engine import Engine, EngineSettings
from specwatch.sim.vllm_cli import StatsLogger


@pytest.mark.parametrize(("activity", "blocks"), [
    ([True, False, False, False], [True, True, False, False]),  # busy, the idle line, then quiet
    ([False, False], [False, False]),  # idle from the start: quiet
    ([True, False, False, True, False, False], [True, True, False, True, True, False]),  # busy again: logs again
])
def test_a_block_per_active_interval_one_idle_block_then_silence(activity, blocks):
    cfg = model.SpecConfig.from_flags("EAGLE3", 3, 1, None)
    engine = Engine(EngineSettings(model.PROFILES["fast"], cfg, log_decode=False, log_prefill=False), print)
    lines: list[str] = []
    stats = StatsLogger(engine, "current", 1.0, lines.append)
    logged = []
    for busy in activity:
        if busy:
            engine.totals.generation_tokens += 40
            engine.totals.drafts += 10
            engine.totals.draft_tokens += 30
            engine.totals.accepted += 20
        before = len(lines)
        stats.log_once()
        logged.append(len(lines) > before)
        if busy:
            assert any("SpecDecoding metrics" in ln for ln in lines[before:])
    assert logged == blocks

"""Log parsers: golden files for every family in the reference, sim-emitted lines field by field,
malformed and foreign lines, and "never raises" on arbitrary input."""

import dataclasses
import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specwatch.server.logparse import parse_line
from specwatch.sim import logfmt

GOLDEN = Path(__file__).resolve().parent.parent / "golden" / "logs"
LOGS = sorted(GOLDEN.glob("*.log"))


def _verdicts(path: Path) -> list[dict]:
    out = []
    for line in path.read_text().splitlines():
        v = parse_line(line)
        out.append({"result": v.result, "reason": v.reason,
                    "sample": dataclasses.asdict(v.sample) if v.sample else None})
    return out


@pytest.mark.parametrize("path", LOGS, ids=[p.stem for p in LOGS])
def test_golden(path, update_golden):
    expected_file = path.with_suffix(".expected.json")
    got = json.loads(json.dumps(_verdicts(path)))
    if update_golden:
        expected_file.write_text(json.dumps(got, indent=1) + "\n")
    assert got == json.loads(expected_file.read_text())


def test_every_reference_family_line_parses_and_foreign_lines_are_ignored():
    for path in LOGS:
        results = {v["result"] for v in _verdicts(path)}
        if path.stem == "malformed":
            assert results == {"malformed"}
            assert len(path.read_text().splitlines()) >= 20
        elif path.stem == "foreign":
            assert results == {"ignored"}
        else:
            assert results == {"parsed"}, path.stem


def test_reference_decode_values_field_by_field():
    v = parse_line("[2026-04-01 09:20:23.481 DP1 TP3] Decode batch, #running-req: 16, #token: 7416, "
                   "token usage: 0.04, accept len: 3.47, accept rate: 0.49, cuda graph: True, "
                   "gen throughput (token/s): 1903.12, #queue-req: 0")
    s = v.sample
    assert (s.source, s.dp_rank, s.accept_length, s.accept_rate, s.gen_throughput, s.running, s.queued,
            s.token_usage, s.wall_time) == ("sglang_decode", "1", 3.47, 0.49, 1903.12, 16, 0, 0.04,
                                            "2026-04-01 09:20:23")


def test_vllm_current_line_with_per_position_acceptance():
    v = parse_line("(APIServer pid=48213) INFO 11-29 14:20:01 [metrics.py:121] SpecDecoding metrics: Mean "
                   "acceptance length: 2.69, Accepted throughput: 676.00 tokens/s, Drafted throughput: 1200.00 "
                   "tokens/s, Accepted: 6760 tokens, Drafted: 12000 tokens, Per-position acceptance rate: 0.780, "
                   "0.550, 0.360, Avg Draft acceptance rate: 56.3%")
    s = v.sample
    assert (s.accept_length, s.accepted_tokens, s.drafted_tokens) == (2.69, 6760, 12000)
    assert s.position_acceptance == (0.78, 0.55, 0.36)
    assert s.accept_rate == pytest.approx(0.563)
    assert sum(s.position_acceptance) == pytest.approx(s.accept_length - 1, abs=0.01)


STATS = logfmt.DecodeStats(running=3, used_tokens=1234, token_usage=0.05, accept_tokens=260, forward_ct=120,
                           gen_throughput=321.5, queued=2, iteration=40, num_steps=5, num_draft_tokens=6,
                           speculative=True)


@pytest.mark.parametrize("family", sorted(logfmt.FAMILIES))
def test_every_simulated_family_parses_field_by_field(family):
    line = logfmt.decode_line(family, STATS, 1_790_000_000.0)
    s = parse_line(line).sample
    assert s is not None, line
    assert s.accept_length == round(260 / 120, 2)
    assert (s.running, s.queued, s.gen_throughput, s.token_usage) == (3, 2, 321.5, 0.05)
    if family in ("0.4.3", "0.4.5", "0.4.8", "0.4.9.post1"):
        assert s.accept_rate is None
    else:
        assert s.accept_rate == round(logfmt.accept_rate(family, STATS), 2)
    assert s.iteration == (40 if family == "0.5.4" else None)
    pre = logfmt.PrefillStats(new_seq=2, new_tokens=64, cached_tokens=0, used_tokens=64, token_usage=0.0,
                              running=1, queued=0, pending_tokens=0, input_throughput=10.0, iteration=3)
    p = parse_line(logfmt.prefill_line(family, pre, 1_790_000_000.0)).sample
    assert p is not None and p.source == "sglang_prefill" and p.running == 1


def test_accept_rate_definitions_per_release():
    length = 260 / 120
    assert logfmt.accept_rate("0.5.3", STATS) == pytest.approx(length / 6)
    assert logfmt.accept_rate("0.5.8", STATS) == pytest.approx(length / 6)
    assert logfmt.accept_rate("0.5.23", STATS) == pytest.approx((length - 1) / 5)


def test_trailing_separator_families_print_it():
    assert logfmt.decode_line("0.5.8", STATS, 0).endswith("#queue-req: 2, ")
    assert logfmt.decode_line("0.5.23", STATS, 0).endswith("#queue-req: 2")


@settings(max_examples=400, deadline=None)
@given(st.text(max_size=300))
def test_parser_never_raises_on_arbitrary_text(text):
    assert parse_line(text).result in ("parsed", "ignored", "malformed")


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["accept len", "accept rate", "#running-req", "#queue-req",
                                           "gen throughput (token/s)", "token usage", "x"]),
                          st.text(alphabet="0123456789.-eainf%", max_size=8)), max_size=8))
def test_decode_lines_with_garbage_values_never_raise(fields):
    line = "[2026-01-01 00:00:00] Decode batch, " + ", ".join(f"{k}: {v}" for k, v in fields)
    v = parse_line(line)
    assert v.result in ("parsed", "malformed", "ignored")
    if v.sample is not None and v.sample.accept_length is not None:
        assert 0 < v.sample.accept_length <= 64

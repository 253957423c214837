"""The offline results: one accept-length rule per configuration, and documents through the strict codec."""

from __future__ import annotations

import dataclasses
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from specwatch import codec
from specwatch.analysis import advisor
from specwatch.errors import RecordFileError
from specwatch.export import sweep_tables
from specwatch.results import (
    BenchResult,
    ClientLag,
    ConfigResult,
    LevelResult,
    RunResult,
    Spread,
    SweepDoc,
    plain_of,
)


def bench_result(decode_tps: float, accept_client: float | None, tps: float | None = None) -> BenchResult:
    return BenchResult(4, 4, tps or decode_tps, tps, tps, tps, decode_tps, {"ttft": Spread(0.01, 0.02, 0.03, 0.015)},
                       Spread(mean=2.0), accept_client, None, None, 40 if accept_client else 0, (0.7, 0.4),
                       {"ok": 4, "timeout": 0}, {}, 0, None, ClientLag(intervals=3))


def run(tps: float) -> RunResult:
    return RunResult("p1", "chat", "ok", 200, "", 128, 12, 128 / tps, 128 / tps, 0.0, 0.05, 40, tps, None, None,
                     None, True)


def config(label: str, steps: int, decode_tps: float, accept_client: float | None,
           log_accept: float | None = None) -> ConfigResult:
    lvl = LevelResult(bench_result(decode_tps, accept_client), (run(decode_tps), run(decode_tps * 1.02)))
    return ConfigResult(label, {"k": str(steps)} if steps else {}, 1.7e9, "ok", 1.7e9 + 60, steps=steps,
                        draft_tokens=steps + 1, log_accept_length=log_accept, results=lvl.results, runs=lvl.runs,
                        by_concurrency={1: lvl, 4: dataclasses.replace(lvl, results=bench_result(decode_tps / 2,
                                                                                                  accept_client))})


@pytest.mark.parametrize(("steps", "client", "log", "expected"), [
    (3, 2.5, 2.4, 2.5),  # SGLang: the probe's per-request verify counts win
    (3, None, 2.4, 2.4),  # vLLM: no per-request counts, the log's pooled value
    (3, None, None, None),  # known from neither: said, not guessed as 1
    (0, None, None, 1.0),  # plain decoding
    (0, None, 3.0, 1.0),  # a log value does not make plain decoding speculate
])
def test_one_accept_length_rule(steps, client, log, expected):
    c = config("x", steps, 100.0, client, log)
    assert c.accept_length == expected
    assert c.cycle_s == (None if expected is None else pytest.approx(expected / 100.0))
    assert c.at(4).cycle_s == (None if expected is None else pytest.approx(expected / 50.0))


def test_the_table_and_the_advisor_use_the_same_accept_length_for_a_vllm_configuration():
    results = [config("baseline", 0, 150.0, None), config("k=3", 3, 180.0, None, 2.4),
               config("k=1", 1, 140.0, None, 1.6)]
    row = next(ln for ln in sweep_tables.table(results, 1).splitlines() if ln.startswith("k=3"))
    assert row.split()[4:7] == ["2.40", "2.40", f"{2.4 / 180 * 1e3:.2f}"]  # accept, log acc, cycle ms
    ms = {m.label: m for m in advisor.from_results(results)}
    assert ms["k=3"].accept_length == 2.4 and ms["baseline"].accept_length == 1.0
    assert plain_of(results) is results[0]


def test_a_sweep_document_round_trips_through_the_codec(tmp_path):
    doc = SweepDoc((config("baseline", 0, 90.0, None), config("steps=2", 2, 94.0, 1.9, 1.85),
                    ConfigResult("steps=9", {"steps": "9"}, 1.7e9, "failed", error="exited with 1")), "steps=2", 90.0)
    path = tmp_path / "sweep.json"
    path.write_bytes(codec.dumps(doc))
    raw = json.loads(path.read_text())
    assert raw["version"] == 2 and set(raw["configurations"][1]["by_concurrency"]) == {"1", "4"}
    assert raw["configurations"][1]["results"]["latency_seconds"]["ttft"]["p99"] == 0.03
    assert codec.load_as(SweepDoc, str(path)) == doc


def test_a_version_1_file_without_the_version_field_is_read(tmp_path):
    doc = SweepDoc((config("steps=2", 2, 94.0, 1.9),), "steps=2", None)
    raw = json.loads(codec.dumps(doc))
    del raw["version"]
    path = tmp_path / "old.json"
    path.write_text(json.dumps(raw))
    assert codec.load_as(SweepDoc, str(path)) == doc


@pytest.mark.parametrize(("mutate", "message"), [
    (lambda d: d.update(version=7), "version 7: this specwatch reads sweep.json versions 1"),
    (lambda d: d["configurations"][0].update(status="maybe"), "configurations[0].status: 'maybe' is not one of"),
    (lambda d: d["configurations"][0]["results"].pop("ok"), "configurations[0].results.ok: missing field"),
    (lambda d: d["configurations"][0].update(colour="red"), "configurations[0].colour: unknown field"),
    (lambda d: d["configurations"][0]["by_concurrency"].update(x={}), "key 'x' is not an integer"),
    (lambda d: d["configurations"][0]["runs"][0].update(output_tokens=True), "output_tokens: True is not of type int"),
    (lambda d: d["configurations"][0].update(steps="2"), "configurations[0].steps: '2' is not of type int"),
])
def test_a_bad_document_is_refused_naming_the_file_and_the_field(tmp_path, mutate, message):
    raw = json.loads(codec.dumps(SweepDoc((config("steps=2", 2, 94.0, 1.9),), "steps=2", None)))
    mutate(raw)
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(raw))
    with pytest.raises(RecordFileError) as exc:
        codec.load_as(SweepDoc, str(path))
    assert str(exc.value).startswith(f"{path}: ") and message in str(exc.value)


@given(st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=5),
                    lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=8), c, max_size=4),
                    max_leaves=20))
def test_any_json_decodes_to_a_config_result_or_a_record_file_error(v):
    try:
        out = codec.from_json(ConfigResult, v, "")
    except RecordFileError:
        return
    assert isinstance(out, ConfigResult)

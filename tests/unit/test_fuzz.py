"""Fuzzing with Hypothesis: the SSE parser, the stream decoder, the log parser, the scrape parser and the
config loader never raise anything but their own error type, and never yield a negative, non-finite or
impossible value. ``FUZZ_EXAMPLES`` (default 300) sets the examples per property; each test counts what it ran."""

from __future__ import annotations

import argparse
import math
import os

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from specwatch import config
from specwatch.errors import ConfigError, SpecwatchError, SSEError, StreamError
from specwatch.probe.prompts import Prompt
from specwatch.probe.sse import SSEParser
from specwatch.probe.stream import Attempt, Target
from specwatch.records import SAMPLE_SOURCES, Outcome, ServerSample
from specwatch.server.logparse import parse_line
from specwatch.server.scrape import ScrapeState, samples_from_text

EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "300"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
RUNS: dict[str, int] = {}

numbers = st.one_of(st.integers(-(2**70), 2**70), st.floats(allow_nan=True, allow_infinity=True),
                    st.sampled_from(["nan", "inf", "-1", "1e309", "2.5", "", "x", "½"]))
jsonish = st.recursive(st.none() | st.booleans() | numbers | st.text(max_size=10),
                       lambda c: st.lists(c, max_size=4) | st.dictionaries(st.text(max_size=12), c, max_size=5),
                       max_leaves=12)


def sane(s: ServerSample) -> None:
    for name in ("accept_length", "accept_rate", "gen_throughput", "token_usage"):
        v = getattr(s, name)
        assert v is None or (math.isfinite(v) and v >= 0), (name, v)
    assert s.accept_rate is None or s.accept_rate <= 1
    assert s.accept_length is None or s.accept_length <= 64
    for name in ("running", "queued", "accepted_tokens", "drafted_tokens", "iteration"):
        v = getattr(s, name)
        assert v is None or 0 <= v <= 2**53, (name, v)
    assert all(math.isfinite(p) and 0 <= p <= 1 for p in s.position_acceptance)


@FUZZ
@given(st.lists(st.binary(max_size=200) | st.sampled_from([b"data: ", b"\n", b"\r\n", b":", b"event: x\n"]),
                max_size=30))
def test_sse_parser_only_raises_its_own_error(chunks):
    RUNS["sse"] = RUNS.get("sse", 0) + 1
    p = SSEParser()
    try:
        for c in chunks:
            for ev in p.feed(c):
                assert isinstance(ev.data, bytes)
        p.close()
    except SSEError:
        pass


fields = {"text": st.text(max_size=8) | numbers, "meta_info": jsonish, "choices": jsonish, "usage": jsonish}


@FUZZ
@given(st.sampled_from(["sglang", "completions", "chat"]),
       st.lists(st.fixed_dictionaries({}, optional={
           "meta_info": st.fixed_dictionaries({}, optional={"completion_tokens": numbers, "finish_reason": jsonish,
                                                            "spec_verify_ct": numbers, "spec_accept_length": numbers,
                                                            "spec_correct_drafts_histogram": jsonish}),
           "choices": st.lists(st.fixed_dictionaries({}, optional={"text": numbers | st.text(max_size=6),
                                                                   "delta": jsonish}), max_size=2),
           "usage": st.fixed_dictionaries({}, optional={"completion_tokens": numbers, "prompt_tokens": numbers}),
       }), max_size=8))
def test_stream_decoder_yields_only_possible_records(api, events):
    RUNS["stream"] = RUNS.get("stream", 0) + 1
    a = Attempt(Target("spec", "http://x", api), Prompt("p", "d", text="t"), False, intended_ns=0, sent_ns=1)
    outcome = Outcome.OK
    try:
        for i, ev in enumerate(events):
            a.handle(orjson.dumps(ev, option=orjson.OPT_NON_STR_KEYS), 10 + i)
    except StreamError:
        outcome = Outcome.STREAM_ERROR
    except TypeError:  # orjson cannot encode an int beyond 64 bits: not a stream anyone could send
        return
    rec = a.finish(outcome, 100)
    assert all(n >= 0 for n in rec.chunk_tokens) and rec.output_tokens >= 0
    assert rec.output_tokens <= a.limits.data_bytes
    al = rec.accept_length
    assert al is None or (math.isfinite(al) and al >= 0)
    if rec.spec is not None:
        assert rec.spec.verify_ct > 0 and all(h >= 0 for h in rec.spec.histogram)
        assert rec.spec.accept_length is None or 0 <= rec.spec.accept_length <= 64


keys = st.sampled_from(["accept len", "accept rate", "#running-req", "#queue-req", "gen throughput (token/s)",
                        "token usage", "#token", "#new-seq"])
decode_lines = st.builds(lambda tag, kvs: f"[2026-04-01 09:20:30{tag}] Decode batch, "
                         + ", ".join(f"{k}: {v}" for k, v in kvs),
                         st.sampled_from(["", " DP1", " DP0300", " TP0 DP99999"]),
                         st.lists(st.tuples(keys, numbers.map(str)), max_size=8))
vllm_lines = st.builds(lambda vals: "(APIServer pid=1) INFO 11-29 14:53:17 [metrics.py:120] SpecDecoding metrics: "
                       + ", ".join(vals), st.lists(st.sampled_from([
                           "Mean acceptance length: {}", "Accepted: {} tokens", "Drafted: {} tokens",
                           "Avg Draft acceptance rate: {}%", "Per-position acceptance rate: {}, {}"]).flatmap(
                               lambda f: numbers.map(lambda n: f.replace("{}", str(n)))), max_size=6))


@FUZZ
@given(st.one_of(st.text(max_size=300), decode_lines, vllm_lines))
def test_log_parser_yields_only_possible_samples(line):
    RUNS["logparse"] = RUNS.get("logparse", 0) + 1
    r = parse_line(line)
    assert r.result in ("parsed", "ignored", "malformed")
    if r.sample is not None:
        assert r.sample.source in SAMPLE_SOURCES
        sane(r.sample)
        orjson.dumps(r.sample)  # /api/summary can always serialise it


gauge_names = st.sampled_from(["sglang:spec_accept_length", "sglang:num_running_reqs", "sglang:gen_throughput",
                               "sglang:token_usage", "vllm:spec_decode_num_drafts_total",
                               "vllm:spec_decode_num_accepted_tokens_total",
                               "vllm:spec_decode_num_draft_tokens_total",
                               "vllm:spec_decode_num_accepted_tokens_per_pos_total"])
exposition = st.lists(st.builds(lambda n, lab, v: f'{n}{{dp_rank="{lab}",position="{lab}"}} {v}', gauge_names,
                                st.sampled_from(["0", "1", "007", "x", "99999"]),
                                st.sampled_from(["1", "0", "-3", "+Inf", "NaN", "1e308", "2.5", "12345678901"])),
                      max_size=12).map("\n".join)


@FUZZ
@given(st.lists(exposition | st.text(max_size=80), min_size=1, max_size=3))
def test_scrape_parser_yields_only_possible_samples(texts):
    RUNS["scrape"] = RUNS.get("scrape", 0) + 1
    state = ScrapeState()
    for text in texts:
        try:
            samples = samples_from_text(text, state)
        except ValueError:  # not an exposition at all: the scraper counts the scrape as failed
            continue
        for s in samples:
            sane(s)
            assert s.dp_rank in ("", "other") or (s.dp_rank.isdigit() and int(s.dp_rank) < 64)


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.dictionaries(st.sampled_from(["pause_s", "interval_s", "max_tokens", "concurrency", "rate_per_s",
                                        "windows_s", "baseline_tps", "listen", "server_url", "api", "bogus"]),
                       numbers | st.text(max_size=12), max_size=4))
def test_config_is_valid_or_a_config_error(env):
    RUNS["config"] = RUNS.get("config", 0) + 1
    environ = {"SPECWATCH_SERVER_URL": "http://127.0.0.1:1"} | {f"SPECWATCH_{k.upper()}": str(v)
                                                               for k, v in env.items()}
    p = argparse.ArgumentParser()
    config.add_run_flags(p)
    try:
        cfg = config.read(p.parse_args([]), environ)
    except ConfigError:
        return
    except SpecwatchError as exc:  # any other of ours would be a bug in the table
        raise AssertionError(exc) from exc
    for name in ("pause_s", "interval_s", "hysteresis", "read_timeout_s", "connect_timeout_s"):
        v = getattr(cfg, name)
        assert math.isfinite(v) and v >= 0
    assert cfg.concurrency >= 1 and cfg.max_tokens >= 1
    assert max(cfg.windows) / cfg.interval_s <= config.MAX_INTERVALS_KEPT


def test_zz_fuzz_run_counts():
    """Printed with -s (and in the CI log on failure): how many examples each property ran."""
    print("\nfuzz examples run: " + ", ".join(f"{k} {v}" for k, v in sorted(RUNS.items())))
    assert set(RUNS) == {"sse", "stream", "logparse", "scrape", "config"} and min(RUNS.values()) >= 10

"""bench's traffic flags, vllm bench serve's names beside specwatch's: how each parses, what load it asks for,
how the results document names it, and the exact message when two of them disagree."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from specwatch.commands.bench import parse
from specwatch.errors import ConfigError
from specwatch.options import rate_or_all
from specwatch.records import Schedule

URL = ("--server-url", "http://x:1")


@pytest.mark.parametrize(("flags", "plan", "schedule"), [
    # (concurrency, rate_per_s, burstiness, poisson, max_in_flight, requests)
    ((), (1, None, None, False, 256, 5), Schedule(5, "inf", 1.0, 1)),
    (("--num-prompts", "64", "--max-concurrency", "8"), (8, None, None, False, 8, 64), Schedule(64, "inf", 1.0, 8)),
    (("--num-runs", "64", "--concurrency", "8"), (8, None, None, False, 256, 64), Schedule(64, "inf", 1.0, 8)),
    # vLLM's inf: every request at once (one stream each), or --max-concurrency streams
    (("--num-prompts", "20", "--request-rate", "inf"), (20, None, None, False, 256, 20), Schedule(20, "inf", 1.0, 20)),
    (("--num-prompts", "20", "--request-rate", "inf", "--max-concurrency", "4"), (4, None, None, False, 4, 20),
     Schedule(20, "inf", 1.0, 4)),
    # a finite vLLM rate: Poisson by default (burstiness 1), as vLLM; --max-concurrency caps the streams in flight
    (("--request-rate", "4"), (1, 4.0, 1.0, False, 256, 5), Schedule(5, 4.0, 1.0, 256)),
    (("--request-rate", "4", "--burstiness", "0.5", "--max-concurrency", "16"), (16, 4.0, 0.5, False, 16, 5),
     Schedule(5, 4.0, 0.5, 16)),
    # specwatch's own rate: constant gaps unless --poisson or --burstiness
    (("--rate-per-s", "4"), (1, 4.0, None, False, 256, 5), Schedule(5, 4.0, "inf", 256)),
    (("--rate-per-s", "4", "--poisson"), (1, 4.0, None, True, 256, 5), Schedule(5, 4.0, 1.0, 256)),
    (("--rate-per-s", "4", "--burstiness", "2"), (1, 4.0, 2.0, False, 256, 5), Schedule(5, 4.0, 2.0, 256)),
])
def test_flags_to_load_and_to_vllms_names(flags, plan, schedule):
    spec, _ = parse([*URL, *flags])
    p = spec.plan
    assert (p.concurrency, p.rate_per_s, p.burstiness, p.poisson, p.max_in_flight, p.requests) == plan
    assert spec.schedule == schedule


@pytest.mark.parametrize(("flags", "message"), [
    (("--rate-per-s", "2", "--request-rate", "3"), "rate_per_s and request_rate are alternatives (--request-rate is "
                                                   "vllm bench serve's name): give at most one"),
    (("--burstiness", "2",), "burstiness: needs a finite request rate (--request-rate or --rate-per-s)"),
    (("--request-rate", "inf", "--burstiness", "2"), "burstiness: needs a finite request rate"),
    (("--rate-per-s", "2", "--poisson", "--burstiness", "2"), "burstiness and poisson are alternatives (--burstiness "
                                                              "1 is Poisson)"),
    (("--burstiness", "0"), "command line: burstiness: must be > 0, got '0'"),
    (("--request-rate", "0"), "command line: request_rate: must be > 0, got '0' (or inf: every request at once)"),
    (("--request-rate", "nan"), "command line: request_rate: must be a finite number, got nan (or inf"),
    (("--max-concurrency", "-1"), "command line: max_concurrency: must be > 0, got '-1'"),
    (("--num-prompts", "0"), "command line: num_runs: must be > 0, got '0'"),
])
def test_disagreeing_or_bad_flags_are_refused_with_the_message(flags, message):
    with pytest.raises(ConfigError) as exc:
        parse([*URL, *flags])
    assert str(exc.value).startswith(message)


@pytest.mark.parametrize(("raw", "value"), [("inf", math.inf), ("Inf", math.inf), (" infinity ", math.inf),
                                             (math.inf, math.inf), ("2.5", 2.5), (3, 3.0), ("1e-3", 0.001)])
def test_request_rate_values(raw, value):
    assert rate_or_all("request_rate", raw) == value


@given(st.one_of(st.text(max_size=12), st.floats(allow_nan=True), st.integers(), st.booleans(), st.none()))
def test_request_rate_is_a_rate_inf_or_a_config_error(raw):
    try:
        v = rate_or_all("request_rate", raw)
    except ConfigError as exc:
        assert str(exc).startswith("request_rate: ") and str(exc).endswith("(or inf: every request at once)")
    else:
        assert v == math.inf or 0 < v <= 100_000


def test_verbose_is_no_setting_of_the_measurement():
    spec, _ = parse([*URL, "--verbose"])
    assert spec.verbose and "verbose" not in spec.settings

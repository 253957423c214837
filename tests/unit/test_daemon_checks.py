"""The daemon's honesty checks (analysis/daemon_checks.py, recorder/recent.py): each trips on probes or server
reports made to trip it and stays quiet on clean ones; the exporter's 0/1 gauge per check, the verdict that
says it is unreliable, and the page's list."""

from __future__ import annotations

import dataclasses

from specwatch.analysis import checks
from specwatch.analysis.daemon_checks import daemon_checks
from specwatch.analysis.verdict import Verdict, with_checks
from specwatch.export.prometheus import Exporter
from specwatch.export.view import verdict_text
from specwatch.recorder.recent import Recent
from specwatch.records import Outcome, RequestRecord, ServerSample
from specwatch.results import CHECKS

PROSE = "Explain how a lighthouse works and why the keeper checks the lamp at night."


def probe(i: int, *, out: int = 32, cached: int | None = 0, prompt: str | None = None, target: str = "spec",
          warmup: bool = False) -> RequestRecord:
    return RequestRecord("sglang", target, prompt or f"p{i}", "chat", warmup, 0, 0, 1, (1,), (out,), True, 100, out,
                         Outcome.OK, cached_tokens=cached)


def run(probes: list[RequestRecord], reports: tuple[ServerSample, ...] = (), random_ids: frozenset[str] = frozenset()
        ) -> dict[str, checks.Check]:
    recent = Recent()
    for p in probes:
        recent.observe(p)
    got = daemon_checks(recent.summary(random_ids), reports, 32)
    assert tuple(c.name for c in got) == CHECKS
    return {c.name: c for c in got}


VLLM_OK = ServerSample("vllm_spec", accept_length=2.8, position_acceptance=(0.8, 0.6, 0.4))
QUIET = ServerSample("scrape", running=3, queued=0)


def test_clean_probes_and_reports_fail_nothing_and_say_what_the_daemon_cannot_measure():
    got = run([probe(i) for i in range(10)], (VLLM_OK, QUIET))
    assert [n for n, c in got.items() if c.failed] == []
    assert [n for n, c in got.items() if not c.measured] == ["achieved_rate", "repeat_spread"]


def test_each_check_trips_on_what_is_made_to_trip_it():
    clean = [probe(i) for i in range(10)]
    assert run([probe(i, cached=90) for i in range(10)])["prefix_cache"].failed
    assert run(clean, (ServerSample("scrape", running=3, queued=4),))["server_queueing"].failed
    undercounted = ServerSample("vllm_spec", accept_length=2.8, position_acceptance=(0.4, 0.3, 0.2))  # 2 DP ranks
    assert run(clean, (undercounted, QUIET))["acceptance_identity"].failed
    assert run([*clean, probe(11, out=20)])["output_length"].failed
    assert run([probe(i, prompt="same") for i in range(10)])["synthetic_prompts"].failed
    assert run(clean, random_ids=frozenset(f"p{i}" for i in range(8)))["synthetic_prompts"].failed


def test_recent_keeps_the_speculative_targets_measured_probes_only():
    recent = Recent(keep=3)
    for p in (probe(0, target="baseline", out=1), probe(1, warmup=True, out=1), *[probe(i) for i in range(2, 7)]):
        recent.observe(p)
    s = recent.summary()
    assert (s.requests, s.ok_outputs, s.distinct_prompts) == (3, (32, 32, 32), 3)
    assert Recent().summary().cached_tokens is None  # no probe reported: the check is not measured


def test_the_gauge_is_one_per_failed_check_and_zero_otherwise():
    e = Exporter(("spec",), (60,))
    got = run([probe(i, cached=90) for i in range(10)], (QUIET,))
    e.set_checks(tuple(got.values()))
    text = e.render().decode()
    values = {n: line.rsplit(" ", 1)[1] for n in CHECKS for line in text.splitlines()
              if line.startswith(f'specwatch_check_failed{{check="{n}"}}')}
    assert values == {n: "1.0" if n == "prefix_cache" else "0.0" for n in CHECKS}


def test_a_failed_check_on_a_verdict_figure_makes_the_verdict_unreliable():
    v = Verdict(100.0, 0.9, 0.01, 1.2, True, accept_length=1.1)
    bad = with_checks(v, [checks.acceptance_identity(2.8, (0.4,)), checks.prefix_cache(900, 1000)])
    assert bad.unreliable == ("acceptance_identity (accept length)",)
    assert verdict_text(bad).endswith(" (UNRELIABLE: check acceptance_identity (accept length) failed)")
    ttft_only = with_checks(v, [checks.prefix_cache(900, 1000)])  # TTFT is no figure of the verdict's
    assert verdict_text(ttft_only) == verdict_text(v)
    assert dataclasses.replace(bad, unreliable=()) == v

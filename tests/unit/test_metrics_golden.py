"""The whole ``/metrics`` contract as a golden file: every family's HELP, TYPE, name and label set, with the
values masked, from an exporter fed one of everything. A renamed metric, a changed help text or label, a new or
lost series shows as a diff; ``pytest --update-golden`` rewrites the file on purpose."""

from __future__ import annotations

import re
from pathlib import Path

from specwatch.analysis import checks
from specwatch.analysis.baseline import BaselineCurve
from specwatch.analysis.by_load import by_load
from specwatch.analysis.live_advisor import Acceptance, advise
from specwatch.analysis.verdict import Judge, verdict_inputs
from specwatch.export.prometheus import Exporter
from specwatch.probe.lag import LagMonitor
from specwatch.recorder.load import LoadBucket
from specwatch.recorder.observations import observe
from specwatch.recorder.stats import Stats
from specwatch.records import Outcome, RequestRecord, ServerSample, SpecStats

GOLDEN = Path(__file__).parent.parent / "golden" / "metrics.txt"
VALUE = re.compile(r"^([^# ][^ ]*(?:\{.*\})?) \S+$")


def record(target: str) -> RequestRecord:
    return RequestRecord("sglang", target, "p1", "chat", False, 1_000, 2_000, 60_000_000, (10_000_000, 30_000_000,
                         50_000_000), (1, 3, 2), True, 12, 6, Outcome.OK, 200, spec=SpecStats(2, 2.5, (0, 1, 1)))


def fed_exporter() -> Exporter:
    e = Exporter(("spec", "baseline"), (60, 300))
    st = Stats()
    for tg in ("spec", "baseline"):
        rec = record(tg)
        e.observe_record(rec, observe(rec))
        st.add(rec)
    e.observe_sample(ServerSample("sglang_decode", accept_length=2.4, accept_rate=0.6, gen_throughput=80.0,
                                  running=3, queued=0, position_acceptance=(0.8, 0.5)), "log")
    e.observe_sample(ServerSample("scrape", running=3, queued=1, speculative_steps=3.0), "scrape")
    w = st.describe()
    for label in ("1m", "5m", "cumulative"):
        e.update_windows(label, {"spec": w, "baseline": w})
    v = Judge(min_requests=1).update(verdict_inputs(w, w, None, 2.4, 3.0, "ab", 1.0))
    e.set_verdict(v)
    bucket = LoadBucket(4, 10, 3.2, 90.0, 0.01, 2.4)
    e.set_load(by_load([bucket], None, 1, 3.0))
    acc = Acceptance((0.8, 0.5), 100, "probes")
    idle = LoadBucket(1, 10, 1.0, 90.0, 0.01, 2.4)
    e.set_advice(advise([idle], BaselineCurve.fixed(100.0), None, acc, None, 2, 1, 1))
    m = LagMonitor(keep=False)
    m.record_ns(2_000_000)
    e.set_lag(m.close())
    e.set_target_up("spec", True)
    e.count_hlog_error()
    e.set_tick_seconds(0.001)
    e.set_checks((checks.output_length(True, 8, [6]),))
    return e


def masked(text: str) -> str:
    return "\n".join(VALUE.sub(r"\1 <v>", ln) for ln in text.splitlines()) + "\n"


def test_metrics_exposition_matches_the_golden_file(update_golden):
    got = masked(fed_exporter().render().decode())
    if update_golden:
        GOLDEN.write_text(got)
    assert got == GOLDEN.read_text()

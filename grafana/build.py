"""Generates grafana/dashboards/*.json with grafana-foundation-sdk. Edit this file, not the JSON.

    .venv/bin/python grafana/build.py          # rewrite the JSON
    .venv/bin/python grafana/build.py --check  # exit 1 if the committed JSON is out of date (a test runs this)

Every panel query is run against a real Prometheus scraping a real specwatch in
tests/integration/test_prometheus_e2e.py, with the template variables substituted by ``substitute``.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from grafana_foundation_sdk.builders import common, heatmap, stat, timeseries
from grafana_foundation_sdk.builders import dashboard as db
from grafana_foundation_sdk.builders import prometheus as prom
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import dashboard as m
from grafana_foundation_sdk.models.prometheus import PromQueryFormat

OUT = Path(__file__).resolve().parent / "dashboards"
TABLE = Path(__file__).resolve().parent.parent / "docs" / "dashboards.md"
DS = m.DataSourceRef(type_val="prometheus", uid="${datasource}")
SEL = 'instance=~"$instance"'
TSEL = f'{SEL},target=~"$target"'


def q(expr: str, legend: str = "", ref: str = "A") -> prom.Dataquery:
    return prom.Dataquery().expr(expr).legend_format(legend or "__auto").ref_id(ref).datasource(DS)


def ts(title: str, unit: str, *queries: prom.Dataquery, desc: str = "", w: int = 12, h: int = 8
       ) -> timeseries.Panel:
    p = timeseries.Panel().title(title).unit(unit).datasource(DS).description(desc).height(h).span(w)
    for query in queries:
        p = p.with_target(query)
    return p


def st(title: str, unit: str, query: prom.Dataquery, desc: str = "", w: int = 6,
       mappings: list[Any] | None = None) -> stat.Panel:
    p = (stat.Panel().title(title).unit(unit).datasource(DS).description(desc).height(5).span(w).with_target(query)
         .reduce_options(common.ReduceDataOptions().calcs(["lastNotNull"])))
    if mappings:
        p = p.mappings(mappings)
    return p


def variables(d: db.Dashboard, with_target: bool = True) -> db.Dashboard:
    d = d.with_variable(db.DatasourceVariable("datasource").label("Data source").type("prometheus"))
    d = d.with_variable(db.QueryVariable("instance").label("Instance").datasource(DS)
                        .query("label_values(specwatch_build_info, instance)").multi(True).include_all(True)
                        .all_value(".*").refresh(m.VariableRefresh.ON_TIME_RANGE_CHANGED))
    if with_target:
        d = d.with_variable(db.QueryVariable("target").label("Target").datasource(DS)
                            .query("label_values(specwatch_probe_requests_total, target)").multi(True)
                            .include_all(True).all_value(".*").refresh(m.VariableRefresh.ON_TIME_RANGE_CHANGED))
    return d


def base(uid: str, title: str, desc: str) -> db.Dashboard:
    return (db.Dashboard(title).uid(uid).description(desc).tags(["specwatch", "speculative-decoding"])
            .refresh("10s").time("now-1h", "now").timezone("browser").editable())


def verdict() -> db.Dashboard:
    below_map = [m.ValueMap(options={"0": m.ValueMappingResult(text="paying off", color="green"),
                                     "1": m.ValueMappingResult(text="SLOWER than baseline", color="red")})]
    past_map = [m.ValueMap(options={"0": m.ValueMappingResult(text="below the crossover", color="green"),
                                    "1": m.ValueMappingResult(text="PAST the crossover", color="red")})]
    d = variables(base("specwatch-verdict", "specwatch / Speculation verdict",
                       "Is speculative decoding paying off? Probe decode tok/s against the non-speculative "
                       "baseline, and the accept length against its break-even."))
    return (d
            .with_row(db.Row("Verdict"))
            .with_panel(st("Speedup vs baseline", "x", q(f"specwatch_speedup_ratio{{{SEL}}}", "{{instance}}"),
                           "Probe decode tok/s / baseline tok/s over the verdict window."))
            .with_panel(st("Speculation below baseline", "none",
                           q(f"specwatch_speculation_below_baseline{{{SEL}}}", "{{instance}}"),
                           "1 when speculation is confidently slower than plain decoding.", mappings=below_map))
            .with_panel(st("Accept length (client, 1m)", "none",
                           q(f'specwatch_probe_accept_length{{{SEL},target="spec",window="1m"}}', "{{instance}}")))
            .with_panel(st("Break-even accept length", "none",
                           q(f"specwatch_breakeven_accept_length{{{SEL}}}", "{{instance}}"),
                           "Accept length at which speculation would match the baseline at the current cycle "
                           "time."))
            .with_row(db.Row("Fleet (every selected sidecar)"))
            .with_panel(st("Sidecars where speculation loses", "none",
                           q(f"count(specwatch_speculation_below_baseline{{{SEL}}} == 1) or vector(0)", "losing"),
                           "How many of the selected sidecars (one per replica) say speculation is slower than "
                           "plain decoding now.", w=8))
            .with_panel(st("Sidecars past the crossover", "none",
                           q(f"count(specwatch_speculation_past_crossover{{{SEL}}} == 1) or vector(0)", "past"),
                           "How many replicas run at or above the load where speculation stops paying.", w=8))
            .with_panel(st("Sidecars reporting", "none", q(f"count(specwatch_build_info{{{SEL}}})", "sidecars"),
                           w=8))
            .with_row(db.Row("Throughput"))
            .with_panel(ts("Decode tok/s vs baseline", "none",
                           q(f'specwatch_probe_tokens_per_second{{{TSEL},window="1m"}}', "{{target}} {{instance}}"),
                           q(f"specwatch_baseline_tokens_per_second{{{SEL}}}", "baseline {{instance}}", "B")))
            .with_panel(ts("Speedup ratio", "x", q(f"specwatch_speedup_ratio{{{SEL}}}", "{{instance}}"),
                           desc="Below 1.0 speculation costs more than it saves."))
            .with_row(db.Row("Accept length"))
            .with_panel(ts("Accept length: actual vs break-even", "none",
                           q(f'specwatch_probe_accept_length{{{SEL},target="spec",window="1m"}}',
                             "client {{instance}}"),
                           q(f"specwatch_server_accept_length{{{SEL}}}", "server {{source}} dp{{dp_rank}} {{instance}}",
                             "B"),
                           q(f"specwatch_breakeven_accept_length{{{SEL}}}", "break-even {{instance}}", "C")))
            .with_panel(ts("Per-position acceptance", "percentunit",
                           q(f"specwatch_server_position_acceptance_ratio{{{SEL}}} or "
                             f'specwatch_probe_position_acceptance_ratio{{{SEL},target="spec",window="5m"}}',
                             "position {{position}} {{source}}{{target}} {{instance}}"),
                           desc="Share of verify rounds that accepted draft position N: from vLLM's logs or "
                                "metrics when the server is vLLM, else from SGLang's per-request histogram of "
                                "accepted drafts (probe side)."))
            .with_panel(ts("Cycle time", "s", q(f"specwatch_cycle_seconds{{{SEL}}}", "{{instance}}"),
                           desc="Accept length / tok/s: time per draft+verify round as the client sees it."))
            .with_panel(ts("Tokens per chunk (1m mean)", "none",
                           q(f'specwatch_probe_tokens_per_chunk_mean{{{TSEL},window="1m"}}',
                             "{{target}} {{instance}}"),
                           desc="Tracks accept length: one chunk carries one verify round."))
            .with_row(db.Row("Speedup by load"))
            .with_panel(ts("Speedup by load bucket", "x",
                           q(f"specwatch_speedup_by_load_ratio{{{SEL}}}", "{{load_bucket}} running {{instance}}"),
                           desc="Probe decode tok/s over plain decoding's at the same load (the baseline curve), "
                                "per load bucket (the nearest power of two), over load_curve_window_s of probes. "
                                "Below 1.0 speculation loses at that load."))
            .with_panel(ts("Load against the crossover", "none",
                           q(f"specwatch_server_load_running_requests{{{SEL}}}", "load {{instance}}"),
                           q(f"specwatch_speculation_crossover_running_requests{{{SEL}}}", "crossover {{instance}}",
                             "B"),
                           desc="Running requests on the server, and the load above which speculation is slower "
                                "than plain decoding."))
            .with_panel(st("Past the crossover", "none",
                           q(f"specwatch_speculation_past_crossover{{{SEL}}}", "{{instance}}"),
                           "1 while the server runs at or above the crossover (SpeculationLosingAtLoad after "
                           "15 m).", mappings=past_map))
            .with_row(db.Row("Advisor: which step count would win"))
            .with_panel(ts("Predicted tok/s per step count, per load bucket", "none",
                           q(f"specwatch_advisor_predicted_tokens_per_second{{{SEL}}}",
                             "{{steps}} steps at {{load_bucket}} {{instance}}"),
                           desc="The live advisor's predicted per-stream decode tok/s of every step count (0: plain "
                                "decoding) per load bucket, from the running server's own cycle time and acceptance."))
            .with_panel(ts("Advised step count and its gain", "none",
                           q(f"specwatch_advisor_best_steps{{{SEL}}}", "best steps at {{load_bucket}} {{instance}}"),
                           q(f"specwatch_advisor_predicted_gain_ratio{{{SEL}}}", "gain at {{load_bucket}} {{instance}}",
                             "B"),
                           q(f"specwatch_advisor_predicted_gain_lower_ratio{{{SEL}}}",
                             "gain, 95% low end at {{load_bucket}} {{instance}}", "C"),
                           desc="The best step count per load bucket and its predicted tok/s over the running "
                                "configuration's, with the low end of its 95% interval (SpeculationMisconfigured "
                                "when that stays above 1.05 for 30 m)."))
            .build())


HISTOGRAMS = (("ttft", "TTFT"), ("itl", "Per-token ITL"), ("inter_chunk", "Inter-chunk gap"), ("e2e", "End-to-end"))


def latency() -> db.Dashboard:
    d = variables(base("specwatch-latency", "specwatch / Latency",
                       "Probe latency: TTFT, per-token ITL, inter-chunk gap and end-to-end latency (from the "
                       "intended start), HDR-exact quantiles and histogram heatmaps."))
    d = d.with_row(db.Row("Quantiles (HDR, 1m window)"))
    for metric, title in (("ttft", "TTFT"), ("itl", "Per-token ITL"), ("inter_chunk", "Inter-chunk gap"),
                          ("e2e", "End-to-end (from intended start)")):
        sel = f'{TSEL},window="1m",metric="{metric}"'
        d = d.with_panel(ts(f"{title} p50 / p90 / p99", "s",
                            q(f'specwatch_probe_latency_quantile_seconds{{{sel},quantile="0.5"}}',
                              "p50 {{target}} {{instance}}"),
                            q(f'specwatch_probe_latency_quantile_seconds{{{sel},quantile="0.9"}}',
                              "p90 {{target}} {{instance}}", "B"),
                            q(f'specwatch_probe_latency_quantile_seconds{{{sel},quantile="0.99"}}',
                              "p99 {{target}} {{instance}}", "C"),
                            desc="Per sidecar (HDR quantiles do not add up across sidecars; the Fleet row "
                                 "aggregates from histogram buckets)."))
    d = d.with_row(db.Row("Fleet (every selected sidecar, from summed histogram buckets)"))
    for name, title in HISTOGRAMS:
        bucket = f"rate(specwatch_probe_{name}_seconds_bucket{{{TSEL}}}[$__rate_interval])"
        d = d.with_panel(ts(f"Fleet {title} p50 / p99", "s",
                            q(f"histogram_quantile(0.5, sum by (le, target) ({bucket}))", "p50 {{target}}"),
                            q(f"histogram_quantile(0.99, sum by (le, target) ({bucket}))", "p99 {{target}}", "B"),
                            q(f"sum by (target) (rate(specwatch_probe_{name}_seconds_sum{{{TSEL}}}[$__rate_interval]))"
                              f" / sum by (target) (rate(specwatch_probe_{name}_seconds_count{{{TSEL}}}"
                              f"[$__rate_interval]))", "mean {{target}}", "C"),
                            desc="Across every selected sidecar: quantiles interpolated within the summed "
                                 "Prometheus buckets (bucket-resolution, not HDR-exact), mean from summed sums "
                                 "and counts.", w=6))
    d = d.with_row(db.Row("Heatmaps"))
    for name, title in HISTOGRAMS:
        d = d.with_panel(heatmap.Panel().title(f"{title} heatmap").datasource(DS).height(8).span(12)
                         .with_target(q(f"sum by (le) (increase(specwatch_probe_{name}_seconds_bucket{{{TSEL}}}"
                                        f"[$__rate_interval]))", "{{le}}").format(PromQueryFormat.HEATMAP)))
    d = (d.with_row(db.Row("Chunks"))
         .with_panel(ts("Tokens per chunk p50 / p99", "none",
                        q(f"histogram_quantile(0.5, sum by (le, target) (rate(specwatch_probe_tokens_per_chunk_bucket"
                          f"{{{TSEL}}}[$__rate_interval])))", "p50 {{target}}"),
                        q(f"histogram_quantile(0.99, sum by (le, target) (rate("
                          f"specwatch_probe_tokens_per_chunk_bucket{{{TSEL}}}[$__rate_interval])))", "p99 {{target}}",
                          "B")))
         .with_panel(ts("Schedule lag p99 (1m)", "s",
                        q(f'specwatch_probe_latency_quantile_seconds{{{TSEL},window="1m",metric="schedule_lag",'
                          f'quantile="0.99"}}', "{{target}} {{instance}}"),
                        desc="Time requests waited past their intended start (open-loop probing).")))
    return d.build()


def health() -> db.Dashboard:
    d = variables(base("specwatch-health", "specwatch / Sidecar health",
                       "Is the sidecar itself healthy: target and log source up, log lines, probe outcomes, "
                       "event-loop lag."))
    return (d
            .with_panel(ts("Target up", "none", q(f"specwatch_target_up{{{TSEL}}}", "{{target}} {{instance}}")))
            .with_panel(ts("Log source up", "none", q(f"specwatch_log_source_up{{{SEL}}}", "{{instance}}")))
            .with_panel(ts("Log lines / s", "none",
                           q(f"sum by (result) (rate(specwatch_log_lines_total{{{SEL}}}[$__rate_interval]))",
                             "{{result}}"),
                           q(f"sum by (reason) (rate(specwatch_log_lines_skipped_total{{{SEL}}}[$__rate_interval]))",
                             "skipped {{reason}}", "B")))
            .with_panel(ts("Seconds since the last log sample", "s",
                           q(f"time() - specwatch_log_last_sample_timestamp_seconds{{{SEL}}}", "{{instance}}")))
            .with_panel(ts("Probe outcomes / s", "reqps",
                           q(f"sum by (target, outcome) (rate(specwatch_probe_requests_total{{{TSEL}}}"
                             f"[$__rate_interval]))", "{{target}} {{outcome}}")))
            .with_panel(ts("Event-loop lag and tick time", "s",
                           q(f"specwatch_event_loop_lag_seconds{{{SEL}}}", "loop lag max {{instance}}"),
                           q(f"specwatch_event_loop_lag_p99_seconds{{{SEL}}}", "loop lag p99 {{instance}}", "B"),
                           q(f"specwatch_tick_duration_seconds{{{SEL}}}", "tick {{instance}}", "C"),
                           desc="Over 1 ms at p99 the sidecar's own delay enters what it measures."))
            .with_panel(ts("Measurement distorted", "none",
                           q(f"specwatch_measurement_distorted{{{SEL}}}", "{{instance}}"),
                           q(f"sum(increase(specwatch_distorted_intervals_total{{{SEL}}}[$__rate_interval]))",
                             "distorted intervals (fleet)", "B"),
                           desc="1 while the last interval's event-loop lag p99 exceeded 1 ms: probe latencies "
                                "then include the sidecar's delay (give it a core, or --workers)."))
            .build())


DASHBOARDS = {"specwatch-verdict.json": verdict, "specwatch-latency.json": latency, "specwatch-health.json": health}


def render() -> dict[str, str]:
    enc = JSONEncoder(sort_keys=True, indent=2)
    return {name: enc.encode(fn()) + "\n" for name, fn in DASHBOARDS.items()}


def table(rendered: dict[str, str]) -> str:
    """docs/dashboards.md: every panel and its queries (generated with the JSON)."""
    lines = ["# Dashboards", "", "Generated by `grafana/build.py` with the JSON in `grafana/dashboards/`; every query",
             "below returns data in `tests/integration/test_prometheus_e2e.py`.", ""]
    for name, text in rendered.items():
        doc = json.loads(text)
        lines += [f"## {doc['title']} (`{name}`)", "", "| panel | query |", "|---|---|"]
        for title, expr in exprs(doc):
            cell = expr.replace("|", "\\|").replace("\n", " ")
            lines.append(f"| {title} | `{cell}` |")
        lines.append("")
    return "\n".join(lines)


def panels(doc: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for p in doc.get("panels", []):
        yield p
        yield from p.get("panels", [])


def exprs(doc: dict[str, Any]) -> Iterator[tuple[str, str]]:
    """(panel title, query expression) for every target of every panel."""
    for p in panels(doc):
        for t in p.get("targets", []) or []:
            if t.get("expr"):
                yield p.get("title", ""), t["expr"]


def substitute(expr: str, rate_interval: str = "1m") -> str:
    return (expr.replace("$instance", ".*").replace("$target", ".*")
            .replace("$__rate_interval", rate_interval).replace("$__interval", "15s"))


def main(argv: list[str]) -> int:
    out = render()
    doc_table = table(out)
    if "--check" in argv:
        stale = [n for n, text in out.items() if not (OUT / n).exists() or (OUT / n).read_text() != text]
        if not TABLE.exists() or TABLE.read_text() != doc_table:
            stale.append(str(TABLE.name))
        if stale:
            print("out of date (run grafana/build.py): " + ", ".join(stale))
            return 1
        return 0
    OUT.mkdir(exist_ok=True)
    for name, text in out.items():
        (OUT / name).write_text(text)
        print(f"wrote {OUT / name} ({sum(1 for _ in exprs(json.loads(text)))} queries)")
    TABLE.write_text(doc_table)
    print(f"wrote {TABLE}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

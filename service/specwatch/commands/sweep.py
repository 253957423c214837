"""``specwatch sweep``: launch a server per configuration, wait for it, bench it, stop it, go on, explain.

    specwatch sweep --launch "python -m sglang.launch_server … --speculative-num-steps {steps}" \\
        --param steps=1,2,3,5,10 --baseline-launch "python -m sglang.launch_server …" \\
        --server-url http://127.0.0.1:30000 --max-tokens 500 --num-runs 5 --warmup 1 --out sweep-out

Each configuration's result is saved in ``OUT/results/`` as soon as it is finished; a rerun skips it.
A launch that fails, exits early or never becomes ready is reported with the tail of its output and the
sweep goes on. Ctrl-C (or SIGTERM) stops the current server's process group and keeps finished results.
``specwatch advise --from OUT/sweep.json`` prints the advisor's explanation again. Readiness is SGLang's
``/health_generate`` where the server has it, else ``/health`` (vLLM). Templates substitute ``{name}`` for
each ``--param`` and leave every other brace alone, so a vLLM JSON flag is written as it is:

    specwatch sweep --launch "vllm serve MODEL --speculative-config \\
        '{\\"method\\": \\"ngram\\", \\"num_speculative_tokens\\": {k}}'" --param k=1,2,3,5 \\
        --baseline-launch "vllm serve MODEL" --server-url http://127.0.0.1:8000
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import os
import re
import signal
import sys
import time
from pathlib import Path
from typing import Any

import orjson

from .. import options
from ..analysis import advisor, cost_model, load_sweep
from ..analysis import baseline as baseline_mod
from ..analysis.server_log import SamplePool
from ..errors import ConfigError, LaunchError, TargetError
from ..export import sweep_report
from ..probe.detect import speculation_of
from ..server.logparse import parse_line
from . import bench as bench_cmd
from .launch import Server, wait_ready

DEFAULTS: dict[str, Any] = {
    "launch": None, "param": [], "baseline_launch": None, "server_url": "http://127.0.0.1:30000", "targets": None,
    "log_file": None, "api": "auto", "max_tokens": 500, "num_runs": 5, "warmup": 1, "concurrency_levels": "1",
    "prompts": None, "temperature": 0.0, "connect_timeout_s": 5.0, "read_timeout_s": 60.0,
    "request_timeout_s": 600.0, "api_key": None, "api_key_file": None, "ca_file": None,
    "ready_timeout_s": 1800.0, "grace_s": 20.0, "out": "sweep-out",
}
BENCH_KEYS = ("api", "max_tokens", "num_runs", "warmup", "prompts", "temperature",
              "connect_timeout_s", "read_timeout_s", "request_timeout_s", "ca_file")


def parse_params(specs: list[str]) -> dict[str, list[str]]:
    params: dict[str, list[str]] = {}
    for spec in specs:
        name, sep, values = spec.partition("=")
        if not sep or not re.fullmatch(r"[a-z_][a-z0-9_]*", name) or not values:
            raise ConfigError(f"--param {spec!r}: expected NAME=V1,V2,… (e.g. steps=1,2,3,5,10)")
        params[name] = [v.strip() for v in values.split(",") if v.strip()]
    return params


FIELD_RE = re.compile(r"\{([a-z_][a-z0-9_]*)\}")


def fields(template: str) -> set[str]:
    """The ``{name}`` placeholders of a template. Any other brace is literal, so vLLM's JSON flags template
    as written: ``--speculative-config '{"method": "ngram", "num_speculative_tokens": {k}}'``."""
    return set(FIELD_RE.findall(template))


def substitute(template: str, cfg: dict[str, str]) -> str:
    return FIELD_RE.sub(lambda m: cfg[m.group(1)] if m.group(1) in cfg else m.group(0), template)


def check_templates(templates: dict[str, str | None], params: dict[str, list[str]]) -> None:
    for flag, t in templates.items():
        if t is None:
            continue
        unknown = fields(t) - set(params)
        if unknown:
            raise ConfigError(f"{flag} names {', '.join('{' + u + '}' for u in sorted(unknown))}, which no --param "
                              f"defines (defined: {', '.join(sorted(params)) or 'none'})")


def configs(params: dict[str, list[str]]) -> list[dict[str, str]]:
    names = list(params)
    return [dict(zip(names, combo, strict=True)) for combo in itertools.product(*(params[n] for n in names))]


def label(cfg: dict[str, str]) -> str:
    return ",".join(f"{k}={v}" for k, v in cfg.items()) or "baseline"


def log_stats(path: Path, offset: int) -> dict[str, Any]:
    """From the decode / SpecDecoding lines written after ``offset``: the pooled accept length and
    per-position acceptance (``analysis.server_log``'s weighting)."""
    pool = SamplePool()
    try:
        with path.open("rb") as f:
            f.seek(offset)
            data = f.read()
    except OSError:
        data = b""
    for ln in data.decode("utf-8", "replace").splitlines():
        sample = parse_line(ln).sample
        if sample is not None:
            pool.add(sample)
    return {"log_accept_length": pool.accept_length, "log_position_acceptance": pool.position_acceptance}


def run_one(a: dict[str, Any], spec: bench_cmd.BenchSpec, name: str, cfg: dict[str, str], launch: str | None,
            out: Path) -> dict[str, Any]:
    print(f"\n=== {name} ===", flush=True)
    result: dict[str, Any] = {"label": name, "params": cfg, "started": time.time()}
    server = None
    log_path = Path(substitute(a["log_file"], cfg)) if a["log_file"] else None
    try:
        if launch is not None:
            cmd = substitute(launch, cfg)
            result["command"] = cmd
            print(f"  launching: {cmd}", flush=True)
            server = Server(cmd, out / "logs" / f"{safe(name)}.out")
            log_path = log_path or server.out_path
        elapsed = wait_ready(spec.server_url, server, a["ready_timeout_s"], say=lambda m: print(m, flush=True))
        print(f"  ready after {elapsed:.0f}s", flush=True)
        offset = log_path.stat().st_size if log_path and log_path.exists() else 0
        import uvloop

        by_c: dict[str, dict[str, Any]] = {}
        doc: dict[str, Any] = {}
        for c in concurrency_levels(a):
            spec_c = level_spec(spec, c)
            if len(concurrency_levels(a)) > 1:
                print(f"  -- concurrency {c}: {spec_c.num_runs} requests ({spec_c.warmup} warmup)", flush=True)
            info, records = uvloop.run(bench_cmd.collect(spec_c, say=lambda m: print(m, flush=True)))
            analysed = bench_cmd.analyse(info, records)
            print(analysed.text, flush=True)
            reasons = bench_cmd.all_failed(analysed.doc)
            if reasons:
                raise LaunchError(f"every request failed at concurrency {c}: {reasons}")
            doc = doc or analysed.doc
            by_c[str(c)] = {"results": analysed.doc["results"], "runs": analysed.doc["runs"]}
        result["by_concurrency"] = by_c
        sinfo = doc["server_info"]
        steps, draft_tokens = speculation_of(str(sinfo.get("engine", "")), sinfo)
        result.update(status="ok", results=doc["results"], runs=doc["runs"], server_info=sinfo,
                      steps=steps, draft_tokens=draft_tokens, **(log_stats(log_path, offset) if log_path else {}))
        if not sinfo and cfg.get("steps", cfg.get("k", "")).isdigit():
            n = int(cfg.get("steps", cfg.get("k", "0")))  # an OpenAI-only server does not say: trust the template
            result.update(steps=n, draft_tokens=n + 1)
    except (LaunchError, TargetError, OSError) as exc:
        result.update(status="failed", error=str(exc))
        print(f"  FAILED: {exc}", flush=True)
    finally:
        if server is not None:
            server.stop(a["grace_s"])
    result["finished"] = time.time()
    return result


def concurrency_levels(a: dict[str, Any]) -> list[int]:
    return [int(x) for x in str(a["concurrency_levels"]).split(",")]


def level_spec(spec: bench_cmd.BenchSpec, c: int) -> bench_cmd.BenchSpec:
    """At ``c`` streams: at least two measured requests per stream (warmup stays sequential and as given: it
    warms the server, while the closed loop's first round fills the batch at once)."""
    if c == 1:
        return spec
    return dataclasses.replace(spec, concurrency=c, num_runs=max(spec.num_runs, 2 * c))


def safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.=-]+", "_", name).replace(",", "_")


def save_json(path: Path, doc: Any) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_bytes(orjson.dumps(doc, option=orjson.OPT_INDENT_2))
    tmp.replace(path)


Step = tuple[str, dict[str, str], str | None, str]  # label, params, launch command, URL


def plan(a: dict[str, Any]) -> list[Step]:
    if a["targets"]:
        urls = [u.strip() for u in a["targets"].split(",") if u.strip()]
        return [(f"target={u}", {}, None, options.parse_base_url(u)) for u in urls]
    if not a["launch"]:
        raise ConfigError("give --launch (with --param) or --targets")
    params = parse_params(a["param"])
    check_templates({"--launch": a["launch"], "--baseline-launch": a["baseline_launch"], "--log-file": a["log_file"]},
                    params)
    if a["baseline_launch"] is not None and a["log_file"] and fields(a["log_file"]):
        raise ConfigError("--log-file with {param}s cannot name the baseline's log: use a fixed path")
    url = a["server_url"]
    steps: list[Step] = [(label(c), c, a["launch"], url) for c in configs(params)]
    if a["baseline_launch"]:
        steps.insert(0, ("baseline", {}, a["baseline_launch"], url))
    return steps


def explain(results: list[dict[str, Any]]) -> str:
    """Print the table, the winner with its margin's 95% interval, and the advisor; returns the advice."""
    multi = len(load_sweep.levels(results)) > 1
    if multi:
        for c in load_sweep.levels(results):
            print(f"\n-- concurrency {c}\n" + sweep_report.table(at_level(results, c))[0])
        results = at_level(results, load_sweep.levels(results)[0])
        print("\n(the winner, advisor and tables below are at the lowest concurrency)")
    text, winner, _base_tps = sweep_report.table(results)
    print("\n" + text)
    if winner is not None:
        runner, m = sweep_report.winner_margin(results, winner)
        w_tps = winner["results"]["overall_tokens_per_second"]
        ahead = f", per-request tok/s {m.text()} against {runner['label']}" if m is not None and runner else ""
        print(f"\nwinner: {winner['label']} at {w_tps:.1f} tok/s{ahead}")
    ms = advisor.from_results(results)
    if len(ms) < 3:
        return ""
    base_decode = next((m.decode_tokens_per_second for m in ms if m.steps == 0), None)
    advice = advisor.report(ms, cost_model.fit(ms), base_decode, range(1, max(12, *(m.steps for m in ms)) + 1))
    print("\n" + advice)
    return advice


def at_level(results: list[dict[str, Any]], c: int) -> list[dict[str, Any]]:
    """The sweep's results as measured at concurrency ``c`` (for the single-level tables and advisor)."""
    out = []
    for r in results:
        x = load_sweep.cell(r, c)
        out.append(r | x if x is not None else r)
    return out


def by_load(results: list[dict[str, Any]], out: Path) -> str:
    """Per-load verdicts, schedule and batch model (printed), and the baseline curve file; '' for one level."""
    if len(load_sweep.levels(results)) < 2:
        return ""
    lowest = at_level(results, load_sweep.levels(results)[0])
    ms = advisor.from_results(lowest)
    base = cost_model.fit(ms) if len(ms) >= 3 else None
    steps = range(1, max(8, *(m.steps for m in ms)) + 1) if ms else range(1, 9)
    text = load_sweep.report(results, base, steps)
    print("\n" + text)
    curve = load_sweep.baseline_curve(results, f"specwatch sweep, {time.strftime('%Y-%m-%d %H:%M')}")
    if curve is not None:
        baseline_mod.save(out / "baseline-curve.json", curve)
        print(f"\nbaseline curve (plain decoding by load): {out / 'baseline-curve.json'} "
              "(specwatch run --baseline-curve FILE)")
    print(sweep_report.plot_load(out / "sweep-load.png", results))
    return text


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="specwatch sweep", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    options.add_flags(p, DEFAULTS)
    try:
        a = options.from_flags(p.parse_args(argv), DEFAULTS, os.environ)
        todo = plan(a)
        spec = bench_cmd.BenchSpec(**{k: a[k] for k in BENCH_KEYS}, api_key=options.api_key(a))
    except ConfigError as exc:
        print(f"specwatch sweep: {exc}", file=sys.stderr)
        return 2
    out = Path(a["out"])
    (out / "results").mkdir(parents=True, exist_ok=True)
    (out / "logs").mkdir(exist_ok=True)

    def on_term(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    # SIGINT too, explicitly: a sweep started from a script's background job inherits SIGINT ignored, and
    # Ctrl-C / kill -INT must still stop the current server and keep what finished
    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    results: list[dict[str, Any]] = []
    interrupted = False
    try:
        for name, cfg, launch, url in todo:
            saved = out / "results" / f"{safe(name)}.json"
            if saved.exists():
                print(f"\n=== {name} === (done earlier, skipped)")
                results.append(orjson.loads(saved.read_bytes()))
                continue
            res = run_one(a, dataclasses.replace(spec, server_url=url), name, cfg, launch, out)
            if res["status"] == "ok":
                save_json(saved, res)  # resumable: a rerun skips it; failures are retried
            results.append(res)
    except KeyboardInterrupt:
        interrupted = True
        print("\ninterrupted: the current server was stopped; finished configurations are kept", flush=True)
    load_text = by_load(results, out)
    _text, winner, base_tps = sweep_report.table(at_level(results, load_sweep.levels(results)[0])
                                                  if load_sweep.levels(results) else results)
    advice = explain(results)
    if load_text:
        advice = advice + "\n\n" + load_text if advice else load_text
    save_json(out / "sweep.json", {"configurations": results, "winner": winner["label"] if winner else None,
                                    "baseline_tokens_per_second": base_tps})
    sweep_report.write_csv(out / "sweep.csv", results)
    print(sweep_report.plot(out / "sweep.png", results, base_tps))
    (out / "report.html").write_text(sweep_report.html(results, winner, base_tps, advice), encoding="utf-8")
    print(f"\nresults: {out / 'sweep.json'}, {out / 'sweep.csv'}, {out / 'report.html'}")
    if interrupted:
        return 130
    return 0 if winner is not None else 1

"""``specwatch bench``: a bounded benchmark with the seed script's output shape, plus what it lacked.

Wires sources (load + client) to the recorder and prints the report (an exporter). ``--json`` writes the
same numbers and every run as one document; ``--hlog`` writes an HdrHistogram interval log.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from typing import Any

import aiohttp
import orjson

from . import prompts as prompt_sets
from .client import APIS, GenParams, ServerInfo, Target, Timeouts, detect, make_session
from .load import LoadPlan, PromptCycle, run
from .recorder import HlogWriter, Recorder, Stats, outcome_counts
from .records import RequestRecord
from .urls import UrlError, parse_base_url


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="specwatch bench", description=__doc__)
    p.add_argument("--server-url", required=True)
    p.add_argument("--api", default="auto", choices=("auto", *APIS))
    p.add_argument("--max-tokens", type=int, default=500)
    p.add_argument("--num-runs", type=int, default=5, help="measured requests")
    p.add_argument("--warmup", type=int, default=1, help="warm-up requests, recorded apart and discarded")
    p.add_argument("--concurrency", type=int, default=1, help="closed loop: streams in flight")
    p.add_argument("--rate", type=float, default=None, help="open loop: requests per second")
    p.add_argument("--poisson", action="store_true", help="open loop: Poisson arrivals instead of constant")
    p.add_argument("--max-in-flight", type=int, default=256, help="open loop: cap on streams in flight")
    p.add_argument("--prompts", default=None, help="JSONL (text or messages) or ShareGPT JSON")
    p.add_argument("--temperature", type=float, default=0.0)
    eos = p.add_mutually_exclusive_group()
    eos.add_argument("--ignore-eos", dest="ignore_eos", action="store_true", default=True,
                     help="generate exactly --max-tokens (default)")
    eos.add_argument("--no-ignore-eos", dest="ignore_eos", action="store_false")
    p.add_argument("--connect-timeout", type=float, default=10.0)
    p.add_argument("--read-timeout", type=float, default=60.0)
    p.add_argument("--json", default=None, help="write the results document here")
    p.add_argument("--hlog", default=None, help="write an HdrHistogram interval log here")
    p.add_argument("--seed", type=int, default=0)
    return p


def validate(p: argparse.ArgumentParser, a: argparse.Namespace) -> None:
    try:
        a.server_url = parse_base_url(a.server_url)
    except UrlError as exc:
        p.error(f"--server-url: {exc}")
    checks = [("--max-tokens", a.max_tokens >= 1), ("--num-runs", a.num_runs >= 1), ("--warmup", a.warmup >= 0),
              ("--concurrency", a.concurrency >= 1), ("--max-in-flight", a.max_in_flight >= 1),
              ("--rate", a.rate is None or a.rate > 0), ("--temperature", a.temperature >= 0),
              ("--connect-timeout", a.connect_timeout > 0), ("--read-timeout", a.read_timeout > 0)]
    for flag, ok in checks:
        if not ok:
            p.error(f"{flag}: value {getattr(a, flag[2:].replace('-', '_'))!r} is out of range")


class Printer:
    """Prints the seed script's per-request lines as records arrive."""

    def __init__(self, plan: LoadPlan) -> None:
        self.plan = plan
        self.warm = 0
        self.runs = 0
        self.records: list[RequestRecord] = []

    def __call__(self, rec: RequestRecord) -> None:
        if rec.warmup:
            self.warm += 1
            state = f"done ({rec.output_tokens} tokens)" if rec.ok else f"failed ({rec.outcome}: {rec.error})"
            print(f"  Warmup {self.warm}/{self.plan.warmup} {state}")
            if self.warm == self.plan.warmup:
                print()
            return
        self.runs += 1
        self.records.append(rec)
        head = f"  Run {self.runs}/{self.plan.requests}:"
        if rec.ok:
            secs = rec.service_ns / 1e9
            print(f"{head} {rec.output_tokens} tokens in {secs:.2f}s = {rec.output_tokens / secs:.1f} tok/s "
                  f"(prompt: {rec.prompt_tokens} toks)")
        else:
            print(f"{head} failed ({rec.outcome}: {rec.error})")


def _ms(v: float | None) -> str:
    return "n/a" if v is None else f"{v * 1000:.2f} ms"


def _fmt(v: float | None, spec: str = ".2f") -> str:
    return "n/a" if v is None else format(v, spec)


def summarize(stats: Stats, records: list[RequestRecord], wall_s: float, server_avg: float | None) -> dict[str, Any]:
    ok = [r for r in records if r.ok and r.service_ns > 0]
    per = [r.output_tokens / (r.service_ns / 1e9) for r in ok]
    q = {name: {f"p{int(x * 100)}": stats.quantile(name, x) for x in (0.5, 0.9, 0.99)} | {"mean": stats.mean(name)}
         for name in ("ttft", "itl", "inter_chunk", "e2e", "service", "schedule_lag", "tokens_per_chunk")}
    return {
        "requests": len(records), "ok": len(ok),
        "overall_tokens_per_second": sum(r.output_tokens for r in ok) / wall_s if wall_s > 0 else None,
        "avg_tokens_per_second": statistics.fmean(per) if per else None,
        "min_tokens_per_second": min(per) if per else None,
        "max_tokens_per_second": max(per) if per else None,
        "decode_tokens_per_second": stats.decode_tokens_per_second,
        "latency_seconds": {k: v for k, v in q.items() if k != "tokens_per_chunk"},
        "tokens_per_chunk": q["tokens_per_chunk"],
        "accept_length_client": stats.accept_length,
        "accept_length_server_per_request": stats.server_accept_length,
        "accept_length_server_lifetime": server_avg,
        "verify_rounds": stats.verify_ct,
        "position_acceptance": list(stats.position_acceptance),
        "outcomes": outcome_counts(stats),
        "out_of_range": dict(stats.out_of_range),
        "approximated_token_counts": stats.approx_requests,
    }


def print_report(s: dict[str, Any], by_domain: dict[str, Stats], records: list[RequestRecord]) -> None:
    lat = s["latency_seconds"]
    print("\n  ========== Results ==========")
    print(f"  Overall tok/s: {_fmt(s['overall_tokens_per_second'], '.1f')}")
    print(f"  Avg tok/s:     {_fmt(s['avg_tokens_per_second'], '.1f')}")
    print(f"  Min tok/s:     {_fmt(s['min_tokens_per_second'], '.1f')}")
    print(f"  Max tok/s:     {_fmt(s['max_tokens_per_second'], '.1f')}")
    print(f"  Decode tok/s:  {_fmt(s['decode_tokens_per_second'], '.1f')}  (tokens after the first / decode time)")
    print(f"  TTFT:          p50 {_ms(lat['ttft']['p50'])}, p99 {_ms(lat['ttft']['p99'])}")
    print(f"  ITL per token: p50 {_ms(lat['itl']['p50'])}, p90 {_ms(lat['itl']['p90'])}, "
          f"p99 {_ms(lat['itl']['p99'])}, mean {_ms(lat['itl']['mean'])}")
    print(f"  Inter-chunk:   p50 {_ms(lat['inter_chunk']['p50'])}, p99 {_ms(lat['inter_chunk']['p99'])}")
    print(f"  Tokens/chunk:  mean {_fmt(s['tokens_per_chunk']['mean'])}")
    server = s["accept_length_server_per_request"] or s["accept_length_server_lifetime"]
    print(f"  Accept length: client {_fmt(s['accept_length_client'])}"
          + (f", server {server:.2f}" if server is not None else "")
          + ("" if s["accept_length_client"] is not None else "  (server reports no spec_verify_ct)"))
    if (lat["schedule_lag"]["p99"] or 0) > 0.001:
        print(f"  Schedule lag:  p99 {_ms(lat['schedule_lag']['p99'])}  (latency is measured from the intended start)")
    failed = {k: v for k, v in s["outcomes"].items() if k != "ok" and v}
    if failed:
        last = {r.outcome.value: r.error for r in records if not r.ok}
        print("  Failures:      " + ", ".join(f"{k}={v}" for k, v in failed.items()))
        for k, err in last.items():
            print(f"    last {k}: {err}")
    else:
        print("  Failures:      none")
    if s["out_of_range"]:
        print("  Out of range:  " + ", ".join(f"{k}={v}" for k, v in s["out_of_range"].items())
              + " (values outside the HDR histograms' range, counted and left out)")
    if s["approximated_token_counts"]:
        print(f"  Note: {s['approximated_token_counts']} request(s) had no per-chunk usage; per-chunk token "
              "counts were apportioned from the final total")
    if by_domain:
        print("\n  By domain:      requests  decode tok/s  accept length")
        for dom in sorted(by_domain):
            st = by_domain[dom]
            print(f"    {dom:<12} {st.outcomes.get('ok', 0):>8}  {_fmt(st.decode_tokens_per_second, '>12.1f')}  "
                  f"{_fmt(st.accept_length, '>13.2f')}")


def _run_doc(r: RequestRecord) -> dict[str, Any]:
    return {"prompt_id": r.prompt_id, "domain": r.domain, "outcome": r.outcome.value, "status": r.status,
            "error": r.error, "output_tokens": r.output_tokens, "prompt_tokens": r.prompt_tokens,
            "service_s": r.service_ns / 1e9, "e2e_s": r.e2e_ns / 1e9, "schedule_lag_s": r.schedule_lag_ns / 1e9,
            "ttft_s": None if r.ttft_ns is None else r.ttft_ns / 1e9, "chunks": len(r.chunk_ns),
            "decode_tokens_per_second": r.decode_tokens_per_second, "accept_length": r.accept_length,
            "server_accept_length": r.spec.accept_length if r.spec else None,
            "verify_ct": r.spec.verify_ct if r.spec else None, "tokens_exact": r.tokens_exact}


async def _server_avg_accept(session: aiohttp.ClientSession, info: ServerInfo, base: str) -> float | None:
    if info.api != "sglang":
        return None
    for path in ("/server_info", "/get_server_info"):
        try:
            async with session.get(base + path) as resp:
                if resp.status == 200:
                    doc = orjson.loads(await resp.read())
                    states = doc.get("internal_states") or [doc]
                    v = states[0].get("avg_spec_accept_length") if isinstance(states[0], dict) else None
                    return float(v) if isinstance(v, (int, float)) else None
        except (aiohttp.ClientError, TimeoutError, orjson.JSONDecodeError):
            continue
    return None


class DetectError(Exception):
    pass


async def collect(a: argparse.Namespace) -> dict[str, Any]:
    """Run the benchmark, printing the seed script's lines and the report; return the results document.

    Raises ``DetectError`` when ``--api auto`` cannot reach or recognise the server."""
    plist = prompt_sets.load(a.prompts) if a.prompts else prompt_sets.builtin()
    plan = LoadPlan(concurrency=a.concurrency, rate_per_s=a.rate, poisson=a.poisson, max_in_flight=a.max_in_flight,
                    warmup=a.warmup, requests=a.num_runs, seed=a.seed)
    params = GenParams(max_tokens=a.max_tokens, temperature=a.temperature, ignore_eos=a.ignore_eos)
    streams = a.max_in_flight if a.rate else a.concurrency
    hlog_file = open(a.hlog, "w", encoding="utf-8") if a.hlog else None  # noqa: SIM115
    recorder = Recorder(interval_s=1.0, windows_s=(), hlog=HlogWriter(hlog_file, time.time()) if hlog_file else None)
    printer = Printer(plan)
    async with make_session(streams + 4, Timeouts(a.connect_timeout, a.read_timeout)) as session:
        try:
            info = await detect(session, a.server_url, a.api)
        except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
            if a.api == "auto":
                raise DetectError(f"cannot detect the API of {a.server_url}: {exc or type(exc).__name__}. "
                                  "Start the server or pass --api.") from None
            info = ServerInfo(a.api, "default", None, {})
        target = Target("spec", a.server_url, info.api, info.model)
        mode = f"rate={a.rate}/s{' poisson' if a.poisson else ''}" if a.rate else f"concurrency={a.concurrency}"
        print(f"Benchmarking {a.server_url} (api {info.api}, {mode})")
        print(f"  max_tokens={a.max_tokens}, num_runs={a.num_runs}, warmup={a.warmup}\n")

        def sink(rec: RequestRecord) -> None:
            printer(rec)
            recorder.record(rec)
            recorder.record_domain(rec)

        await run(session, PromptCycle(plist, [target]), params, plan, sink, asyncio.Event())
        end_ns = time.monotonic_ns()
        recorder.tick()
        server_avg = await _server_avg_accept(session, info, a.server_url)
    if hlog_file is not None:
        hlog_file.close()
    measured = printer.records
    first_send = min((r.sent_ns for r in measured), default=end_ns)
    stats = recorder.cumulative.get("spec", Stats())
    summary = summarize(stats, measured, (end_ns - first_send) / 1e9, server_avg)
    print_report(summary, dict(recorder.by_domain), measured)
    return {"server_url": a.server_url, "api": info.api, "model": info.model, "server_info": info.info,
            "config": {k: v for k, v in vars(a).items() if k not in ("json", "hlog")},
            "results": summary,
            "by_domain": {d: {"ok": st.outcomes.get("ok", 0), "decode_tokens_per_second":
                              st.decode_tokens_per_second, "accept_length": st.accept_length}
                          for d, st in sorted(recorder.by_domain.items())},
            "runs": [_run_doc(r) for r in measured]}


def all_failed(doc: dict[str, Any]) -> str | None:
    """The reasons when every measured request failed, else None."""
    runs = doc["runs"]
    if runs and all(r["outcome"] != "ok" for r in runs):
        return "; ".join(sorted({f"{r['outcome']}: {r['error']}" for r in runs})[:3])
    return None


async def bench(a: argparse.Namespace) -> int:
    try:
        doc = await collect(a)
    except DetectError as exc:
        print(f"specwatch bench: {exc}", file=sys.stderr)
        return 1
    if a.json:
        with open(a.json, "wb") as f:
            f.write(orjson.dumps(doc, option=orjson.OPT_INDENT_2))
    reasons = all_failed(doc)
    if reasons:
        print(f"specwatch bench: every request failed ({reasons})", file=sys.stderr)
        return 1
    return 0


def main(argv: list[str]) -> int:
    p = build_parser()
    a = p.parse_args(argv)
    validate(p, a)
    import uvloop

    try:
        return uvloop.run(bench(a))
    except prompt_sets.PromptFileError as exc:
        print(f"specwatch bench: {exc}", file=sys.stderr)
        return 2

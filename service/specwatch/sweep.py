"""``specwatch sweep``: launch a server per configuration, wait for it, bench it, stop it, go on, explain.

    specwatch sweep --launch "python -m sglang.launch_server … --speculative-num-steps {steps}" \\
        --param steps=1,2,3,5,10 --baseline-launch "python -m sglang.launch_server …" \\
        --server-url http://127.0.0.1:30000 --max-tokens 500 --num-runs 5 --warmup 1 --out sweep-out

Each configuration's result is saved in ``OUT/results/`` as soon as it is finished; a rerun skips it.
A launch that fails, exits early or never becomes ready is reported with the tail of its output and the
sweep goes on. Ctrl-C (or SIGTERM) stops the current server's process group and keeps finished results.
``specwatch advise --from OUT/sweep.json`` prints the advisor's explanation again.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import itertools
import os
import re
import signal
import string
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import orjson

from . import advisor
from . import bench as bench_mod
from .logparse import parse_line
from .urls import UrlError, parse_base_url

TAIL_LINES = 15


class SweepError(Exception):
    pass


def parse_params(specs: list[str]) -> dict[str, list[str]]:
    params: dict[str, list[str]] = {}
    for spec in specs:
        name, sep, values = spec.partition("=")
        if not sep or not re.fullmatch(r"[a-z_][a-z0-9_]*", name) or not values:
            raise SweepError(f"--param {spec!r}: expected NAME=V1,V2,… (e.g. steps=1,2,3,5,10)")
        params[name] = [v.strip() for v in values.split(",") if v.strip()]
    return params


def fields(template: str) -> set[str]:
    return {f for _, f, _, _ in string.Formatter().parse(template) if f}


def check_templates(templates: dict[str, str | None], params: dict[str, list[str]]) -> None:
    for flag, t in templates.items():
        if t is None:
            continue
        unknown = fields(t) - set(params)
        if unknown:
            raise SweepError(f"{flag} names {', '.join('{' + u + '}' for u in sorted(unknown))}, which no --param "
                             f"defines (defined: {', '.join(sorted(params)) or 'none'})")


def configs(params: dict[str, list[str]]) -> list[dict[str, str]]:
    names = list(params)
    return [dict(zip(names, combo, strict=True)) for combo in itertools.product(*(params[n] for n in names))]


def label(cfg: dict[str, str]) -> str:
    return ",".join(f"{k}={v}" for k, v in cfg.items()) or "baseline"


class Server:
    """One launched server in its own process group, with its output in a file."""

    def __init__(self, cmd: str, out_path: Path) -> None:
        self.out_path = out_path
        self.fh = out_path.open("wb")
        self.proc = subprocess.Popen(cmd, shell=True, stdout=self.fh, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, start_new_session=True)

    def tail(self, n: int = TAIL_LINES) -> str:
        lines = self.out_path.read_text(errors="replace").splitlines()
        return "\n".join("    | " + ln for ln in lines[-n:])

    def stop(self, grace_s: float) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(grace_s)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        else:
            with contextlib.suppress(ProcessLookupError):  # children left behind by a shell that exited
                os.killpg(self.proc.pid, signal.SIGKILL)
        self.fh.close()


def wait_ready(url: str, server: Server | None, timeout_s: float) -> None:
    start = time.monotonic()
    last_report = -10.0
    tty = sys.stdout.isatty()
    while True:
        elapsed = time.monotonic() - start
        if server is not None and server.proc.poll() is not None:
            raise SweepError(f"exited with status {server.proc.returncode} before becoming ready\n{server.tail()}")
        with contextlib.suppress(OSError, urllib.error.URLError), \
                urllib.request.urlopen(url + "/health_generate", timeout=5) as r:
            if r.status == 200:
                if tty:
                    print()
                print(f"  ready after {elapsed:.0f}s", flush=True)
                return
        if elapsed > timeout_s:
            raise SweepError(f"not ready after {timeout_s:.0f}s" + (f"\n{server.tail()}" if server else ""))
        if tty:
            print(f"\r  waiting for {url}/health_generate … {elapsed:.0f}s", end="", flush=True)
        elif elapsed - last_report >= 10:
            print(f"  waiting for {url}/health_generate … {elapsed:.0f}s", flush=True)
            last_report = elapsed
        time.sleep(1.0)


def log_stats(path: Path, offset: int) -> dict[str, Any]:
    """From the decode / SpecDecoding lines written after ``offset``: mean accept length and (vLLM) the
    per-position acceptance weighted by drafted tokens."""
    try:
        with path.open("rb") as f:
            f.seek(offset)
            data = f.read()
    except OSError:
        return {"log_accept_length": None, "log_position_acceptance": []}
    samples = [v.sample for ln in data.decode("utf-8", "replace").splitlines()
               if (v := parse_line(ln)).sample is not None and v.sample.source != "sglang_prefill"]
    lengths = [s.accept_length for s in samples if s.accept_length is not None]
    pos: list[float] = []
    weight = 0.0
    for s in samples:
        if s.position_acceptance:
            w = float(s.drafted_tokens or 1)
            pos += [0.0] * (len(s.position_acceptance) - len(pos))
            for i, a in enumerate(s.position_acceptance):
                pos[i] += a * w
            weight += w
    return {"log_accept_length": sum(lengths) / len(lengths) if lengths else None,
            "log_position_acceptance": [p / weight for p in pos] if weight else []}


def bench_args(a: argparse.Namespace, url: str) -> argparse.Namespace:
    args = ["--server-url", url, "--max-tokens", str(a.max_tokens), "--num-runs", str(a.num_runs), "--warmup",
            str(a.warmup), "--concurrency", str(a.concurrency), "--api", a.api]
    if a.prompts:
        args += ["--prompts", a.prompts]
    p = bench_mod.build_parser()
    ns = p.parse_args(args)
    bench_mod.validate(p, ns)
    return ns


def run_one(a: argparse.Namespace, name: str, cfg: dict[str, str], launch: str | None, url: str,
            out: Path) -> dict[str, Any]:
    print(f"\n=== {name} ===", flush=True)
    result: dict[str, Any] = {"label": name, "params": cfg, "started": time.time()}
    server = None
    log_path = Path(a.log_file.format(**cfg)) if a.log_file else None
    try:
        if launch is not None:
            cmd = launch.format(**cfg)
            result["command"] = cmd
            print(f"  launching: {cmd}", flush=True)
            server = Server(cmd, out / "logs" / f"{safe(name)}.out")
            log_path = log_path or server.out_path
        wait_ready(url, server, a.ready_timeout)
        offset = log_path.stat().st_size if log_path and log_path.exists() else 0
        import uvloop

        doc = uvloop.run(bench_mod.collect(bench_args(a, url)))
        reasons = bench_mod.all_failed(doc)
        if reasons:
            raise SweepError(f"every request failed: {reasons}")
        info = doc["server_info"]
        result.update(status="ok", results=doc["results"], runs=doc["runs"], server_info=info,
                      steps=int(info.get("speculative_num_steps") or 0) if info.get("speculative_algorithm") else 0,
                      draft_tokens=int(info.get("speculative_num_draft_tokens") or 1),
                      **(log_stats(log_path, offset) if log_path else {}))
        if not info and "steps" in cfg:  # an OpenAI-only server does not say: trust the template
            result.update(steps=int(cfg["steps"]), draft_tokens=int(cfg["steps"]) + 1)
    except (SweepError, bench_mod.DetectError, OSError) as exc:
        result.update(status="failed", error=str(exc))
        print(f"  FAILED: {exc}", flush=True)
    finally:
        if server is not None:
            server.stop(a.grace)
    result["finished"] = time.time()
    return result


def safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.=-]+", "_", name).replace(",", "_")


def save_json(path: Path, doc: Any) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_bytes(orjson.dumps(doc, option=orjson.OPT_INDENT_2))
    tmp.replace(path)


def table(results: list[dict[str, Any]]) -> tuple[str, dict[str, Any] | None, float | None]:
    ok = [r for r in results if r["status"] == "ok"]
    base = next((r for r in ok if r["label"] == "baseline"), None)
    base_tps = base["results"]["overall_tokens_per_second"] if base else None
    lines = [f"{'configuration':<24}{'tok/s':>8}{'decode':>8}{'accept':>8}{'log acc':>9}{'cycle ms':>10}"
             f"{'vs baseline':>13}"]
    for r in results:
        if r["status"] != "ok":
            lines.append(f"{r['label']:<24}  FAILED: {r['error'].splitlines()[0]}")
            continue
        res = r["results"]
        al = res.get("accept_length_client") or 1.0
        cyc = al / res["decode_tokens_per_second"] * 1e3
        vs = f"{100 * (res['overall_tokens_per_second'] / base_tps - 1):+.1f}%" if base_tps else "-"
        log_al = f"{r['log_accept_length']:.2f}" if r.get("log_accept_length") else "-"
        lines.append(f"{r['label']:<24}{res['overall_tokens_per_second']:>8.1f}{res['decode_tokens_per_second']:>8.1f}"
                     f"{al:>8.2f}{log_al:>9}{cyc:>10.2f}{vs:>13}")
    winner = max(ok, key=lambda r: r["results"]["overall_tokens_per_second"], default=None)
    return "\n".join(lines), winner, base_tps


def write_csv(path: Path, results: list[dict[str, Any]]) -> None:
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["configuration", "status", "tokens_per_second", "decode_tokens_per_second", "accept_length",
                    "log_accept_length", "ttft_p50_s", "itl_mean_s", "error"])
        for r in results:
            res = r.get("results") or {}
            lat = res.get("latency_seconds", {})
            w.writerow([r["label"], r["status"], res.get("overall_tokens_per_second"),
                        res.get("decode_tokens_per_second"), res.get("accept_length_client"),
                        r.get("log_accept_length"), lat.get("ttft", {}).get("p50"), lat.get("itl", {}).get("mean"),
                        r.get("error", "")])


def plot(path: Path, results: list[dict[str, Any]], base_tps: float | None) -> str:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "plot skipped: install the plot extra (pip install 'specwatch[plot]')"
    pts = sorted((r["steps"], r["results"]["overall_tokens_per_second"], r["results"].get("accept_length_client"))
                 for r in results if r["status"] == "ok" and r.get("steps"))
    if not pts:
        return "plot skipped: no speculative configuration finished"
    fig, ax = plt.subplots(figsize=(7, 4.2), dpi=110)
    ax.plot([p[0] for p in pts], [p[1] for p in pts], "o-", color="tab:blue", label="tok/s")
    if base_tps:
        ax.axhline(base_tps, color="tab:red", ls="--", label=f"baseline {base_tps:.1f} tok/s")
    ax.set_xlabel("draft steps")
    ax.set_xticks([p[0] for p in pts])
    ax.set_ylabel("tok/s")
    ax2 = ax.twinx()
    ax2.plot([p[0] for p in pts], [p[2] or 1.0 for p in pts], "s:", color="tab:green", label="accept length")
    ax2.set_ylabel("accept length")
    handles = ax.get_legend_handles_labels()[0] + ax2.get_legend_handles_labels()[0]
    ax.legend(handles, [str(h.get_label()) for h in handles], loc="upper right")
    ax.set_title("specwatch sweep: tok/s and accept length by draft steps")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return f"plot: {path}"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="specwatch sweep", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--launch", help="server command with {param} placeholders")
    p.add_argument("--param", action="append", default=[], help="NAME=V1,V2,… (several make a grid)")
    p.add_argument("--baseline-launch", help="the same server without speculation")
    p.add_argument("--server-url", default="http://127.0.0.1:30000")
    p.add_argument("--targets", help="URL,URL of servers already running (instead of --launch)")
    p.add_argument("--log-file", help="the server's log file, may use {param}s (default: its captured output)")
    p.add_argument("--api", default="auto", choices=("auto", "sglang", "completions", "chat"))
    p.add_argument("--max-tokens", type=int, default=500)
    p.add_argument("--num-runs", type=int, default=5)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--concurrency", type=int, default=1)
    p.add_argument("--prompts")
    p.add_argument("--ready-timeout", type=float, default=1800.0, help="seconds (default 30 min)")
    p.add_argument("--grace", type=float, default=20.0, help="seconds between SIGTERM and SIGKILL")
    p.add_argument("--out", default="sweep-out")
    return p


def plan(a: argparse.Namespace) -> list[tuple[str, dict[str, str], str | None, str]]:
    if a.targets:
        urls = [u.strip() for u in a.targets.split(",") if u.strip()]
        return [(f"target={u}", {}, None, parse_base_url(u)) for u in urls]
    if not a.launch:
        raise SweepError("give --launch (with --param) or --targets")
    params = parse_params(a.param)
    check_templates({"--launch": a.launch, "--baseline-launch": a.baseline_launch, "--log-file": a.log_file},
                    params)
    if a.baseline_launch is not None and a.log_file and fields(a.log_file):
        raise SweepError("--log-file with {param}s cannot name the baseline's log: use a fixed path")
    url = parse_base_url(a.server_url)
    steps = [(label(c), c, a.launch, url) for c in configs(params)]
    if a.baseline_launch:
        steps.insert(0, ("baseline", {}, a.baseline_launch, url))
    return steps


def main(argv: list[str]) -> int:
    p = build_parser()
    a = p.parse_args(argv)
    try:
        todo = plan(a)
    except (SweepError, UrlError) as exc:
        p.error(str(exc))
    out = Path(a.out)
    (out / "results").mkdir(parents=True, exist_ok=True)
    (out / "logs").mkdir(exist_ok=True)

    def on_term(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_term)
    results: list[dict[str, Any]] = []
    interrupted = False
    try:
        for name, cfg, launch, url in todo:
            saved = out / "results" / f"{safe(name)}.json"
            if saved.exists():
                print(f"\n=== {name} === (done earlier, skipped)")
                results.append(orjson.loads(saved.read_bytes()))
                continue
            res = run_one(a, name, cfg, launch, url, out)
            if res["status"] == "ok":
                save_json(saved, res)  # resumable: a rerun skips it; failures are retried
            results.append(res)
    except KeyboardInterrupt:
        interrupted = True
        print("\ninterrupted: the current server was stopped; finished configurations are kept", flush=True)
    text, winner, base_tps = table(results)
    print("\n" + text)
    if winner is not None:
        others = [r for r in results if r["status"] == "ok" and r is not winner]
        runner = max(others, key=lambda r: r["results"]["overall_tokens_per_second"], default=None)
        margin = (f", {100 * (winner['results']['overall_tokens_per_second'] / runner['results']['overall_tokens_per_second'] - 1):.1f}% ahead of {runner['label']}"  # noqa: E501
                  if runner else "")
        print(f"\nwinner: {winner['label']} at {winner['results']['overall_tokens_per_second']:.1f} tok/s{margin}")
    save_json(out / "sweep.json", {"configurations": results, "winner": winner["label"] if winner else None,
                                    "baseline_tokens_per_second": base_tps})
    write_csv(out / "sweep.csv", results)
    print(plot(out / "sweep.png", results, base_tps))
    ms = advisor.from_results(results)
    if len(ms) >= 3:
        base_decode = next((m.decode_tokens_per_second for m in ms if m.steps == 0), None)
        print("\n" + advisor.report(ms, advisor.fit(ms), base_decode, range(1, max(12, *(m.steps for m in ms)) + 1)))
    print(f"\nresults: {out / 'sweep.json'}, {out / 'sweep.csv'}")
    if interrupted:
        return 130
    return 0 if winner is not None else 1


def advise_main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="specwatch advise", description=advisor.__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--from", dest="src", required=True, help="sweep.json written by specwatch sweep")
    p.add_argument("--max-steps", type=int, default=12)
    a = p.parse_args(argv)
    try:
        doc = orjson.loads(Path(a.src).read_bytes())
        ms = advisor.from_results(doc["configurations"])
        f = advisor.fit(ms, a.max_steps)
    except (OSError, orjson.JSONDecodeError, KeyError, ValueError) as exc:
        print(f"specwatch advise: {a.src}: {exc}", file=sys.stderr)
        return 2
    base = next((m.decode_tokens_per_second for m in ms if m.steps == 0), None)
    print(advisor.report(ms, f, base, range(1, max(a.max_steps, *(m.steps for m in ms)) + 1)))
    return 0

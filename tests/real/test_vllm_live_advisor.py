"""The live advisor on real EAGLE-3: the daemon watches a k=3 server and predicts the decode tok/s of
step counts it never ran (and the ``--advisor-prior`` sweep did not include); servers at those step counts,
started side by side, then measure them.

On two cores a server's speed drifts over minutes (in CI a sweep's sequential starts disagreed by up to 37%),
so the truth is measured interleaved: ``bench`` on every server in turn, the order rotated each round, and
each server's rate pooled over the rounds. A drift of the whole machine then falls on all of them alike. What
interleaving does not cancel is a server's age: the tier's own k=3 server, started a quarter of an hour
earlier, measured 8-10% faster than k=2 and k=5 servers started later beside each other in two of four runs
(k=5 over k=2 agreed with the advisor within 5% in all four). So the daemon watches a k=3 server started
beside the truth's, and is compared with it: the tier's EAGLE-3 servers at 1, 2, 3 and 5 steps
(``eagle3_ladder``), started together, serve the prior, the daemon and the truth.

The machine's own speed moves too, by a third within minutes, and a prior swept at another speed than the
daemon's minute misfits the cost shape; so the predictions against the truth are printed, and what is asserted
is the advice: the same best (measured within 10% of the best), the advised flags starting vLLM at its step
count.

Two cases on the distilled head: greedy, where speculation wins, and temperature 0.8, where the target's
sampled tokens leave the draft's greedy chain (per-position acceptance about 0.55, 0.4, 0.33 at k=3) and plain
decoding wins at every step count: the seed's "a traffic mix can silently make speculation a net loss".

The greedy truth (plain decoding and the ladder, interleaved) is measured once for the module
(``greedy_truth``): the live advisor's greedy case and tune read the same servers with the same traffic, and
measuring it twice cost 40 s of a tier over its budget."""

from __future__ import annotations

import json
import shlex
import statistics
import subprocess
import time
from pathlib import Path

import pytest
from realserver import COMPARISONS, TIMINGS, RealServer, pinned, start_side_by_side, stop_together
from serve_vllm import speculative_config
from vllm_truth import metrics

import bench_client
from conftest import free_port, http_json, specwatch_cmd, wait_until
from specwatch.analysis.winner import TIE_WITHIN

pytestmark = pytest.mark.integration
PRIOR_STEPS = (1, 3)  # the prior sweep's step counts (with plain decoding)
PREDICTED = (2, 5)  # never run by the daemon, not in the prior
ROUNDS, RUNS, MAX_TOKENS = 3, 8, 128
TOLERANCE = 0.10  # the issue's, reported


def head_config(k: int) -> tuple[str, ...]:
    """``vllm serve`` flags for EAGLE-3 with the tier's head at ``k`` steps, as serve_vllm.py gives them."""
    return ("--speculative-config", json.dumps(speculative_config(k, "eagle3")),
            "--per-request-spec-decode-metrics", "summary")



def decode_tps(url: str, temperature: float, prompts: Path, tmp: Path) -> float:
    out = tmp / f"bench-{free_port()}.json"
    p = bench_client.run([
        "bench", "--server-url", url, "--temperature", str(temperature), "--max-tokens", str(MAX_TOKENS),
        "--num-runs", str(RUNS), "--warmup", "1", "--prompts", str(prompts), "--json", str(out)], timeout_s=300,
        placement=pinned([]))
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    return float(json.loads(out.read_text())["results"]["decode_tokens_per_second"])


def interleaved(urls: dict[int, str], temperature: float, prompts: Path, tmp: Path
                ) -> tuple[dict[int, float], dict[int, float]]:
    """Per-stream decode tok/s of each server (by step count), ``bench`` on each in turn, ``ROUNDS`` times with
    the order rotated, pooled: what a drift over the minutes this takes does to one it does to all. With each
    mean's standard error over the rounds."""
    rates: dict[int, list[float]] = {s: [] for s in urls}
    order = list(urls)
    for r in range(ROUNDS):
        for s in order[r % len(order):] + order[:r % len(order)]:
            rates[s].append(decode_tps(urls[s], temperature, prompts, tmp))
    return ({s: statistics.fmean(v) for s, v in rates.items()},
            {s: statistics.stdev(v) / len(v) ** 0.5 for s, v in rates.items()})


class GreedyTruth:
    """Plain decoding and the ladder's step counts (0, 1, 2, 3, 5) measured greedy, interleaved
    (``interleaved``), on first use; every later use reads the same figures."""

    def __init__(self, urls: dict[int, str], prompts: Path, tmp: Path) -> None:
        self.urls, self.prompts, self.tmp = urls, prompts, tmp
        self.measured: tuple[dict[int, float], dict[int, float]] | None = None

    def __call__(self) -> tuple[dict[int, float], dict[int, float]]:
        if self.measured is None:
            t0 = time.monotonic()
            self.measured = interleaved(self.urls, 0.0, self.prompts, self.tmp)
            TIMINGS[f"greedy truth, {len(self.urls)} servers interleaved, for the advisor and tune (s)"] = (
                time.monotonic() - t0)
        return self.measured


@pytest.fixture(scope="module")
def greedy_truth(plain_server, eagle3_ladder, heldout_prompts, tmp_path_factory) -> GreedyTruth:
    return GreedyTruth({0: plain_server.url, **{k: eagle3_ladder[k].url for k in sorted(eagle3_ladder)}},
                       heldout_prompts, tmp_path_factory.mktemp("truth"))


def prior_sweep(urls: list[str], prompts: Path, tmp: Path) -> Path:
    """The ``--advisor-prior``: ``sweep --targets`` over plain decoding and the prior's step counts."""
    out = tmp / "prior"
    p = subprocess.run(pinned(specwatch_cmd(
        "sweep", "--targets", ",".join(urls), "--max-tokens", str(MAX_TOKENS), "--num-runs", str(2 * RUNS),
        "--warmup", "1", "--temperature", "0", "--prompts", str(prompts), "--out", str(out))),
        capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-2000:]
    doc = json.loads((out / "sweep.json").read_text())
    assert sorted(c["steps"] for c in doc["configurations"]) == [0, *PRIOR_STEPS]  # from vLLM's /metrics
    return out / "sweep.json"


def live_advice(procs, spec: RealServer, plain_tps: float, prior: Path, temperature: float,
                prompts: Path, name: str) -> dict:
    """The daemon on a k=3 server, with plain decoding's rate for its traffic (as an operator would give it from
    a sweep or a bench; an A/B server would share the Worker's CPU here, its EngineCore spinning after each of
    its requests) and the server's own ``--speculative-config`` (vLLM does not report it: the advice is then a
    whole flag), until its one-stream bucket's advice stands on 40 probes; its advice then."""
    port = free_port()
    d = procs.start(pinned(specwatch_cmd(
        "run", "--listen", f"127.0.0.1:{port}", "--server-url", spec.url, "--baseline-tps", f"{plain_tps:.3f}",
        "--log-file", str(spec.log), "--server-metrics", "--interval-s", "0.5", "--max-tokens", str(MAX_TOKENS),
        "--pause-s", "0", "--temperature", str(temperature), "--prompts", str(prompts),
        "--advisor-prior", str(prior), "--speculative-config", head_config(3)[1])), f"daemon-{name}")
    url = f"http://127.0.0.1:{port}"

    def ready():
        assert d.popen.poll() is None, d.output()[-3000:]
        try:
            adv = http_json(url + "/api/summary")["advisor"]
        except OSError:
            return None
        one = next((b for b in adv["buckets"] if b["bucket"] == 1), None) if adv else None
        return adv if one and one["status"] == "ok" and one["requests"] >= 40 else None

    t0 = time.monotonic()
    adv = wait_until(ready, timeout_s=300, every_s=1.0, what=f"the advisor's one-stream advice ({name})")
    TIMINGS[f"live advisor {name}, to advice (s)"] = time.monotonic() - t0
    d.stop()
    return adv


@pytest.fixture(scope="module")
def prior(eagle3_ladder, plain_server, heldout_prompts, tmp_path_factory) -> tuple[Path, float]:
    """``sweep --targets`` over plain decoding and the distilled head at 1 and 3 steps: the ``--advisor-prior``
    and plain decoding's one-stream rate."""
    tmp = tmp_path_factory.mktemp("prior")
    t0 = time.monotonic()
    path = prior_sweep([plain_server.url, eagle3_ladder[1].url, eagle3_ladder[3].url], heldout_prompts, tmp)
    TIMINGS["advisor prior, sweep --targets of 3 (s)"] = time.monotonic() - t0
    doc = json.loads(path.read_text())
    plain = next(c for c in doc["configurations"] if c["steps"] == 0)
    return path, float(plain["results"]["decode_tokens_per_second"])


def check(case: str, adv: dict, measured: tuple[dict[int, float], dict[int, float]], predicted: tuple[int, ...],
          advised: int | None = None) -> None:
    """The predictions for ``predicted`` against the truth (both relative to the running 3 steps), printed, and
    the same best among the step counts the truth's servers ran (but ``advised``: the advice's own server,
    reported, not ranked), asserted."""
    truth, se = measured
    one = next(b for b in adv["buckets"] if b["bucket"] == 1)
    assert adv["running_steps"] == 3 and adv["prior"]
    pred = {p["steps"]: p["tokens_per_second"] for p in one["predictions"]}

    def note(s: int) -> str:
        return "" if s in predicted else " (advised)" if s == advised else " (ran)" if s == 3 else " (prior)"

    def rel(s: int) -> float:
        return 100 * (pred[s]["value"] / pred[3]["value"] / (truth[s] / truth[3]) - 1)

    rows = [f"  {s:>5} {pred[s]['value']:>9.1f} {pred[s]['lower']:>7.1f}…{pred[s]['upper']:<7.1f}{truth[s]:>9.1f}"
            f" ±{se[s]:<5.1f}{100 * (pred[s]['value'] / truth[s] - 1):>+7.1f}%{rel(s):>+9.1f}%{note(s)}"
            for s in sorted(truth)]
    ranked = [s for s in truth if s != advised]
    best_truth = max(ranked, key=truth.__getitem__)
    # the advisor's point predictions ranked by winner's own rule: those within its tie (TIE_WITHIN, 1%) of the
    # top are as good as it, and the fewest steps of them is the pick (a clean-clone run at temperature 0.8 ranked
    # 5 steps first by 0.9% over plain decoding, which the truth measured best, 5 steps 25% below it)
    top = max(pred[s]["value"] for s in ranked)
    best_live = min(s for s in ranked if pred[s]["value"] >= top * (1 - TIE_WITHIN))
    COMPARISONS.extend([f"live advisor on real EAGLE-3, {case} (daemon at k=3, prior at 0, 1, 3; truth interleaved):",
                        f"  {'steps':>5} {'predicted':>9} {'95% interval':^15}{'measured ±se':>15}{'error':>8}"
                        f"{'vs k=3':>10}", *rows,
                        f"  best of {sorted(ranked)}: advisor {best_live}, measured {best_truth}; the advisor's best "
                        f"of 0-{adv['max_steps']}: {one['best_steps']} ({one['gain_vs_running']['value']:.3f}x "
                        f"running, 95% {one['gain_vs_running']['lower']:.3f}…{one['gain_vs_running']['upper']:.3f})"])
    # each prediction relative to the running configuration's, against the same ratio of the interleaved truth,
    # is printed (the table above) and counted, not asserted: on this tier's two shared cores the machine's speed
    # moves by a third within minutes (one run: plain decoding 384 tok/s in the prior's sweep, 272 in the truth
    # ten minutes later; the prior's k=1 against k=3 then fits a draft step that costs nothing and 5 steps read
    # +27%), and no interleaving of the truth mends a prior swept at another speed. Within 10% in 3 of 5 runs.
    within = [s for s in predicted if abs(rel(s)) <= 100 * TOLERANCE]
    COMPARISONS.append(f"  within {100 * TOLERANCE:.0f}% (relative to k=3): {len(within)} of {len(predicted)}")
    # the same best, to the truth's resolution: the advised step count measured within the 10% of the
    # measured best (a CI run measured k=3 4% over k=5, where other runs measured k=5 13-53% over k=3), or
    # within twice the standard error of the two means' difference over the truth's rounds
    resolution = max(TOLERANCE * truth[best_truth], 2 * (se[best_live] ** 2 + se[best_truth] ** 2) ** 0.5)
    assert truth[best_live] >= truth[best_truth] - resolution, (case, {s: pred[s]["value"] for s in truth}, truth,
                                                                se)


def tie_holds_truth(gain: dict, measured: tuple[dict[int, float], dict[int, float]]) -> None:
    """A tie of plain decoding with the running 3 steps: the truth's plain over k=3 within the advisor's 95%
    interval of that gain, give or take twice the ratio's standard error over the truth's rounds."""
    truth, se = measured
    ratio = truth[0] / truth[3]
    err = 2 * ratio * ((se[0] / truth[0]) ** 2 + (se[3] / truth[3]) ** 2) ** 0.5
    COMPARISONS.append(f"  plain ties k=3 on the daemon's evidence: {gain['value']:.3f}x (95% {gain['lower']:.3f}…"
                       f"{gain['upper']:.3f}); the truth {ratio:.3f}x ± {err:.3f}")
    assert gain["lower"] - err <= ratio <= gain["upper"] + err, (gain, truth, se)


def test_the_live_advisor_predicts_step_counts_it_never_ran_and_its_flags_run_them(
        plain_server, eagle3_ladder, prior, greedy_truth, heldout_prompts, procs, tmp_path):
    """Greedy, then at temperature 0.8, on a k=3 server: the predictions for 2 and 5 steps against servers at 2
    and 5 steps started beside it (greedy: the module's truth over plain decoding and the whole ladder); the
    greedy advice's own flags, when they name a step count no server here runs, started and measured beside
    them."""
    path, plain_tps = prior
    up: dict[str, RealServer] = {}  # started here: the advice's own flags
    try:
        for temperature in (0.0, 0.8):
            servers = ({0: plain_server, **eagle3_ladder} if temperature == 0.0 else
                       {0: plain_server, **{k: eagle3_ladder[k] for k in (3, *PREDICTED)}})
            # plain decoding's rate for this traffic, as an operator gives it: the greedy prior's, and at 0.8 the
            # mean of ROUNDS benches of the plain server at 0.8 (sampling is work of its own for vLLM's CPU build),
            # measured as carefully as the truth measures each server: one bench spreads ~9% here, and one
            # clean-clone run's read 341.8 against the truth's 407.4 +- 20.3, so the advisor set k=3 (344.8)
            # against a plain rate 16% low and named it
            baseline = plain_tps if temperature == 0.0 else statistics.fmean(
                decode_tps(plain_server.url, temperature, heldout_prompts, tmp_path) for _ in range(ROUNDS))
            adv = live_advice(procs, servers[3], baseline, path, temperature, heldout_prompts,
                              f"T{temperature}")
            one = next(b for b in adv["buckets"] if b["bucket"] == 1)
            advised = {}
            if temperature == 0.0 and one["best_steps"] not in servers:  # its flags, exactly as printed
                flags = next(e["flags"] for e in adv["engine"] if e["engine"] == "vllm")
                assert flags.startswith("--speculative-config "), adv["engine"]
                advised = start_side_by_side(tmp_path, {"advised": tuple(shlex.split(flags))})
                up.update(advised)
            urls = {s: srv.url for s, srv in servers.items()}
            if advised:
                urls[one["best_steps"]] = advised["advised"].url
            b0 = metrics(advised["advised"].url) if advised else {}
            measured = (greedy_truth() if temperature == 0.0 and not advised else
                        interleaved(urls, temperature, heldout_prompts, tmp_path))
            check(f"distilled head, T={temperature}", adv, measured, PREDICTED,
                  one["best_steps"] if advised else None)
            if temperature > 0:  # the sampled tokens leave the draft's chain: plain decoding wins, and it says so
                # (that the servers agree, to the truth's resolution, is check()'s: plain measured 1.2-1.4x
                # k=2 in every run, but one CI round's slow minute put k=2's standard error at 13%)
                assert one["best_steps"] == 0, one
                if one["ties_running"]:  # plain decoding only tied k=3 on the daemon's evidence: no restart, no
                    # flags (as one CI run's advice said), and the truth's ratio where the advisor's tie put it
                    assert adv["engine"] == [], adv["engine"]
                    tie_holds_truth(one["gain_vs_running"], measured)
                else:
                    assert any("plain decoding wins: launch without --speculative-config" in e["headline"]
                               for e in adv["engine"]), adv["engine"]
            if advised:  # the advice's flags run its step count: vLLM's counters, draft tokens per draft
                after = metrics(advised["advised"].url)
                drafts = after["vllm:spec_decode_num_drafts_total"] - b0.get("vllm:spec_decode_num_drafts_total", 0)
                tokens = (after["vllm:spec_decode_num_draft_tokens_total"]
                          - b0.get("vllm:spec_decode_num_draft_tokens_total", 0))
                assert drafts > 0 and tokens / drafts == pytest.approx(one["best_steps"]), (drafts, tokens)
    finally:
        stop_together(up.values())


def test_tune_picks_the_best_of_a_sweep_over_the_same_range_climbing_in_three_launches(
        plain_server, eagle3_ladder, greedy_truth, heldout_prompts, tmp_path):
    """``tune --targets`` over plain decoding and the ladder's step counts (1, 2, 3, 5), greedy, from 1 step,
    against the same five measured interleaved (the module's ``greedy_truth``, the live advisor's greedy truth
    too: ``interleaved``, a sweep whose rounds rotate over the servers, so that the machine's drift falls on all
    of them alike; a sequential sweep here once measured plain decoding at 306 tok/s a minute after tune measured
    it at 438): tune's pick is that sweep's best, or within the truth's resolution
    of it (``check``'s: 10% of the best, or twice the two means' standard error), in at most three speculative
    launches to climb and two more when a tie is settled (the SGLang tier's and forced acceptance's rule: with
    three in all, a CI run's tune measured 2 steps 4.0% below 5 (-9.7% to +1.7%), had no launch left to measure
    both again, gave the tie to the fewer steps and kept 2, which the truth measured 45% below 5); its flags
    name its step count in vLLM's --speculative-config."""
    space = (0, 1, 2, 3, 5)
    urls = {0: plain_server.url, **{k: eagle3_ladder[k].url for k in space[1:]}}
    t0 = time.monotonic()
    p = subprocess.run(pinned(specwatch_cmd(
        "tune", "--targets", ",".join(urls[s] for s in space), "--param", "steps=" + ",".join(map(str, space)),
        "--start", "steps=1", "--max-launches", "5", "--speculative-config", head_config(3)[1], "--out",
        str(tmp_path / "tune"), "--max-tokens", str(MAX_TOKENS), "--num-runs", str(2 * RUNS), "--warmup", "1",
        "--temperature", "0", "--prompts", str(heldout_prompts))), capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, p.stdout[-4000:] + p.stderr[-2000:]
    TIMINGS["tune --targets of 5 (s)"] = time.monotonic() - t0
    doc = json.loads((tmp_path / "tune" / "tune.json").read_text())
    assert greedy_truth.urls == urls  # the same five servers, the same traffic
    truth, se = greedy_truth()
    chosen, best = doc["best"]["1"]["steps"], max(truth, key=truth.__getitem__)
    COMPARISONS.extend([
        "tune on real EAGLE-3 (greedy, from 1 step, over 0, 1, 2, 3, 5) against the same five interleaved:",
        "  tune: " + "; ".join(f"{la['steps']} steps {la['measured_tok_s'].get('1', 0):.1f}"
                               + (f" (predicted {la['predicted_tok_s']['1']:.1f})" if la["predicted_tok_s"] else "")
                               for la in doc["launches"]),
        "  truth: " + "; ".join(f"{k} steps {v:.1f} ±{se[k]:.1f}" for k, v in sorted(truth.items())),
        f"  tune's pick {chosen} in {doc['speculative_launches']} launches; the truth's best {best}"])
    climbing = [la for la in doc["launches"] if la["steps"] and "to settle it" not in la["why"]]
    assert len(climbing) <= 3 and doc["speculative_launches"] <= 5, doc["launches"]
    resolution = max(TOLERANCE * truth[best], 2 * (se[chosen] ** 2 + se[best] ** 2) ** 0.5)
    assert truth[chosen] >= truth[best] - resolution, (chosen, best, truth, se, doc["launches"])
    if chosen:
        assert f'"num_speculative_tokens": {chosen}' in "\n".join(doc["flags"]), doc["flags"]

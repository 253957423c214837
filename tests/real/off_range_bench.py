"""The off range's price, measured the same way on both real engines: a server whose schedule is at 0 at the
load against the tier's plain server, one greedy bench against each in turn (the order alternating round by
round), on the same pinned cores; the cost per round is the ratio of the two (the machine's drift between
rounds cancels), stated as a mean with its 95% interval (Student's t).

``ROUNDS`` is 4 in the suite: the tests assert only that a cost is not absurd, and 8 rounds cost the two tests
about 200 s more; ``OFF_RANGE_ROUNDS=8`` measures the intervals docs/sim-model.md quotes."""

from __future__ import annotations

import json
import math
import os
import statistics
from pathlib import Path

from realserver import pinned

import bench_client

ROUNDS = int(os.environ.get("OFF_RANGE_ROUNDS", "4"))
T975 = {3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228, 11: 2.201}  # by n - 1


def decode_rate(url: str, streams: int, tmp: Path) -> float:
    """Per-stream decode tok/s of one greedy bench at ``streams`` closed-loop streams: 256 tokens a request and at
    least 4 requests (at 128 tokens and 2 requests a bench at one stream lasted well under a second, and rounds
    of one run ranged from -8% to +175% on a shared machine)."""
    out = tmp / f"b-{streams}.json"
    p = bench_client.run(["bench", "--server-url", url, "--concurrency", str(streams), "--num-runs",
                          str(max(4, 2 * streams)), "--warmup", "0", "--max-tokens", "256", "--temperature", "0",
                          "--json", str(out)], timeout_s=300, placement=pinned([]))
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    return float(json.loads(out.read_text())["results"]["decode_tokens_per_second"])


def interval(ratios: list[float]) -> tuple[float, float]:
    """Mean and 95% half-width of the per-round costs."""
    return statistics.fmean(ratios), T975[len(ratios) - 1] * statistics.stdev(ratios) / math.sqrt(len(ratios))


def measure(off_url: str, plain_url: str, loads: tuple[int, ...], rounds: int, tmp: Path) -> dict[int, list[float]]:
    """Per load: each round's cost, time per output token of the off range over plain decoding's, minus one; and
    the rates, under ``("off" | "plain", load)``, for the record."""
    out: dict[int, list[float]] = {n: [] for n in loads}
    for url in (plain_url, off_url):  # a warm-up bench each, not counted (a fresh server's first requests lag)
        decode_rate(url, max(loads), tmp)
    for r in range(rounds):
        for n in loads:
            order = (off_url, plain_url) if r % 2 else (plain_url, off_url)
            rates = {url: decode_rate(url, n, tmp) for url in order}
            RATES.setdefault(("off", n), []).append(rates[off_url])
            RATES.setdefault(("plain", n), []).append(rates[plain_url])
            out[n].append(rates[plain_url] / rates[off_url] - 1.0)
    return out


RATES: dict[tuple[str, int], list[float]] = {}


def lines(what: str, costs: dict[int, list[float]], rounds: int) -> list[str]:
    """The comparisons' lines: per load the mean cost, its interval, the median rates and every round's cost."""
    out = [f"{what} vs plain decoding, time per output token, {rounds} alternating rounds (95% interval):"]
    for n, c in costs.items():
        mean, half = interval(c)
        off, plain = (statistics.median(RATES[(w, n)][-rounds:]) for w in ("off", "plain"))
        out.append(f"  {n} streams: {100 * mean:+.1f}% ± {100 * half:.1f}% (median decode tok/s per stream: off "
                   f"range {off:.1f}, plain {plain:.1f}; rounds: {', '.join(f'{100 * x:+.1f}%' for x in c)})")
    return out

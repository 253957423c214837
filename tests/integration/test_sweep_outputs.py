"""One sweep, every output: the terminal, sweep.json, sweep.csv, report.html and ``advise --from`` give the same
value and interval for every comparison they print, and no two of their sentences give opposite advice."""

from __future__ import annotations

import csv
import html
import json
import subprocess
import sys

import pytest

from conftest import free_port, specwatch_cmd

pytestmark = pytest.mark.integration
LEVELS = (1, 4)


def short(c: dict) -> str:
    return f"{100 * c['ratio']:+.1f}% ({100 * c['low']:+.1f}..{100 * c['high']:+.1f})"


def long(c: dict) -> str:
    return f"{100 * c['ratio']:+.1f}% (95% interval {100 * c['low']:+.1f}% to {100 * c['high']:+.1f}%)"


def test_every_output_of_a_sweep_gives_the_same_answer(tmp_path):
    port = free_port()
    sim = f"{sys.executable} -m specwatch sim --profile seed --cost-scale 0.1 --seed 1 --quiet --port {port}"
    out = tmp_path / "out"
    p = subprocess.run(specwatch_cmd(
        "sweep", "--out", str(out), "--launch", sim + " --speculative-algorithm EAGLE3 --speculative-num-steps {steps} "
        "--speculative-eagle-topk 1", "--param", "steps=1,2,5", "--baseline-launch", sim, "--server-url",
        f"http://127.0.0.1:{port}", "--concurrency", ",".join(map(str, LEVELS)), "--max-tokens", "128",
        "--num-runs", "8", "--warmup", "1"), capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-2000:]
    term = p.stdout
    doc = json.loads((out / "sweep.json").read_text())
    rows = list(csv.DictReader((out / "sweep.csv").open()))
    page = html.unescape((out / "report.html").read_text())
    adv = subprocess.run(specwatch_cmd("advise", "--from", str(out / "sweep.json")), capture_output=True, text=True,
                         timeout=60)
    assert adv.returncode == 0, adv.stderr
    compared = [c for c in doc["comparisons"] if c["ratio"] is not None]
    assert len(compared) == 3 * len(LEVELS) and len(rows) == 4 * len(LEVELS)  # a CSV row per configuration × load
    steps_of = {c["label"]: int(c["label"].split("=")[1]) for c in compared}
    tables = {c: term.split(f"-- concurrency {c}\n")[1].split("\n\n")[0] for c in LEVELS}
    for c in compared:
        row = next(r for r in rows if r["configuration"] == c["label"] and int(r["concurrency"]) == c["concurrency"])
        assert (float(row["vs_plain_ratio"]), float(row["vs_plain_low"]), float(row["vs_plain_high"]),
                row["vs_plain_outcome"]) == (c["ratio"], c["low"], c["high"], c["outcome"])
        line = next(ln for ln in tables[c["concurrency"]].splitlines() if ln.startswith(c["label"] + " "))
        assert line.endswith(short(c) + (" a tie" if c["outcome"] == "a tie" else "")), (line, c)
        if c["concurrency"] == LEVELS[0]:  # the page's table and the advisor are at the lowest load
            assert f"<td>{c['label']}</td>" in page and short(c) in page
            for text in (term, adv.stdout):
                ln = next(x for x in text.splitlines()
                          if x.strip().startswith(f"steps {steps_of[c['label']]:>2}: measured ") and " tok/s" in x)
                assert f"measured {c['decode_tokens_per_second']:.1f} tok/s" in ln and long(c) in ln, ln
    for pick in doc["picks"]:  # each load's answer: one sentence, the same wherever it is printed
        assert f"concurrency {pick['concurrency']:>4}: {pick['sentence']}" in term
        assert f"concurrency {pick['concurrency']:>4}: {pick['sentence']}" in adv.stdout
    lowest = doc["picks"][0]
    assert doc["winner"] == lowest["pick"]
    assert f"winner: {lowest['sentence']}" in term and f"winner: {lowest['sentence']}" in page
    # no opposite advice: the pick, the schedule and the advisor's best say the same of speculation
    speculate = lowest["pick"] != "baseline"
    schedule = next(ln for ln in term.splitlines() if ln.startswith("Schedule (batch sizes"))
    ranges = schedule.split("): ")[1]
    assert ranges.endswith(f" (measured up to {LEVELS[-1]})"), schedule  # and no range past it
    first = ranges.removesuffix(f" (measured up to {LEVELS[-1]})").split(", ")[0]
    assert first.startswith("1-") and first.endswith(": 0") != speculate, schedule
    best = next(ln for ln in term.splitlines() if ln.startswith("Best predicted:"))
    fastest = next(c for c in compared if c["label"] == lowest["fastest"] and c["concurrency"] == LEVELS[0]) \
        if lowest["fastest"] != "baseline" else None
    if "measured:" in best:
        said = {"a tie": "a tie with plain decoding", "faster": "beats plain decoding",
                "slower": "slower than plain decoding"}
        c = next(c for c in compared if c["concurrency"] == LEVELS[0] and
                 steps_of[c["label"]] == int(best.split()[2]))
        assert f"measured: {said[c['outcome']]}, {long(c)}" in best, best
    if not speculate:
        assert "beats plain decoding" not in term.replace(best, "") or fastest is None
        assert "beats plain decoding" not in best or (fastest and fastest["outcome"] == "faster")
    assert "exact fit, not validated" in term or "degrees of freedom" in term

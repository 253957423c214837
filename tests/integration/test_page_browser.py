"""What a person sees, in a real browser: headless Chromium (Debian's ``chromium``) loads the daemon's page
while it watches the simulator, and a sweep's report.html from disk; the test reads the rendered DOM (the
verdict in words, charts drawn with data points), checks the console for errors, and saves screenshots to
``artifacts/`` (``SPECWATCH_ARTIFACTS`` to move it) for CI to keep."""

from __future__ import annotations

import itertools
import math
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import ROOT, Procs, free_port, http_get, scrape, specwatch_cmd, wait_until

pytestmark = pytest.mark.integration
ARTIFACTS = Path(os.environ.get("SPECWATCH_ARTIFACTS", ROOT / "artifacts"))
# the simulators run at half the seed's costs: the same verdicts, winners and chart shapes (every cost scales
# together, so the speedups do not move), the probes twice as fast
SEED = ("--profile", "seed", "--cost-scale", "0.5")


@pytest.fixture(scope="module")
def chromium() -> str:
    path = shutil.which("chromium")
    if path is None:
        pytest.fail("chromium not found: install Debian's chromium package (bash .ci/run does)")
    return path


def browse(chromium: str, tmp: Path, url: str, shot: Path, size: str = "1280,1500") -> tuple[str, str]:
    """The rendered DOM and the browser's log for ``url``; a screenshot of it in ``shot``."""
    base = [chromium, "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
            "--hide-scrollbars", "--no-first-run", f"--user-data-dir={tmp / 'chrome'}", "--enable-logging=stderr",
            "--v=0"]
    dom = subprocess.run([*base, "--dump-dom", url], capture_output=True, text=True, timeout=120)
    assert dom.returncode == 0, dom.stderr[-2000:]
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    pic = subprocess.run([*base, f"--screenshot={shot}", f"--window-size={size}", url], capture_output=True,
                         text=True, timeout=120)
    assert pic.returncode == 0 and shot.stat().st_size > 20_000, pic.stderr[-2000:]
    return dom.stdout, dom.stderr + pic.stderr


def console_errors(log: str) -> list[str]:
    return [ln for ln in log.splitlines() if "CONSOLE" in ln and ("Uncaught" in ln or "Error" in ln)]


def chart(dom: str, caption: str) -> str:
    m = re.search(re.escape(caption) + r"</figcaption>(.*?)</figure>", dom, re.S)
    return "" if m is None else m.group(1)


def points(dom: str, caption: str) -> int:
    """Data points drawn in the chart captioned ``caption``."""
    return chart(dom, caption).count('class="pt"')


def tick_steps(dom: str, caption: str) -> dict[str, float]:
    """Per axis of that chart, the step between its tick labels, after checking there are more than two, evenly
    spaced, and written without float noise."""
    out = {}
    for axis in ("x", "y"):
        labels = re.findall(rf'class="{axis}tick">([^<]*)<', chart(dom, caption))
        vals = [float(v) for v in labels]
        assert len(vals) > 2 and all(re.fullmatch(r"-?\d+(\.\d{1,3})?", v) for v in labels), labels
        out[axis] = vals[1] - vals[0]
        assert all(abs(b - a - out[axis]) < 1e-9 for a, b in itertools.pairwise(vals)), labels
    return out


def nice(step: float) -> bool:
    """1, 2 or 5 times a power of ten."""
    mantissa = step / 10 ** math.floor(math.log10(step) + 1e-9)
    return any(abs(mantissa - m) < 1e-6 for m in (1, 2, 5))


@pytest.mark.serial  # a speed near the model's or the baseline's: not beside CPU-bound tests
@pytest.mark.parametrize(("steps", "words"), [(2, "paying off"), (10, "SLOWER than baseline")])
def test_the_daemons_page_shows_the_verdict_and_its_charts(procs: Procs, tmp_path, chromium, steps, words):
    spec = procs.sim(*SEED, "--speculative-algorithm", "EAGLE3", "--speculative-num-steps", str(steps),
                     "--speculative-eagle-topk", "1", "--decode-log-interval", "10", "--quiet", "--log-file",
                     "spec.log", name=f"spec{steps}")  # relative: both run in tmp_path, the page shows no path
    base = procs.sim(*SEED, "--quiet", name="plain")
    port = free_port()
    d = procs.start(specwatch_cmd("run", "--listen", f"127.0.0.1:{port}", "--server-url", spec.url, "--baseline-url",
                                  base.url, "--log-file", "spec.log", "--interval-s", "0.5",
                                  "--verdict-window-s", "300", "--max-tokens", "100", "--pause-s", "0",
                                  "--min-requests", "4"), f"daemon{steps}")
    d.url = f"http://127.0.0.1:{port}"
    wait_until(lambda: scrape(d.url).get("specwatch_speculation_below_baseline") in (0.0, 1.0) and
               scrape(d.url)['specwatch_probe_requests_total{outcome="ok",target="spec"}'] >= 8, timeout_s=120,
               what="a verdict after 8 probes")
    shot = ARTIFACTS / f"page-{steps}-steps.png"
    dom, log = browse(chromium, tmp_path, d.url + "/", shot)
    verdict = re.search(r'<div class="verdict[^"]*" id="verdict">(.*?)</div>', dom, re.S)
    assert verdict is not None and words in verdict.group(1)
    assert points(dom, "Decode tok/s per stream vs the baseline") >= 3
    assert points(dom, "Accept length vs break-even") >= 3
    for caption in ("Decode tok/s per stream vs the baseline", "Accept length vs break-even"):
        assert all(nice(s) for s in tick_steps(dom, caption).values())
        assert "time since start (s)" in chart(dom, caption)  # a run under two minutes: seconds
    assert points(dom, "Per-position draft acceptance") >= steps  # one bar per draft position
    # one probe stream: one load bucket, the server's point; an A/B baseline has no curve to draw beside it
    load_chart = chart(dom, "Per-stream vs aggregate tok/s by load bucket, against plain decoding")
    assert load_chart.count('class="pt"') >= 1 and 'class="tag"' in load_chart
    assert "updated" in dom and "ttft" in dom and not console_errors(log)
    assert http_get(d.url + "/")[0] == 200


def test_a_sweep_report_opens_from_disk(procs: Procs, tmp_path, chromium):
    spec = procs.sim(*SEED, "--speculative-algorithm", "EAGLE3", "--speculative-num-steps", "2",
                     "--speculative-eagle-topk", "1", "--quiet", name="s2")
    spec5 = procs.sim(*SEED, "--speculative-algorithm", "EAGLE3", "--speculative-num-steps", "5",
                      "--speculative-eagle-topk", "1", "--quiet", name="s5")
    base = procs.sim(*SEED, "--quiet", name="b")
    out = tmp_path / "sweep"
    p = subprocess.run(specwatch_cmd("sweep", "--targets", f"{base.url},{spec.url},{spec5.url}", "--max-tokens", "80",
                                     "--num-runs", "4", "--warmup", "0", "--concurrency", "1,2,4", "--out", str(out)),
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr
    report = out / "report.html"
    dom, log = browse(chromium, tmp_path, report.as_uri(), ARTIFACTS / "sweep-report.png")
    winner = re.search(r'<p id="winner">(.*?)</p>', dom, re.S)
    assert winner is not None and "winner:" in winner.group(1) and "95% interval" in winner.group(1)
    caption = "Aggregate output tok/s (all streams) by draft steps"
    assert points(dom, caption) == 2  # the two speculative configurations; the baseline is a line
    assert tick_steps(dom, caption)["x"] == 1 and nice(tick_steps(dom, caption)["y"])  # steps 2..5: 2, 3, 4, 5
    assert dom.count("<tr") == 4 and not console_errors(log)
    pareto = "Per-user vs aggregate tok/s, a line per configuration over its loads"
    assert points(dom, pareto) == 9  # three configurations at three loads
    assert chart(dom, pareto).count("<polyline") == 4  # a line each and the schedule's (each load's pick)
    assert 1 <= chart(dom, pareto).count('class="opt"') <= 9  # the Pareto-optimal points, ringed
    assert all(nice(s) for s in tick_steps(dom, pareto).values())
    note = re.search(r'<p class="note" id="pareto-note">(.*?)</p>', dom, re.S)
    assert note is not None and "the schedule's points on it:" in note.group(1)
    assert (out / "sweep-pareto.png").read_bytes()[:4] == b"\x89PNG"
    text = report.read_text()  # the Pareto chart alone, with the report's own style, for its own screenshot
    section = re.search(r'<section id="pareto">.*?</section>', text, re.S)
    assert section is not None
    alone = tmp_path / "pareto.html"
    alone.write_text(text[:text.index("<body>") + 6] + section.group(0) + "</body></html>", encoding="utf-8")
    _, log = browse(chromium, tmp_path, alone.as_uri(), ARTIFACTS / "sweep-pareto-report.png", "800,560")
    assert not console_errors(log)

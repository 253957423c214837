"""Every SGLang flag specwatch prints, started on the real SGLang 0.5.23 exactly as printed: the sweep's advice,
the live advisor's (one generator, ``engine_flags``, fed what the real server says of itself), the per-load
schedule with ``--speculative-adaptive-config`` and its file, the runbook's example and ``deploy/``'s compose
and Kubernetes commands. Each starts and serves, and the server's own ``/server_info`` (and, for the schedule,
its ``sglang:spec_num_steps`` under load) shows the flags took effect. NGRAM with ``--speculative-adaptive``
falls back to static steps with SGLang's own notice, read in its log.

The module's servers are started two at a time, in the order the tests use them (``printed``; the sweep's
and the live advisor's are started by their own modules): a test that only reads ``/server_info`` is over in
a second, and a start is mostly imports, which two overlap well on two cores. compose and Kubernetes print the
same command line: one server answers both."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from realserver import COMPARISONS, TIMINGS, RealServer
from sglang_truth import metrics
from sglangserver import PrintedServers, launch, stop_all

from conftest import specwatch_cmd
from specwatch.analysis import engine_flags

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
NGRAM_ADAPTIVE = ["--speculative-algorithm", "NGRAM", "--speculative-num-draft-tokens", "4", "--speculative-adaptive"]
DEPLOY_FILES = ("docker-compose.yml", "k8s/deployment.yaml")


@pytest.fixture(scope="module")
def printed(sglang_installed, tmp_path_factory) -> Iterator[PrintedServers]:
    """Every command line this module starts, with the files they name (each in a folder of its own: the
    schedule's and the runbook's file have the same name), launched two at a time in the tests' order."""
    stop_all()  # the tier's three servers are done with (two cores)
    pool = PrintedServers(tmp_path_factory.mktemp("printed"))
    pool.add("sglang-advised-k2", static_flags())
    advice = schedule_advice(pool.tmp / "schedule")
    for name, content in advice.files:
        (pool.tmp / "schedule" / name).write_text(content)
    pool.add("sglang-adaptive", shlex.split(advice.flags))
    pool.add("sglang-ngram-adaptive", NGRAM_ADAPTIVE)
    content, flags = runbook_command(pool.tmp / "runbook")
    Path(flags[-1]).write_text(json.dumps(content))
    pool.add("sglang-runbook", flags)
    for where in DEPLOY_FILES:
        pool.add(f"sglang-{where.replace('/', '-')}", deploy_flags(where))
    try:
        yield pool
    finally:
        pool.stop()


def static_flags() -> list[str]:
    """What the live advisor and sweep print for 2 steps, for the setup the real EAGLE-3 server reports."""
    setup = engine_flags.ServerSetup("sglang", "0.5.23", algorithm="EAGLE3", topk=1)
    (advice,) = engine_flags.static_advice(2, setup)
    return shlex.split(advice.flags)


def test_the_static_advice_starts_sglang_at_that_step_count(printed):
    """What the live advisor and sweep print for one step count, for the setup the real EAGLE-3 server reports."""
    flags = static_flags()
    _server, info = printed.get("sglang-advised-k2", flags)
    try:
        assert (info["speculative_algorithm"], info["speculative_num_steps"], info["speculative_num_draft_tokens"],
                info["speculative_eagle_topk"]) == ("EAGLE3", 2, 3, 1)
    finally:
        printed.release(flags)


def schedule_advice(where: Path) -> engine_flags.EngineAdvice:
    """The schedule's advice with its file in ``where`` (created)."""
    where.mkdir(exist_ok=True)
    setup = engine_flags.ServerSetup("sglang", "0.5.23", algorithm="EAGLE3", topk=1, max_running=16)
    return engine_flags.sglang_advice([(1, 2, 3), (3, 16, 0)], setup, str(where))


def test_the_schedule_starts_sglang_and_its_steps_follow_the_load(printed):
    """The per-load schedule 3 steps at 1-2 running requests, none from 3, as the sweep prints it: flags and file.
    SGLang's own gauge of the step count in use reads 3 at one stream and 0 at eight."""
    advice = schedule_advice(printed.tmp / "schedule")
    assert all((printed.tmp / "schedule" / name).read_text() == content for name, content in advice.files)
    server, info = printed.get("sglang-adaptive", shlex.split(advice.flags))
    try:
        assert info["speculative_adaptive"] is True and info["speculative_num_steps"] == 3
        # the gauge is set at each decode log line (every 10 rounds), 0 until the first: read in order
        seen = {1: steps_under_load(server, 1), 8: steps_under_load(server, 8)}
        assert seen[1][-1] == 3.0 and 0.0 not in seen[1][seen[1].index(3.0):], seen
        assert seen[8][0] == 3.0 and 0.0 in seen[8], seen
        COMPARISONS.append(f"SGLang adaptive schedule {advice.files[0][1]}: sglang:spec_num_steps seen at 1 stream "
                           f"{seen[1]}, at 8 streams {seen[8]} (in order)")
    finally:
        printed.release(shlex.split(advice.flags))


def steps_under_load(server: RealServer, streams: int) -> list[float]:
    """``sglang:spec_num_steps`` as it changed while ``bench`` ran ``streams`` streams, in order."""
    seen: list[float] = []
    done = threading.Event()

    def watch() -> None:
        while not done.wait(0.2):
            v = metrics(server.url).get("sglang:spec_num_steps")
            if v is not None and (not seen or seen[-1] != v):
                seen.append(v)

    t = threading.Thread(target=watch, daemon=True)
    t.start()
    p = subprocess.run(specwatch_cmd("bench", "--server-url", server.url, "--concurrency", str(streams),
                                     "--num-runs", str(2 * streams), "--warmup", "0", "--max-tokens", "96",
                                     "--temperature", "0"), capture_output=True, text=True, timeout=600)
    done.set()
    t.join(5)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    return seen


def test_ngram_with_adaptive_falls_back_with_sglangs_notice(printed, tmp_path):
    """The advice never prints --speculative-adaptive for NGRAM; what SGLang does if given it anyway."""
    setup = engine_flags.ServerSetup("sglang", "0.5.23", algorithm="NGRAM", topk=1)
    advice = engine_flags.sglang_advice([(1, 2, 3), (3, 16, 0)], setup, str(tmp_path))
    assert "--speculative-adaptive" not in advice.flags and "EAGLE and EAGLE3 only" in advice.headline
    server, info = printed.get("sglang-ngram-adaptive", NGRAM_ADAPTIVE)
    try:
        assert info["speculative_adaptive"] is False
        notice = "speculative_adaptive disabled: speculative_algorithm=NGRAM (only EAGLE/EAGLE3 are supported). " \
                 "Falling back to static speculative params."
        assert notice in server.output()
        COMPARISONS.append(f"NGRAM + --speculative-adaptive, SGLang's log: {notice}")
    finally:
        printed.release(NGRAM_ADAPTIVE)


def runbook_schedule() -> tuple[dict, list[str]]:
    """The runbook's SGLang example: its file content and the flags it names."""
    text = (ROOT / "docs" / "runbooks.md").read_text()
    content = re.search(r"`(\{\"1\": \{\"candidate_steps\".*?\})`", text)
    assert content, "the runbook's adaptive example moved"
    steps = re.search(r"with `--speculative-num-steps (\d+)`", text)
    assert steps
    return json.loads(content.group(1)), ["--speculative-algorithm", "EAGLE3", "--speculative-eagle-topk", "1",
                                          "--speculative-num-steps", steps.group(1), "--speculative-adaptive",
                                          "--speculative-adaptive-config"]


def runbook_command(where: Path) -> tuple[dict, list[str]]:
    """The runbook's file content and its flags, the file named in ``where`` (created)."""
    where.mkdir(exist_ok=True)
    content, flags = runbook_schedule()
    return content, [*flags, str(where / engine_flags.ADAPTIVE_FILE)]


def test_the_runbooks_schedule_starts_sglang(printed):
    content, flags = runbook_command(printed.tmp / "runbook")
    assert json.loads(Path(flags[-1]).read_text()) == content
    _server, info = printed.get("sglang-runbook", flags)
    printed.release(flags)
    assert info["speculative_adaptive"] is True


def deploy_commands() -> dict[str, str]:
    """The SGLang command line of each deploy file that launches SGLang, as written there."""
    compose = yaml.safe_load((ROOT / "deploy" / "docker-compose.yml").read_text())
    k8s = [d for d in yaml.safe_load_all((ROOT / "deploy" / "k8s" / "deployment.yaml").read_text()) if d]
    out = {"docker-compose.yml": compose["services"]["sglang"]["command"][-1]}
    for doc in k8s:
        for c in doc["spec"]["template"]["spec"]["containers"]:
            if "sglang" in c.get("image", ""):
                out["k8s/deployment.yaml"] = c["args"][-1] if "args" in c else c["command"][-1]
    return out


def speculative_part(command: str, head: str) -> list[str]:
    """The command's flags less what is about the deployment (model, address, port, log piping): the
    speculative flags and ``--enable-metrics`` as written, the draft model variable set to the tier's head."""
    words = shlex.split(command.split("2>&1")[0].replace('"$$DRAFT"', head).replace('"$DRAFT"', head))
    i = words.index("--speculative-algorithm")
    return [w for w in words[i:] if w != "--enable-metrics"]


def deploy_flags(where: str) -> list[str]:
    import sglang_env

    return speculative_part(deploy_commands()[where], str(sglang_env.head_dir()))


@pytest.mark.parametrize("where", DEPLOY_FILES)
def test_the_deploy_files_sglang_command_starts_sglang(printed, where):
    flags = deploy_flags(where)
    _server, info = printed.get(f"sglang-{where.replace('/', '-')}", flags)
    printed.release(flags)
    want = dict(zip(flags[::2], flags[1::2], strict=False))
    assert info["speculative_num_steps"] == int(want["--speculative-num-steps"])
    assert info["speculative_num_draft_tokens"] == int(want["--speculative-num-draft-tokens"])


def test_cuda_graph_bs_is_no_0_5_23_flag(sglang_installed, tmp_path):
    """What specwatch no longer prints: 0.5.23's parser stops on --cuda-graph-bs as an ambiguous prefix."""
    t0 = time.monotonic()
    server = launch(tmp_path, "sglang-cuda-graph-bs", extra=("--cuda-graph-bs", "1", "2", "4"))
    try:
        assert server.popen.wait(120) != 0
    finally:
        server.stop()
    assert "ambiguous option: --cuda-graph-bs could match --cuda-graph-bs-decode, --cuda-graph-bs-prefill" in \
        server.output(), server.output()[-2000:]
    TIMINGS["sglang refusing --cuda-graph-bs (s)"] = time.monotonic() - t0

"""The fault matrix's raw-HTTP rows for ``bench`` (SGLang and OpenAI completions) against ``tests/rawserver.py``,
which speaks HTTP/1.1 by hand and so reaches what the simulator (aiohttp) never sends: close-delimited bodies,
trailers, chunk extensions, interim 1xx, broken framing, non-HTTP bytes. Each row: the expected outcome for every
request, no traceback, no hang, the API key in no output, no raw control byte printed. The daemon's rows:
test_raw_http.py."""

from __future__ import annotations

import json
import os
import subprocess

import pytest
import raw_rig
from raw_rig import CONTROL, KEY, ROWS, use

from conftest import specwatch_cmd
from rawserver import EXPECTED

pytestmark = pytest.mark.integration
REUSE = {"keepalive_closed", "idle_bytes", "garbage_after"}  # about the next request on the same connection


@pytest.fixture(scope="module")
def raw(tmp_path_factory):
    yield from raw_rig.serve(tmp_path_factory)


@pytest.mark.parametrize("api", ["sglang", "completions"])
@pytest.mark.parametrize("case", sorted(EXPECTED))
def test_bench_against_the_raw_server(raw, case, api):
    _procs, server, tmp = raw
    use(server, case)
    out = tmp / f"{case}-{api}.json"
    streams = "1" if case in REUSE else "3"  # three at once: no failure backoff between them
    p = subprocess.run(specwatch_cmd("bench", "--server-url", server.url, "--api", api, "--num-runs", "3",
                                     "--concurrency", streams, "--warmup", "0", "--max-tokens", "8",
                                     "--read-timeout-s", "1",
                                     "--request-timeout-s", "5", "--json", str(out)),
                       capture_output=True, text=True, timeout=60, env={**clean_env(), "SPECWATCH_API_KEY": KEY})
    printed = p.stdout + p.stderr
    runs = json.loads(out.read_text())["runs"]
    assert [r["outcome"] for r in runs] == [EXPECTED[case]] * 3, printed[-2000:]
    assert p.returncode == (0 if EXPECTED[case] == "ok" else 1), printed[-2000:]
    assert "Traceback" not in printed and KEY not in printed + out.read_text()
    assert not CONTROL.search(printed), repr(CONTROL.search(printed))
    if EXPECTED[case] == "ok":
        assert all(r["output_tokens"] == 8 and r["ttft_s"] >= 0 and r["service_s"] > 0 for r in runs)
    ROWS.append((case, f"bench {api}", f"{EXPECTED[case]} x3"))


def test_bench_workers_end_on_a_broken_stream_instead_of_waiting_for_a_stuck_worker(raw):
    _procs, server, tmp = raw
    use(server, "negative_chunk")  # the chunk size that once froze the parser, and the parent with it
    out = tmp / "workers.json"
    p = subprocess.run(specwatch_cmd("bench", "--server-url", server.url, "--api", "sglang", "--num-runs", "4",
                                     "--warmup", "0", "--concurrency", "2", "--workers", "2", "--max-tokens", "8",
                                     "--json", str(out)), capture_output=True, text=True, timeout=120, env=clean_env())
    assert [r["outcome"] for r in json.loads(out.read_text())["runs"]] == ["stream_error"] * 4, p.stderr[-2000:]
    assert p.returncode == 1 and "Traceback" not in p.stdout + p.stderr
    ROWS.append(("negative_chunk", "bench --workers 2", "stream_error x4"))


def clean_env() -> dict[str, str]:
    """This process's environment without any ``SPECWATCH_`` setting (the tests give the key themselves)."""
    return {k: v for k, v in os.environ.items() if not k.startswith("SPECWATCH_")}

"""The live advisor next to the real SGLang with EAGLE-3 (3 steps) and the plain server beside it (A/B): its
advice is built from what the real server says of itself (``/server_info``: EAGLE3, topk 1), and the SGLang flags
it prints start SGLang exactly as printed, at the advised step count by SGLang's own ``/server_info``."""

from __future__ import annotations

import shlex

import pytest
from realserver import COMPARISONS
from sglangserver import start_printed

from conftest import free_port, http_get, http_json, specwatch_cmd, wait_until

pytestmark = pytest.mark.integration


def test_the_live_advisors_sglang_flags_start_sglang_at_the_advised_steps(sglang, procs, tmp_path):
    server, plain = sglang["eagle3"], sglang["plain"]
    port = free_port()
    procs.start(specwatch_cmd("run", "--listen", f"127.0.0.1:{port}", "--server-url", server.url, "--baseline-url",
                              plain.url, "--log-file", str(server.log), "--server-metrics", "--interval-s", "0.5",
                              "--verdict-window-s", "30", "--max-tokens", "96", "--pause-s", "0", "--min-requests",
                              "4", "--temperature", "0"), "daemon")
    url = f"http://127.0.0.1:{port}"
    wait_until(lambda: http_get(url + "/healthz", 1)[0] == 200, what="daemon up")

    def advised():
        a = http_json(url + "/api/summary").get("advisor") or {}
        sglang_advice = [e for e in a.get("engine") or [] if e["engine"] == "sglang"]
        ok = [b for b in a.get("buckets") or [] if b["status"] == "ok" and b["best_steps"] is not None]
        return (a, ok, sglang_advice) if ok and (sglang_advice or ok[0]["best_steps"] == a["running_steps"]) else None

    advice, buckets, engine = wait_until(advised, timeout_s=240, every_s=1.0, what="the live advisor's advice")
    best = buckets[0]["best_steps"]
    assert advice["running_steps"] == 3  # from the server's own per-position acceptance, not a flag
    COMPARISONS.append(f"live advisor on sglang-eagle3 (k=3): best {best} steps at load bucket "
                       f"{buckets[0]['bucket']}; {engine[0]['headline'] if engine else 'keep the configuration'}")
    if not engine:  # the running configuration is the advice: nothing to paste
        return
    flags = engine[0]["flags"]
    if best == 0:
        assert flags == "" and "launch without --speculative-algorithm" in engine[0]["headline"]
        return
    assert flags.startswith("--speculative-algorithm EAGLE3 --speculative-eagle-topk 1 "), flags
    _server, info = start_printed(tmp_path, f"sglang-advised-live-k{best}", shlex.split(flags))
    _server.stop()
    assert (info["speculative_num_steps"], info["speculative_num_draft_tokens"]) == (best, best + 1)

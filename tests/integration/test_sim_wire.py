"""`specwatch sim` as a real process: every endpoint's wire format against shared/reference/sglang.md,
bad input, client disconnects, many connections, logs and the control endpoint."""

import asyncio
import itertools
import json
import re
import signal
import socket
import subprocess
import urllib.request

import aiohttp
import pytest

from conftest import http_get, http_json, sim_truth, specwatch_cmd, wait_until
from specwatch.server.logparse import parse_line

pytestmark = pytest.mark.integration
SPEC = ("--speculative-algorithm", "EAGLE3", "--speculative-num-steps", "5", "--speculative-eagle-topk", "1")


def sse_events(url: str, body: dict) -> list[bytes]:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as r:
        assert r.headers["Content-Type"].startswith("text/event-stream")
        raw = r.read()
    assert raw.endswith(b"data: [DONE]\n\n")
    return [e[len(b"data: "):] for e in raw.split(b"\n\n") if e]


@pytest.fixture(scope="module")
def spec_sim(tmp_path_factory):
    from conftest import Procs
    ps = Procs(tmp_path_factory.mktemp("sim"))
    log = ps.tmp / "sglang.log"
    p = ps.sim(*SPEC, "--enable-metrics", "--decode-log-interval", "5", "--log-file", str(log), "--seed", "1")
    p.extra["log"] = log
    yield p
    ps.stop_all()


def test_generate_stream_is_cumulative_with_final_spec_fields(spec_sim):
    events = sse_events(spec_sim.url + "/generate", {"text": "Write a python function", "stream": True,
                                                     "sampling_params": {"max_new_tokens": 40, "ignore_eos": True}})
    assert events[-1] == b"[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    texts = [c["text"] for c in chunks]
    assert all(b.startswith(a) for a, b in itertools.pairwise(texts))  # cumulative text
    cts = [c["meta_info"]["completion_tokens"] for c in chunks]
    assert cts[0] == 1 and cts[-1] == 40 and cts == sorted(cts)
    assert max(b - a for a, b in itertools.pairwise(cts)) > 1  # multi-token chunks
    for c in chunks[:-1]:
        m = c["meta_info"]
        assert set(m) >= {"id", "finish_reason", "prompt_tokens", "completion_tokens", "cached_tokens"}
        assert m["finish_reason"] is None and "spec_verify_ct" not in m
    last = chunks[-1]["meta_info"]
    assert last["finish_reason"] == {"type": "length", "length": 40}
    vct = last["spec_verify_ct"]
    assert last["spec_accept_length"] == pytest.approx(40 / vct)
    assert last["spec_num_proposed_drafts"] == vct * 5
    assert last["spec_accept_rate"] == pytest.approx(last["spec_num_correct_drafts"] / (vct * 5))
    assert sum(last["spec_correct_drafts_histogram"]) == vct and len(last["spec_correct_drafts_histogram"]) == 6
    assert len(chunks) - 1 == vct  # one chunk per verify round after the prefill's first token
    assert isinstance(last["e2e_latency"], float)


def test_generate_non_stream_and_input_ids(spec_sim):
    r = http_json(spec_sim.url + "/generate", {"input_ids": [1, 2, 3], "sampling_params": {"max_new_tokens": 5}})
    assert r["meta_info"]["prompt_tokens"] == 3 and r["meta_info"]["completion_tokens"] <= 5
    assert len(r["text"].split()) == r["meta_info"]["completion_tokens"]


def test_without_ignore_eos_the_model_stops_on_its_own(spec_sim):
    r = http_json(spec_sim.url + "/generate", {"text": "Why is the sky blue?",
                                               "sampling_params": {"max_new_tokens": 5000}})
    assert r["meta_info"]["finish_reason"]["type"] == "stop"
    assert r["meta_info"]["completion_tokens"] < 5000


@pytest.mark.parametrize(("body", "message"), [
    (b"{not json", "invalid JSON"),
    (b"[1]", "JSON object"),
    (b'{"sampling_params": {}}', "either text"),
    (b'{"text": "a", "sampling_params": {"max_new_tokens": 0}}', "between 1 and"),
    (b'{"text": "a", "sampling_params": {"max_new_tokens": 10000000}}', "between 1 and"),
    (b'{"text": "a", "sampling_params": {"max_new_tokens": "ten"}}', "must be an integer"),
    (b'{"text": "a", "sampling_params": {"temperature": "hot"}}', "must be a number"),
    (b'{"text": "a", "stream": "yes"}', "must be a boolean"),
])
def test_bad_generate_bodies_get_400_with_a_clear_message(spec_sim, body, message):
    req = urllib.request.Request(spec_sim.url + "/generate", data=body)
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(req, timeout=10)
    assert e.value.code == 400
    assert message in json.loads(e.value.read())["error"]


def test_unknown_fields_are_ignored(spec_sim):
    r = http_json(spec_sim.url + "/generate", {"text": "a", "lora_path": None, "foo": 1,
                                               "sampling_params": {"max_new_tokens": 2, "top_p": 0.9}})
    assert r["meta_info"]["completion_tokens"] == 2


@pytest.mark.parametrize("chat", [False, True])
def test_openai_streams_with_usage(spec_sim, chat):
    path = "/v1/chat/completions" if chat else "/v1/completions"
    body = {"model": "m", "max_tokens": 20, "stream": True, "ignore_eos": True,
            "stream_options": {"include_usage": True, "continuous_usage_stats": True}}
    body |= {"messages": [{"role": "user", "content": "hi"}]} if chat else {"prompt": "hi"}
    chunks = [json.loads(e) for e in sse_events(spec_sim.url + path, body)[:-1]]
    obj = "chat.completion.chunk" if chat else "text_completion"
    assert {c["object"] for c in chunks} == {obj}
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == 20
    content = chunks[:-1]
    if chat:
        assert content[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
        assert content[-1]["choices"][0]["delta"] == {} and content[-1]["choices"][0]["finish_reason"] == "length"
        text = "".join(c["choices"][0]["delta"].get("content", "") for c in content)
    else:
        assert content[-1]["choices"][0]["finish_reason"] == "length"
        text = "".join(c["choices"][0]["text"] for c in content)
    assert len(text.split()) == 20
    usages = [c["usage"]["completion_tokens"] for c in content]
    assert usages == sorted(usages) and usages[-1] == 20


def test_openai_non_stream_and_errors(spec_sim):
    r = http_json(spec_sim.url + "/v1/completions", {"model": "m", "prompt": "hi", "max_tokens": 3,
                                                     "ignore_eos": True})
    assert r["object"] == "text_completion" and r["usage"]["completion_tokens"] == 3
    req = urllib.request.Request(spec_sim.url + "/v1/chat/completions", data=b'{"messages": []}')
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(req, timeout=10)
    err = json.loads(e.value.read())
    assert e.value.code == 400 and err["object"] == "error" and "messages" in err["message"]


def test_info_endpoints(spec_sim):
    for path in ("/get_server_info", "/server_info"):
        info = http_json(spec_sim.url + path)
        assert info["speculative_algorithm"] == "EAGLE3"
        assert (info["speculative_num_steps"], info["speculative_eagle_topk"],
                info["speculative_num_draft_tokens"]) == (5, 1, 6)
        assert info["decode_log_interval"] == 5 and info["stream_interval"] == 1 and info["version"]
        assert "last_gen_throughput" in info["internal_states"][0]
        # 0.5.23's graph keys: the flags as given (none) and the captured sizes; no cuda_graph_bs since 0.5.14
        assert (info["cuda_graph_bs_decode"], info["cuda_graph_bs_prefill"]) == (None, None)
        assert "cuda_graph_bs" not in info and info["cuda_graph_config"]["decode"]["bs"][:9] == [1, 2, 3, 4, 5, 6, 7,
                                                                                              8, 10]
    models = http_json(spec_sim.url + "/v1/models")
    assert models["object"] == "list" and models["data"][0]["owned_by"] == "sglang"
    assert http_json(spec_sim.url + "/get_model_info")["is_generation"] is True
    assert http_get(spec_sim.url + "/health")[0] == 200
    assert http_get(spec_sim.url + "/health_generate")[0] == 200


def test_old_endpoint_names_log_0_5_23s_deprecation_and_detection_asks_the_new_ones(procs, tmp_path):
    log = tmp_path / "sglang.log"
    sim = procs.sim(*SPEC, "--log-file", str(log))
    out = tmp_path / "bench.json"
    p = subprocess.run(specwatch_cmd("bench", "--server-url", sim.url, "--num-runs", "1", "--warmup", "0",
                                     "--max-tokens", "4", "--json", str(out)), capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    assert json.loads(out.read_text())["api"] == "sglang"
    assert "deprecated" not in log.read_text()  # bench asked /server_info (and /model_info, if at all)
    for old, new in (("/get_server_info", "/server_info"), ("/get_model_info", "/model_info")):
        assert http_get(sim.url + old)[0] == 200
        line = f"Endpoint '{old}' is deprecated and will be removed in a future version. Please use '{new}' instead."
        wait_until(lambda line=line: line in log.read_text(), what=f"the warning for {old}")
        got = [ln for ln in log.read_text().splitlines() if line in ln]
        assert len(got) == 1 and re.fullmatch(r"\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\] " + re.escape(line), got[0])


def test_metrics_use_sglang_names_and_move_when_requests_finish(spec_sim):
    before = _metric(spec_sim.url, "sglang:generation_tokens_total")
    http_json(spec_sim.url + "/generate", {"text": "x", "sampling_params": {"max_new_tokens": 30,
                                                                            "ignore_eos": True}})
    text = http_get(spec_sim.url + "/metrics")[1].decode()
    for name in ("spec_accept_length", "spec_accept_rate", "gen_throughput", "num_running_reqs", "num_queue_reqs",
                 "generation_tokens_total", "spec_verify_calls_total"):
        assert re.search(rf"^sglang:{name}\{{", text, re.M), name
    assert _metric(spec_sim.url, "sglang:generation_tokens_total") == before + 30
    assert 1.0 <= _metric(spec_sim.url, "sglang:spec_accept_length") <= 6.0


def _metric(url: str, name: str) -> float:
    text = http_get(url + "/metrics")[1].decode()
    return float(re.search(rf"^{re.escape(name)}\{{[^}}]*\}} (\S+)$", text, re.M).group(1))


def test_decode_lines_every_interval_with_exact_accept_len(spec_sim):
    log = spec_sim.extra["log"]
    wait_until(lambda: "Decode batch" in log.read_text(), what="a decode line")
    lines = [ln for ln in log.read_text().splitlines() if "batch" in ln]
    for ln in lines:
        assert re.match(r"^\[\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}\] (Prefill|Decode) batch, #", ln), ln
        v = parse_line(ln)
        assert v.result == "parsed", ln
        s = v.sample
        if s.source == "sglang_decode":
            assert 1.0 <= s.accept_length <= 6.0
            assert s.accept_rate == pytest.approx((s.accept_length - 1) / 5, abs=0.006)


async def test_client_disconnect_frees_the_batch_slot(procs):
    sim = procs.sim(*SPEC, "--max-running-requests", "1")
    async with aiohttp.ClientSession() as s:
        async with s.post(sim.url + "/generate", json={"text": "a", "stream": True, "sampling_params": {
                "max_new_tokens": 100000 // 4, "ignore_eos": True}}) as r:
            await r.content.readline()  # first chunk arrived: the request holds the only slot
        # the connection is closed; the next request must get the slot and finish
        async with s.post(sim.url + "/generate", json={"text": "b", "sampling_params": {
                "max_new_tokens": 3}}, timeout=aiohttp.ClientTimeout(total=20)) as r:
            assert (await r.json())["meta_info"]["completion_tokens"] <= 3
    truth = wait_until(lambda: (t := sim_truth(sim))["counters"].get("aborted") and t, what="abort recorded")
    assert truth["counters"]["aborted"] == 1
    assert [r["outcome"] for r in truth["requests"]] == ["aborted", "finished"]


async def test_hundreds_of_concurrent_connections_queue_and_all_finish(procs):
    sim = procs.sim(*SPEC, "--max-running-requests", "48", "--profile", "seed")
    conn = aiohttp.TCPConnector(limit=400)
    async with aiohttp.ClientSession(connector=conn) as s:
        async def one(i):
            async with s.post(sim.url + "/generate", json={"text": f"q{i}", "sampling_params": {
                    "max_new_tokens": 4, "ignore_eos": True}}) as r:
                return (await r.json())["meta_info"]["completion_tokens"]
        results = await asyncio.gather(*(one(i) for i in range(300)))
    assert results == [4] * 300
    assert http_get(sim.url + "/health")[0] == 200


def test_control_endpoint_changes_acceptance_live_and_truth_records_requests(procs):
    sim = procs.sim(*SPEC, "--seed", "3")
    before = http_json(sim.control + "/explain")["accept_length"]
    after = http_json(sim.control + "/control", {"accept_scale": 0.2})["accept_length"]
    assert before > 2.0 and after < 1.2
    http_json(sim.url + "/generate", {"text": "a", "sampling_params": {"max_new_tokens": 50, "ignore_eos": True}})
    (rec,) = sim_truth(sim)["requests"]
    assert rec["completion_tokens"] == 50 and (50 - 1) / rec["verify_ct"] < 1.6
    with pytest.raises(urllib.error.HTTPError):
        http_json(sim.control + "/control", {"bogus": 1})


def test_plain_decoding_has_no_spec_fields(procs):
    sim = procs.sim()
    r = http_json(sim.url + "/generate", {"text": "a", "sampling_params": {"max_new_tokens": 5, "ignore_eos": True}})
    assert "spec_verify_ct" not in r["meta_info"]
    assert http_json(sim.url + "/get_server_info")["speculative_algorithm"] is None


def test_sglang_flags_it_does_not_simulate_are_accepted(procs):
    sim = procs.sim(*SPEC, "--tp", "8", "--mem-fraction-static", "0.8", "--trust-remote-code")
    assert http_get(sim.url + "/health")[0] == 200
    assert "ignoring flags it does not simulate: --tp 8 --mem-fraction-static 0.8 --trust-remote-code" in \
        sim.output()


def test_port_in_use_fails_cleanly(procs):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        from conftest import specwatch_cmd
        p = procs.start(specwatch_cmd("sim", "--port", str(port)), "busy")
        assert p.popen.wait(20) == 1
        assert "cannot listen" in p.output()


async def test_sigterm_aborts_streams_in_flight_and_exits_promptly(procs):
    sim = procs.sim(*SPEC)
    body = {"text": "a", "stream": True, "sampling_params": {"max_new_tokens": 20000, "ignore_eos": True}}
    async with aiohttp.ClientSession() as s, s.post(sim.url + "/generate", json=body) as r:
        first = await r.content.readuntil(b"\n\n")
        sim.popen.send_signal(signal.SIGTERM)
        rest = first + await asyncio.wait_for(r.content.read(), 10)
    events = [e for e in rest.split(b"\n\n") if e.startswith(b"data: {")]
    last = json.loads(events[-1][len(b"data: "):])["meta_info"]["finish_reason"]
    assert last == {"type": "abort", "message": "server shutting down"}
    assert rest.endswith(b"data: [DONE]\n\n")
    assert sim.popen.wait(10) == 0


@pytest.fixture(scope="module")
def ngram_sim(tmp_path_factory):
    """The flags of the real 0.5.23 NGRAM server sampled in December 2026 (its /server_info, /metrics and
    streamed /generate are what these tests pin)."""
    from conftest import Procs
    ps = Procs(tmp_path_factory.mktemp("ngram"))
    p = ps.sim("--speculative-algorithm", "NGRAM", "--speculative-num-draft-tokens", "4",
               "--speculative-ngram-max-bfs-breadth", "1", "--speculative-ngram-min-bfs-breadth", "1",
               "--context-length", "2048", "--enable-metrics", "--seed", "1")
    yield p
    ps.stop_all()


def test_ngram_reports_and_drafts_as_the_real_server(ngram_sim):
    info = http_json(ngram_sim.url + "/server_info")
    assert (info["speculative_algorithm"], info["speculative_num_steps"], info["speculative_eagle_topk"],
            info["speculative_num_draft_tokens"], info["context_length"]) == ("NGRAM", 4, 1, 4, 2048)
    events = sse_events(ngram_sim.url + "/generate", {"text": "Write a python function", "stream": True,
                                                      "sampling_params": {"max_new_tokens": 64, "ignore_eos": True}})
    last = json.loads(events[-2])["meta_info"]
    vct = last["spec_verify_ct"]
    assert len(last["spec_correct_drafts_histogram"]) == 4 and sum(last["spec_correct_drafts_histogram"]) == vct
    assert last["spec_num_proposed_drafts"] == 3 * vct
    _, metrics = http_get(ngram_sim.url + "/metrics")
    for name in ("sglang:spec_num_steps", "sglang:spec_num_draft_tokens"):
        assert re.search(rf"^{name}\{{[^}}]*\}} 4\.0$", metrics.decode(), re.M), name


def test_a_prompt_over_the_context_length_is_refused_as_sglang_refuses_it(ngram_sim):
    message = "The input (2539 tokens) is longer than the model's context length (2048 tokens)."
    ids = list(range(1, 2540))
    events = sse_events(ngram_sim.url + "/generate", {"input_ids": ids, "stream": True})
    assert events == [json.dumps({"error": {"message": message, "type": "invalid_request_error", "code": 400,
                                            "retryable": False}}, separators=(",", ":")).encode(), b"[DONE]"]
    req = urllib.request.Request(ngram_sim.url + "/generate", data=json.dumps({"input_ids": ids}).encode())
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(req, timeout=10)
    assert e.value.code == 400 and json.loads(e.value.read()) == {"error": {"message": message}}
    long = " ".join(["word"] * 2538)  # + BOS: 2539 tokens
    for path, body in (("/v1/completions", {"prompt": long}), ("/v1/chat/completions", {"messages": [
            {"role": "user", "content": " ".join(["word"] * 2530)}]})):
        for stream in (False, True):
            req = urllib.request.Request(ngram_sim.url + path, data=json.dumps({**body, "stream": stream}).encode())
            with pytest.raises(urllib.error.HTTPError) as e:
                urllib.request.urlopen(req, timeout=10)
            err = json.loads(e.value.read())
            assert e.value.code == 400 and (err["object"], err["type"], err["param"], err["code"]) == (
                "error", "BadRequestError", None, 400)
            assert err["message"].startswith("The input (") and "context length (2048 tokens)" in err["message"]
    assert http_json(ngram_sim.url + "/v1/completions", {"prompt": "hi", "max_tokens": 2})["usage"][
        "completion_tokens"] <= 2

"""Per-API stream decoding into records (no network: the Attempt state machine)."""

import orjson
import pytest

from specwatch.errors import StreamError
from specwatch.probe.prompts import Prompt
from specwatch.probe.stream import Attempt, GenParams, Target, build_payload
from specwatch.records import Outcome

P = Prompt("p1", "code", text="def f():")


def attempt(api: str) -> Attempt:
    return Attempt(Target("spec", "http://x", api, "m"), P, False, intended_ns=1_000)


def sg(ct: int, finish: bool = False, **spec) -> bytes:
    meta = {"id": "r", "finish_reason": {"type": "length", "length": ct} if finish else None, "prompt_tokens": 5,
            "completion_tokens": ct, "cached_tokens": 0} | spec
    return orjson.dumps({"text": "x" * ct, "meta_info": meta})


def test_sglang_tokens_per_chunk_from_completion_token_deltas_even_when_coalesced():
    a = attempt("sglang")
    a.sent_ns = 2_000
    for t, data in [(10, sg(1)), (20, sg(4)), (30, sg(4)), (40, sg(9)),
                    (50, sg(10, True, spec_verify_ct=4, spec_accept_length=2.5, spec_num_correct_drafts=5,
                                spec_correct_drafts_histogram=[1, 1, 2]))]:
        assert not a.handle(data, t)
    assert a.handle(b"[DONE]", 60)
    r = a.finish(Outcome.OK, 100)
    assert tuple(r.chunk_tokens) == (1, 3, 5, 1)  # the repeated ct=4 chunk carried no tokens
    assert tuple(r.chunk_ns) == (10, 20, 40, 50)
    assert r.output_tokens == 10 and r.prompt_tokens == 5 and r.tokens_exact
    assert r.spec.verify_ct == 4 and r.spec.histogram == (1, 1, 2)
    assert r.accept_length == pytest.approx(9 / 4)
    assert r.ttft_ns == 10 - 2_000
    assert r.decode_tokens_per_second == pytest.approx(9 / 40e-9)


def oa(text: str | None, ct: int | None, finish: str | None = None, chat: bool = False) -> bytes:
    choices = [] if text is None else [
        {"index": 0, "delta": {"content": text}, "finish_reason": finish} if chat else
        {"index": 0, "text": text, "finish_reason": finish}]
    usage = None if ct is None else {"prompt_tokens": 7, "completion_tokens": ct, "total_tokens": 7 + ct}
    return orjson.dumps({"id": "c", "choices": choices, "usage": usage})


@pytest.mark.parametrize("api", ["completions", "chat"])
def test_openai_with_continuous_usage_is_exact(api):
    a = attempt(api)
    chat = api == "chat"
    for t, d in [(1, oa("", 0, chat=chat)), (2, oa(" a", 1, chat=chat)), (3, oa(" b c d", 4, chat=chat)),
                 (4, oa("", 4, "length", chat=chat)), (5, oa(None, 4))]:
        a.handle(d, t)
    r = a.finish(Outcome.OK, 100)
    assert (tuple(r.chunk_tokens), r.output_tokens, r.prompt_tokens, r.tokens_exact) == ((1, 3), 4, 7, True)


def test_openai_without_usage_apportions_final_total_by_text_length():
    a = attempt("completions")
    for t, d in [(1, oa(" a", None)), (2, oa(" bb cc", None)), (3, oa(" dd", None, "length")), (4, oa(None, 8))]:
        a.handle(d, t)
    r = a.finish(Outcome.OK, 100)
    assert sum(r.chunk_tokens) == 8 and r.output_tokens == 8
    assert r.chunk_tokens[1] > r.chunk_tokens[0]
    assert not r.tokens_exact


@pytest.mark.parametrize(("data", "msg"), [
    (b"{not json", "malformed JSON event"),
    (b"[1,2]", "not a JSON object"),
    (b'{"error": {"message": "boom"}}', "server error event: boom"),
    (b'{"text": "x"}', "without meta_info"),
])
def test_protocol_errors(data, msg):
    with pytest.raises(StreamError, match=msg):
        attempt("sglang").handle(data, 1)


def test_payloads_ask_for_what_the_client_needs():
    params = GenParams(max_tokens=9, temperature=0.5, ignore_eos=True)
    sg_body = build_payload(Target("spec", "u", "sglang"), P, params)
    assert sg_body["sampling_params"] == {"max_new_tokens": 9, "temperature": 0.5, "ignore_eos": True}
    assert sg_body["stream"] is True and sg_body["text"] == "def f():"
    chat = build_payload(Target("spec", "u", "chat", "m"), P, params)
    assert chat["messages"] == [{"role": "user", "content": "def f():"}]
    assert chat["stream_options"] == {"include_usage": True, "continuous_usage_stats": True}


def test_a_request_the_server_aborted_is_a_stream_error():
    a = attempt("sglang")
    a.handle(sg(1), 1)
    abort = orjson.dumps({"text": "x", "meta_info": {"id": "r", "finish_reason": {"type": "abort", "message":
                          "server shutting down"}, "completion_tokens": 3, "prompt_tokens": 5}})
    with pytest.raises(StreamError, match="aborted by the server: server shutting down"):
        a.handle(abort, 2)


@pytest.mark.parametrize(("meta", "expected"), [
    ({"spec_verify_ct": 4, "spec_accept_length": 2.5, "spec_correct_drafts_histogram": [1, 1, 2]},
     (4, 2.5, (1, 1, 2))),
    ({"spec_verify_ct": 4, "spec_accept_length": -2.5}, (4, None, ())),  # negative: left out, never averaged
    ({"spec_verify_ct": 4, "spec_correct_drafts_histogram": [5, -1, 0]}, (4, None, ())),  # negative counts
    ({"spec_verify_ct": 4, "spec_correct_drafts_histogram": [1, 1]}, (4, None, ())),  # not one per round
    ({"spec_verify_ct": 99}, None),  # more verify rounds than tokens
    ({"spec_verify_ct": 0}, None),
])
def test_server_speculative_fields_are_validated(meta, expected):
    a = attempt("sglang")
    a.handle(sg(1), 10)
    a.handle(sg(10, True, **meta), 20)
    spec = a.finish(Outcome.OK, 30).spec
    assert (None if spec is None else (spec.verify_ct, spec.accept_length, spec.histogram)) == expected


def test_a_token_claim_beyond_the_bytes_received_is_a_stream_error():
    a = attempt("sglang")
    event = orjson.dumps({"text": "x", "meta_info": {"completion_tokens": 20_000_000, "finish_reason": None}})
    with pytest.raises(StreamError, match="claims 20000000 completion tokens after only"):
        a.handle(event, 10)


def test_a_stream_is_bounded_by_the_tokens_asked_for_not_only_by_its_bytes():
    """A request for 32 tokens that streams 200,000 (or endless chunks) is a stream_error at the cap, not an
    ok record with millions of tok/s; the cap leaves one draft's overshoot (TOKEN_MARGIN)."""
    from specwatch.probe.limits import TOKEN_MARGIN

    a = Attempt(Target("spec", "http://x", "sglang", "m"), P, False, intended_ns=0, max_tokens=32)
    assert not a.handle(sg(32 + TOKEN_MARGIN), 1)  # the most a server may overshoot by
    with pytest.raises(StreamError, match=r"claims 200000 completion tokens, more than the 32 asked \(\+64\)"):
        Attempt(Target("spec", "http://x", "sglang", "m"), P, False, 0, max_tokens=32).handle(
            orjson.dumps({"text": "x" * 300_000, "meta_info": {"completion_tokens": 200_000}}), 1)
    b = Attempt(Target("spec", "http://x", "completions", "m"), P, False, 0, max_tokens=32)
    chunk = orjson.dumps({"choices": [{"index": 0, "text": "w", "finish_reason": None}]})
    for i in range(32 + TOKEN_MARGIN):  # no usage at all: one chunk per token at most
        assert not b.handle(chunk, i)
    with pytest.raises(StreamError, match="more than 96 chunks for 32 tokens asked"):
        b.handle(chunk, 99)
    assert len(b.chunk_ns) == 96  # what is kept stays bounded


def test_events_that_repeat_the_same_count_end_at_twice_the_tokens_asked():
    """The chunk cap never fires on events that claim no new token; the events cap does, past an event that carries
    none beside every token-bearing one (role, usage, stats, SGLang's sglext_ids), plus a few."""
    from specwatch.probe.limits import max_events

    a = Attempt(Target("spec", "http://x", "sglang", "m"), P, False, 0, max_tokens=8)
    cap = max_events(a.limits.token_cap)
    assert cap == 2 * (8 + 64) + 16
    for i in range(cap):
        assert not a.handle(sg(1), i)
    with pytest.raises(StreamError, match=f"more than {cap} events for 8 tokens asked"):
        a.handle(sg(1), cap)
    b = Attempt(Target("spec", "http://x", "sglang", "m"), P, False, 0, max_tokens=8)
    for n in range(1, a.limits.token_cap + 1):  # the longest stream allowed, an event without a token beside each
        assert not b.handle(sg(n), n) and not b.handle(sg(n), n)
    assert b.tokens == b.limits.token_cap


def test_an_event_far_larger_than_its_stream_so_far_is_refused():
    a = Attempt(Target("spec", "http://x", "sglang", "m"), P, False, 0, max_tokens=8)
    with pytest.raises(StreamError, match=r"an event of \d+ bytes after 0 tokens"):
        a.handle(b'{"text": "' + b"x" * (2 * 1024 * 1024) + b'", "meta_info": {"completion_tokens": 1}}', 1)


def vllm_tail(ct: int, **sd) -> bytes:
    return orjson.dumps({"id": "c", "choices": [], "usage": {"prompt_tokens": 7, "completion_tokens": ct,
                                                              "total_tokens": 7 + ct},
                         "metrics": {"speculative_decoding": sd}})


VLLM_SD = {"mean_acceptance_length": 2.5, "draft_acceptance_rate": 0.5, "acceptance_histogram": [1, 1, 2],
           "num_spec_steps": 4, "num_accepted_draft_tokens": 6, "num_draft_tokens": 12, "num_spec_tokens": 3}


@pytest.mark.parametrize(("change", "verify_ct", "accept_length"), [
    ({}, 4, 2.5),  # 1 + 6 accepted / 4 steps, vLLM's own mean: steps without a draft are no verify round
    ({"acceptance_histogram": [1, 1]}, 4, 2.5),  # a histogram that does not count every step is left out
    ({"num_spec_steps": 0}, None, None), ({"num_spec_steps": "4"}, None, None),
    ({"num_accepted_draft_tokens": 40}, None, None),  # more than the completion holds
    ({"num_accepted_draft_tokens": 10}, 4, 3.5),  # a last step max_tokens cut short: vLLM counts its drafts
    ({"num_accepted_draft_tokens": -1}, None, None), ({"mean_acceptance_length": 900.0}, 4, 2.5),
])
def test_vllm_per_request_spec_decode_metrics(change, verify_ct, accept_length):
    a = attempt("completions")
    for t, d in [(1, oa(" a", 1)), (2, oa(" b c d e f g h i j k l", 12, "length")),
                 (3, vllm_tail(12, **(VLLM_SD | change)))]:
        a.handle(d, t)
    r = a.finish(Outcome.OK, 100)
    assert (r.spec.verify_ct if r.spec else None) == verify_ct
    assert r.accept_length == (pytest.approx(accept_length) if accept_length else None)
    if r.spec is not None:
        assert r.spec.histogram == ((1, 1, 2) if "acceptance_histogram" not in change else ())
        assert r.spec.accept_length == (2.5 if "mean_acceptance_length" not in change else None)

"""Records survive the JSON Lines codec exactly, and a bad line is refused with the field named."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from specwatch import codec
from specwatch.errors import RecordFileError
from specwatch.records import Outcome, RequestRecord, RunInfo, ServerSample, SpecStats

ints = st.integers(min_value=0, max_value=2**62)
text = st.text(max_size=20)


@st.composite
def requests(draw):
    n = draw(st.integers(0, 20))
    spec = draw(st.none() | st.builds(SpecStats, verify_ct=ints, accept_length=st.none() | st.floats(0, 64),
                                      histogram=st.lists(ints, max_size=6).map(tuple)))
    return RequestRecord(
        api=draw(st.sampled_from(["sglang", "completions", "chat"])),
        target=draw(st.sampled_from(["spec", "baseline"])),
        prompt_id=draw(text), domain=draw(text), warmup=draw(st.booleans()), intended_ns=draw(ints),
        sent_ns=draw(ints), done_ns=draw(ints), chunk_ns=tuple(draw(st.lists(ints, min_size=n, max_size=n))),
        chunk_tokens=tuple(draw(st.lists(ints, min_size=n, max_size=n))), tokens_exact=draw(st.booleans()),
        prompt_tokens=draw(ints), output_tokens=draw(ints), outcome=draw(st.sampled_from(list(Outcome))),
        http_status=draw(st.none() | st.integers(100, 599)), error=draw(text), spec=spec)


samples = st.builds(ServerSample, source=st.sampled_from(["sglang_decode", "vllm_spec", "scrape"]), dp_rank=text,
                    wall_time=text, accept_length=st.none() | st.floats(1, 64), running=st.none() | ints,
                    position_acceptance=st.lists(st.floats(0, 1), max_size=5).map(tuple))


@given(requests())
def test_request_records_round_trip_exactly(rec):
    assert codec.decode(codec.encode(rec)) == rec


@given(samples)
def test_server_samples_round_trip_exactly(s):
    assert codec.decode(codec.encode(s)) == s


def test_run_info_round_trips():
    info = RunInfo("http://x:1", "sglang", "m", {"speculative_num_steps": 5}, 2.1, {"max_tokens": 500})
    assert codec.decode(codec.encode(info)) == info


@pytest.mark.parametrize(("line", "message"), [
    (b"nope", "not JSON"),
    (b'{"kind": "elephant"}', "kind is one of run, request, sample"),
    (b'{"kind": "request", "api": "sglang"}', "missing field 'target'"),
    (b'{"kind": "request", "api": "sglang", "target": "spec", "prompt_id": "p", "domain": "d", "error": "", '
     b'"intended_ns": "soon", "sent_ns": 0, "done_ns": 0, "prompt_tokens": 0, "output_tokens": 0, "warmup": false, '
     b'"tokens_exact": true, "http_status": null, "chunk_ns": [], "chunk_tokens": [], "outcome": "ok"}',
     "intended_ns: 'soon' is not of type int"),
    (b'{"kind": "request", "api": "sglang", "target": "spec", "prompt_id": "p", "domain": "d", "error": "", '
     b'"intended_ns": 0, "sent_ns": 0, "done_ns": 0, "prompt_tokens": 0, "output_tokens": 0, "warmup": false, '
     b'"tokens_exact": true, "http_status": null, "chunk_ns": [1], "chunk_tokens": [], "outcome": "ok"}',
     "chunk_ns and chunk_tokens differ in length"),
    (b'{"kind": "request", "api": "sglang", "target": "spec", "prompt_id": "p", "domain": "d", "error": "", '
     b'"intended_ns": 0, "sent_ns": 0, "done_ns": 0, "prompt_tokens": 0, "output_tokens": 0, "warmup": false, '
     b'"tokens_exact": true, "http_status": null, "chunk_ns": [], "chunk_tokens": [], "outcome": "great"}',
     "outcome: 'great' is not one of"),
])
def test_bad_lines_are_refused_naming_the_field(line, message):
    with pytest.raises(RecordFileError, match=message):
        codec.decode(line)

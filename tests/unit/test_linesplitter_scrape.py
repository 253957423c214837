"""Line splitting limits (long, binary, partial lines), its pace, and the server-metrics scrape parser."""

import time

import pytest

from specwatch.server.logtail import BUSY_SHARE, LineSplitter, SourceState, feed_paced
from specwatch.server.scrape import ScrapeState, running_from_text, samples_from_text


def split(chunks, limit=64):
    got, st = [], SourceState()
    s = LineSplitter(got.append, st, limit)
    for c in chunks:
        s.feed(c)
    s.flush_partial()
    return got, dict(st.skipped)


def test_lines_across_chunks_and_crlf():
    assert split([b"a\r\nb", b"c\n", b"d\n"]) == (["a", "bc", "d"], {})


def test_long_line_dropped_once_even_across_many_chunks_and_next_line_survives():
    got, skipped = split([b"x" * 50, b"x" * 50, b"x" * 50, b"\nok\n", b"y" * 70 + b"\nfine\n"])
    assert got == ["ok", "fine"] and skipped == {"too_long": 2}


def test_binary_and_partial_lines():
    got, skipped = split([b"\x00\x01\x02junk\n", b"\xff\xfe\xfd\xfc\n", b"caf\xc3\xa9\n", b"tail-without-newline"])
    assert got == ["café"] and skipped == {"binary": 2, "partial": 1}


SGLANG = """# TYPE sglang:spec_accept_length gauge
sglang:spec_accept_length{model_name="m",engine_type="unified",tp_rank="0",pp_rank="0"} 2.5
sglang:spec_accept_rate{model_name="m",engine_type="unified",tp_rank="0",pp_rank="0"} 0.3
sglang:gen_throughput{model_name="m",engine_type="unified",tp_rank="0",pp_rank="0"} 88.5
sglang:num_running_reqs{model_name="m",engine_type="unified",tp_rank="0",pp_rank="0"} 3
sglang:spec_num_steps{model_name="m",engine_type="unified",tp_rank="0",pp_rank="0"} 5
"""


def test_sglang_gauges():
    (s,) = samples_from_text(SGLANG, ScrapeState())
    assert (s.accept_length, s.accept_rate, s.gen_throughput, s.running, s.dp_rank) == (2.5, 0.3, 88.5, 3, "0")
    assert s.speculative_steps == 5  # the running step count (adaptive moves it), not the launch value
    state = ScrapeState()
    (s,) = samples_from_text(SGLANG.replace("} 5", "} 99"), state)
    assert s.speculative_steps is None and state.rejected == 1  # no draft is that long


def vllm(drafts, drafted, accepted, pos, generated=None):
    lines = [*([f'vllm:generation_tokens_total{{engine="0"}} {generated}'] if generated is not None else []),
             f'vllm:spec_decode_num_drafts_total{{engine="0"}} {drafts}',
             f'vllm:spec_decode_num_draft_tokens_total{{engine="0"}} {drafted}',
             f'vllm:spec_decode_num_accepted_tokens_total{{engine="0"}} {accepted}']
    lines += [f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{engine="0",position="{i}"}} {v}'
              for i, v in enumerate(pos)]
    return "\n".join(lines) + "\n"


def test_vllm_counters_become_interval_values_from_deltas():
    state = ScrapeState()
    assert samples_from_text(vllm(100, 300, 150, [80, 50, 20]), state) == []  # first scrape: no interval yet
    (s,) = samples_from_text(vllm(1100, 3300, 1650, [880, 550, 220]), state)
    assert s.accept_length == 1 + 1500 / 1000
    assert s.accept_rate == 1500 / 3000
    assert s.position_acceptance == (0.8, 0.5, 0.2)
    assert s.speculative_steps == 3.0  # 3000 draft tokens over 1000 drafts
    assert samples_from_text(vllm(1100, 3300, 1650, [880, 550, 220]), state) == []  # idle: no drafts, no sample


def test_vllm_steps_in_use_follow_a_schedule():
    state = ScrapeState()
    samples_from_text(vllm(100, 300, 150, [80, 50, 20], generated=1000), state, 1.0)
    (s,) = samples_from_text(vllm(200, 400, 200, [120, 60, 20], generated=1500), state, 2.0)
    assert s.speculative_steps == 1.0  # 100 draft tokens over 100 drafts: the schedule's k=1 at this batch
    (s,) = samples_from_text(vllm(200, 400, 200, [120, 60, 20], generated=2500), state, 3.0)
    assert s.speculative_steps == 0.0 and s.accept_length is None  # generating without a draft: k=0


@pytest.mark.parametrize(("text", "want"), [
    (SGLANG, [3]),
    ('vllm:num_requests_running{engine="0",model_name="m"} 7.0\nvllm:num_requests_running{engine="1"} 2\n', [7, 2]),
    ("vllm:num_requests_running 4\n", [4]),  # no labels
    ('vllm:num_requests_running_total{engine="0"} 9\nvllm:num_requests_waiting{engine="0"} 5\n', []),
    ('vllm:num_requests_running{engine="0"} NaN\nsglang:num_running_reqs{tp_rank="0"} -1\n', []),
    ("# HELP vllm:num_requests_running Number of requests\n", []),
])
def test_running_from_text_reads_what_samples_from_text_reads(text, want):
    assert running_from_text(text) == want
    assert [s.running for s in samples_from_text(text, ScrapeState()) if s.running is not None] == want


def test_running_from_text_skips_what_the_full_parser_would_refuse():
    # the full parser raises on the whole exposition (the daemon counts that scrape as failed); the bench's
    # sampler keeps the readable lines
    assert running_from_text('vllm:num_requests_running{engine="0"} x\nsglang:num_running_reqs{tp_rank="0"}\n'
                             'vllm:num_requests_running{engine="1"} 3\n') == [3]


async def test_parsing_a_backlog_takes_at_most_half_a_core():
    """feed_paced rests after each slice in proportion to its CPU time: over a backlog whose lines cost real CPU,
    the thread's CPU time is at most BUSY_SHARE of the wall time (contention only lowers that share)."""
    def busy(_line: str) -> None:
        end = time.thread_time() + 0.0002
        while time.thread_time() < end:
            pass

    split = LineSplitter(busy, SourceState())
    slice_ = b"a line\n" * 20  # 4 ms of CPU per slice
    cpu0, wall0 = time.thread_time(), time.monotonic()
    for _ in range(50):
        await feed_paced(split, slice_)
    cpu, wall = time.thread_time() - cpu0, time.monotonic() - wall0
    assert cpu >= 0.15 and cpu / wall <= BUSY_SHARE * 1.05, (cpu, wall)

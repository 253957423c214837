"""Following real files across rename+create rotation and copytruncate, counting every line exactly once;
a command source that exits and is restarted; a log file that appears later."""

import asyncio
import os

import pytest

from specwatch.server.logtail import CommandSource, FileFollower

pytestmark = pytest.mark.integration


async def until(pred, timeout_s=10.0):
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout_s
    while not pred():
        assert loop.time() < end, "deadline passed"
        await asyncio.sleep(0.02)


def write(path, lines, mode="a"):
    with open(path, mode) as f:
        for line in lines:
            f.write(line + "\n")


async def test_rotation_and_truncation_count_every_line_once(tmp_path):
    path = tmp_path / "server.log"
    write(path, ["old-1", "old-2"], "w")  # before start: skipped (we start at the end)
    got: list[str] = []
    f = FileFollower(str(path), got.append, poll_s=0.01)
    task = asyncio.create_task(f.run())
    try:
        await until(lambda: f.state.up)
        expected = []
        for round_ in range(5):
            batch = [f"r{round_}-{i}" for i in range(50)]
            write(path, batch[:30])
            if round_ % 2 == 0:  # rename + create: the tail of the old file must still be read
                write(path, batch[30:])
                os.rename(path, tmp_path / f"server.log.{round_}")
                write(path, [], "w")
            else:  # copytruncate, after the follower caught up (lines written in between are lost by design)
                write(path, batch[30:])
                want = len(expected) + 50
                await until(lambda n=want: len(got) == n)
                before = f.state.restarts
                os.truncate(path, 0)
                await until(lambda n=before + 1: f.state.restarts == n)  # noticed before new lines outgrow it
            expected += batch
            want = len(expected)
            await until(lambda n=want: len(got) == n)
        write(path, ["last"])
        expected.append("last")
        await until(lambda: len(got) == len(expected))
        assert got == expected
        assert f.state.restarts == 5 and f.state.up
    finally:
        task.cancel()


async def test_partial_last_line_waits_for_its_newline(tmp_path):
    path = tmp_path / "a.log"
    path.write_text("")
    got: list[str] = []
    f = FileFollower(str(path), got.append, poll_s=0.01)
    task = asyncio.create_task(f.run())
    try:
        await until(lambda: f.state.up)
        with open(path, "a") as fh:
            fh.write("half")
            fh.flush()
            await until(lambda: f.split.pending_bytes == 4)  # the follower read the half line and holds it back
            assert got == []
            fh.write(" and half\n")
        await until(lambda: got == ["half and half"])
    finally:
        task.cancel()


async def test_missing_file_is_waited_for_and_read_from_its_start(tmp_path):
    path = tmp_path / "later.log"
    got: list[str] = []
    f = FileFollower(str(path), got.append, poll_s=0.01)
    task = asyncio.create_task(f.run())
    try:
        await until(lambda: "No such file" in f.state.last_error)
        assert not f.state.up
        write(path, ["first", "second"], "w")
        await until(lambda: got == ["first", "second"])
        assert f.state.up
    finally:
        task.cancel()


async def test_command_source_restarts_with_backoff_and_reports_exit(tmp_path):
    got: list[str] = []
    src = CommandSource("echo one; echo two; exit 3", got.append, backoff_max_s=0.2)
    task = asyncio.create_task(src.run())
    try:
        # the third run's lines arrive before its exit is seen: wait for both (one run at six workers read the
        # six lines with two restarts counted)
        await until(lambda: len(got) >= 6 and src.state.restarts >= 3)
        assert got[:6] == ["one", "two"] * 3
        assert "status 3" in src.state.last_error
    finally:
        task.cancel()


async def test_command_that_cannot_start_is_retried_not_fatal():
    got: list[str] = []
    src = CommandSource("/nonexistent/bin/logs -f", got.append, backoff_max_s=0.1)
    task = asyncio.create_task(src.run())
    try:
        await until(lambda: src.state.restarts >= 2)
        assert got and "not found" in got[0]
        assert "status 127" in src.state.last_error
    finally:
        task.cancel()


async def test_from_start_on_a_large_log_yields_to_the_event_loop_while_it_reads(tmp_path):
    """A long backlog is read in slices: another task runs between them (before the fix it ran only after
    the whole file had been parsed, so every probe in flight measured the sidecar's own stall)."""
    path = tmp_path / "big.log"
    total = 20_000
    path.write_text("".join(f"[2025-05-02 10:05:31] Decode batch. #running-req: 1, #token: {i}\n"
                            for i in range(total)))
    got: list[str] = []
    seen_by_other_task: list[int] = []
    f = FileFollower(str(path), got.append, from_start=True, poll_s=0.01)
    task = asyncio.create_task(f.run())

    async def other() -> None:
        while len(got) < total:
            seen_by_other_task.append(len(got))
            await asyncio.sleep(0)

    try:
        await asyncio.wait_for(other(), 30)
    finally:
        task.cancel()
    assert len(got) == total
    partial = [n for n in seen_by_other_task if 0 < n < total]
    assert len(partial) >= 10, f"the reader held the loop: other task saw {sorted(set(seen_by_other_task))[:5]}"

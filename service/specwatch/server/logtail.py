"""Log sources: follow a file (rotation and truncation), a command's stdout (restarted), or stdin.

Server side, source stage. Each source cuts bytes into lines with ``LineSplitter`` and hands every complete line to
``on_line``; lines over the limit, binary junk and partial last lines are counted and skipped. Sources
never raise on I/O trouble: they report ``up`` and retry. Their ``SourceState`` is plain counters that the
exporter reads at scrape time.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import os
import stat
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

MAX_LINE_BYTES = 64 * 1024
# A file is read this much at a time, yielding to the event loop in between: a large backlog (--from-start
# on a long log) must not hold up the probes in flight, whose latency would then be the sidecar's own stall.
READ_CHUNK_BYTES = 16 * 1024
BUSY_SHARE = 0.5  # of one core: the most that parsing a log source's bytes may take, however many arrive
log = logging.getLogger("specwatch.logs")


@dataclass(slots=True)
class SourceState:
    up: bool = False
    restarts: int = 0  # file reopenings (rotation, truncation) or command restarts
    skipped: collections.Counter[str] = field(default_factory=collections.Counter)  # by records.SKIP_REASONS
    last_error: str = ""


class LineSplitter:
    """Bytes → complete lines. A line longer than ``limit`` is dropped whole (counted once)."""

    __slots__ = ("_buf", "_discarding", "limit", "on_line", "state")

    def __init__(self, on_line: Callable[[str], None], state: SourceState, limit: int = MAX_LINE_BYTES) -> None:
        self.on_line = on_line
        self.state = state
        self.limit = limit
        self._buf = b""
        self._discarding = False

    @property
    def pending_bytes(self) -> int:
        """Bytes of a line still waiting for its newline."""
        return len(self._buf)

    def feed(self, data: bytes) -> None:
        buf = self._buf + data if self._buf else data
        start = 0
        while True:
            nl = buf.find(b"\n", start)
            if nl < 0:
                break
            line = buf[start:nl]
            start = nl + 1
            if self._discarding:
                self._discarding = False
                continue
            self._emit(line)
        rest = buf[start:]
        if len(rest) > self.limit:
            if not self._discarding:
                self.state.skipped["too_long"] += 1
                self._discarding = True
            rest = b""
        self._buf = rest

    def _emit(self, line: bytes) -> None:
        if len(line) > self.limit:
            self.state.skipped["too_long"] += 1
            return
        if b"\x00" in line:
            self.state.skipped["binary"] += 1
            return
        text = line.decode("utf-8", "replace").rstrip("\r")
        if "\ufffd" in text and text.count("\ufffd") * 10 > len(text):
            self.state.skipped["binary"] += 1
            return
        self.on_line(text)

    def flush_partial(self) -> None:
        """The stream ended (or the file was rotated away) with an unterminated last line."""
        if self._buf and not self._discarding:
            self.state.skipped["partial"] += 1
        self._buf = b""
        self._discarding = False


async def feed_paced(split: LineSplitter, data: bytes) -> None:
    """Parse ``data``, then rest in proportion to the CPU time that took, so that a backlog, a burst or a fast
    pipe takes at most ``BUSY_SHARE`` of a core. The server this sidecar sits beside keeps the rest, and so do
    the probes and ``/healthz``: on a busy machine the kernel wakes a process that rests between slices as soon
    as a request arrives, where one that never rests waits its turn behind every other busy process."""
    started = time.thread_time()
    split.feed(data)
    await asyncio.sleep((time.thread_time() - started) * (1 - BUSY_SHARE) / BUSY_SHARE)


def file_lines(chunks: Iterable[bytes], state: SourceState) -> Iterator[str]:
    """The lines of a saved log under the follower's rules (a line too long or binary is skipped and counted
    in ``state``); a last line without its newline is a line too, since the file is complete."""
    out: list[str] = []
    split = LineSplitter(out.append, state)
    for chunk in chunks:
        split.feed(chunk)
        yield from out
        out.clear()
    if split.pending_bytes:
        split.feed(b"\n")
        yield from out


class FileFollower:
    """``tail -F`` by polling: survives rename+create rotation and copytruncate, waits for a missing file."""

    def __init__(self, path: str, on_line: Callable[[str], None], from_start: bool = False,
                 poll_s: float = 0.1) -> None:
        self.path = path
        self.state = SourceState()
        self.split = LineSplitter(on_line, self.state)
        self.from_start = from_start
        self.poll_s = poll_s

    async def run(self) -> None:
        fd: int | None = None
        ino = 0
        pos = 0
        first = True
        try:
            while True:
                if fd is None:
                    fd, problem = _open_regular(self.path)
                    if fd is None:
                        self.state.up = False
                        self.state.last_error = problem
                        first = False  # a file that appears later is read from its start
                        await asyncio.sleep(self.poll_s)
                        continue
                    opened = os.fstat(fd)
                    ino = opened.st_ino
                    pos = opened.st_size if first and not self.from_start else 0
                    first = False
                    self.state.up = True
                try:
                    pos = await self._drain(fd, pos)
                except OSError as exc:  # e.g. EIO, or the path now names something unreadable
                    self.state.up = False
                    self.state.last_error = f"{self.path}: {exc.strerror}"
                    os.close(fd)
                    fd = None
                    await asyncio.sleep(self.poll_s)
                    continue
                try:
                    st: os.stat_result | None = os.stat(self.path)
                except OSError:
                    st = None
                if st is None or st.st_ino != ino:
                    with contextlib.suppress(OSError):
                        pos = await self._drain(fd, pos)  # the rest of the rotated file, then switch
                    self.split.flush_partial()
                    os.close(fd)
                    fd = None
                    self.state.restarts += 1
                    continue
                if st.st_size < pos:  # copytruncate
                    pos = 0
                    self.split.flush_partial()
                    self.state.restarts += 1
                    continue
                await asyncio.sleep(self.poll_s)
        finally:
            if fd is not None:
                os.close(fd)

    async def _drain(self, fd: int, pos: int) -> int:
        while True:
            data = os.pread(fd, READ_CHUNK_BYTES, pos)
            if not data:
                return pos
            pos += len(data)
            await feed_paced(self.split, data)


def _open_regular(path: str) -> tuple[int | None, str]:
    """Open ``path`` for reading only if it is a regular file. Non-blocking, so a FIFO (which would block the
    open until a writer appears) or a device never freezes the loop; a directory, FIFO, socket or device is
    refused with a reason and retried later (the path may become a file again)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as exc:
        return None, f"{path}: {exc.strerror}"
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        kind = "a directory" if stat.S_ISDIR(mode) else "a FIFO" if stat.S_ISFIFO(mode) else "not a regular file"
        return None, f"{path}: is {kind}; follow a regular file, or use --log-cmd / --log-stdin for a stream"
    return fd, ""


class CommandSource:
    """A command's stdout (e.g. ``docker logs -f sglang``); restarted with backoff when it exits."""

    def __init__(self, cmd: str, on_line: Callable[[str], None], backoff_max_s: float = 30.0) -> None:
        self.cmd = cmd  # may hold a secret: never logged, never in the snapshot (/api/summary)
        self.pgid: int | None = None  # the running command's process group
        self.state = SourceState()
        self.split = LineSplitter(on_line, self.state)
        self.backoff_max_s = backoff_max_s

    async def run(self) -> None:
        backoff = 0.5
        loop = asyncio.get_running_loop()
        while True:
            started = loop.time()
            try:
                proc = await asyncio.create_subprocess_shell(
                    self.cmd, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
                    stdin=asyncio.subprocess.DEVNULL, start_new_session=True)
            except OSError as exc:
                self.state.up = False
                self.state.last_error = f"cannot start log command: {exc}"
                log.warning("%s; retrying in %.1fs", self.state.last_error, backoff)
            else:
                self.state.up = True
                self.pgid = proc.pid
                try:
                    assert proc.stdout is not None
                    while data := await proc.stdout.read(1 << 16):
                        await feed_paced(self.split, data)
                    rc = await proc.wait()
                    self.state.last_error = f"log command exited with status {rc}"
                finally:
                    if proc.returncode is None:
                        with contextlib.suppress(ProcessLookupError):
                            os.killpg(proc.pid, 15)
                        await proc.wait()
                    self.pgid = None
                self.split.flush_partial()
                self.state.up = False
                log.warning("log command exited with status %s; restarting in %.1fs", rc, backoff)
            self.state.restarts += 1
            if loop.time() - started > 30:
                backoff = 0.5
            await asyncio.sleep(backoff)
            backoff = min(self.backoff_max_s, backoff * 2)


class StdinSource:
    """Standard input: a pipe or socket is read on the loop; anything else (a regular file, /dev/null, a
    terminal) by a daemon thread, since the loop can only watch pipes, sockets and some character devices."""

    def __init__(self, on_line: Callable[[str], None], fd: int = 0) -> None:
        self.state = SourceState()
        self.split = LineSplitter(on_line, self.state)
        self.fd = fd

    async def run(self) -> None:
        try:
            mode = os.fstat(self.fd).st_mode
        except OSError as exc:
            self.state.last_error = f"stdin: {exc.strerror}"
            await asyncio.Event().wait()
        self.state.up = True
        if stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode):
            await self._pipe()
        else:
            await self._thread()
        self.split.flush_partial()
        self.state.up = False
        self.state.last_error = self.state.last_error or "stdin closed"
        await asyncio.Event().wait()  # stay alive: the daemon keeps probing

    async def _pipe(self) -> None:
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader(limit=1 << 20)
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(self.fd, "rb", 0,
                                                                                                closefd=False))
        while data := await reader.read(1 << 16):
            await feed_paced(self.split, data)

    async def _thread(self) -> None:
        loop = asyncio.get_running_loop()
        chunks: asyncio.Queue[bytes] = asyncio.Queue(maxsize=64)  # bounded: the thread waits for the loop

        def read() -> None:
            try:
                while data := os.read(self.fd, 1 << 16):
                    asyncio.run_coroutine_threadsafe(chunks.put(data), loop).result()
            except (OSError, RuntimeError) as exc:  # RuntimeError: the loop closed under us at shutdown
                self.state.last_error = f"stdin: {exc}"
            with contextlib.suppress(RuntimeError):
                asyncio.run_coroutine_threadsafe(chunks.put(b""), loop)

        threading.Thread(target=read, name="stdin-reader", daemon=True).start()
        while data := await chunks.get():
            await feed_paced(self.split, data)


LogSource = FileFollower | CommandSource | StdinSource


def kill_now(source: LogSource | None) -> None:
    """On a hard exit (second signal): the log command's process group must not outlive the daemon."""
    if isinstance(source, CommandSource) and source.pgid is not None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(source.pgid, 9)

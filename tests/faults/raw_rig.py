"""What the raw-HTTP fault tests share (``test_raw_http_bench.py``: bench's rows; ``test_raw_http.py``: the
daemon's): ``tests/rawserver.py`` started once per module, the API key planted in every client, the check that no
raw control byte is printed, and the rows the session summary prints (tests/conftest.py). Two modules, so that
xdist runs bench's rows and the daemon's on two workers: as one module they held one worker for 160 s of a 186 s
first run (``.ci/run``'s, at six workers), twice any other file."""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from conftest import Proc, Procs, free_port, http_get, wait_until

KEY = "sk-raw-0123456789abcdef"
CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")  # any control byte but tab and newline
ROWS: list[tuple[str, str, str]] = []  # (case, who, outcome): printed in the session summary (conftest)


def serve(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Procs, Proc, Path]]:
    """The raw server for a module's tests (each module's ``raw`` fixture), stopped when they are done."""
    tmp = tmp_path_factory.mktemp("raw")
    procs = Procs(tmp)
    port = free_port()
    server = procs.start([sys.executable, str(Path(__file__).parent.parent / "rawserver.py"), str(port), "ok"], "raw")
    server.url = f"http://127.0.0.1:{port}"
    wait_until(lambda: http_get(server.url + "/get_server_info", 1)[0] == 200, what="the raw server")
    yield procs, server, tmp
    procs.stop_all()


def use(server: Any, case: str) -> None:
    assert json.loads(http_get(f"{server.url}/case/{case}")[1]) == {"case": case}


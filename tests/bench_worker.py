"""One long-lived ``specwatch`` client for measured benches (``bench_client``): reads one JSON argv per line on
stdin, runs it through ``specwatch.cli.main`` as the command line would, and answers one JSON line per run (its
exit code, what it printed to stdout and to stderr). A bench of one 8-token request against the simulator,
pinned: 0.50 s as a process, 0.16 s here."""

from __future__ import annotations

import contextlib
import gc
import io
import json
import sys
import traceback


def run(argv: list[str]) -> dict[str, object]:
    from specwatch import cli

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = cli.main(argv)
        except SystemExit as exc:  # argparse's refusals
            rc = exc.code if isinstance(exc.code, int) else 1 if exc.code else 0
        except Exception:  # the caller's assertion shows it, as a crashed process's stderr would
            traceback.print_exc()
            rc = 1
    gc.collect()  # this run's garbage now, not in the middle of the next run's measurement
    return {"rc": rc, "stdout": out.getvalue(), "stderr": err.getvalue()}


def main() -> None:
    answers = sys.stdout
    for line in sys.stdin:
        answers.write(json.dumps(run(json.loads(line))) + "\n")
        answers.flush()


if __name__ == "__main__":
    main()

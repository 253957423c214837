"""``specwatch`` command line: dispatches to each subcommand's own module (imported lazily)."""

from __future__ import annotations

import importlib
import sys

COMMANDS = {
    "sim": ("specwatch.sim.cli", "simulated SGLang server with EAGLE-3 speculative decoding"),
    "bench": ("specwatch.commands.bench", "benchmark a server: tok/s, TTFT, per-token ITL, accept length"),
    "report": ("specwatch.commands.report", "replay records files from bench --records into the same report"),
    "run": ("specwatch.commands.run", "the sidecar daemon: probe, tail logs, export Prometheus metrics"),
    "demo": ("specwatch.commands.demo", "simulator + daemon + live terminal view, on this machine"),
    "parse-log": ("specwatch.commands.parse_log", "accept-length statistics of saved server logs"),
    "sweep": ("specwatch.commands.sweep", "launch, bench and compare draft configurations unattended"),
    "tune": ("specwatch.commands.tune", "find the best draft step count in a few launches, from the one running"),
    "advise": ("specwatch.commands.advise", "explain a sweep with the cycle model and predict untested steps"),
}


def usage() -> str:
    lines = ["usage: specwatch COMMAND [options]", "", "commands:"]
    lines += [f"  {name:<10} {help_}" for name, (_, help_) in COMMANDS.items()]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help"):
        print(usage())
        return 0 if argv else 2
    if argv[0] in ("-V", "--version"):
        from specwatch import __version__

        print(f"specwatch {__version__}")
        return 0
    entry = COMMANDS.get(argv[0])
    if entry is None:
        print(f"specwatch: unknown command {argv[0]!r}\n\n{usage()}", file=sys.stderr)
        return 2
    rc: int = importlib.import_module(entry[0]).main(argv[1:])
    return rc


if __name__ == "__main__":
    sys.exit(main())

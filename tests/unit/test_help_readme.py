"""Help = README: each command's ``--help`` lists the flags its README table lists, each with the default the table
states; every flag's help states its default (or that the flag is required); every environment variable a command
reads is in its ``--help``; no help names an internal module.

On a mismatch the test prints the table the README should hold, generated from the help (the README's tables were
written from it): paste it and keep the prose beside it for what the flags do not say.
"""

import contextlib
import io
import re
from pathlib import Path

import pytest

from specwatch import cli, config
from specwatch.commands import bench, sweep, tune

README = Path(__file__).resolve().parents[2] / "README.md"
COMMANDS = ["run", "bench", "report", "sweep", "tune", "advise", "parse-log", "demo", "sim", "sim --engine vllm"]
ENTRY = re.compile(r"^  (-\S.*?)(?:  +(\S.*))?$")  # an option's line: two spaces, its flags, its help if it fits
STATED = re.compile(r"(.*?) ?\((required|default: .*)\)")
INTERNAL = re.compile(r"\bstage\b|\bpure\b|\.py\b|``|specwatch\.[a-z]|\b(?:analysis|probe|recorder|export|commands|sim)"
                      r"[./][a-z_]+")
Table = dict[tuple[str, ...], tuple[str, str]]  # flags -> (default as stated, meaning)


def help_text(command: str, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("COLUMNS", "2000")  # one line per option: argparse wraps at the terminal's width
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit) as exit_:
        cli.main([*command.split(), "--help"])
    assert exit_.value.code == 0
    return out.getvalue()


def help_table(text: str) -> Table:
    """Every option of the help's options section but --help: its flags, stated default and meaning."""
    entries: list[list[str]] = []
    for line in text.split("\noptions:\n", 1)[1].split("\n\n", 1)[0].splitlines():
        m = ENTRY.match(line)
        if m:
            entries.append([m.group(1), m.group(2) or ""])
        else:  # the help on the line below a long invocation
            entries[-1][1] = f"{entries[-1][1]} {line.strip()}".strip()
    table: Table = {}
    for invocation, meaning in entries:
        flags = tuple(part.split()[0] for part in invocation.split(", "))
        if "--help" in flags:
            continue
        m = STATED.fullmatch(meaning)
        assert m, f"{', '.join(flags)}: the help states no default: {meaning!r}"
        table[flags] = (m.group(2).removeprefix("default: "), m.group(1))
    return table


def markdown(table: Table) -> str:
    rows = ["| flag | default | meaning |", "|---|---|---|"]
    for flags, (stated, meaning) in table.items():
        cells = (", ".join(f"`{f}`" for f in flags), stated, meaning.replace("|", "\\|"))
        rows.append("| " + " | ".join(cells) + " |")
    return "\n".join(rows)


def readme_table(command: str) -> Table:
    """The ``| flag | default | meaning |`` table of the README section headed ``specwatch COMMAND``."""
    text = README.read_text(encoding="utf-8")
    heading = re.search(rf"^#+ `specwatch {re.escape(command)}`.*$", text, re.M)
    assert heading, f"the README has no section headed `specwatch {command}`"
    section = re.split(r"^#{2,} ", text[heading.end():], maxsplit=1, flags=re.M)[0]
    lines = section.splitlines()
    assert "| flag | default | meaning |" in lines, f"`specwatch {command}`: the section has no flag table"
    table: Table = {}
    for line in lines[lines.index("| flag | default | meaning |") + 2:]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]]
        table[tuple(re.findall(r"`(-[^`\s]+)", cells[0]))] = (cells[1].replace("`", ""), cells[2])
    return table


@pytest.mark.parametrize("command", COMMANDS)
def test_the_readme_table_lists_the_flags_and_defaults_the_help_does(command, monkeypatch):
    helped = help_table(help_text(command, monkeypatch))
    documented = readme_table(command)
    expected = markdown(helped)
    assert set(documented) == set(helped), f"`specwatch {command}`: the README's table should be\n{expected}"
    wrong = {f: (documented[f][0], helped[f][0]) for f in helped if documented[f][0] != helped[f][0]}
    assert wrong == {}, f"`specwatch {command}`: defaults (README, help) differ; the table should be\n{expected}"


@pytest.mark.parametrize("command", COMMANDS)
def test_the_help_names_no_internal_module_or_stage(command, monkeypatch):
    assert INTERNAL.findall(help_text(command, monkeypatch)) == []


@pytest.mark.parametrize(("command", "defaults"), [("run", config.DEFAULTS), ("bench", bench.DEFAULTS),
                                                   ("sweep", sweep.DEFAULTS), ("tune", tune.DEFAULTS)])
def test_the_help_lists_every_environment_variable_the_command_reads(command, defaults, monkeypatch):
    text = help_text(command, monkeypatch)
    epilog = text.split("\nenvironment (flags > SPECWATCH_* > config file > defaults):\n", 1)[1]
    listed = re.findall(r"^  (SPECWATCH_[A-Z_]+) ", epilog, re.M)
    assert listed == ["SPECWATCH_CONFIG", *(f"SPECWATCH_{k.upper()}" for k in defaults)]
    assert "SPECWATCH_API_KEY" in listed
    assert ("SPECWATCH_API_TOKEN" in listed) == (command == "run")  # the page's token: the daemon's only


@pytest.mark.parametrize("command", ["run", "bench"])
def test_a_required_flag_shows_no_default_and_a_default_shows_once(command, monkeypatch):
    text = help_text(command, monkeypatch)
    table = help_table(text)
    assert table[("--server-url",)] == ("required", "URL of the (speculative) server, http://host:port")
    assert table[("--ignore-eos", "--no-ignore-eos")][0] == "on; --no-ignore-eos to stop at EOS" \
        if command == "bench" else text.count("127.0.0.1:9753") == 1


def test_the_simulators_read_their_engines_variables(monkeypatch):
    assert "SGLANG_LOG_MS" in help_text("sim", monkeypatch).split("\nenvironment:\n", 1)[1]
    assert "VLLM_LOG_STATS_INTERVAL" in help_text("sim --engine vllm", monkeypatch).split("\nenvironment:\n", 1)[1]

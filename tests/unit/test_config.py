"""Config precedence (flag > env > file > default) and exact error messages."""

import argparse

import pytest

from specwatch import config, options
from specwatch.errors import ConfigError


def args(*argv: str) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    config.add_run_flags(p)
    return p.parse_args(list(argv))


def test_precedence_flag_over_env_over_file(tmp_path):
    f = tmp_path / "c.toml"
    f.write_text('server_url = "http://10.0.0.1:1"\nmax_tokens = 64\nconcurrency = 3\npause_s = 1\n')
    env = {"SPECWATCH_MAX_TOKENS": "32", "SPECWATCH_CONCURRENCY": "2"}
    cfg = config.read(args("--config", str(f), "--concurrency", "5"), env)
    assert (cfg.server_url, cfg.max_tokens, cfg.concurrency, cfg.pause_s) == ("http://10.0.0.1:1", 32, 5, 1.0)
    assert cfg.listen == options.DEFAULT_LISTEN and cfg.interval_s == 10.0


def test_env_booleans_and_config_path_from_env(tmp_path):
    f = tmp_path / "c.toml"
    f.write_text('server_url = "http://127.0.0.1:30000"\n')
    cfg = config.read(args("--from-start"), {"SPECWATCH_CONFIG": str(f), "SPECWATCH_SERVER_METRICS": "true"})
    assert cfg.server_metrics is True and cfg.from_start is True


@pytest.mark.parametrize(("argv", "env", "toml", "message"), [
    ((), {}, 'server_url = "http://x:1"\nmax_token = 5\n', "config file {f}: unknown option 'max_token'"),
    (("--server-url", "ftp://x"), {}, None, "command line: server_url: 'ftp://x' must start with http://"),
    (("--server-url", "http://x:1/v1"), {}, None, "must be a base URL without a path"),
    (("--server-url", "http://x:1", "--max-tokens", "ten"), {}, None, "max_tokens: expected int, got 'ten'"),
    (("--server-url", "http://x:1", "--concurrency", "0"), {}, None, "concurrency: must be > 0, got '0'"),
    (("--server-url", "http://x:1", "--api", "grpc"), {}, None,
     "api: 'grpc' is not one of auto, sglang, completions, chat"),
    (("--server-url", "http://x:1", "--listen", "9753"), {}, None, "listen: '9753' must be HOST:PORT"),
    ((), {}, None, "server_url is required"),
    (("--server-url", "http://x:1", "--log-file", "a", "--log-stdin"), {}, None, "are alternatives"),
    ((), {}, 'server_url = "http://x:1"\nconcurrency = true\n', "concurrency: expected int, got True"),
    ((), {}, "server_url = [", "config file {f}: "),
])
def test_errors_name_the_key_and_where_it_came_from(tmp_path, argv, env, toml, message):
    f = tmp_path / "c.toml"
    a = list(argv)
    if toml is not None:
        f.write_text(toml)
        a += ["--config", str(f)]
    with pytest.raises(ConfigError) as e:
        config.read(args(*a), env)
    assert message.format(f=f) in str(e.value)


def test_missing_config_file():
    with pytest.raises(ConfigError, match=r"config file /nonexistent\.toml: No such file"):
        config.read(args("--config", "/nonexistent.toml"), {})


def test_nan_and_inf_are_refused_for_every_float_option():
    for key in ("pause_s", "interval_s", "baseline_tps", "rate_per_s", "temperature", "drain_timeout_s"):
        for bad in ("nan", "inf", "-inf"):
            with pytest.raises(ConfigError, match=f"{key}: must be a finite number"):
                config.read(args("--server-url", "http://x:1", f"--{key.replace('_', '-')}={bad}"), {})


def test_one_layering_for_every_command_flags_over_env_over_file_over_default():
    defaults = {"max_tokens": 500, "num_runs": 5, "warmup": 1, "temperature": 0.0}
    got = options.layer(defaults, {"max_tokens": "9"}, {"SPECWATCH_MAX_TOKENS": "8", "SPECWATCH_NUM_RUNS": "7",
                                                        "SPECWATCH_LOG_FILE": "daemon.log"},
                        {"max_tokens": 6, "num_runs": 6, "warmup": 6}, "f.toml")
    assert got == {"max_tokens": 9, "num_runs": 7, "warmup": 6, "temperature": 0.0}  # log_file: run's, left to it
    with pytest.raises(ConfigError, match=r"^config file f.toml: unknown option 'log_file'"):
        options.layer(defaults, {}, {}, {"log_file": "x"}, "f.toml")
    with pytest.raises(ConfigError, match=r"^environment \(SPECWATCH_\*\): max_tokens"):
        options.layer(defaults, {}, {"SPECWATCH_MAX_TOKENS": "-1"})


@pytest.mark.parametrize(("environ", "warned"), [
    ({"SPECWATCH_VENV": "/opt/venv"}, ["specwatch: warning: ignoring SPECWATCH_VENV: no specwatch option is called "
                                       "that"]),
    ({"SPECWATCH_MAX_TOKEN": "5", "SPECWATCH_BOGUS": "1"},  # sorted; a near miss gets a hint
     ["specwatch: warning: ignoring SPECWATCH_BOGUS: no specwatch option is called that",
      "specwatch: warning: ignoring SPECWATCH_MAX_TOKEN: no specwatch option is called that (did you mean "
      "SPECWATCH_MAX_TOKENS?)"]),
    ({"SPECWATCH_LOG_FILE": "d.log", "SPECWATCH_CONFIG": "f.toml", "SPECWATCHER": "x", "PATH": "/usr/bin"}, []),
])
def test_a_variable_that_is_no_option_is_named_in_a_warning_and_ignored(environ, warned):
    defaults = {"max_tokens": 500, "num_runs": 5}
    seen: list[str] = []
    got = options.layer(defaults, {}, {**environ, "SPECWATCH_NUM_RUNS": "7"}, warn=seen.append)
    assert got == {"max_tokens": 500, "num_runs": 7} and seen == warned


def test_the_daemons_config_warns_of_a_foreign_variable_on_stderr_and_starts(capsys):
    cfg = config.read(args("--server-url", "http://x:1"), {"SPECWATCH_VENV": "/opt/venv", "SPECWATCH_RATEE": "1",
                                                          "SPECWATCH_MAX_TOKENS": "9"})
    assert cfg.max_tokens == 9
    assert capsys.readouterr().err.splitlines() == [
        "specwatch: warning: ignoring SPECWATCH_RATEE: no specwatch option is called that",
        "specwatch: warning: ignoring SPECWATCH_VENV: no specwatch option is called that"]


def test_every_dataclass_default_is_the_option_tables():
    import dataclasses

    from specwatch.commands.sweep import SweepSpec
    from specwatch.probe.bounded import BenchSpec

    for cls, command in ((config.Config, "run"), (BenchSpec, "bench"), (SweepSpec, "sweep")):
        for f in dataclasses.fields(cls):
            if f.name in options.OPTIONS:
                assert f.default == options.default(f.name, command), (cls.__name__, f.name)


W = "windows_s"
WANT = "window lengths, comma-separated: e.g. 60,300"


@pytest.mark.parametrize(("raw", "want"), [
    # happy path: one parse at the edge, sorted, each window once
    ("60,300", (60.0, 300.0)),
    (" 300 , 60,60 ", (60.0, 300.0)),
    ("90", (90.0,)),
    ("2.5,1e3", (2.5, 1000.0)),
    ("604800", (604800.0,)),
    ([300, 60], (60.0, 300.0)),  # a TOML array
    ([30.5], (30.5,)),
    # sad path: the message names the key and what is wrong
    ("", f"{W}: no window given: give one or more lengths in seconds, e.g. 60,300"),
    (" ", f"{W}: no window given: give one or more lengths in seconds, e.g. 60,300"),
    ([], f"{W}: no window given: give one or more lengths in seconds, e.g. 60,300"),
    ("60,abc", f"{W}: 'abc' is not a number of seconds ({WANT})"),
    ("60,,300", f"{W}: '' is not a number of seconds ({WANT})"),
    ("nan", f"{W}: 'nan' is not a number of seconds ({WANT})"),
    ("inf", f"{W}: 'inf' is not a number of seconds ({WANT})"),
    ("1_000", f"{W}: '1_000' is not a number of seconds ({WANT})"),
    ("٣", f"{W}: '٣' is not a number of seconds ({WANT})"),
    ("60 300", f"{W}: '60 300' is not a number of seconds ({WANT})"),
    (["60", 300], f"{W}: '60' is not a number of seconds ({WANT})"),  # an array holds numbers, not strings
    ([True], f"{W}: True is not a number of seconds ({WANT})"),
    ("1e999", f"{W}: must be a finite number of seconds, got '1e999'"),
    ([float("inf")], f"{W}: must be a finite number of seconds, got inf"),
    ("0", f"{W}: a window must be > 0 and at most 604800 seconds (7 days), got '0'"),
    ("60,-5", f"{W}: a window must be > 0 and at most 604800 seconds (7 days), got '-5'"),
    ("604801", f"{W}: a window must be > 0 and at most 604800 seconds (7 days), got '604801'"),
    (60, f'{W}: expected window lengths in seconds, comma-separated ("60,300") or an array ([60, 300]), got 60'),
    ({"a": 1}, f"{W}: expected window lengths in seconds, comma-separated (\"60,300\") or an array ([60, 300]), "
               "got {'a': 1}"),
])
def test_window_list_parses_once_or_names_the_key_and_the_fault(raw, want):
    if isinstance(want, tuple):
        got = options.window_list(W, raw)
        assert got == want and all(type(w) is float for w in got)
    else:
        with pytest.raises(ConfigError) as e:
            options.window_list(W, raw)
        assert str(e.value) == want


@pytest.mark.parametrize(("argv", "env", "toml", "message"), [
    (("--windows-s", "60,x"), {}, None, f"command line: {W}: 'x' is not a number of seconds ({WANT})"),
    ((), {"SPECWATCH_WINDOWS_S": "0"}, None,
     f"environment (SPECWATCH_*): {W}: a window must be > 0 and at most 604800 seconds (7 days), got '0'"),
    ((), {}, "windows_s = []\n", f"config file {{f}}: {W}: no window given: give one or more lengths in seconds, "
                                 "e.g. 60,300"),
])
def test_a_bad_window_list_stops_start_up_naming_where_it_came_from(tmp_path, argv, env, toml, message):
    f = tmp_path / "c.toml"
    a = ["--server-url", "http://x:1", *argv]
    if toml is not None:
        f.write_text(toml)
        a += ["--config", str(f)]
    with pytest.raises(ConfigError) as e:
        config.read(args(*a), env)
    assert str(e.value) == message.format(f=f)


def test_windows_are_typed_at_the_edge_and_the_verdict_window_joins_them(tmp_path):
    assert config.read(args("--server-url", "http://x:1"), {}).windows_s == (60.0, 300.0)
    f = tmp_path / "c.toml"
    f.write_text('server_url = "http://x:1"\nwindows_s = [300, 30]\nverdict_window_s = 90\n')
    cfg = config.read(args("--config", str(f)), {})
    assert cfg.windows_s == (30.0, 300.0) and cfg.windows == (30.0, 90.0, 300.0)
    cfg = config.read(args("--server-url", "http://x:1", "--windows-s", "60"), {"SPECWATCH_WINDOWS_S": "5"})
    assert cfg.windows_s == (60.0,) and cfg.windows == (60.0,)  # the flag wins; the verdict window is one of them


def test_the_help_shows_the_windows_default_as_the_flag_takes_it():
    p = argparse.ArgumentParser()
    config.add_run_flags(p)
    assert "(default: 60,300 s)" in " ".join(p.format_help().split())

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

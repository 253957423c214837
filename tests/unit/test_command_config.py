"""``--config FILE`` (or ``SPECWATCH_CONFIG``) for bench and sweep: the daemon's one layering, flags > SPECWATCH_*
> config file > defaults, through ``options.layer``, with the same strict file."""

import os

import pytest

from specwatch.commands import bench, sweep
from specwatch.errors import ConfigError

BENCH_FILE = 'server_url = "http://127.0.0.1:9"\nmax_tokens = 9\nnum_runs = 3\nwarmup = 2\nignore_eos = false\n'
SWEEP_FILE = ('targets = "http://127.0.0.1:9,http://127.0.0.1:10"\nconcurrency_levels = "4,1"\ngrace_s = 3\n'
              'param = ["k=1,2"]\nmax_tokens = 9\nnum_runs = 3\n')


def env(monkeypatch: pytest.MonkeyPatch, **variables: str) -> None:
    for name in [n for n in os.environ if n.startswith("SPECWATCH_")]:
        monkeypatch.delenv(name)
    for name, value in variables.items():
        monkeypatch.setenv(name, value)


def test_bench_takes_a_config_file_under_the_environment_and_the_flags(tmp_path, monkeypatch):
    f = tmp_path / "bench.toml"
    f.write_text(BENCH_FILE)
    env(monkeypatch, SPECWATCH_NUM_RUNS="4")
    spec, _ = bench.parse(["--config", str(f), "--max-tokens", "7"])
    assert (spec.server_url, spec.max_tokens, spec.num_runs, spec.warmup, spec.ignore_eos) == \
        ("http://127.0.0.1:9", 7, 4, 2, False)  # the flag over the file; the environment over the file
    env(monkeypatch, SPECWATCH_CONFIG=str(f))
    spec, _ = bench.parse([])
    assert (spec.max_tokens, spec.num_runs, spec.concurrency) == (9, 3, 1)  # the file by SPECWATCH_CONFIG; a default


def test_sweep_takes_a_config_file_under_the_environment_and_the_flags(tmp_path, monkeypatch):
    f = tmp_path / "sweep.toml"
    f.write_text(SWEEP_FILE)
    env(monkeypatch, SPECWATCH_GRACE_S="5")
    sw = sweep.parse(["--config", str(f), "--num-runs", "8"])
    assert (sw.targets, sw.levels, sw.grace_s, sw.param, sw.max_tokens, sw.num_runs, sw.out) == \
        ("http://127.0.0.1:9,http://127.0.0.1:10", [1, 4], 5.0, ("k=1,2",), 9, 8, "sweep-out")
    env(monkeypatch, SPECWATCH_CONFIG=str(f))
    assert sweep.parse([]).grace_s == 3.0


@pytest.mark.parametrize(("parse", "text", "message"), [
    (bench.parse, 'server_url = "http://127.0.0.1:9"\nlisten = "127.0.0.1:1"\n', "unknown option 'listen'"),
    (bench.parse, 'server_url = "http://127.0.0.1:9"\nmax_tokens = 0\n', "max_tokens: must be > 0, got 0"),
    (sweep.parse, 'grace_s = "soon"\n', "grace_s: expected float, got 'soon'"),
    (sweep.parse, "grace_s = \n", "Invalid value"),
])
def test_a_bad_config_file_is_refused_naming_the_file_and_the_key(tmp_path, monkeypatch, parse, text, message):
    f = tmp_path / "c.toml"
    f.write_text(text)
    env(monkeypatch)
    with pytest.raises(ConfigError) as exc:
        parse(["--config", str(f)])
    assert str(exc.value).startswith(f"config file {f}: ") and message in str(exc.value)


def test_a_missing_config_file_is_named(tmp_path, monkeypatch):
    env(monkeypatch)
    with pytest.raises(ConfigError, match=f"^config file {tmp_path}/none.toml: No such file or directory$"):
        bench.parse(["--config", str(tmp_path / "none.toml")])

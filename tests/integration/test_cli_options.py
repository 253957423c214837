"""Every command takes the same flags for the same options and rejects a bad value with the same message."""

import subprocess
import sys

import pytest

pytestmark = pytest.mark.integration


@pytest.mark.parametrize(("flags", "message"), [
    (("--max-tokens", "0"), "command line: max_tokens: must be > 0, got '0'"),
    (("--read-timeout-s", "nan"), "command line: read_timeout_s: must be a finite number, got nan"),
    (("--connect-timeout-s", "-1"), "command line: connect_timeout_s: must be > 0, got '-1'"),
    (("--api", "grpc"), "command line: api: 'grpc' is not one of auto, sglang, completions, chat"),
    (("--server-url", "localhost:1"), "command line: server_url: 'localhost:1' must start with http:// or https://"),
])
@pytest.mark.parametrize("command", ["run", "bench", "sweep"])
def test_run_bench_and_sweep_share_flag_names_and_messages(command, flags, message):
    base = () if "--server-url" in flags else ("--server-url", "http://127.0.0.1:1")
    extra = ("--targets", "http://127.0.0.1:1") if command == "sweep" else ()
    p = subprocess.run([sys.executable, "-m", "specwatch", command, *base, *extra, *flags], capture_output=True,
                       text=True, timeout=30)
    assert p.returncode == 2
    assert p.stderr.strip() == f"specwatch {command}: {message}"


@pytest.mark.parametrize(("curve", "message"), [
    ('{"kind": "specwatch.baseline_curve", "version": 1, "unit": "tokens_per_second", "points": []}', "unit"),
    ('{"kind": "specwatch.baseline_curve", "version": 1, "points": [{"running": -1, "tokens_per_second": 90}]}',
     "points[0].running"),
    ("not json", "not JSON"),
])
def test_run_refuses_a_wrong_baseline_curve_at_start_naming_the_field(tmp_path, curve, message):
    path = tmp_path / "curve.json"
    path.write_text(curve)
    p = subprocess.run([sys.executable, "-m", "specwatch", "run", "--server-url", "http://127.0.0.1:9",
                        "--baseline-curve", str(path)], capture_output=True, text=True, timeout=30)
    assert p.returncode == 2 and "--baseline-curve" in p.stderr and message in p.stderr, p.stderr


def test_a_baseline_is_one_of_three():
    p = subprocess.run([sys.executable, "-m", "specwatch", "run", "--server-url", "http://127.0.0.1:9",
                        "--baseline-tps", "90", "--baseline-curve", "x.json"], capture_output=True, text=True,
                       timeout=30)
    assert p.returncode == 2 and "baseline_tps, baseline_url and baseline_curve are alternatives" in p.stderr

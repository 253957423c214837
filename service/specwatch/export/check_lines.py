"""The honesty checks (``analysis.checks``) as the terminal prints them: one line per failed check, and a
count of those not measured. Exporter stage."""

from __future__ import annotations

from collections.abc import Sequence

from ..results import Check


def lines(checks: Sequence[Check], indent: str = "  ", where: str = "--json") -> list[str]:
    """Nothing when no check ran (a result written before checks); else every failed one, and one line naming
    the checks that lacked the data to decide."""
    if not checks:
        return []
    out = [f"{indent}CHECK FAILED:  {c.name}: {c.detail}" for c in checks if c.failed]
    unmeasured = [c.name for c in checks if not c.measured]
    passed = sum(1 for c in checks if c.ok and c.measured)
    out.append(f"{indent}Checks:        {passed} passed, {len(checks) - passed - len(unmeasured)} failed"
               + (f", not measured: {', '.join(unmeasured)}" if unmeasured else "") + f" (details in {where})")
    return out

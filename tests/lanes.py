"""xdist's ``--dist loadfile`` (a file to a worker, so its module fixtures start once and its tests keep their
order) with one rule more: a file in ``OWN_LANE`` is handed out first and has its worker to itself until it is
done. A plugin of the root conftest; without xdist, or with another ``--dist``, nothing changes.

Why: xdist hands a worker its next file as soon as two or fewer of its tests are left. The oracle's table
(three tests, one per profile, 270-295 s, run 2 of ``.ci/run``) then had a file queued behind it that waited
for the table's last two profiles: run 2 took 312-349 s in CI where the table took 268-293 s, while the other
two workers ran out of files. With the table's worker to itself, the rest share the other two."""

from __future__ import annotations

from typing import Any

import pytest

# test files that take a worker to themselves (the table needs its core undisturbed, and it is the longest)
OWN_LANE = frozenset({"tests/integration/test_explain_vs_served.py"})

try:
    from xdist.scheduler import LoadFileScheduling
except ImportError:  # pragma: no cover - xdist is a dev dependency; without it there is nothing to schedule
    LoadFileScheduling = None


if LoadFileScheduling is not None:

    class OwnLaneScheduling(LoadFileScheduling):  # type: ignore[misc, valid-type]
        def _assign_work_unit(self, node: Any) -> None:
            for scope in [s for s in self.workqueue if s in OWN_LANE]:  # first, so they start at once
                self.workqueue.move_to_end(scope, last=False)
            super()._assign_work_unit(node)

        def _reschedule(self, node: Any) -> None:
            holding = any(scope in OWN_LANE and not all(done.values())
                          for scope, done in self.assigned_work[node].items())
            if holding and self.workqueue:
                return
            super()._reschedule(node)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    if LoadFileScheduling is None or config.getvalue("dist") != "loadfile":
        return None
    return OwnLaneScheduling(config, log)

"""Per-position gauges (``…_position_acceptance{…,position}``): 1-based, at most ``max_positions`` of them, and a
position no longer reported removed rather than left stale (a server restarted with fewer draft steps must not
keep exporting the old chain's tail). Exporter stage."""

from __future__ import annotations

from prometheus_client import Gauge


class PositionSeries:
    def __init__(self, max_positions: int) -> None:
        self.max_positions = max_positions
        self._shown: dict[tuple[int, tuple[str, ...]], int] = {}  # positions exported, per gauge and labels

    def set(self, gauge: Gauge, labels: tuple[str, ...], values: tuple[float, ...]) -> None:
        values = values[: self.max_positions]
        for i, p in enumerate(values, 1):
            gauge.labels(*labels, str(i)).set(p)
        for i in range(len(values) + 1, self._shown.get((id(gauge), labels), 0) + 1):
            gauge.remove(*labels, str(i))
        self._shown[(id(gauge), labels)] = len(values)

"""Number formatting shared by every text exporter: one placeholder ("-") for a missing value. Pure."""

from __future__ import annotations

MISSING = "-"


def fmt(v: float | None, spec: str = ".2f", unit: str = "") -> str:
    return MISSING if v is None else format(v, spec) + unit


def ms(seconds: float | None, spec: str = ".2f", unit: str = "") -> str:
    """Seconds shown as milliseconds."""
    return MISSING if seconds is None else format(seconds * 1000, spec) + unit

"""Number formatting shared by every text exporter: one placeholder ("-") for a missing value. Pure."""

from __future__ import annotations

MISSING = "-"


def fmt(v: float | None, spec: str = ".2f", unit: str = "") -> str:
    return MISSING if v is None else format(v, spec) + unit


def span(seconds: float) -> str:
    """A wall time as a person reads it: ``45s``, ``3m48s``."""
    m, s = divmod(round(seconds), 60)
    return f"{m}m{s:02d}s" if m else f"{s}s"


def ms(seconds: float | None, spec: str = ".2f", unit: str = "") -> str:
    """Seconds shown as milliseconds."""
    return MISSING if seconds is None else format(seconds * 1000, spec) + unit

"""The steady window's lines in the bench report (``bench``, ``report``, each level of ``sweep``). Exporter
stage: a ``results.SteadyWindow`` in, text out."""

from __future__ import annotations

from ..results import SteadyWindow
from .format import fmt


def lines(w: SteadyWindow) -> list[str]:
    """The window named, with what it left apart; its figures only when it is steady, else why not."""
    apart = f"ramp-up {w.ramp_up} request(s), drain {w.drain} recorded apart"
    server = f"; the server reported {w.server_running:g} running (median)" if w.server_running is not None else ""
    if not w.steady:
        return [f"  Steady window: none, too short to be steady: {w.reason} ({apart}{server})"]
    return [f"  Steady window: {w.window_s:.1f} s with {fmt(w.mean_in_flight, '.1f')} requests in flight on average "
            f"({apart}{server})",
            f"  Steady tok/s:  {fmt(w.tokens_per_second, '.1f')} per stream (per request, over the window's "
            f"{w.requests} requests), decode {fmt(w.decode_tokens_per_second, '.1f')} per stream, "
            f"{fmt(w.output_tokens_per_second, '.1f')} aggregate"]

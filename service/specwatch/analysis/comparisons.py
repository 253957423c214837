"""A sweep's answers, each derived once: every configuration against plain decoding at every load (one value,
one 95% interval), and at each load the pick. The terminal, ``report.html``, ``sweep.csv``, ``sweep.json``
and ``advise --from`` all print these, never a margin of their own.

The measure is per-stream decode tok/s (tokens after the first ÷ first → last token), the quantity the daemon's
verdict and the baseline curve use; at a fixed concurrency it ranks configurations as aggregate throughput
does. A margin is Welch's difference of the per-request means over plain's mean; one whose interval holds zero
is a tie. A load's pick is its fastest configuration, or plain decoding when the fastest does not beat plain
decoding outside the noise (speculation that cannot be told apart from it only costs).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..results import ConfigResult, LoadPick, VersusPlain, levels, plain_of
from .compare import Margin, margin

MEASURE = "per-stream decode tok/s"


@dataclass(frozen=True, slots=True)
class Comparison:
    """``label`` against plain decoding at ``concurrency``: measured, with its 95% interval."""

    label: str
    concurrency: int
    tokens_per_second: float  # per-stream decode, token-weighted (the tables' "decode/stream")
    plain_tokens_per_second: float | None
    margin: Margin | None  # None for plain decoding itself, or with no plain decoding measured

    @property
    def outcome(self) -> str:
        """faster | slower | a tie | "" (nothing to compare with)."""
        m = self.margin
        if m is None:
            return ""
        if m.tie:
            return "a tie"
        return "faster" if m.ratio > 0 else "slower"

    def short(self) -> str:
        """``+1.7% (-4.7..+8.0) a tie``: the table's and the CSV's form of ``text``."""
        m = self.margin
        if m is None:
            return "-"
        ci = f" ({100 * m.low:+.1f}..{100 * m.high:+.1f})" if m.low is not None and m.high is not None else ""
        return f"{100 * m.ratio:+.1f}%{ci}" + (" a tie" if m.tie else "")

    def text(self) -> str:
        """``+1.7% (95% interval -4.6% to +8.0%)``, the margin without its verdict."""
        return self.margin.interval_text() if self.margin is not None else "-"


def comparisons(results: Sequence[ConfigResult]) -> dict[tuple[str, int], Comparison]:
    """Every finished configuration at every load it was measured at, against plain decoding there."""
    plain = plain_of(results)
    out: dict[tuple[str, int], Comparison] = {}
    for c in levels(results):
        base = plain.stream_tps(c) if plain is not None else None
        for r in results:
            tps = r.stream_tps(c) if r.ok else None
            if tps is None:
                continue
            m = margin(r.per_request(c), plain.per_request(c)) if plain is not None and r is not plain and base \
                else None
            out[r.label, c] = Comparison(r.label, c, tps, base, m)
    return out


@dataclass(frozen=True, slots=True)
class Band:
    """One load's answer."""

    concurrency: int
    winner: str  # the pick: the fastest, or plain decoding when the fastest does not beat it outside the noise
    fastest: str
    steps: int  # the pick's draft steps (0: no speculation)
    comparison: Comparison  # the fastest against plain decoding

    @property
    def tokens_per_second(self) -> float:
        return self.comparison.tokens_per_second

    @property
    def margin(self) -> Margin | None:
        return self.comparison.margin

    def sentence(self) -> str:
        """The answer in one line, as every output prints it."""
        c = self.comparison
        head = f"{self.fastest} at {c.tokens_per_second:.1f} tok/s per stream (decode)"
        if c.margin is None:
            plain_fastest = c.plain_tokens_per_second is not None
            return head + (f" -> {self.winner} (plain decoding is the fastest)" if plain_fastest else
                           f" -> {self.winner} (no plain decoding measured to compare with)")
        vs = f": {c.text()} vs plain decoding, {c.outcome}"
        if self.winner == self.fastest:
            return head + vs + f" -> {self.winner}"
        why = "a tie is no reason to speculate" if c.margin.tie else "not faster than plain decoding"
        return head + vs + f" -> {self.winner} ({why})"


def bands(results: Sequence[ConfigResult]) -> list[Band]:
    """Each load's pick, from ``comparisons``."""
    plain = plain_of(results)
    cmp = comparisons(results)
    out = []
    for c in levels(results):
        ok = [r for r in results if (r.label, c) in cmp]
        if not ok:
            continue
        fastest = max(ok, key=lambda r: cmp[r.label, c].tokens_per_second)
        m = cmp[fastest.label, c].margin
        pick = fastest
        if plain is not None and (fastest is plain or m is None or m.tie or m.ratio <= 0):
            pick = plain
        out.append(Band(c, pick.label, fastest.label, pick.steps, cmp[fastest.label, c]))
    return out


def band_at(results: Sequence[ConfigResult], c: int) -> Band | None:
    return next((b for b in bands(results) if b.concurrency == c), None)


def records(results: Sequence[ConfigResult]) -> tuple[tuple[VersusPlain, ...], tuple[LoadPick, ...]]:
    """``sweep.json``'s ``comparisons`` and ``picks``: the same values, as plain records."""
    def rec(c: Comparison) -> VersusPlain:
        m = c.margin
        return VersusPlain(c.label, c.concurrency, c.tokens_per_second, c.plain_tokens_per_second,
                           m.ratio if m else None, m.low if m else None, m.high if m else None, c.outcome)

    return (tuple(rec(c) for c in comparisons(results).values()),
            tuple(LoadPick(b.concurrency, b.winner, b.fastest, b.steps, b.sentence()) for b in bands(results)))

"""A sweep's answers, each derived once: every configuration against plain decoding at every load (one value,
one 95% interval), and at each load the pick. The terminal, ``report.html``, ``sweep.csv``, ``sweep.json``
and ``advise --from`` all print these, never a margin of their own.

The measure is per-stream decode tok/s (tokens after the first ÷ first → last token), the quantity the daemon's
verdict and the baseline curve use; at a fixed concurrency it ranks configurations as aggregate throughput
does. A margin is Welch's difference of the per-request means over plain's mean, or, for two configurations
measured in the same rounds (``sweep --interleave``), the mean of the rounds' ratios with a t interval over the
rounds (paired: the machine's drift between rounds cancels); one whose interval holds zero, or within 1%, is a
tie. A load's pick follows ``winner``'s one rule: at least three requests per cell, the
highest lower 95% bound against plain decoding (not the best mean), a tie with it going to the fewer draft
steps (plain decoding the fewest); printed against plain decoding and against what is running, when known.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..results import ConfigResult, LoadPick, VersusPlain, levels, plain_of
from . import winner
from .compare import Margin, margin_of

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
        paired = f", paired over {m.rounds} rounds" if m.rounds else ""
        ci = f" ({100 * m.low:+.1f}..{100 * m.high:+.1f}{paired})" if m.low is not None and m.high is not None else ""
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
            m = versus(r, plain, c) if plain is not None and r is not plain and base else None
            out[r.label, c] = Comparison(r.label, c, tps, base, m)
    return out


def versus(a: ConfigResult, b: ConfigResult, c: int) -> Margin | None:
    """``a`` against ``b`` at ``c`` streams: paired over the rounds when both ran in the same ones, else Welch."""
    return margin_of(a.per_request(c), b.per_request(c), a.per_round(c), b.per_round(c))


@dataclass(frozen=True, slots=True)
class Band:
    """One load's answer, by ``winner``'s rule."""

    concurrency: int
    winner: str  # the pick; "" when nothing could be crowned (``no_pick`` says why)
    fastest: str  # the highest mean (the pick only when it also scores best, or ties the best with fewer steps)
    steps: int  # the pick's draft steps (0: no speculation)
    comparison: Comparison | None  # the pick against plain decoding
    head: Comparison | None  # the sentence's subject: the best-scored configuration other than the reference
    head_score: Margin | None  # its score: against plain decoding, or without it against the reference
    reference: str = ""  # what scores are against: plain decoding, or without it the fewest steps measured
    plain: bool = True  # the reference is plain decoding
    tie: Margin | None = None  # the pick against the best, when the pick won a tie on steps
    best: str = ""  # the highest lower bound
    running: str = ""  # what is running (tune's --start), when known and measured at this load
    vs_running: Margin | None = None  # the pick against it
    not_crowned: tuple[str, ...] = ()  # "steps=5 (2 requests, 3 needed)"
    no_pick: str = ""
    fastest_score: Margin | None = None  # the fastest's score, when it is not the pick

    @property
    def tokens_per_second(self) -> float | None:
        return self.comparison.tokens_per_second if self.comparison is not None else None

    @property
    def margin(self) -> Margin | None:
        """The pick against plain decoding."""
        return self.comparison.margin if self.comparison is not None else None

    def sentence(self) -> str:
        """The answer in one line, as every output prints it."""
        tail = self._running_text() + (f"; not crowned: {', '.join(self.not_crowned)}" if self.not_crowned else "")
        if not self.winner or self.head is None:
            return f"no pick: {self.no_pick}{tail}"
        h = self.head
        text = f"{h.label} at {h.tokens_per_second:.1f} tok/s per stream (decode)"
        if h.label == self.reference:
            alone = "nothing else measured with enough requests" if self.not_crowned else "nothing else measured"
            return text + f" -> {self.winner} ({alone} to compare with){tail}"
        vs = "plain decoding" if self.plain else f"{self.reference} (no plain decoding measured: the fewest steps)"
        s = self.head_score
        outcome = "" if s is None else ", a tie" if s.tie else ", faster" if s.ratio > 0 else ", slower"
        text += f": {s.interval_text() if s else '-'} vs {vs}{outcome} -> {self.winner}"
        return text + self._why() + tail

    def _why(self) -> str:
        why = ""
        if self.winner == self.reference:
            s = self.head_score
            if s is not None and s.tie:
                why = " (a tie goes to the fewer draft steps: " + ("plain decoding)" if self.plain else
                                                                      f"{self.reference})")
            else:
                why = " (not faster than plain decoding)" if self.plain else f" (not faster than {self.reference})"
        elif self.tie is not None:
            why = f" (a tie with {self.best}, {self.tie.interval_text()}, with fewer draft steps"
            c = self.comparison
            if self.plain and c is not None and c.margin is not None:
                why += f"; {self.winner}: {c.margin.interval_text()} vs plain decoding"
            why += ")"
        f = self.fastest_score
        if f is not None and f.low is not None:
            why += (f" ({self.fastest} has the higher mean, {100 * f.ratio:+.1f}%, but its 95% interval reaches "
                    f"lower, {100 * f.low:+.1f}%)")
        return why

    def _running_text(self) -> str:
        if not self.running or not self.winner:
            return ""
        if self.running == self.winner:
            return f"; {self.running} is what is running"
        m = self.vs_running
        if m is None:
            return ""
        return f"; vs {self.running} (running): {m.interval_text()}" + (", a tie" if m.tie else "")


def bands(results: Sequence[ConfigResult], running: str | None = None) -> list[Band]:
    """Each load's pick (``winner.pick``), against plain decoding and against ``running`` (what is running:
    ``tune``'s start configuration) where it was measured."""
    cmp = comparisons(results)
    out = []
    for c in levels(results):
        ok = [r for r in results if (r.label, c) in cmp]
        if ok:
            out.append(_band(ok, cmp, c, running))
    return out


def _band(ok: list[ConfigResult], cmp: dict[tuple[str, int], Comparison], c: int, running: str | None) -> Band:
    plain = plain_of(ok)
    ref = plain if plain is not None else min(ok, key=lambda r: (r.steps, r.draft_tokens))
    reqs = {r.label: r.per_request(c) for r in ok}
    steps = {r.label: r.steps for r in ok}
    by = {r.label: r for r in ok}

    def vs(a: winner.Candidate, b: winner.Candidate) -> Margin | None:
        return versus(by[a.name], by[b.name], c)

    fastest = max(ok, key=lambda r: cmp[r.label, c].tokens_per_second)
    short = winner.repeats_reason(len(reqs[ref.label]))
    if short:
        return Band(c, "", fastest.label, 0, None, None, None, ref.label, plain is not None,
                    no_pick=f"{ref.label} has {short} at this load, and every configuration is scored against it")
    cands = [winner.Candidate(r.label, r.steps, winner.EXACT if r is ref else versus(r, ref, c),
                              winner.repeats_reason(len(reqs[r.label]))) for r in ok]
    p = winner.pick(cands, vs)
    not_crowned = tuple(f"{x.name} ({x.why_not or 'no interval'})" for x in p.not_crowned)
    if p.chosen is None or p.best is None:  # not reached: the reference itself is always a candidate
        return Band(c, "", fastest.label, 0, None, None, None, ref.label, plain is not None,
                    not_crowned=not_crowned, no_pick="no configuration has an interval at this load")
    others = [x for x in cands if x.name != ref.label and x not in p.not_crowned]
    head = p.best if p.best.name != ref.label or not others else max(others, key=lambda x: (x.low, -x.steps))
    fast = cands[ok.index(fastest)]
    shown = fast.score if fastest.label not in (p.chosen.name, head.name) and fast not in p.not_crowned else None
    run = running if running is not None and running in reqs else ""
    return Band(c, p.chosen.name, fastest.label, steps[p.chosen.name], cmp[p.chosen.name, c], cmp[head.name, c],
                head.score, ref.label, plain is not None, p.tie, p.best.name, run,
                versus(by[p.chosen.name], by[run], c) if run else None, not_crowned, "", shown)


def band_at(results: Sequence[ConfigResult], c: int, running: str | None = None) -> Band | None:
    return next((b for b in bands(results, running) if b.concurrency == c), None)


def records(results: Sequence[ConfigResult], running: str | None = None
            ) -> tuple[tuple[VersusPlain, ...], tuple[LoadPick, ...]]:
    """``sweep.json``'s ``comparisons`` and ``picks``: the same values, as plain records."""
    def rec(c: Comparison) -> VersusPlain:
        m = c.margin
        return VersusPlain(c.label, c.concurrency, c.tokens_per_second, c.plain_tokens_per_second,
                           m.ratio if m else None, m.low if m else None, m.high if m else None, c.outcome,
                           m.rounds if m else 0)

    return (tuple(rec(c) for c in comparisons(results).values()),
            tuple(LoadPick(b.concurrency, b.winner, b.fastest, b.steps, b.sentence()) for b in bands(results, running)))

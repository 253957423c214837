"""Tokens per chunk when an OpenAI server reports only the final total. Probe stage, pure.

A server that ignores ``stream_options.continuous_usage_stats`` sends each chunk's text and, at the end, one
``usage.completion_tokens``. How the total splits over the chunks is then found, in order of preference:

1. **one per chunk**, exact, when the chunks carrying text are as many as the tokens (every such chunk holds
   at least one token);
2. **the model's tokenizer** (``--tokenizer PATH``, a ``tokenizer.json``; the ``tokenizers`` extra): the
   record keeps its chunks' text and ``refine`` (the recorder's side, after the stream) encodes the whole
   text once with offsets and counts each token in the chunk where its text ends; exact when the count
   equals the server's total (else the text did not round-trip and the approximation stands);
3. **by text length**, approximated: the record says so (``tokens_exact=False``) and carries the bound
   ``chunk_tokens_max = total - chunks + 1``: every chunk holds between 1 and that many tokens (a server
   may coalesce several verify rounds into one chunk, so no tighter bound holds without per-chunk counts).
   Each chunk's per-token ITL then lies in [gap / max, gap]. Totals stay exact: tokens, chunks, inter-chunk
   gaps, TTFT and e2e.
"""

from __future__ import annotations

import dataclasses
import itertools
from array import array
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..errors import ConfigError
from ..records import RequestRecord


class Tokenizer:
    """A ``tokenizers.Tokenizer`` loaded from ``tokenizer.json``; ``ConfigError`` names what is missing."""

    def __init__(self, path: str) -> None:
        try:
            from tokenizers import Tokenizer as HFTokenizer
        except ImportError:
            raise ConfigError("tokenizer: needs the tokenizers package (pip install 'specwatch[tokenizers]')") \
                from None
        try:
            self._tok: Any = HFTokenizer.from_file(path)
        except Exception as exc:  # the library raises bare Exceptions for missing and malformed files alike
            raise ConfigError(f"tokenizer: cannot load {path!r} as a tokenizer.json: {str(exc)[:200]}") from None
        self.path = path

    def split(self, texts: Sequence[str], total: int) -> list[int] | None:
        """Tokens per chunk, or None unless they add up to ``total``."""
        enc = self._tok.encode("".join(texts), add_special_tokens=False)
        if len(enc.ids) != total:
            return None
        ends = np.fromiter(itertools.accumulate(len(t) for t in texts), dtype=np.int64, count=len(texts))
        token_ends = np.array([end for _, end in enc.offsets], dtype=np.int64)
        where = np.minimum(np.searchsorted(ends, token_ends, side="left"), len(texts) - 1)
        return np.bincount(where, minlength=len(texts)).tolist()


def refine(rec: RequestRecord, tok: Tokenizer) -> RequestRecord:
    """A record whose counts were apportioned, split exactly with the tokenizer when it agrees with the
    server's total (recorder side: it costs a tokenizer pass, so never on the stream's hot path). The texts
    are dropped either way."""
    if not rec.chunk_texts:
        return rec
    counts = tok.split(rec.chunk_texts, sum(rec.chunk_tokens))
    if counts is None:
        return dataclasses.replace(rec, chunk_texts=())
    return dataclasses.replace(rec, chunk_tokens=array("q", counts), tokens_exact=True, chunk_tokens_max=None,
                               chunk_texts=())


def by_length(chars: Sequence[int], total: int) -> list[int]:
    """``total`` apportioned over chunks by their text length, at least one each: every chunk gets one, the
    rest is shared by length, largest remainder first. One sort: it runs as each request ends, on the loop,
    so no loop over the chunks may repeat per token (a stream of many tiny chunks would make it quadratic)."""
    n = len(chars)
    extra = total - n
    if extra <= 0:  # no more tokens than chunks: one each (the floor)
        return [1] * n
    weights = [max(1, c) for c in chars]
    whole = sum(weights)
    shares = [extra * w / whole for w in weights]
    counts = [1 + int(x) for x in shares]
    left = total - sum(counts)
    for k in sorted(range(n), key=lambda k: shares[k] - int(shares[k]), reverse=True)[:left]:
        counts[k] += 1
    return counts


def chunk_bound(total: int, chunks: int) -> int:
    """Most tokens one chunk can hold when each of the others holds at least one."""
    return max(1, total - chunks + 1)

"""Fake tokenizer and text for the simulator: prompt token counts, prompt domain, output tokens.

Pure. The domain is guessed from the prompt the way a draft model's luck depends on it: code and
repetitive structured text are easy to draft, creative writing is hard.
"""

from __future__ import annotations

import re
import zlib

_TOKEN_RE = re.compile(r"\w+|[^\w\s]")
_WORDS = tuple("""
the of and to in is that for it as with was on be by this are or from at an which not have model
token draft verify accept length speed batch cache layer expert value result system data function
return list index time step first second next value query server request response
""".split())

_DOMAIN_HINTS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("code", re.compile(r"```|\bdef \b|\bfunction\b|\bclass\b|\bcode\b|\bpython\b|\bsql\b|\bregex\b|"
                        r"\bimplement\b|\brust\b|\bjavascript\b|\bbash\b|\bgolang\b|\bhandler\b", re.I)),
    ("math", re.compile(r"\bsolve\b|\bcalculate\b|\bcompute\b|\bprove\b|\bequation\b|\bintegral\b|"
                        r"\bprobability\b|\d+\s*[-+*/^]\s*\d+", re.I)),
    ("summary", re.compile(r"\bsummar|\btl;?dr\b|\bkey points\b|\bcondense\b", re.I)),
    ("creative", re.compile(r"\bstory\b|\bpoem\b|\bhaiku\b|\bfiction\b|\bimagine\b|\blyrics\b|\bnovel\b|"
                            r"\blimerick\b|\bfable\b", re.I)),
)


def count_prompt_tokens(text: str) -> int:
    """Approximate tokenizer: words and punctuation, plus a BOS token."""
    return len(_TOKEN_RE.findall(text)) + 1


def classify_domain(text: str) -> str:
    for name, pattern in _DOMAIN_HINTS:
        if pattern.search(text):
            return name
    return "chat"


def natural_length(prompt: str) -> int:
    """Tokens until the fake model emits EOS for this prompt (deterministic, 24..1536)."""
    return 24 + zlib.crc32(prompt.encode()) % 1513


class TokenStream:
    """Deterministic output tokens for one request; each token is one short word with a space."""

    __slots__ = ("_state",)

    def __init__(self, seed: int) -> None:
        self._state = seed & 0xFFFFFFFF or 1

    def next_tokens(self, n: int) -> str:
        out = []
        s = self._state
        for _ in range(n):
            s ^= (s << 13) & 0xFFFFFFFF
            s ^= s >> 17
            s ^= (s << 5) & 0xFFFFFFFF
            out.append(" " + _WORDS[s % len(_WORDS)])
        self._state = s
        return "".join(out)

"""What may be shown: a URL without its credentials, and server-supplied text without our secrets or control
characters. Used wherever text reaches a terminal, a log line, a file or a metric (any stage); pure.

A server is not always friendly: a 401 page, an SSE error event or a ``Location`` header may echo the API key
it was sent, and an error text may carry terminal escape sequences or a newline that forges a log line.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
REDACTED = "<redacted>"
MIN_SECRET_CHARS = 4  # a shorter "secret" would redact ordinary text: such a key is refused at start anyway


def redact(url: str) -> str:
    """``url`` with any ``user:password@`` replaced: safe to print, log or put in a message."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        return url.rpartition("@")[2] if "@" in url else url
    netloc, slash, tail = rest.partition("/")
    if "@" in netloc:
        netloc = "***@" + netloc.rpartition("@")[2]
    return f"{scheme}://{netloc}{slash}{tail}"


def scrub(text: str, secrets: Iterable[str | None] = ()) -> str:
    """``text`` with every secret replaced by ``<redacted>`` and every control character (C0, C1, line and
    bidirectional separators; tab and newline included) shown as ``\\xNN`` / ``\\uNNNN``."""
    for s in secrets:
        if s and len(s) >= MIN_SECRET_CHARS and s in text:
            text = text.replace(s, REDACTED)
    return CONTROL.sub(_escape, text)


def _escape(m: re.Match[str]) -> str:
    c = ord(m.group())
    return f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}"

"""What may be shown: a server's echo of our key is redacted and its control characters escaped, as a table
and as a property (no secret and no control character survives, whatever the text)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from specwatch.redaction import CONTROL, scrub

KEY = "sk-live-0123456789"


@pytest.mark.parametrize(("text", "shown"), [
    ("HTTP 401: bad key sk-live-0123456789", "HTTP 401: bad key <redacted>"),
    ("Bearer sk-live-0123456789 and sk-live-0123456789", "Bearer <redacted> and <redacted>"),
    ("\x1b[2J\x1b[31mred", "\\x1b[2J\\x1b[31mred"),  # terminal escapes shown, not obeyed
    ("ok\nlevel=ERROR msg=forged", "ok\\x0alevel=ERROR msg=forged"),  # no forged log line
    ("a\u202eb\u2028c\x85d\x00", "a\\u202eb\\u2028c\\x85d\\x00"),  # bidi override, separators, C1, NUL
    ("plain text, unicode é 中", "plain text, unicode é 中"),
])
def test_scrub_table(text, shown):
    assert scrub(text, [KEY, None, ""]) == shown


def test_a_too_short_secret_does_not_redact_ordinary_text():
    assert scrub("abc abc", ["abc"]) == "abc abc"


@given(st.text(), st.text(), st.text(min_size=4, max_size=40, alphabet="ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_"))
def test_no_secret_or_control_character_survives(before, after, secret):
    out = scrub(before + secret + after, [secret])
    assert secret not in out  # (its alphabet shares no character with the marker, so none can form anew)
    assert not CONTROL.search(out)


def test_a_servers_own_settings_are_written_without_their_secrets():
    from specwatch.probe.detect import without_secrets

    info = {"api_key": "sk-live-0123456789", "admin_api_key": "x" * 8, "hf_token": "t" * 8, "model_path": "m",
            "speculative_num_steps": 3, "speculative_num_draft_tokens": 4, "max_total_tokens": 9,
            "ssl_keyfile": "/k.pem", "tokenizer_path": "t", "unset_key": None}
    assert without_secrets(info) == info | {"api_key": "<redacted>", "admin_api_key": "<redacted>",
                                            "hf_token": "<redacted>"}  # settings that count tokens stay

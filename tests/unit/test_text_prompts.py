"""Prompt sets and the simulator's prompt classifier."""

import json

import pytest

from specwatch.probe import prompts
from specwatch.sim.text import TokenStream, classify_domain, count_prompt_tokens


def test_builtin_prompts_cover_the_domains_and_the_simulator_agrees_with_every_label():
    ps = prompts.builtin()
    assert 45 <= len(ps) <= 60
    assert {p.domain for p in ps} == {"code", "math", "chat", "summary", "creative"}
    assert [p.id for p in ps if classify_domain(p.as_text()) != p.domain] == []
    assert len({p.id for p in ps}) == len(ps)


def test_jsonl_text_and_messages_and_sharegpt(tmp_path):
    f = tmp_path / "p.jsonl"
    f.write_text('{"text": "hi", "domain": "chat"}\n\n{"messages": [{"role": "user", "content": "yo"}]}\n')
    a, b = prompts.read(str(f))
    assert (a.as_text(), a.domain) == ("hi", "chat")
    assert b.as_messages() == [{"role": "user", "content": "yo"}]
    g = tmp_path / "sg.json"
    g.write_text(json.dumps([{"id": "x", "conversations": [{"from": "human", "value": "Q?"},
                                                          {"from": "gpt", "value": "A"}]}]))
    (c,) = prompts.read(str(g))
    assert (c.id, c.as_text(), c.domain) == ("x", "Q?", "sharegpt")


@pytest.mark.parametrize(("content", "message"), [
    ('{"text": ""}\n', "p.jsonl:1: needs a non-empty"),
    ('{"text": "a"}\nnot json\n', "p.jsonl:2: invalid JSON"),
    ("[1, 2]", "no ShareGPT conversations"),
    ("", "no prompts"),
])
def test_bad_prompt_files_name_the_line(tmp_path, content, message):
    f = tmp_path / "p.jsonl"
    f.write_text(content)
    with pytest.raises(prompts.PromptFileError, match=message):
        prompts.read(str(f))


def test_missing_prompt_file():
    with pytest.raises(prompts.PromptFileError, match="No such file"):
        prompts.read("/nonexistent/prompts.jsonl")


def test_token_stream_is_deterministic_and_counts_tokens():
    a, b = TokenStream(42), TokenStream(42)
    assert a.next_tokens(5) == b.next_tokens(5)
    assert len(TokenStream(1).next_tokens(7).split()) == 7
    assert count_prompt_tokens("Hello, world!") == 5  # Hello , world ! + BOS

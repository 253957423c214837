"""Tokens per chunk from a final-only usage total: exact where it can be, flagged with its bound where not."""

import orjson
import pytest
from tokenizers import Tokenizer as HFTokenizer
from tokenizers import models, pre_tokenizers

from specwatch.errors import ConfigError
from specwatch.probe.prompts import Prompt
from specwatch.probe.stream import Attempt, Target
from specwatch.probe.tokens import Tokenizer, by_length, chunk_bound, refine
from specwatch.records import Outcome

WORDS = ["alpha", "be", "c", "delta", "eps", "zeta", "et", "theta"]


def word_tokenizer(path, words=WORDS):
    """A real tokenizers WordLevel model over the words (each word one token, spaces dropped)."""
    tok = HFTokenizer(models.WordLevel({w: i for i, w in enumerate([*words, "[UNK]"])}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.save(str(path))
    return str(path)


def completion_chunk(text, final=None):
    return orjson.dumps({"choices": [{"index": 0, "text": text, "finish_reason": final}]})


def stream(attempt, texts, total):
    t = 0
    for i, text in enumerate(texts):
        t += 10
        attempt.handle(completion_chunk(text, "length" if i == len(texts) - 1 else None), t)
    attempt.handle(orjson.dumps({"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": total}}), t + 1)
    assert attempt.handle(b"[DONE]", t + 2)
    return attempt.finish(Outcome.OK, t + 3)


def four_token_chunks(n_chunks):
    """The first chunk one token (prefill), then four per chunk, words of unequal length."""
    out, k = [], 0
    for i in range(n_chunks):
        n = 1 if i == 0 else 4
        out.append("".join(" " + WORDS[(k + j) % len(WORDS)] for j in range(n)))
        k += n
    return out


def attempt(keep_texts=False):
    return Attempt(Target("spec", "http://x", "completions"), Prompt("p", "chat", text="x"), False, 0,
                   keep_texts=keep_texts)


def test_four_token_chunks_are_exact_with_the_models_tokenizer(tmp_path):
    texts = four_token_chunks(20)
    raw = stream(attempt(keep_texts=True), texts, 1 + 4 * 19)
    assert not raw.tokens_exact and raw.chunk_texts == tuple(texts)  # the stream only keeps the texts
    rec = refine(raw, Tokenizer(word_tokenizer(tmp_path / "tokenizer.json")))  # the recorder splits them
    assert tuple(rec.chunk_tokens) == (1,) + (4,) * 19
    assert rec.tokens_exact and rec.chunk_tokens_max is None and rec.chunk_texts == ()


def test_without_a_tokenizer_four_token_chunks_are_flagged_with_a_bound_that_holds():
    texts = four_token_chunks(20)
    rec = stream(attempt(), texts, 77)
    assert not rec.tokens_exact
    assert sum(rec.chunk_tokens) == 77 and len(rec.chunk_tokens) == 20
    assert rec.chunk_tokens_max == 77 - 20 + 1
    assert all(1 <= n <= rec.chunk_tokens_max for n in rec.chunk_tokens)
    assert all(1 <= n <= rec.chunk_tokens_max for n in (1, *[4] * 19))  # the truth lies inside the bound too


def test_one_token_per_chunk_is_exact_without_a_tokenizer():
    rec = stream(attempt(), [" a", " bb", " ccc", " d"], 4)
    assert tuple(rec.chunk_tokens) == (1, 1, 1, 1) and rec.tokens_exact


def test_a_tokenizer_that_disagrees_with_the_servers_total_falls_back_and_says_so(tmp_path):
    tok = Tokenizer(word_tokenizer(tmp_path / "t.json"))
    raw = stream(attempt(keep_texts=True), [" alpha", " be c", " delta"], 9)  # the server counted 9, we see 4
    rec = refine(raw, tok)
    assert not rec.tokens_exact and sum(rec.chunk_tokens) == 9 and rec.chunk_tokens_max == 7
    assert rec.chunk_texts == ()


def test_no_final_usage_is_never_called_exact():
    a = attempt()
    a.handle(completion_chunk(" a"), 1)
    a.handle(completion_chunk(" b", "length"), 2)
    assert not a.finish(Outcome.OK, 3).tokens_exact


@pytest.mark.parametrize(("chars", "total"), [([1, 2, 3], 6), ([5, 1, 1, 1], 4), ([0, 0, 9], 12), ([3] * 7, 7),
                                             ([1] * 1000 + [100_000], 1100)])
def test_by_length_adds_up_and_gives_every_chunk_one(chars, total):
    counts = by_length(chars, total)
    assert sum(counts) == total and all(c >= 1 for c in counts)


def test_chunk_bound():
    assert chunk_bound(77, 20) == 58 and chunk_bound(5, 5) == 1 and chunk_bound(3, 5) == 1


def test_a_missing_or_broken_tokenizer_file_is_a_config_error_naming_it(tmp_path):
    with pytest.raises(ConfigError, match=r"cannot load .*nope\.json"):
        Tokenizer(str(tmp_path / "nope.json"))
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(ConfigError, match=r"bad\.json"):
        Tokenizer(str(bad))

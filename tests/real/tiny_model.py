"""Build a tiny Llama and its tokenizer from the running Python's standard library sources. No downloads.

Runs inside the real tier's vLLM venv (it has torch, transformers and tokenizers). The model is a noisy
bigram model of Python source: every token's input embedding is the superposition of the output vectors of
its three most frequent successors in the corpus, the rest of the weights are small and random. Greedy
output therefore falls into loops such as ``def __init__(self.`` and ngram speculation accepts most drafts,
while the attention and MLP layers still add a little context. Seeded: the same files on every run.

The output layer is those vectors times ``OUTPUT_SCALE``: unscaled, the top token leads by 50-130 nats and
sampled text is the greedy text at any temperature. Scaled, sampling at 0.8 keeps the greedy token about 3
times in 4 (at 1.0 about 1 in 3), as a served model's sampled traffic drifts from its greedy path; the
greedy path itself is unchanged (the same argmax everywhere).

    python tiny_model.py OUT_DIR
"""

from __future__ import annotations

import sys
import sysconfig
from pathlib import Path

VOCAB = 4096
HIDDEN = 256
SPECIAL = ["<s>", "</s>", "<unk>", "<pad>"]
OUTPUT_SCALE = 1 / 26
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)
# codec tables and test data are not Python as people write it
SKIP_DIRS = {"encodings", "test", "tests", "idlelib", "lib2to3", "site-packages", "dist-packages", "tkinter",
             "turtledemo", "ensurepip", "pydoc_data", "__pycache__"}


def corpus_files() -> list[Path]:
    root = Path(sysconfig.get_paths()["stdlib"])
    files = [p for p in root.rglob("*.py") if not SKIP_DIRS.intersection(p.relative_to(root).parts[:-1])]
    return sorted(files, key=lambda p: str(p.relative_to(root)))


def main(out: Path) -> None:
    import numpy as np
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    files = corpus_files()
    texts = [p.read_text(encoding="utf-8", errors="replace") for p in files]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB, special_tokens=SPECIAL, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(texts, trainer=trainer)
    ids = np.concatenate([np.asarray(e.ids, dtype=np.int64) for e in tok.encode_batch(texts)])
    print(f"corpus: {len(files)} files, {len(ids)} tokens", file=sys.stderr)

    # successor counts: the three most frequent next tokens of every token
    pair = ids[:-1] * VOCAB + ids[1:]
    counts = np.bincount(pair, minlength=VOCAB * VOCAB).reshape(VOCAB, VOCAB)
    counts[:, : len(SPECIAL)] = 0  # never predict a special token, so greedy output never ends early
    top = np.argsort(-counts, axis=1, kind="stable")[:, :3]

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=512, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=64, max_position_embeddings=4096, initializer_range=0.02,
        tie_word_embeddings=False, bos_token_id=0, eos_token_id=1, pad_token_id=3, rms_norm_eps=1e-5,
    )
    model = LlamaForCausalLM(config)
    with torch.no_grad():
        out_vecs = torch.randn(VOCAB, HIDDEN, generator=torch.Generator().manual_seed(1))
        weights = torch.tensor([1.0, 0.6, 0.4]).view(1, 3, 1)
        emb = (out_vecs[torch.from_numpy(top)] * weights).sum(dim=1)
        model.model.embed_tokens.weight.copy_(emb)
        model.lm_head.weight.copy_(out_vecs * OUTPUT_SCALE)
    model = model.to(torch.bfloat16)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>",
                                   pad_token="<pad>")
    fast.chat_template = CHAT_TEMPLATE
    fast.model_max_length = 4096
    fast.save_pretrained(out)


if __name__ == "__main__":
    main(Path(sys.argv[1]))

"""Build a tiny EAGLE-3 draft head for the real tier's tiny target, in vLLM's EAGLE-3 Llama draft format, and
distil it from the target on the CPU. No downloads: the prompts are the running Python's standard library
sources (as the target's corpus), the continuations and hidden states the target's own.

Runs inside the tier's vLLM venv (torch, transformers, safetensors). Seeded and bounded by a step count, not
by time, so every machine builds the same head. Facts it follows (vLLM 0.32's ``llama_eagle3.py`` and its
EAGLE proposer; the project's EAGLE-3 reference):

- one decoder layer whose q/k/v take ``cat(input_layernorm(embed(token)), hidden_norm(h))`` (512 wide), the
  residual the un-normed ``h``; vLLM's fused RMSNorm-with-residual after attention and at the end; the output
  fed back to the next draft step is the pre-norm sum;
- the first draft pass pairs token ``t[p+1]`` with ``fc(aux[p])`` at position ``p``; step ``s`` pairs its own
  input token with the previous step's pre-norm output at position ``p+s`` and attends to the first pass's
  keys at positions ≤ ``p`` plus its own earlier steps' — training unrolls exactly that;
- aux ids 0, 1, 2 = the embedding output and the outputs of the target's two decoder layers (the residual
  stream before the final norm: a hook, since transformers' last hidden state is normed); the default ids
  of vLLM do not fit a 2-layer target and the engine dies on the first request, so the config pins them;
- the full target vocabulary (no ``d2t``), and no ``embed_tokens`` or ``lm_head``: vLLM shares the target's.

For SGLang (``--aux-ids 0,1 --sglang``): SGLang 0.5.23 loads the same checkpoint, but its aux id j is the
*output* of layer j (captured at the input of layer j + 1, ``srt/models/llama.py``), vLLM's the *input*, so it
cannot capture the last layer's output at all: the head is distilled on vLLM ids 0, 1 (the embedding and
layer 0's output) and ``eagle_config.eagle_aux_hidden_state_layer_ids``, the only key SGLang reads, is
written in SGLang's numbering ([-1, 0]); the top-level key, which vLLM reads first, keeps vLLM's. SGLang's
draft also loads its own ``lm_head`` when the config names a ``draft_vocab_size`` (``llama_eagle3.py``), and
does not share the target's: the checkpoint carries the target's rows, the ones the head was distilled against.

    python eagle3_head.py TARGET_DIR OUT_DIR [--steps N] [--random] [--no-aux-pin] [--aux-ids 0,1 [--sglang]]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import tiny_model

PROMPT_TOKENS = 32
NEW_TOKENS = 192
TRAIN_PROMPTS = 384
EVAL_PROMPTS = 32
BATCH = 16
UNROLL = 5  # draft steps trained
STEPS = 140
LR = 3e-3
WARMUP = 20
AUX_IDS = [0, 1, 2]
SEED = 0


def prompts(tok, n: int, held_out: bool, rng: random.Random) -> list[list[int]]:
    """``n`` windows of ``PROMPT_TOKENS`` tokens starting at line starts of stdlib files, train or held-out
    by a hash of the path (~90/10); half begin with BOS."""
    files = [p for p in tiny_model.corpus_files()
             if (int(hashlib.sha1(str(p.name).encode()).hexdigest(), 16) % 10 == 0) == held_out]
    out: list[list[int]] = []
    while len(out) < n:
        text = rng.choice(files).read_text(encoding="utf-8", errors="replace")
        starts = [0] + [i + 1 for i, ch in enumerate(text) if ch == "\n"]
        s = rng.choice(starts)
        ids = tok.encode(text[s:s + 4000], add_special_tokens=False)[:PROMPT_TOKENS]
        if len(ids) < PROMPT_TOKENS:
            continue
        if len(out) % 2:
            ids = [tok.bos_token_id, *ids[:-1]]
        out.append(ids)
    return out


def generate(target, ids, temperatures, torch):
    """The target's own continuations of each prompt at its temperature (0: greedy)."""
    seqs = []
    for t in sorted(set(temperatures)):
        rows = [i for i, x in enumerate(temperatures) if x == t]
        for b in range(0, len(rows), 32):
            part = torch.tensor([ids[i] for i in rows[b:b + 32]])
            kw = {"do_sample": False} if t == 0 else {"do_sample": True, "temperature": t, "top_k": 0, "top_p": 1.0}
            with torch.no_grad():
                out = target.generate(part, max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS,
                                      attention_mask=torch.ones_like(part), pad_token_id=3, **kw)
            seqs += list(zip(rows[b:b + 32], out, strict=True))
    return torch.stack([s for _, s in sorted(seqs, key=lambda x: x[0])])


def teacher(target, seqs, torch, aux_ids=tuple(AUX_IDS)):
    """Aux states (vLLM ids: 0 the embedding output, then id i the output of decoder layer i - 1, before the
    final norm), rounded to bf16 as vLLM's activations are, and the target's logits, per position."""
    n_layers = len(target.model.layers)
    last: list = []
    hook = target.model.layers[-1].register_forward_hook(lambda _m, _i, out: last.append(
        out[0] if isinstance(out, tuple) else out))
    aux, logits = [], []
    try:
        for b in range(0, len(seqs), 16):
            last.clear()
            with torch.no_grad():
                o = target(seqs[b:b + 16], output_hidden_states=True)
            hs = o.hidden_states
            aux.append(torch.cat([last[0] if i == n_layers else hs[i] for i in aux_ids], dim=-1).to(torch.bfloat16))
            logits.append(o.logits.float())
    finally:
        hook.remove()
    return torch.cat(aux), torch.cat(logits)


def build_head(torch, nn, cfg, target, n_aux=None):
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

    hidden, heads, kv, hd, eps = cfg.hidden_size, cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim, \
        cfg.rms_norm_eps

    class RMSNorm(nn.Module):
        def __init__(self, n):
            super().__init__()
            self.weight = nn.Parameter(torch.ones(n))

        def forward(self, x):
            return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))

    class Head(nn.Module):
        """vLLM's Eagle3 Llama draft in plain PyTorch (fp32), and its unrolled multi-step training pass."""

        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(hidden * (n_aux or len(AUX_IDS)), hidden, bias=False)
            self.input_layernorm, self.hidden_norm = RMSNorm(hidden), RMSNorm(hidden)
            self.post_attention_layernorm, self.norm = RMSNorm(hidden), RMSNorm(hidden)
            self.q_proj = nn.Linear(2 * hidden, heads * hd, bias=False)
            self.k_proj = nn.Linear(2 * hidden, kv * hd, bias=False)
            self.v_proj = nn.Linear(2 * hidden, kv * hd, bias=False)
            self.o_proj = nn.Linear(heads * hd, hidden, bias=False)
            self.gate_proj = nn.Linear(hidden, cfg.intermediate_size, bias=False)
            self.up_proj = nn.Linear(hidden, cfg.intermediate_size, bias=False)
            self.down_proj = nn.Linear(cfg.intermediate_size, hidden, bias=False)
            for m in self.modules():
                if isinstance(m, nn.Linear):
                    nn.init.normal_(m.weight, std=0.02)

        def qkv(self, e, h, pos):
            b, n, _ = e.shape
            x = torch.cat([self.input_layernorm(e), self.hidden_norm(h)], dim=-1)
            q = self.q_proj(x).view(b, n, heads, hd).transpose(1, 2)
            k = self.k_proj(x).view(b, n, kv, hd).transpose(1, 2)
            v = self.v_proj(x).view(b, n, kv, hd).transpose(1, 2)
            cos, sin = target.model.rotary_emb(x, pos)
            q, k = apply_rotary_pos_emb(q, k, cos, sin)
            rep = heads // kv
            return q, k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1)

        def rest(self, attn, h):
            b, _, n, _ = attn.shape
            r1 = self.o_proj(attn.transpose(1, 2).reshape(b, n, heads * hd)) + h  # residual: the un-normed h
            y = self.post_attention_layernorm(r1)
            r2 = self.down_proj(nn.functional.silu(self.gate_proj(y)) * self.up_proj(y)) + r1
            return self.norm(r2), r2  # (to the logits, pre-norm: fed back to the next step)

        def unrolled(self, tokens, aux, steps):
            """Per step s, the normed outputs at anchors p = 0..T-2 (step s sits at position p+s, its input token
            t[p+s+1], its hidden the previous step's pre-norm output; step 0's hidden is fc(aux[p]))."""
            b, t = tokens.shape
            n = t - 1
            emb = target.model.embed_tokens(tokens).float()
            pos0 = torch.arange(n).unsqueeze(0).expand(b, n)
            h = self.fc(aux[:, :n].float())
            q, k0, v0 = self.qkv(emb[:, 1:], h, pos0)
            causal = torch.ones(n, n, dtype=torch.bool).tril()
            scale = 1.0 / math.sqrt(hd)
            scores = (q @ k0.transpose(-1, -2)) * scale
            attn = torch.softmax(scores.masked_fill(~causal, float("-inf")), -1) @ v0
            out, pre = self.rest(attn, h)
            outs = [out]
            ks, vs = [], []
            for s in range(1, steps):
                # input token t[p+s+1]: past the end for the last anchors (masked out of the loss)
                idx = torch.clamp(torch.arange(n) + s + 1, max=t - 1)
                e_s = emb[:, idx]
                h = pre
                q, k, v = self.qkv(e_s, h, pos0 + s)
                ks.append(k)
                vs.append(v)
                main = (q @ k0.transpose(-1, -2)) * scale
                main = main.masked_fill(~causal, float("-inf"))
                diag = torch.stack([(q * kk).sum(-1) * scale for kk in ks], dim=-1)  # own steps, same anchor
                w = torch.softmax(torch.cat([main, diag], dim=-1), -1)
                attn = w[..., :n] @ v0 + sum(w[..., n + i:n + i + 1] * vv for i, vv in enumerate(vs))
                out, pre = self.rest(attn, h)
                outs.append(out)
            return outs

    return Head()


def logits_of(target, x):
    return x @ target.lm_head.weight.float().T


def chain_acceptance(head, target, seqs, aux, torch, k_max=5):
    """Held-out greedy chain acceptance: P(the first k drafts all equal the target's argmax), k = 1..k_max,
    over the anchors of the continuations (greedy data: teacher forcing is drafting while the drafts are
    right, so this is what vLLM would accept)."""
    hits = torch.zeros(k_max)
    total = 0
    with torch.no_grad():
        for b in range(0, len(seqs), 16):
            tok, ax = seqs[b:b + 16], aux[b:b + 16]
            outs = head.unrolled(tok, ax, k_max)
            lo, hi = PROMPT_TOKENS, tok.shape[1] - 1 - k_max  # step s at anchor p drafts t[p+s+2]
            ok = torch.ones(tok.shape[0], hi - lo, dtype=torch.bool)
            for s in range(k_max):
                pred = logits_of(target, outs[s][:, lo:hi]).argmax(-1)
                ok = ok & (pred == tok[:, lo + s + 2:hi + s + 2])
                hits[s] += ok.sum()
            total += ok.numel()
    return [float(h / total) for h in hits]


def save(head, target, cfg, out: Path, torch, pin_aux: bool = True, aux_ids=tuple(AUX_IDS), sglang: bool = False
         ) -> None:
    from safetensors.torch import save_file

    sd = head.state_dict()
    names = {"fc.weight": "fc.weight", "norm.weight": "norm.weight"}
    for key in sd:
        if key not in names:
            group = "self_attn" if key.split(".")[0] in ("q_proj", "k_proj", "v_proj", "o_proj") else (
                "mlp" if key.split(".")[0] in ("gate_proj", "up_proj", "down_proj") else "")
            names[key] = f"midlayer.{group + '.' if group else ''}{key}"
    tensors = {names[k]: v.detach().to(torch.bfloat16).contiguous() for k, v in sd.items()}
    if sglang:  # its draft reads its own lm_head when the config has draft_vocab_size: the target's, as distilled
        tensors["lm_head.weight"] = target.lm_head.weight.detach().to(torch.bfloat16).contiguous()
    out.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(out / "model.safetensors"), metadata={"format": "pt"})
    conf = json.loads(cfg.to_json_string())
    ids = list(aux_ids)
    conf.update({"architectures": ["LlamaForCausalLMEagle3"], "num_hidden_layers": 1, "draft_vocab_size":
                 cfg.vocab_size, "target_hidden_size": cfg.hidden_size, "eagle_aux_hidden_state_layer_ids": ids,
                 "eagle_config": {"eagle_aux_hidden_state_layer_ids": [i - 1 for i in ids] if sglang else ids,
                                  "use_aux_hidden_state": True},
                 "tie_word_embeddings": False, "dtype": "bfloat16"})
    if not pin_aux:  # vLLM's default ids then, (2, L//2, L-3) = (2, 1, -1): two states reach a 768-wide fc
        del conf["eagle_aux_hidden_state_layer_ids"]
        del conf["eagle_config"]["eagle_aux_hidden_state_layer_ids"]
    (out / "config.json").write_text(json.dumps(conf, indent=2), encoding="utf-8")


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("target")
    p.add_argument("out")
    p.add_argument("--steps", type=int, default=STEPS)
    p.add_argument("--random", action="store_true", help="no training: a head that accepts nothing")
    p.add_argument("--no-aux-pin", action="store_true", help="leave the aux-layer ids to vLLM's default (which "
                                                              "does not fit a 2-layer target: for the smoke test)")
    p.add_argument("--aux-ids", default=",".join(map(str, AUX_IDS)),
                   help="the target's hidden states the head reads, in vLLM's numbering (0: the embedding output, "
                        "i: decoder layer i-1's output); default 0,1,2")
    p.add_argument("--sglang", action="store_true", help="write eagle_config's aux ids in SGLang's numbering (vLLM's "
                                                         "minus one; SGLang cannot read the last layer's output)")
    a = p.parse_args()
    aux_ids = [int(x) for x in a.aux_ids.split(",")]
    import torch
    from torch import nn
    from transformers import AutoTokenizer, LlamaForCausalLM

    torch.set_num_threads(2)
    torch.manual_seed(SEED)
    rng = random.Random(SEED)
    t0 = time.monotonic()
    target = LlamaForCausalLM.from_pretrained(a.target, dtype=torch.float32).eval()
    for prm in target.parameters():
        prm.requires_grad_(False)
    tok = AutoTokenizer.from_pretrained(a.target)
    n_layers = target.config.num_hidden_layers
    if not aux_ids or any(not 0 <= i <= n_layers for i in aux_ids) or (a.sglang and n_layers in aux_ids):
        p.error(f"--aux-ids {a.aux_ids}: each in 0..{n_layers}" + (f", below {n_layers} for SGLang" if a.sglang
                                                                    else ""))
    head = build_head(torch, nn, target.config, target, len(aux_ids))
    if not a.random:
        train_ids = prompts(tok, TRAIN_PROMPTS, False, rng)
        temps = [(0.0, 0.8, 1.0)[i % 3] for i in range(len(train_ids))]
        seqs = generate(target, train_ids, temps, torch)
        eval_seqs = generate(target, prompts(tok, EVAL_PROMPTS, True, rng), [0.0] * EVAL_PROMPTS, torch)
        aux, tlogits = teacher(target, seqs, torch, aux_ids)
        eval_aux, _ = teacher(target, eval_seqs, torch, aux_ids)
        print(f"eagle3 head: data {time.monotonic() - t0:.0f} s ({len(seqs)} sequences of {seqs.shape[1]} tokens)",
              file=sys.stderr, flush=True)
        opt = torch.optim.AdamW(head.parameters(), lr=LR, weight_decay=0.0)
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda i: min(1.0, (i + 1) / WARMUP) * 0.5 * (
            1 + math.cos(math.pi * min(1.0, i / max(1, a.steps)))))
        gen = torch.Generator().manual_seed(SEED)
        t1 = time.monotonic()
        for step in range(a.steps):
            rows = torch.randint(0, len(seqs), (BATCH,), generator=gen)
            tk, ax, tl = seqs[rows], aux[rows], tlogits[rows]
            outs = head.unrolled(tk, ax, UNROLL)
            n = tk.shape[1] - 1
            loss = torch.zeros(())
            for s, out in enumerate(outs):
                valid = n - s - 1  # anchors whose teacher position p+s+1 exists
                pick = torch.rand(BATCH, valid, generator=gen) < 0.5
                pred = torch.log_softmax(logits_of(target, out[:, :valid][pick]), -1)
                want = torch.softmax(tl[:, s + 1:s + 1 + valid][pick], -1)
                loss = loss + (0.8 ** s) * -(want * pred).sum(-1).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
            if step % 20 == 0 or step == a.steps - 1:
                print(f"eagle3 head: step {step + 1}/{a.steps} loss {loss.item():.3f} "
                      f"({(time.monotonic() - t1) / (step + 1):.2f} s/step)", file=sys.stderr, flush=True)
        acc = chain_acceptance(head, target, eval_seqs, eval_aux, torch)
        print("eagle3 head: held-out greedy chain acceptance k=1..5: " + ", ".join(f"{x:.3f}" for x in acc),
              file=sys.stderr, flush=True)
    save(head, target, target.config, Path(a.out), torch, pin_aux=not a.no_aux_pin, aux_ids=aux_ids, sglang=a.sglang)
    print(f"eagle3 head: built in {time.monotonic() - t0:.0f} s", file=sys.stderr, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

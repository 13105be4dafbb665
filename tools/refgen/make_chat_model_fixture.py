#!/usr/bin/env python3
"""Writes the fixtures of tests/test_chat_cli.sh (colossal-chat).

Run from the repository root with the refgen venv:
    tools/refgen/.venv/bin/python tools/refgen/make_chat_model_fixture.py

1. A tiny GPT-2 (byte-level, vocab 257 = the bundled assets/tokenizers/bytes
   tokenizer, 2 blocks of width 32, 256 positions) trained for a few hundred
   AdamW steps on a small ChatML + prose corpus, so that its greedy output is
   readable text with clear margins (no near-ties that float rounding could
   flip). Saved with save_pretrained plus the tokenizer files:
     chat_model/base/     tokenizer_config.json without a chat template
     chat_model/chatml/   tokenizer.json + a tokenizer_config.json with the
                          ChatML chat_template (used through --tokenizer, or
                          copied next to the weights by the test)
2. transformers' greedy generate() on it (do_sample=False), as files of raw
   bytes (the continuation decoded by the tokenizer) and shell variables in
   chat_model/refs.sh:
     raw_*     the raw prompt RAW_PROMPT completed (no template)
     chat1_*   ChatML [user U1] with the generation prompt
     chat2_*   ChatML [user U1, assistant reply1, user U2]
     alone2_*  ChatML [user U2] (what is left after the oldest turn is dropped)
     sys_*     ChatML [system S, user U1]
   Replies are the continuation cut before the first "<|im_end|>" (all
   CHAT_NEW tokens when there is none).
   stop_str / stop_expect: a string taken from the raw continuation and the
   continuation cut right before its first occurrence.
   ctx_drop: a context that holds [U2] + CHAT_NEW tokens but not
   [U1, reply1, U2] + CHAT_NEW (so the first turn must be dropped).
3. chat_model/hf_greedy.sh: the greedy_prompt / greedy_output ids of
   tests/fixtures/hf/*_ref.safetensors (written by refgen.py from
   transformers) as text, so that the shell test needs no safetensors reader.
"""
import json
import os
import shutil

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import torch  # noqa: E402
from safetensors.torch import load_file  # noqa: E402
from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast  # noqa: E402

OUT = "tests/fixtures/chat_model"
BYTES_TOK = "assets/tokenizers/bytes"
SEED = 4242
STEPS, LR, WINDOW, BATCH = 800, 1e-2, 128, 16
MIN_MARGIN = 0.05
RAW_NEW, CHAT_NEW = 32, 40
RAW_PROMPT = "The cat"
U1, U2, S = "hello", "who are you?", "Be brief."

CHATML = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + "
    "'<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

CORPUS = [
    "<|im_start|>user\nhello<|im_end|>\n<|im_start|>assistant\nHi there! How can I help you today?<|im_end|>\n"
    "<|im_start|>user\nwho are you?<|im_end|>\n<|im_start|>assistant\nI am a tiny test model.<|im_end|>\n",
    "<|im_start|>user\nwho are you?<|im_end|>\n<|im_start|>assistant\nA small model for tests.<|im_end|>\n",
    "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nhello<|im_end|>\n<|im_start|>assistant\nHi.<|im_end|>\n",
    "<|im_start|>user\nwhat is this?<|im_end|>\n<|im_start|>assistant\nA chat test.<|im_end|>\n",
    "The cat sat on the mat and looked at the dog. ",
    "The dog ran to the park to play with a ball. ",
    "A bird sang in the tree all day long. ",
]


def train(model, tok):
    text = "".join(CORPUS * 40)
    ids = torch.tensor(tok(text)["input_ids"], dtype=torch.long)
    gen = torch.Generator().manual_seed(SEED)
    opt = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=0.0)
    model.train()
    for step in range(STEPS):
        starts = torch.randint(0, len(ids) - WINDOW - 1, (BATCH,), generator=gen)
        x = torch.stack([ids[s:s + WINDOW] for s in starts])
        loss = model(x, labels=x).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    return float(loss.detach())


@torch.no_grad()
def greedy(model, ids, n_new):
    """transformers' greedy generate() and, recomputed, the top-1 minus top-2
    margins of each step (a near-tie could flip in float32 elsewhere)."""
    x = torch.tensor([ids])
    out = model.generate(x, attention_mask=torch.ones_like(x), do_sample=False, max_new_tokens=n_new,
                         min_new_tokens=n_new, pad_token_id=256)
    new = out[0, len(ids):].tolist()
    seq = list(ids)
    for t in new:
        top = torch.topk(model(torch.tensor([seq])).logits[0, -1], 2)
        assert int(top.indices[0]) == t, "generate() is not the argmax"
        margin = float(top.values[0] - top.values[1])
        assert margin >= MIN_MARGIN, f"greedy margin {margin} < {MIN_MARGIN}: retrain with another seed"
        seq.append(t)
    return new


def write_bytes(name, data):
    with open(os.path.join(OUT, name), "wb") as f:
        f.write(data)


def shell_quote(s):
    return "'" + s.replace("'", "'\\''") + "'"


def main():
    torch.manual_seed(SEED)
    if os.path.isdir(OUT):
        shutil.rmtree(OUT)
    base, chatml = os.path.join(OUT, "base"), os.path.join(OUT, "chatml")
    os.makedirs(base)
    os.makedirs(chatml)

    with open(os.path.join(BYTES_TOK, "tokenizer_config.json"), encoding="utf-8") as f:
        tcfg = json.load(f)
    for d, extra in ((base, {}), (chatml, {"chat_template": CHATML})):
        shutil.copy(os.path.join(BYTES_TOK, "tokenizer.json"), d)
        with open(os.path.join(d, "tokenizer_config.json"), "w", encoding="utf-8") as f:
            f.write(json.dumps({**tcfg, **extra}, indent=1, sort_keys=True) + "\n")
    tok = PreTrainedTokenizerFast.from_pretrained(chatml)
    assert len(tok) == 257

    cfg = GPT2Config(vocab_size=257, n_positions=256, n_embd=32, n_layer=2, n_head=4, resid_pdrop=0.0,
                     embd_pdrop=0.0, attn_pdrop=0.0, activation_function="gelu_new", bos_token_id=256,
                     eos_token_id=256, tie_word_embeddings=True)
    model = GPT2LMHeadModel(cfg).float()
    model.set_attn_implementation("eager")
    loss = train(model, tok)
    model.save_pretrained(base, safe_serialization=True)
    # the reference is computed from the weights as saved
    model = GPT2LMHeadModel.from_pretrained(base).float().eval()
    model.set_attn_implementation("eager")

    def chat_ids(msgs):
        return tok.apply_chat_template(msgs, add_generation_prompt=True, tokenize=True, return_dict=False)

    def decode(ids):
        return tok.decode(ids, skip_special_tokens=False).encode("utf-8")

    refs = {}
    raw_ids = tok(RAW_PROMPT)["input_ids"]
    raw_new = greedy(model, raw_ids, RAW_NEW)
    raw_text = decode(raw_new)
    write_bytes("raw_greedy.txt", raw_text)
    refs["raw_ids"] = ",".join(map(str, raw_ids))
    refs["raw_new_ids"] = ",".join(map(str, raw_new))
    refs["raw_new"] = str(RAW_NEW)

    def reply(name, msgs):
        ids = chat_ids(msgs)
        text = decode(greedy(model, ids, CHAT_NEW))
        r = text[:text.index(b"<|im_end|>")] if b"<|im_end|>" in text else text
        assert r.isascii() and r, f"{name}: reply {r!r}"
        write_bytes(name + "_reply.txt", r)
        refs[name + "_len"] = str(len(ids))
        return r.decode("utf-8")

    r1 = reply("chat1", [{"role": "user", "content": U1}])
    reply("chat2", [{"role": "user", "content": U1}, {"role": "assistant", "content": r1},
                    {"role": "user", "content": U2}])
    reply("alone2", [{"role": "user", "content": U2}])
    reply("sys", [{"role": "system", "content": S}, {"role": "user", "content": U1}])
    refs["chat_new"] = str(CHAT_NEW)

    # a stop string from the middle of the raw continuation
    stop = raw_text[8:11]
    assert len(stop) == 3 and all(32 < c < 127 and c != 39 for c in stop), stop
    refs["stop_str"] = stop.decode()
    write_bytes("stop_expect.txt", raw_text[:raw_text.index(stop)])

    ctx_drop = int(refs["alone2_len"]) + CHAT_NEW
    assert int(refs["chat1_len"]) + CHAT_NEW <= ctx_drop < int(refs["chat2_len"]) + CHAT_NEW
    refs["ctx_drop"] = str(ctx_drop)
    refs["u1"], refs["u2"], refs["sys"] = U1, U2, S

    with open(os.path.join(OUT, "refs.sh"), "w", encoding="utf-8") as f:
        f.write("# written by tools/refgen/make_chat_model_fixture.py (transformers greedy generate)\n")
        for k in sorted(refs):
            f.write(f"{k}={shell_quote(refs[k])}\n")

    with open(os.path.join(OUT, "hf_greedy.sh"), "w", encoding="utf-8") as f:
        f.write("# tests/fixtures/hf/*_ref.safetensors greedy_prompt / greedy_output as text\n")
        for m in ("gpt2", "opt", "llama2", "llama3"):
            r = load_file(f"tests/fixtures/hf/{m}_ref.safetensors")
            p, o = r["greedy_prompt"].tolist(), r["greedy_output"].tolist()
            assert o[:len(p)] == p
            f.write(f"{m}_prompt={','.join(map(str, p))}\n{m}_new={','.join(map(str, o[len(p):]))}\n")
    print(f"trained to loss {loss:.3f}; wrote {OUT}")


if __name__ == "__main__":
    main()

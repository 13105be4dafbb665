#!/usr/bin/env python3
"""Writes the GGUF model fixtures of tests/test_lm_gguf.c: tiny Hugging Face models converted to GGUF by
llama.cpp's own converter (convert_hf_to_gguf.py), and what transformers computes with them.

Setup (nothing here is built; llama.cpp's source comes from the sdist of llama-cpp-python):
    tools/refgen/.venv/bin/pip download --no-deps --no-binary :all: llama-cpp-python -d /tmp/lcpp
    tar xzf /tmp/lcpp/llama_cpp_python-*.tar.gz -C /tmp/lcpp
    tools/refgen/.venv/bin/pip install --target /tmp/gguf_pydeps sentencepiece protobuf
Run from the repository root:
    PYTHONPATH=/tmp/gguf_pydeps tools/refgen/.venv/bin/python tools/refgen/make_gguf_model_fixtures.py \
        /tmp/lcpp/llama_cpp_python-0.3.36/vendor/llama.cpp
(the fixtures were made with llama-cpp-python 0.3.36's llama.cpp, sentencepiece 0.2.3, protobuf 7.36.2).

Outputs (tests/fixtures/gguf_model/):
  llama/        a random LlamaForCausalLM (hidden 32, 2 layers, 4 heads, 2 key/value heads, head_dim 8,
                MLP 64, untied head, vocabulary of a SentencePiece BPE model with byte fallback trained here
                on a few lines of assets/corpus/kjv.txt.gz and unicode text): config.json, model.safetensors,
                tokenizer.model, tokenizer_config.json
  llama-{f32,f16,q8_0}.gguf   convert_hf_to_gguf.py llama/ --outtype ...: SentencePiece vocabulary
                ("llama": tokens, scores, types) and q/k rows permuted as the converter does
  gpt2-{f32,f16,q8_0}.gguf    the same of tests/fixtures/chat_model/base (GPT-2, 257 byte-level ids, tied
                embeddings; its config.json gets the "n_ctx" the converter reads and transformers 5 no longer
                writes, = n_positions). Its tokenizer is not one the converter recognises by the hash of its
                pre-tokenizer output (convert_hf_to_gguf_update.py lists known models), so this script
                tells it "gpt-2" (the pre-tokenizer the file does use: GPT-2's byte level) by replacing
                TextModel.get_vocab_base_pre; everything else is the converter's own
  {llama,gpt2}-logits.f32   the logits transformers gives for the prompt of refs.json ([prompt length,
                vocabulary] little-endian float32)
  {llama,gpt2}-{f16,q8_0}-logits.f32   the same with the GGUF file's own weights: gguf-py's dequantize,
                q/k rows un-permuted and GPT-2's Conv1D weights transposed back in numpy, loaded into the
                transformers model (the logits a correct reader of that file must give)
  refs.json     for each model: the prompt's ids (llama: with BOS) and token ids of sample texts (unicode included) from the reference
                tokenizers: for llama sentencepiece itself (what llama.cpp's tokenizer follows; transformers 5's own
                conversion of tokenizer.model, a Metaspace pre-tokenizer, differs from it on leading
                spaces: "  x" loses a "▁"), for gpt2 the tokenizers library on its tokenizer.json
"""
import gzip
import json
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import torch

OUT = "tests/fixtures/gguf_model/"
PROMPT_TEXT = "In the beginning God"
SAMPLES = [
    "In the beginning God created the heaven and the earth.",
    "  leading spaces,\ttabs\nand newlines\n\n",
    "caf\u00e9 na\u00efve \u00fcber \u65e5\u672c\u8a9e \U0001F680 \u0645\u0631\u062d\u0628\u0627",
    "digits 1234567 and 3.14159; punctuation!?",
    "",
    " ",
    "\u2581already metaspace\u2581",
    "<s> not special </s>",
]


def corpus():
    with gzip.open("assets/corpus/kjv.txt.gz", "rt", encoding="utf-8") as f:
        lines = [next(f) for _ in range(3000)]
    lines += ["caf\u00e9 na\u00efve \u00fcber", "\u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8", "tabs\tand  spaces"] * 20
    return [l.rstrip("\n") for l in lines if l.strip()]


def make_spm(d):
    import sentencepiece as spm
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(corpus()), model_prefix=os.path.join(d, "tokenizer"), vocab_size=400,
        model_type="bpe", byte_fallback=True, character_coverage=0.9995, split_digits=True,
        add_dummy_prefix=True, remove_extra_whitespaces=False, allow_whitespace_only_pieces=True,
        normalization_rule_name="identity", unk_id=0, bos_id=1, eos_id=2, pad_id=-1, num_threads=1,
        minloglevel=2)
    os.remove(os.path.join(d, "tokenizer.vocab"))
    return spm.SentencePieceProcessor(model_file=os.path.join(d, "tokenizer.model"))


def make_llama(d):
    from transformers import LlamaConfig, LlamaForCausalLM
    sp = make_spm(d)
    with open(os.path.join(d, "tokenizer_config.json"), "w") as f:
        json.dump({"tokenizer_class": "LlamaTokenizer", "bos_token": "<s>", "eos_token": "</s>",
                   "unk_token": "<unk>", "add_bos_token": True, "add_eos_token": False, "legacy": True}, f)
    torch.manual_seed(19)
    cfg = LlamaConfig(vocab_size=sp.vocab_size(), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, head_dim=8, max_position_embeddings=128,
                      rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=False, bos_token_id=1,
                      eos_token_id=2, pad_token_id=None, initializer_range=0.2)
    model = LlamaForCausalLM(cfg).eval()
    with torch.no_grad():  # norms away from 1 so that a swapped norm weight shows
        for n, p in model.named_parameters():
            if "norm" in n:
                p.copy_(1 + 0.3 * torch.randn_like(p))
    model.save_pretrained(d, safe_serialization=True)
    return model, sp, {s: sp.encode(s) for s in SAMPLES}


def logits_of(model, ids):
    with torch.no_grad():
        return model(torch.tensor([ids])).logits[0].float().numpy()


LLAMA_NAMES = {"attn_norm": "input_layernorm", "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj",
               "attn_v": "self_attn.v_proj", "attn_output": "self_attn.o_proj", "ffn_norm": "post_attention_layernorm",
               "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj"}
GPT2_NAMES = {"attn_norm": "ln_1", "attn_qkv": "attn.c_attn", "attn_output": "attn.c_proj", "ffn_norm": "ln_2",
              "ffn_up": "mlp.c_fc", "ffn_down": "mlp.c_proj"}


def dequantized_state(path, arch, cfg):
    """The GGUF file's tensors as a transformers state dict: gguf-py's dequantize, then what the converter did
    undone here in numpy (q/k rows un-permuted, GPT-2's Conv1D weights transposed back)."""
    import gguf
    r = gguf.GGUFReader(path)
    sd = {}
    for t in r.tensors:
        w = gguf.quants.dequantize(np.ascontiguousarray(t.data), t.tensor_type).astype(np.float32)
        w = w.reshape([int(x) for x in reversed(t.shape[:len(t.shape)])])
        parts = t.name.split(".")
        if parts[0] == "blk":
            base, suffix = parts[2], parts[3]
            if arch == "llama":
                name = f"model.layers.{parts[1]}.{LLAMA_NAMES[base]}.{suffix}"
                heads = {"attn_q": cfg.num_attention_heads, "attn_k": cfg.num_key_value_heads}.get(base)
                if heads:  # the inverse of LlamaModel.permute
                    w = w.reshape(heads, w.shape[0] // heads // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)
            else:
                name = f"transformer.h.{parts[1]}.{GPT2_NAMES[base]}.{suffix}"
                if suffix == "weight" and base in ("attn_qkv", "attn_output", "ffn_up", "ffn_down"):
                    w = w.T
        else:
            top = {"llama": {"token_embd": "model.embed_tokens", "output_norm": "model.norm", "output": "lm_head"},
                   "gpt2": {"token_embd": "transformer.wte", "position_embd": "transformer.wpe",
                            "output_norm": "transformer.ln_f", "output": "lm_head"}}[arch]
            name = top[parts[0]] + "." + parts[1]
        sd[name] = torch.from_numpy(np.ascontiguousarray(w))
    return sd


def logits_with(model, sd, ids):
    import copy
    m = copy.deepcopy(model)
    missing, unexpected = m.load_state_dict(sd, strict=False)
    assert not unexpected and set(missing) <= {"lm_head.weight"}, (missing, unexpected)
    if "lm_head.weight" in missing:
        m.tie_weights()
    return logits_of(m, ids)


def convert(src, out, outtype, lcpp, patch_pre=None):
    """convert_hf_to_gguf.py in a child process (its gguf-py first on the path)."""
    code = (
        "import sys, runpy\n"
        f"sys.path.insert(0, {os.path.join(lcpp, 'gguf-py')!r})\n"
        f"sys.path.insert(0, {lcpp!r})\n"
        f"sys.argv = ['convert_hf_to_gguf.py', {src!r}, '--outtype', {outtype!r}, '--outfile', {out!r}]\n"
        "import conversion.base as b\n"
        + (f"b.TextModel.get_vocab_base_pre = lambda self, tokenizer: {patch_pre!r}\n" if patch_pre else "")
        + f"runpy.run_path({os.path.join(lcpp, 'convert_hf_to_gguf.py')!r}, run_name='__main__')\n")
    env = dict(os.environ, NO_LOCAL_GGUF="")
    env.pop("NO_LOCAL_GGUF")
    subprocess.run([sys.executable, "-c", code], check=True, env=env, cwd=lcpp,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def main():
    lcpp = os.path.abspath(sys.argv[1])
    os.makedirs(OUT, exist_ok=True)
    refs = {}
    llama_dir = os.path.join(OUT, "llama")
    shutil.rmtree(llama_dir, ignore_errors=True)
    os.makedirs(llama_dir)
    model, sp, ids = make_llama(llama_dir)
    prompt = [1] + sp.encode(PROMPT_TEXT)
    logits_of(model, prompt).astype("<f4").tofile(OUT + "llama-logits.f32")
    refs["llama"] = {"prompt": prompt, "samples": ids, "add_bos": True}
    from transformers import GPT2LMHeadModel
    from tokenizers import Tokenizer
    gpt2_dir = "tests/fixtures/chat_model/base"
    g = GPT2LMHeadModel.from_pretrained(gpt2_dir).eval()
    gt = Tokenizer.from_file(os.path.join(gpt2_dir, "tokenizer.json"))
    gp = gt.encode(PROMPT_TEXT, add_special_tokens=False).ids
    logits_of(g, gp).astype("<f4").tofile(OUT + "gpt2-logits.f32")
    refs["gpt2"] = {"prompt": gp,
                    "samples": {s: gt.encode(s, add_special_tokens=False).ids for s in SAMPLES}, "add_bos": False}
    # transformers 5 no longer writes GPT-2's "n_ctx", which the converter reads: a copy that has it
    tmp = tempfile.mkdtemp()
    gpt2_conv = os.path.join(tmp, "chat-model-base")  # the converter names the model after its directory
    os.makedirs(gpt2_conv)
    for n in os.listdir(gpt2_dir):
        shutil.copy(os.path.join(gpt2_dir, n), gpt2_conv)
    with open(os.path.join(gpt2_conv, "config.json")) as f:
        c = json.load(f)
    c["n_ctx"] = c["n_positions"]
    with open(os.path.join(gpt2_conv, "config.json"), "w") as f:
        json.dump(c, f)
    for t in ("f32", "f16", "q8_0"):
        convert(os.path.abspath(llama_dir), os.path.abspath(OUT + f"llama-{t}.gguf"), t, lcpp)
        convert(gpt2_conv, os.path.abspath(OUT + f"gpt2-{t}.gguf"), t, lcpp, patch_pre="gpt-2")
        if t != "f32":  # the logits of the file's own (dequantized) weights
            sys.path.insert(0, os.path.join(lcpp, "gguf-py"))
            logits_with(model, dequantized_state(OUT + f"llama-{t}.gguf", "llama", model.config),
                        prompt).astype("<f4").tofile(OUT + f"llama-{t}-logits.f32")
            logits_with(g, dequantized_state(OUT + f"gpt2-{t}.gguf", "gpt2", g.config),
                        gp).astype("<f4").tofile(OUT + f"gpt2-{t}-logits.f32")
    shutil.rmtree(tmp)
    with open(OUT + "refs.json", "w") as f:
        json.dump(refs, f, separators=(",", ":"))
    for n in sorted(os.listdir(OUT)):
        p = os.path.join(OUT, n)
        print(n, os.path.getsize(p) if os.path.isfile(p) else sorted(os.listdir(p)))


if __name__ == "__main__":
    main()

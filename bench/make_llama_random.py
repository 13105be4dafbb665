#!/usr/bin/env python3
"""Writes a Hugging Face LLaMA model directory with random f32 weights, shaped as colossal's llama-1b-shaped
preset (vocabulary 32000, hidden 2048, 16 layers, 32 heads, 8 key/value heads, MLP 5632, untied head, RoPE
theta 10000, 2048 positions), with the LLaMA-2 tokenizer bundled with colossal: what bench/bench_llamacpp.sh
gives llama.cpp's convert_hf_to_gguf.py and colossal's bench_lm alike. Speed does not depend on the values.

    make_llama_random.py OUT_DIR [--seed N]

Needs numpy and safetensors (tools/refgen/.venv has both). Writes config.json, model.safetensors (3.4 GB, 0.85B parameters),
tokenizer.json, tokenizer_config.json. Weights are N(0, 0.02), norm weights 1."""
import argparse
import json
import os
import shutil

import numpy as np
from safetensors.numpy import save_file

CFG = dict(vocab=32000, hidden=2048, layers=16, heads=32, kv_heads=8, ffn=5632, positions=2048)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    os.makedirs(a.out, exist_ok=True)
    V, C, L, H, KV, F = (CFG[k] for k in ("vocab", "hidden", "layers", "heads", "kv_heads", "ffn"))
    hd = C // H
    rng = np.random.default_rng(a.seed)

    def w(*shape):
        return (rng.standard_normal(shape, dtype=np.float32) * np.float32(0.02))

    t = {"model.embed_tokens.weight": w(V, C)}
    for i in range(L):
        p = f"model.layers.{i}."
        t[p + "input_layernorm.weight"] = np.ones(C, np.float32)
        t[p + "self_attn.q_proj.weight"] = w(H * hd, C)
        t[p + "self_attn.k_proj.weight"] = w(KV * hd, C)
        t[p + "self_attn.v_proj.weight"] = w(KV * hd, C)
        t[p + "self_attn.o_proj.weight"] = w(C, H * hd)
        t[p + "post_attention_layernorm.weight"] = np.ones(C, np.float32)
        t[p + "mlp.gate_proj.weight"] = w(F, C)
        t[p + "mlp.up_proj.weight"] = w(F, C)
        t[p + "mlp.down_proj.weight"] = w(C, F)
    t["model.norm.weight"] = np.ones(C, np.float32)
    t["lm_head.weight"] = w(V, C)
    save_file(t, os.path.join(a.out, "model.safetensors"), metadata={"format": "pt"})
    config = {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": V, "hidden_size": C,
        "intermediate_size": F, "num_hidden_layers": L, "num_attention_heads": H, "num_key_value_heads": KV,
        "max_position_embeddings": CFG["positions"], "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
        "hidden_act": "silu", "tie_word_embeddings": False, "bos_token_id": 1, "eos_token_id": 2,
        "torch_dtype": "float32",
    }
    with open(os.path.join(a.out, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    shutil.copy(os.path.join(repo, "assets/tokenizers/llama2/tokenizer.json"), a.out)
    tc = {"tokenizer_class": "LlamaTokenizerFast", "bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>",
          "add_bos_token": True, "add_eos_token": False, "model_max_length": CFG["positions"]}
    with open(os.path.join(a.out, "tokenizer_config.json"), "w") as f:
        json.dump(tc, f, indent=2)
    n = sum(x.size for x in t.values())
    print(f"{a.out}: {n / 1e9:.3f}B parameters, {4 * n / 1e9:.2f} GB f32")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Writes assets/tokenizers/bytes/: a byte-level tokenizer in Hugging Face's
tokenizer.json layout - the 256 bytes as tokens 0..255 (token i is byte i, in
GPT-2's printable byte-to-character spelling), no merges, and <|endoftext|> as
token 256. It is the tokenizer of colossal-finetune's embedded default model,
and transformers loads it as a PreTrainedTokenizerFast.

Usage: python3 tools/make_byte_tokenizer.py [OUT_DIR]   (standard library only)
"""
import json
import os
import sys


def byte_chars():
    """GPT-2's bytes_to_unicode: printable bytes stand for themselves, the
    rest are shifted to code points from 256 up, in byte order."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    out, extra = {}, 0
    for b in range(256):
        if b in keep:
            out[b] = chr(b)
        else:
            out[b] = chr(256 + extra)
            extra += 1
    return out


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "assets", "tokenizers", "bytes")
    os.makedirs(out, exist_ok=True)
    chars = byte_chars()
    eot = "<|endoftext|>"
    tok = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [{"id": 256, "content": eot, "single_word": False, "lstrip": False, "rstrip": False,
                          "normalized": False, "special": True}],
        "normalizer": None,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False},
        "post_processor": None,
        "decoder": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": {chars[b]: b for b in range(256)}, "merges": []},
    }
    cfg = {"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": eot, "eos_token": eot,
           "model_max_length": 1024, "clean_up_tokenization_spaces": False}
    with open(os.path.join(out, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(tok, f, ensure_ascii=False, indent=1)
        f.write("\n")
    with open(os.path.join(out, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(cfg, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()

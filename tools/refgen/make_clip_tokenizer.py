#!/usr/bin/env python3
"""Writes assets/tokenizers/clip/: the CLIP BPE tokenizer of Stable Diffusion's
text encoder, in the layout of a diffusers model's tokenizer/ folder (vocab.json,
merges.txt, tokenizer_config.json, special_tokens_map.json), built from OpenAI
CLIP's merge list bpe_simple_vocab_16e6.txt.gz (MIT licence) as the
open_clip_torch wheel on PyPI ships it.

Run from the repository root with the refgen venv:
    pip download --no-deps open_clip_torch==3.3.0 -d /tmp/clipdl
    tools/refgen/.venv/bin/python tools/refgen/make_clip_tokenizer.py /tmp/clipdl/open_clip_torch-3.3.0-py3-none-any.whl [OUT_DIR]

The files are built as OpenAI's SimpleTokenizer and Hugging Face define them:
  vocab     the 256 byte characters (GPT-2's bytes_to_unicode, in its order),
            the same 256 with "</w>" appended, then the first 49152-256-2
            merges joined, then <|startoftext|> and <|endoftext|>: 49408 ids
  merges    "#version: 0.2", then those 48894 merges, one "a b" a line
  configs   as in openai/clip-vit-large-patch14 (SD 1.x's tokenizer): model
            max length 77, pad <|endoftext|>, special tokens "normalized"
Then the folder is loaded with transformers' CLIPTokenizer and checked against
known facts (vocab size, the ids of a few captions). Downloads nothing else.
"""
import gzip
import hashlib
import io
import json
import os
import sys
import zipfile

WHEEL_NAME = "open_clip_torch-3.3.0-py3-none-any.whl"
WHEEL_SHA256 = "c549ad5ed6bfc119cc11105033c0a2b9d7a2a4afeb40a58a09aab3da1a0043ce"
VOCAB_GZ = "open_clip/bpe_simple_vocab_16e6.txt.gz"
VOCAB_GZ_SHA256 = "924691ac288e54409236115652ad4aa250f48203de50a9e4722a6ecd48d6804a"  # OpenAI CLIP's file
N_MERGES = 49152 - 256 - 2


def byte_chars():
    """GPT-2's bytes_to_unicode, in its order: printable bytes first (standing
    for themselves), then the others shifted to code points from 256 up."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return [chr(c) for c in cs]


def sha256(data):
    return hashlib.sha256(data).hexdigest()


def token(content):
    return {"content": content, "single_word": False, "lstrip": False, "rstrip": False, "normalized": True}


def build(wheel_path, out):
    raw = open(wheel_path, "rb").read()
    if sha256(raw) != WHEEL_SHA256:
        sys.exit(f"{wheel_path}: sha256 {sha256(raw)} is not that of {WHEEL_NAME}")
    gz = zipfile.ZipFile(io.BytesIO(raw)).read(VOCAB_GZ)
    if sha256(gz) != VOCAB_GZ_SHA256:
        sys.exit(f"{VOCAB_GZ}: unexpected sha256 {sha256(gz)}")
    lines = gzip.decompress(gz).decode("utf-8").split("\n")
    merges = [tuple(line.split()) for line in lines[1:N_MERGES + 1]]  # line 0 is the version header
    assert len(merges) == N_MERGES and all(len(m) == 2 for m in merges)
    chars = byte_chars()
    vocab = chars + [c + "</w>" for c in chars] + ["".join(m) for m in merges] + ["<|startoftext|>", "<|endoftext|>"]
    assert len(vocab) == 49408 and len(set(vocab)) == 49408
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "vocab.json"), "w", encoding="utf-8") as f:
        json.dump({t: i for i, t in enumerate(vocab)}, f, ensure_ascii=False)
    with open(os.path.join(out, "merges.txt"), "w", encoding="utf-8") as f:
        f.write("#version: 0.2\n")
        for a, b in merges:
            f.write(f"{a} {b}\n")
    specials = {"bos_token": token("<|startoftext|>"), "eos_token": token("<|endoftext|>"),
                "unk_token": token("<|endoftext|>"), "pad_token": "<|endoftext|>"}
    with open(os.path.join(out, "special_tokens_map.json"), "w", encoding="utf-8") as f:
        json.dump(specials, f, indent=2)
        f.write("\n")
    config = {
        "unk_token": dict(specials["unk_token"], __type="AddedToken"),
        "bos_token": dict(specials["bos_token"], __type="AddedToken"),
        "eos_token": dict(specials["eos_token"], __type="AddedToken"),
        "pad_token": "<|endoftext|>",
        "add_prefix_space": False,
        "errors": "replace",
        "do_lower_case": True,
        "name_or_path": "openai/clip-vit-large-patch14",
        "model_max_length": 77,
        "special_tokens_map_file": "./special_tokens_map.json",
        "tokenizer_class": "CLIPTokenizer",
    }
    with open(os.path.join(out, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(config, f, indent=2)
        f.write("\n")
    for name in ("vocab.json", "merges.txt", "tokenizer_config.json", "special_tokens_map.json"):
        data = open(os.path.join(out, name), "rb").read()
        print(f"{name}: {len(data)} bytes, sha256 {sha256(data)}")


def check(out):
    os.environ["HF_HUB_OFFLINE"] = "1"
    import transformers
    from transformers import CLIPTokenizer

    tok = CLIPTokenizer.from_pretrained(out)
    facts = [
        (len(tok), 49408),
        (tok.bos_token_id, 49406),
        (tok.eos_token_id, 49407),
        (tok.pad_token_id, 49407),
        (tok.model_max_length, 77),
        (tok("a photo of a cat").input_ids, [49406, 320, 1125, 539, 320, 2368, 49407]),
        (tok.convert_ids_to_tokens([320, 1125, 539, 2368]), ["a</w>", "photo</w>", "of</w>", "cat</w>"]),
        (tok.convert_ids_to_tokens([0, 255, 256, 511]), ["!", "Ń", "!</w>", "Ń</w>"]),
    ]
    for got, want in facts:
        assert got == want, (got, want)
    ids = tok("a photo of a cat", padding="max_length", max_length=77, truncation=True).input_ids
    assert len(ids) == 77 and ids[7:] == [49407] * 70
    print(f"checked with transformers {transformers.__version__} {type(tok).__name__}: vocab {len(tok)}, "
          f"'a photo of a cat' -> {tok('a photo of a cat').input_ids}")


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    out = sys.argv[2] if len(sys.argv) > 2 else os.path.join(os.path.dirname(__file__), "..", "..", "assets",
                                                             "tokenizers", "clip")
    build(sys.argv[1], out)
    check(out)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Writes tests/fixtures/chat_model/escape/tokenizer.json: the chat model
fixture's byte-level tokenizer (tests/fixtures/chat_model/base) with two
hostile tokens, for the terminal-safety test of colossal-chat
(tests/test_chat_cli.sh). The fixture model's first two greedy ids after the
prompt ids 72,101,108,108,111 are 60 and 124 ("<|"); here they trade bytes
with ESC (0x1b) and the raw 8-bit CSI byte 0x9b, so the model "says" an
escape sequence: ids 60, 124 decode to ESC 0x9b, and ids 27, 155 to "<", "|"
(every byte keeps a token, as a byte-level vocabulary must).

Usage: python3 tools/refgen/make_escape_tokenizer.py   (standard library only)
"""
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from make_byte_tokenizer import byte_chars  # noqa: E402

SWAPS = [(60, 0x1B), (124, 0x9B)]


def main():
    root = os.path.join(os.path.dirname(__file__), "..", "..", "tests", "fixtures", "chat_model")
    with open(os.path.join(root, "base", "tokenizer.json"), encoding="utf-8") as f:
        tok = json.load(f)
    chars = byte_chars()
    vocab = tok["model"]["vocab"]
    by_id = {i: s for s, i in vocab.items()}
    for a, b in SWAPS:
        assert by_id[a] == chars[a] and by_id[b] == chars[b], "not the byte-level vocabulary this expects"
        vocab[chars[a]], vocab[chars[b]] = b, a
    out = os.path.join(root, "escape")
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(tok, f, ensure_ascii=False, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Writes the Hugging Face reference fixtures of tests/test_tokenizer.c.

Run from the repository root with the refgen venv:
    tools/refgen/.venv/bin/python tools/refgen/make_tokenizer_fixtures.py [N]

The ids come from Hugging Face `tokenizers` (the Rust library behind
transformers' fast tokenizers) on the bundled files in assets/tokenizers, and
on two small tokenizers trained here. Outputs (tests/fixtures/tokenizer/):
  hf_cases.jsonl   one case a line:
                     {"tok", "text", "special", "ids"}  encode(text,
                       add_special_tokens=special) == ids; with "parse":
                       false, special tokens written in the text are
                       encoded as text (encode_special_tokens = True);
                       texts with U+0000 also come as "hex", their UTF-8
                       bytes, as C strings end at the first NUL
                     {"tok", "ids", "skip", "decoded"}   decode(ids,
                       skip_special_tokens=skip) == decoded
                   for tok in gpt2 (vocab.json + merges.txt, ByteLevel,
                   <|endoftext|> special), llama2, llama3, tiny_meta,
                   tiny_bytelevel; N random texts per tokenizer (default
                   100) drawn from the character classes the regexes care
                   about, plus hand-picked edge cases
  tiny_meta.json   BPE trained on a few sentences: Metaspace pre-tokenizer
                   (prepend_scheme "first", split), unk with fuse_unk, a
                   template that adds <bos> and <eos>, an rstrip added token,
                   a Metaspace decoder
  tiny_bytelevel.json
                   byte-level BPE trained the same way: ByteLevel with
                   add_prefix_space, merges stored as pairs, an lstrip
                   non-special added token, a RobertaProcessing post-processor
With a path as second argument, writes only the random cases there (for a
long differential run: ./tests/test_tokenizer PATH).
"""
import json
import random
import sys

from tokenizers import AddedToken, Tokenizer, decoders, pre_tokenizers, processors
from tokenizers.models import BPE
from tokenizers.trainers import BpeTrainer

A = "assets/tokenizers/"
OUT = "tests/fixtures/tokenizer/"

POOLS = [
    "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ",
    "0123456789",
    " ", "  ", "\t", "\n", "\r\n", "\r", "\x0b\x0c",
    ".,;:!?-_()[]{}<>/\\|@#$%^&*+=~`\"",
    "'", "'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'LL", "'Re",
    "éèêëàâäïîôöùûüçñÉÀÖÜßøåæœ",
    "日本語中文字漢のテキストですか。、",
    "😀🚀🎉👍🏽🇫🇷‍",
    "\u0301\u0308\u200b\u200d\ufeff",   # combining marks, zero-width (neither L nor N)
    "\x85\xa0\u1680\u2000\u2009\u2028\u2029\u202f\u205f\u3000",  # Unicode spaces, NEL
    "\x1c\x1d\x1e\x1f\x00\x01\x7f",
    "مرحبا بالعالم", "Привет мир", "नमस्ते१२३", "٣٤٥", "ⅫⅣ", "²³½",
    "ſK\u212a",   # long s, Kelvin sign: case folding in (?i:'s)
    "\u2581",     # SentencePiece's space
    "\u1c89\ua7cb\U00013460\U0001e5d0\U00031350\U0002ebf0",  # letters newer than Unicode 14 (PCRE2 10.42)
    "\U00010d40\U0001e5f1\U0001ccf0",  # digits newer than Unicode 14
    "\u180e",     # Mongolian vowel separator: not White_Space since Unicode 6.3
    "<|endoftext|>", "<|eot_id|>", "<|begin_of_text|>", "<s>", "</s>", "<unk>", "<|", "|>", "<bos>", "<eos>",
    "<mask>",
    "hello", "world", "the", "The", "in", " the", "ing",
]


def random_text(rng):
    n = rng.randint(0, 12)
    parts = []
    for _ in range(n):
        pool = rng.choice(POOLS)
        if len(pool) > 3 and rng.random() < 0.7:
            k = rng.randint(1, 4)
            parts.append("".join(rng.choice(pool) for _ in range(k)))
        else:
            parts.append(pool)
    return "".join(parts)


EDGE = [
    "", " ", "  ", "\n", "\n\n", " \n ", "a", "A", "'s", "'S", " 's", "x's", "X'S", "don't", "DON'T",
    "ſ's", "'ſ", "'\u212a",
    "1", "12", "123", "1234", "12345678901", "  123  ", "a1b2c3", "٣٤٥٦",
    "Hello<s>world", "<s>hi", "a</s>", " <s> x", "<s>", "x<|eot_id|>y", "<|begin_of_text|>hi",
    "<|endoftext|>", "a <|endoftext|> b", "<|endoftext|><|endoftext|>", "<|endoftext", "<|eot_id|",
    "x  \x85", "x  \x85y", "a\x85b \x85 c  \x85 \x85\n", "\xa0\xa0x", "x \u2028 y", "x\x0b\x0c y",
    "x\x1c\x1dy  \x1c", "\u3000\u3000", "tab\t\tx", "\r\n\r\n", " \r\n x", "a  \n  b", "   \n",
    "\u2581", "a\u2581b", " \u2581 ", "\u2581\u2581x",
    "\U00013460's", " \U00013460\U00013461 x", "1\U00010d40\U00010d41\U00010d42\U00010d43", "a\u180eb  \u180e",
    "😀", "👍🏽", "🇫🇷", "e\u0301", "\u200b", "\ufeff",
    "a" * 200, " " * 100, "\n" * 30, "ab" * 60, "😀" * 20, "9" * 40, ".," * 30,
    "<mask>", "a <mask> b", "x<mask>y", "<eos>  z", "<bos>", "hello world the",
]


def case(name, text, special, ids):
    c = {"tok": name, "text": text, "special": special, "ids": ids}
    if "\x00" in text:  # C reads JSON strings up to the first U+0000: give the bytes too
        c["hex"] = text.encode().hex()
    return c


def cases_for(tok, name, rng, n, specials):
    out = []
    texts = EDGE + [random_text(rng) for _ in range(n)]
    for text in texts:
        for special in specials:
            ids = tok.encode(text, add_special_tokens=special).ids
            out.append(case(name, text, special, ids))
        if "<" in text:  # special tokens in the text encoded as plain text
            tok.encode_special_tokens = True
            ids = tok.encode(text, add_special_tokens=specials[0]).ids
            tok.encode_special_tokens = False
            out.append(dict(case(name, text, specials[0], ids), parse=False))
    # decoding with and without special tokens, on ids that encode produced
    for text in ["Hello<s>world", " <s> x", "x<|eot_id|>y", "a <|endoftext|> b", "<eos>  z", "a <mask> b",
                 "hello world", "  two leading", "\u2581\u2581x"]:
        ids = tok.encode(text, add_special_tokens=True).ids
        for skip in (False, True):
            out.append({"tok": name, "ids": ids, "skip": skip, "decoded": tok.decode(ids, skip_special_tokens=skip)})
    return out


def gpt2():
    t = Tokenizer(BPE.from_file(A + "gpt2/vocab.json", A + "gpt2/merges.txt"))
    t.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    t.decoder = decoders.ByteLevel()
    t.add_special_tokens(["<|endoftext|>"])
    return t


CORPUS = [
    "In the beginning God created the heaven and the earth.",
    "And the earth was without form, and void; and darkness was upon the face of the deep.",
    "hello world, hello there; the world is wide and the sea is deep",
    "Numbers 12 and 345 and 6789 appear here, as do tabs\tand newlines\n.",
    "She said: 'we're here, they'll come, it's fine, I'm sure, you've seen, he'd go'.",
]


def tiny_meta():
    t = Tokenizer(BPE(unk_token="<unk>", fuse_unk=True))
    t.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="first", split=True)
    t.decoder = decoders.Metaspace(replacement="\u2581", prepend_scheme="first", split=True)
    tr = BpeTrainer(vocab_size=300, special_tokens=["<unk>", "<bos>", "<eos>"], show_progress=False)
    t.train_from_iterator(CORPUS * 4, trainer=tr)
    t.add_special_tokens([AddedToken("<eos>", rstrip=True, special=True)])
    bos, eos = t.token_to_id("<bos>"), t.token_to_id("<eos>")
    t.post_processor = processors.TemplateProcessing(single="<bos> $A <eos>", special_tokens=[("<bos>", bos),
                                                                                             ("<eos>", eos)])
    return t


def tiny_bytelevel():
    t = Tokenizer(BPE())
    t.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=True)
    t.decoder = decoders.ByteLevel()
    tr = BpeTrainer(vocab_size=400, special_tokens=["<s>", "</s>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                    show_progress=False)
    t.train_from_iterator(CORPUS * 4, trainer=tr)
    t.add_tokens([AddedToken("<mask>", lstrip=True, special=False)])
    t.post_processor = processors.RobertaProcessing(("</s>", t.token_to_id("</s>")), ("<s>", t.token_to_id("<s>")),
                                                    trim_offsets=False, add_prefix_space=True)
    return t


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 100
    only = sys.argv[2] if len(sys.argv) > 2 else None
    rng = random.Random(20261122 if not only else n)
    toks = {
        "gpt2": (gpt2(), [False]),
        "llama2": (Tokenizer.from_file(A + "llama2/tokenizer.json"), [True, False]),
        "llama3": (Tokenizer.from_file(A + "llama3/tokenizer.json"), [False, True]),
        "tiny_meta": (tiny_meta(), [True, False]),
        "tiny_bytelevel": (tiny_bytelevel(), [True]),
    }
    if not only:
        toks["tiny_meta"][0].save(OUT + "tiny_meta.json")
        toks["tiny_bytelevel"][0].save(OUT + "tiny_bytelevel.json")
    # the trained ones are re-read from their files, as the C side will
    for name in ("tiny_meta", "tiny_bytelevel"):
        if not only:
            toks[name] = (Tokenizer.from_file(OUT + name + ".json"), toks[name][1])
    lines = []
    for name, (tok, specials) in toks.items():
        if only and name.startswith("tiny"):
            continue
        lines += cases_for(tok, name, rng, n, specials)
    with open(only or OUT + "hf_cases.jsonl", "w", encoding="utf-8") as f:
        for c in lines:
            f.write(json.dumps(c, ensure_ascii=False) + "\n")
    print(f"{len(lines)} cases")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Writes the reference fixtures of tests/test_clip_tokenizer.c: the ids that
transformers' CLIPTokenizer (as diffusers' StableDiffusionPipeline loads it:
CLIPTokenizer.from_pretrained(folder)) gives for a few hundred captions, with
the bundled files of assets/tokenizers/clip (tools/refgen/make_clip_tokenizer.py).

Run from the repository root with the refgen venv:
    tools/refgen/.venv/bin/python tools/refgen/make_clip_tokenizer_fixtures.py

Outputs (tests/fixtures/clip_tokenizer/):
  sd2/, sdxl2/     tokenizer_config.json (+ special_tokens_map.json) of two
                   other configurations; the test puts them beside the bundled
                   vocab.json and merges.txt:
                     sd1    the bundled folder (openai/clip-vit-large-patch14,
                            SD 1.x): pad <|endoftext|>
                     sd2    as stable-diffusion-2's tokenizer: pad "!", which
                            transformers makes a special token (id 0)
                     sdxl2  the newer layout (SDXL's tokenizer_2): an
                            added_tokens_decoder, named tokens as strings, pad
                            "!"; its special_tokens_map.json disagrees and is
                            ignored, as transformers ignores it
                     newpad pad "<|pad|>", which is not in the vocabulary:
                            transformers adds it as id 49408
                     bare   no configuration files: CLIPTokenizer's defaults
                            (every special token not "normalized"), no
                            model_max_length (0 here)
  cases_CONFIG.jsonl
                   one case a line (sdxl2, newpad, bare: the hand-written
                   captions only):
                     {"config", "text", "ids", "padded", "padded_tail"}
                       tok(text).input_ids and tok(text, padding="max_length",
                       max_length=77, truncation=True).input_ids, the latter as
                       "padded" followed by padded_tail = [id, count]: its
                       trailing run of pad ids; texts with U+0000 also come as
                       "hex" (C strings end at the first NUL)
                     {"config", "ids", "skip", "decoded"}  tok.decode(ids,
                       skip_special_tokens=skip)
                     {"config", "facts"}  vocab size, bos / eos / pad ids,
                       model_max_length
  normalize.jsonl  {"text", "nfc", "lower", "clip"}: tokenizers' NFC and
                   Lowercase normalizers and CLIP's whole normalizer on every
                   code point the NFC and Lowercase tables hold (in runs of
                   40) and on random mark sequences
Nothing is downloaded (HF_HUB_OFFLINE=1); the captions are written here.
"""
import json
import os
import random
import shutil
import sys
import tempfile
import unicodedata

os.environ["HF_HUB_OFFLINE"] = "1"

import tokenizers  # noqa: E402
import transformers  # noqa: E402
from tokenizers import normalizers  # noqa: E402
from transformers import CLIPTokenizer  # noqa: E402

ASSET = "assets/tokenizers/clip"
OUT = "tests/fixtures/clip_tokenizer"

HAND = [
    "", " ", "  ", "\n", "\t", " \n\t ", "a", "A", "a photo of a cat", "A PHOTO OF A CAT", "a  photo\tof\na cat",
    "   leading and trailing spaces   ", "a photograph of an astronaut riding a horse",
    "masterpiece, best quality, 1girl, solo, long hair, looking at viewer, smile, (detailed eyes:1.2)",
    "((masterpiece)), [[blurry]], {extra}, (cat:1.3), [dog:cat:0.5], <lora:add_detail:0.8>",
    "portrait of a woman, 85mm, f/1.8, 8k, uhd, dslr, soft lighting, high quality, film grain, Fujifilm XT3",
    "a cat's toy", "it's", "It'S", "DON'T", "we're here, they'll come, I'm sure, you've seen, he'd go",
    "rock'n'roll", "l'été", "o'clock", "'s", "''s", "'", "x's'", "'sa", "’s", "the cat’s “quoted” ‘words’",
    "well — no… maybe", "1", "12", "123", "1234567890", "3.14159", "1,000,000", "2024-01-01", "v1.5", "x2 x10 x100",
    "#hashtag @user", "http://example.com/path?a=1&b=2#frag", "someone@example.com", "C:\\Windows\\System32",
    "<b>bold</b> &amp; &lt;tag&gt; &#39;quote&#39; &nbsp;", "<div class=\"x\">hi</div>", "a<br/>b", "</w>", "a</w>b",
    "naïve café résumé", "cafe\u0301", "e\u0301\u0301", "\u0301a", "A\u030a", "\u212b", "\u2126", "Ångström",
    "Straße", "STRASSE", "İstanbul", "ISTANBUL", "ı", "ΣΟΦΙΑ ΣΑΣ", "ὈΔΥΣΣΕΎΣ", "Привет, мир!", "ПРИВЕТ",
    "日本語のテキスト", "中文字幕，标点！", "한국어 텍스트", "\u1100\u1161\u11a8", "مرحبا بالعالم", "שלום עולם",
    "हिन्दी पाठ", "ไทย", "Ελληνικά", "Ǆǅǆ", "ǅungla", "ﬁ ﬂ ﬀ", "Ⅻ ⅻ", "①②③", "²³½", "٣٤٥", "१२३",
    "😀", "😀😀😀", "🚀 to the moon", "👍🏽", "🇫🇷🇯🇵", "👨\u200d👩\u200d👧", "❤️", "☕", "⭐️✨", "a😀b",
    "\u00a0\u00a0x", "x\u3000y", "x\u200by", "\ufeffbom", "x\u2028y\u2029z", "\x85next line", "a\u180eb",
    "\x00", "a\x00b", "\x01\x1f\x7f", "\x1c\x1d", "x\x0b\x0cy", "\r\n\r\n", "tab\t\tx",
    "<|startoftext|>", "<|endoftext|>", "<|startoftext|>a cat<|endoftext|>", "a<|endoftext|>b",
    "x <|startoftext|> <|endoftext|>", "<|STARTOFTEXT|>x", "<|ENDOFTEXT|>", "<|EndOfText|>", "<|endoftext",
    "<|", "|>", "<|endofte\u212ax|>", "<|startoftext|><|startoftext|>", "!", "!!", "!!!", "hello!!", "a!b",
    "what?!", "...", "?", "-_-", "^_^", ":)", "(╯°□°)╯︵ ┻━┻", "~~~", "***", "$100", "50%", "100°C", "№5", "©®™",
    "[a] {b} (c) <d>", "a|b|c", "\\n", "%20", "x^2 + y^2 = z^2", "∑∫∂", "→←↑↓", "♪♫", "█▓▒░",
    "UPPER lower MiXeD CaSe", "CamelCaseWords", "snake_case_words", "kebab-case-words", "ALLCAPS!!!",
    "a b c d e f g h i j k l m n o p q r s t u v w x y z", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
    "supercalifragilisticexpialidocious", "pneumonoultramicroscopicsilicovolcanoconiosis",
]

EXTRA = ["<|pad|>", "a <|pad|> b", "<|PAD|>", "x<|pad|><|endoftext|>"]

WORDS = ("a photo of the cat dog astronaut horse riding beautiful landscape mountain river sunset city night "
         "neon cyberpunk portrait painting oil watercolor detailed intricate highly realistic cinematic lighting "
         "trending artstation octane render unreal engine 4k 8k hdr bokeh sharp focus illustration concept art "
         "by greg rutkowski and alphonse mucha studio ghibli anime style").split()

POOLS = [
    "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ", "0123456789", " ", "  ", "\t", "\n", "\u3000",
    ".,;:!?-_()[]{}<>/\\|@#$%^&*+=~`\"", "'", "'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'LL",
    "éèêëàâäïîôöùûüçñÉÀÖÜßøåæœİΣ", "e\u0301", "a\u0308", "\u0301\u0308\u0323\u0302", "日本語中文字漢のテキスト。、",
    "한국어", "😀🚀🎉👍🏽🇫🇷\u200d", "\u200b\u200d\ufeff", "Привет", "ΑΒΓΔ", "<|endoftext|>", "<|startoftext|>", "</w>",
    "!", "!!", "&amp;", "<b>", "(", ":1.2)", "1girl", "masterpiece",
]


def random_text(rng):
    parts = []
    for _ in range(rng.randint(1, 12)):
        pool = rng.choice(POOLS)
        if len(pool) > 3 and rng.random() < 0.7:
            parts.append("".join(rng.choice(pool) for _ in range(rng.randint(1, 5))))
        else:
            parts.append(pool)
    return "".join(parts)


def captions():
    rng = random.Random(20261124)
    texts = list(HAND)
    for _ in range(60):  # prompts of words and commas, some longer than 77 tokens
        n = rng.choice([3, 8, 20, 40, 80, 150])
        texts.append(", ".join(" ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 4))) for _ in range(n // 2)))
    for n in (74, 75, 76, 77, 78):  # around the truncation point: n one-token words
        texts.append(" ".join(["cat"] * n))
    texts.append("a photo of a cat " * 60)
    texts.append("word " * 600)
    texts.append("🚀" * 100)
    texts += [random_text(rng) for _ in range(200)]
    return texts


def configs(tmp):
    """name -> folder transformers loads"""
    base = json.load(open(os.path.join(ASSET, "tokenizer_config.json")))
    smap = json.load(open(os.path.join(ASSET, "special_tokens_map.json")))
    sd2 = dict(base, pad_token="!", name_or_path="stabilityai/stable-diffusion-2")
    sd2_map = dict(smap, pad_token="!")
    added = {"content": "", "lstrip": False, "normalized": True, "rstrip": False, "single_word": False,
             "special": True}
    sdxl2 = {
        "add_prefix_space": False,
        "added_tokens_decoder": {"0": dict(added, content="!", normalized=False),
                                 "49406": dict(added, content="<|startoftext|>"),
                                 "49407": dict(added, content="<|endoftext|>")},
        "bos_token": "<|startoftext|>", "clean_up_tokenization_spaces": True, "do_lower_case": True,
        "eos_token": "<|endoftext|>", "errors": "replace", "model_max_length": 77, "pad_token": "!",
        "tokenizer_class": "CLIPTokenizer", "unk_token": "<|endoftext|>",
    }
    sdxl2_map = dict(smap, pad_token="<|endoftext|>")  # ignored: the config has added_tokens_decoder
    newpad = dict(base, pad_token="<|pad|>")
    newpad_map = dict(smap, pad_token="<|pad|>")
    out = {"sd1": ASSET}
    for name, cfg, m in (("sd2", sd2, sd2_map), ("sdxl2", sdxl2, sdxl2_map), ("newpad", newpad, newpad_map),
                         ("bare", None, None)):
        fix = os.path.join(OUT, name)
        if cfg:
            os.makedirs(fix, exist_ok=True)
        for fname, obj in (("tokenizer_config.json", cfg), ("special_tokens_map.json", m)) if cfg else ():
            with open(os.path.join(fix, fname), "w", encoding="utf-8") as f:
                json.dump(obj, f, indent=2, ensure_ascii=False)
                f.write("\n")
        d = os.path.join(tmp, name)
        os.makedirs(d)
        for fname in ("vocab.json", "merges.txt"):
            shutil.copy(os.path.join(ASSET, fname), d)
        for fname in ("tokenizer_config.json", "special_tokens_map.json") if cfg else ():
            shutil.copy(os.path.join(fix, fname), d)
        out[name] = d
    return out


def text_case(name, text, tok):
    padded = tok(text, padding="max_length", max_length=77, truncation=True).input_ids
    assert len(padded) == 77
    k = 77  # the padded ids, their trailing run of pad ids given as [pad id, count] (lossless, for size)
    while k > 0 and padded[k - 1] == tok.pad_token_id:
        k -= 1
    c = {"config": name, "text": text, "ids": tok(text).input_ids, "padded": padded[:k],
         "padded_tail": [tok.pad_token_id, 77 - k]}
    if "\x00" in text:
        c["hex"] = text.encode().hex()
    return c


def normalize_cases():
    nfc, low = normalizers.NFC(), normalizers.Lowercase()
    clip = normalizers.Sequence([normalizers.NFC(), normalizers.Replace(tokenizers.Regex(r"\s+"), " "),
                                 normalizers.Lowercase()])
    nfd = normalizers.NFD()
    cps = [c for c in range(0x110000) if not 0xD800 <= c < 0xE000 and not 0xAC00 <= c < 0xD7A4 and
           (nfd.normalize_str(chr(c)) != chr(c) or low.normalize_str(chr(c)) != chr(c) or
            unicodedata.combining(chr(c)))]
    texts = ["".join(map(chr, cps[i:i + 40])) for i in range(0, len(cps), 40)]
    rng = random.Random(5)
    marks = [c for c in cps if unicodedata.combining(chr(c))] + [0x301, 0x308, 0x323, 0x334, 0x345, 0x3099]
    bases = [0x41, 0x61, 0x45, 0x65, 0x4F, 0x55, 0x3B1, 0x391, 0x415, 0x1100, 0x1161, 0x11A8, 0xAC00, 0xAC01,
             0xD7A3, 0x20, 0x9, 0x3000, 0x130, 0x3A3, 0xB47, 0xB3E, 0x11099, 0x110BA]
    for _ in range(1500):
        texts.append("".join(chr(rng.choice(bases if rng.random() < 0.4 else marks)) for _ in range(rng.randint(1, 8))))
    texts += ["".join(chr(0xAC00 + rng.randrange(11172)) for _ in range(20)) for _ in range(20)]
    return [{"text": t, "nfc": nfc.normalize_str(t), "lower": low.normalize_str(t), "clip": clip.normalize_str(t)}
            for t in texts]


def main():
    os.makedirs(OUT, exist_ok=True)
    n_text = n_other = 0
    with tempfile.TemporaryDirectory() as tmp:
        for name, folder in configs(tmp).items():
            lines = []
            tok = CLIPTokenizer.from_pretrained(folder)
            assert type(tok).__name__ == "CLIPTokenizer"
            lines.append({"config": name, "facts": {"vocab": len(tok), "bos": tok.bos_token_id,
                                                    "eos": tok.eos_token_id, "pad": tok.pad_token_id,
                                                    "max_length": tok.model_max_length if tok.model_max_length
                                                    < 2**31 else 0}})
            for text in captions() if name in ("sd1", "sd2") else HAND + EXTRA:  # the others: how files are read
                lines.append(text_case(name, text, tok))
            for text in ["a photo of a cat", "  A Cat!!  ", "x <|startoftext|> <|endoftext|>", "hello!! a!b",
                         "café 日本 😀", "</w>", "a\u3000b\x1c"]:
                ids = tok(text).input_ids
                for skip in (False, True):
                    lines.append({"config": name, "ids": ids, "skip": skip,
                                  "decoded": tok.decode(ids, skip_special_tokens=skip)})
            lines.append({"config": name, "ids": [27, 272, 337, 285, 320], "skip": False,
                          "decoded": tok.decode([27, 272, 337, 285, 320])})  # "<" "/" "w" ">" "a</w>"
            with open(os.path.join(OUT, f"cases_{name}.jsonl"), "w", encoding="utf-8") as f:
                for c in lines:
                    f.write(json.dumps(c, ensure_ascii=False, separators=(",", ":")) + "\n")
            n_text += sum("text" in c for c in lines)
            n_other += sum("text" not in c for c in lines)
    norm = normalize_cases()
    with open(os.path.join(OUT, "normalize.jsonl"), "w", encoding="utf-8") as f:
        for c in norm:
            f.write(json.dumps(c, ensure_ascii=False, separators=(",", ":")) + "\n")
    print(f"{n_text} caption cases ({len(captions())} captions for sd1 and sd2, {len(HAND + EXTRA)} for the others), "
          f"{n_other} other; "
          f"{len(norm)} normalization cases; transformers {transformers.__version__}, tokenizers "
          f"{tokenizers.__version__}")


if __name__ == "__main__":
    sys.exit(main())

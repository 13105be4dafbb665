#!/usr/bin/env python3
"""check_chat_roundtrip.py - a chat fine-tune's template as transformers reads it.

colossal-finetune writes the chat template it trained with into the output's
tokenizer_config.json as Jinja text (col_chat_jinja in
models/lm/chat_template.c). This checks that transformers' apply_chat_template
on that directory gives the same text and the same ids as colossal's own
rendering (colossal-tokenize --chat, what colossal-chat feeds the model), for
a set of conversations, with and without the generation prompt, and that a
conversation the template refuses (llama2: roles out of order) is refused by
both.

    check_chat_roundtrip.py [--bin BUILD/apps] [OUT ...]

Without OUT it makes one tiny fine-tune per template (llama2, llama3, chatml,
plain: llama-tiny, 2 steps on generated chat data) in a temporary directory
and checks each; then the same template text beside the bundled llama2 and
llama3 tokenizers (where the markers are special tokens or SentencePiece
pieces, not single bytes). Needs transformers (e.g. /work/scratch/venv/bin/python).
Not part of make check. Exit 0 when everything matches.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

from transformers import AutoTokenizer

CONVS = [
    [{"role": "user", "content": "hi"}],
    [{"role": "system", "content": "be brief"}, {"role": "user", "content": "1+2?"}],
    [{"role": "user", "content": "  spaced out \n"}, {"role": "assistant", "content": "\n3 "},
     {"role": "user", "content": "and 2+2?"}],
    [{"role": "system", "content": "You answer in French."}, {"role": "user", "content": "bonjour, ça va ?"},
     {"role": "assistant", "content": "Très bien."}, {"role": "user", "content": "et toi — 漢字?"},
     {"role": "assistant", "content": "oui"}],
]
BAD = [{"role": "assistant", "content": "first"}, {"role": "user", "content": "then"}]


def colossal_ids(bindir, out, conv, gen):
    args = [os.path.join(bindir, "colossal-tokenize"), "--chat", out] + (["--generation-prompt"] if gen else [])
    p = subprocess.run(args, input=json.dumps(conv).encode(), capture_output=True)
    if p.returncode != 0:
        return None, p.stderr.decode().strip()
    return json.loads(p.stdout), None


def colossal_text(bindir, out, ids):
    p = subprocess.run([os.path.join(bindir, "colossal-tokenize"), "--decode", out], input=json.dumps(ids).encode(),
                       capture_output=True, check=True)
    return p.stdout.decode()


def hf_render(tok, conv, gen):
    text = tok.apply_chat_template(conv, tokenize=False, add_generation_prompt=gen)
    ids = tok.apply_chat_template(conv, tokenize=True, add_generation_prompt=gen)
    if hasattr(ids, "keys"):  # transformers 5 returns a BatchEncoding
        ids = ids["input_ids"]
    return text, list(ids)


def check_dir(bindir, out, family, what=None, compare_text=True):
    """compare_text: also the text colossal's ids decode to (exact with a byte-level tokenizer; SentencePiece's
    decoding adds a space after <s>, so with it only the ids are compared)"""
    what = what or family
    tok = AutoTokenizer.from_pretrained(out)
    bad = 0
    for ci, conv in enumerate(CONVS):
        for gen in (False, True):
            ours, why = colossal_ids(bindir, out, conv, gen)
            if ours is None:
                print(f"FAIL {what} conversation {ci} gen={gen}: colossal refused it: {why}")
                bad += 1
                continue
            text, ids = hf_render(tok, conv, gen)
            our_text = colossal_text(bindir, out, ours) if compare_text else text
            if text != our_text or ids != ours:
                print(f"FAIL {what} conversation {ci} gen={gen}:\n  transformers {text!r}\n  colossal     {our_text!r}"
                      f"\n  ids equal: {ids == ours}")
                bad += 1
            else:
                print(f"ok   {what} conversation {ci} gen={gen}: {len(ids)} ids, same {'text and ' * compare_text}ids")
    ours, why = colossal_ids(bindir, out, BAD, False)
    try:
        hf_render(tok, BAD, False)
        hf_refused = False
    except Exception:  # jinja2's TemplateError from raise_exception
        hf_refused = True
    if family == "llama2" and not (hf_refused and ours is None):
        print(f"FAIL {what}: roles out of order: transformers refused: {hf_refused}, colossal refused: {ours is None}")
        bad += 1
    elif family != "llama2" and (hf_refused or ours is None):
        print(f"FAIL {what}: an assistant message first was refused (transformers {hf_refused}, colossal {why})")
        bad += 1
    else:
        print(f"ok   {what}: assistant first: {'refused by both' if hf_refused else 'rendered by both'}")
    # generation_config.json (written with the template): transformers reads it, and generate() stops at the
    # tokenizer's end of text and at the template's end of turn where that is one token
    if os.path.exists(os.path.join(out, "generation_config.json")):
        from transformers import GenerationConfig
        eos = GenerationConfig.from_pretrained(out).eos_token_id
        eos = eos if isinstance(eos, list) else [eos]
        want = [tok.eos_token_id]
        end = {"llama3": "<|eot_id|>", "chatml": "<|im_end|>"}.get(family)
        if end and len(tok.encode(end, add_special_tokens=False)) == 1:
            want.append(tok.encode(end, add_special_tokens=False)[0])
        if eos != want:
            print(f"FAIL {what}: generation_config.json's eos_token_id {eos}, wanted {want}")
            bad += 1
        else:
            print(f"ok   {what}: generation_config.json read by transformers: eos_token_id {eos}")
    return bad


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "apps"),
                    help="the directory of colossal-finetune and colossal-tokenize (default: the tree's apps/)")
    ap.add_argument("out", nargs="*", help="fine-tuned output directories (default: make one per template)")
    a = ap.parse_args()
    bad = 0
    if a.out:
        for out in a.out:
            cfg = json.load(open(os.path.join(out, "tokenizer_config.json")))
            fam = subprocess.run([os.path.join(a.bin, "colossal-tokenize"), "--chat", out], capture_output=True,
                                 input=json.dumps(BAD).encode()).returncode != 0 and "llama2" or "other"
            bad += check_dir(a.bin, out, fam, what=out)
    else:
        with tempfile.TemporaryDirectory() as tmp:
            data = os.path.join(tmp, "chat.jsonl")
            with open(data, "w") as f:
                for i in range(100):
                    f.write(json.dumps({"messages": [{"role": "user", "content": f"{i}+1?"},
                                                     {"role": "assistant", "content": str(i + 1)}]}) + "\n")
            for family in ("llama2", "llama3", "chatml", "plain"):
                out = os.path.join(tmp, family)
                subprocess.run([os.path.join(a.bin, "colossal-finetune"), "llama-tiny", data, "--out", out, "--steps",
                                "2", "--batch", "2", "--seq", "64", "--template", family, "--quiet"], check=True)
                bad += check_dir(a.bin, out, family)
                tmpl = json.load(open(os.path.join(out, "tokenizer_config.json")))["chat_template"]
                for name in ("llama2", "llama3"):
                    d = os.path.join(tmp, f"{family}_{name}")
                    os.mkdir(d)
                    src = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "assets", "tokenizers",
                                       name, "tokenizer.json")
                    with open(src, "rb") as f, open(os.path.join(d, "tokenizer.json"), "wb") as g:
                        g.write(f.read())
                    with open(os.path.join(d, "tokenizer_config.json"), "w") as f:
                        json.dump({"tokenizer_class": "PreTrainedTokenizerFast", "chat_template": tmpl}, f)
                    bad += check_dir(a.bin, d, family, f"{family} with the {name} tokenizer", compare_text=False)
    print("all match" if bad == 0 else f"{bad} mismatches")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())

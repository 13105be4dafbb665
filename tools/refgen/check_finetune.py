"""Check that what colossal-finetune writes is a model transformers can use,
and that transformers and colossal agree on it:

    check_finetune.py OUT_DIR [--bin apps] [--new 24] [--text FILE]

1. AutoTokenizer and AutoModelForCausalLM load OUT_DIR (a local path).
2. The tokenizer gives the same ids as colossal-tokenize OUT_DIR on a text.
3. Greedy generation: transformers' generate(do_sample=False) from a prompt
   and `colossal-chat OUT_DIR --prompt-ids ... --temperature 0 --json` give
   the same tokens.
4. The loss transformers computes on a window of the text equals the loss of
   `colossal-finetune OUT_DIR TEXT --eval-only` on the same window (the text is
   written so that the whole file is one validation batch).

Exits non-zero on any mismatch. Needs torch + transformers (tools/refgen/.venv)
and the built colossal binaries."""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

os.environ.setdefault("HF_HUB_OFFLINE", "1")

SAMPLE = ("And it came to pass, when men began to multiply on the face of the earth, and daughters were born "
          "unto them, that the sons of God saw the daughters of men that they were fair.")


def run(cmd, stdin=None):
    p = subprocess.run(cmd, input=stdin, capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({p.returncode}): {p.stderr.strip()}")
    return p.stdout


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("out_dir")
    ap.add_argument("--bin", default=os.path.join(os.path.dirname(__file__), "..", "..", "apps"))
    ap.add_argument("--new", type=int, default=24)
    ap.add_argument("--text", default=None, help="text for the tokenizer and loss checks (default: a KJV verse)")
    a = ap.parse_args()
    text = open(a.text, encoding="utf-8").read() if a.text else SAMPLE
    ok = True

    tok = AutoTokenizer.from_pretrained(a.out_dir)
    model = AutoModelForCausalLM.from_pretrained(a.out_dir, dtype=torch.float32).eval()
    print(f"loaded {type(model).__name__} ({sum(p.numel() for p in model.parameters()) / 1e6:.2f}M parameters) "
          f"and {type(tok).__name__} from {a.out_dir}")

    hf_ids = tok(text, add_special_tokens=False)["input_ids"]
    c_ids = json.loads(run([os.path.join(a.bin, "colossal-tokenize"), a.out_dir, "--no-special"], stdin=text))
    same = hf_ids == c_ids
    ok &= same
    print(f"tokenizer: {len(hf_ids)} ids, {'identical' if same else 'DIFFERENT'}")

    prompt = hf_ids[:12]
    with torch.no_grad():
        out = model.generate(torch.tensor([prompt]), max_new_tokens=a.new, do_sample=False, min_new_tokens=a.new,
                             pad_token_id=tok.eos_token_id)
    hf_new = out[0, len(prompt):].tolist()
    c_out = run([os.path.join(a.bin, "colossal-chat"), a.out_dir, "--prompt-ids", ",".join(map(str, prompt)),
                 "--temperature", "0", "--max-new-tokens", str(a.new), "--json"])
    c_new = json.loads(c_out)["ids"]
    # colossal stops at EOS; transformers was told to go on: compare the common part
    same = hf_new[:len(c_new)] == c_new and len(c_new) > 0
    ok &= same
    print(f"greedy: {len(c_new)} tokens {'identical' if same else 'DIFFERENT'}: {tok.decode(c_new)!r}")

    # loss on one window: a file of exactly T+1 tokens is one validation batch at --val-percent 99
    T = min(64, len(hf_ids) - 1)
    window = hf_ids[:T + 1]
    with tempfile.TemporaryDirectory() as d:
        # llm.c token file (uint16 when the vocabulary fits, else uint32): the same ids, no re-tokenizing
        path = os.path.join(d, "window.bin")
        wide = max(window) > 65535
        header = [20240801 if wide else 20240520, 2 if wide else 1, len(window) * 100] + [0] * 253
        with open(path, "wb") as f:
            f.write(b"".join(v.to_bytes(4, "little") for v in header))
            f.write(b"".join(t.to_bytes(4 if wide else 2, "little") for t in window * 100))
        c_loss = json.loads(run([os.path.join(a.bin, "colossal-finetune"), a.out_dir, path, "--eval-only", "--json",
                                 "--batch", "1", "--seq", str(T), "--val-percent", "1", "--eval-batches", "1",
                                 "--no-shuffle"]).strip().splitlines()[-1])["val_loss"]
    # the validation split is the last 1% of the 100 repeats; its first batch starts at a repeat boundary when
    # the split falls on one, so compute transformers' loss on the same T+1 tokens colossal evaluates
    n = len(window) * 100
    start = n - (n * 1 // 100)
    seq = (window * 100)[start:start + T + 1]
    with torch.no_grad():
        logits = model(torch.tensor([seq[:-1]])).logits[0]
        hf_loss = torch.nn.functional.cross_entropy(logits, torch.tensor(seq[1:])).item()
    same = abs(hf_loss - c_loss) <= 1e-4 * max(1.0, abs(hf_loss))
    ok &= same
    print(f"loss on {T} tokens: transformers {hf_loss:.6f}, colossal {c_loss:.6f} {'agree' if same else 'DIFFER'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

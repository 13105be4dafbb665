#!/usr/bin/env python3
"""refgen.py - reference outputs of tiny Hugging Face causal LMs for colossal's parity tests.

Builds seven tiny, randomly initialised models with transformers (no download: the
models come from configs written here), saves their checkpoints in the two formats
the C loader reads, and writes what PyTorch computes with them: logits, the loss,
every parameter gradient, ten AdamW steps and a greedy generation.

    tools/refgen/.venv/bin/python tools/refgen/refgen.py --out tests/fixtures/hf
    tools/refgen/.venv/bin/python tools/refgen/refgen.py --out tests/fixtures/hf --verify-only

See tools/refgen/README.md for what each file holds.  The output is deterministic:
rerunning with the same package versions on the same machine gives the same bytes.
"""

import os

# Never touch the network: every model here is built from a config.
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
os.environ["HF_HUB_DISABLE_TELEMETRY"] = "1"
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import argparse
import copy
import hashlib
import json
import shutil
import struct
import sys

import safetensors
import torch
import torch.nn.functional as F
import transformers
from safetensors.torch import load_file, save_file
from transformers import (AutoConfig, GPT2Config, GPT2LMHeadModel, LlamaConfig,
                          LlamaForCausalLM, OPTConfig, OPTForCausalLM)

SEED = 20240611          # model k (in MODEL_NAMES order) uses SEED + k
VOCAB = 96
BATCH, SEQ = 2, 12
IGNORE = -100
# (row, position) of labels set to -100.  Position 0 is never a target (the
# shift drops it); the others remove 4 of the 22 shifted targets.
IGNORED_LABELS = [(0, 0), (0, 5), (1, 3), (1, 4), (1, 11)]
PROMPT_LEN, NEW_TOKENS = 6, 10
MIN_GREEDY_MARGIN = 0.02  # top-1 minus top-2 logit at every greedy step
ADAMW = dict(lr=1e-2, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01)
ADAMW_STEPS = 10
# Re-initialisation (see randomise()): matrices N(0, W_STD), biases N(0, B_STD),
# norm weights U(1 - G_HALF, 1 + G_HALF).
W_STD, B_STD, G_HALF = 0.2, 0.1, 0.5

# New models go at the end: a model's seed is its index here, so the others keep their bytes.
MODEL_NAMES = ["gpt2", "opt", "opt_postln", "llama2", "llama3", "gpt2_untied", "llama_bias"]


def make_model(name):
    """Config and model class for NAME; the model is float32 with eager attention."""
    if name in ("gpt2", "gpt2_untied"):
        cfg = GPT2Config(vocab_size=VOCAB, n_positions=64, n_embd=32, n_layer=2, n_head=4,
                         resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                         summary_first_dropout=0.0, activation_function="gelu_new",
                         # GPT-2's <|endoftext|> (50256) is its last id; keep that
                         # role inside the tiny vocabulary.
                         bos_token_id=VOCAB - 1, eos_token_id=VOCAB - 1,
                         tie_word_embeddings=name == "gpt2")
        cls = GPT2LMHeadModel
    elif name in ("opt", "opt_postln"):
        post = name == "opt_postln"
        cfg = OPTConfig(vocab_size=VOCAB, hidden_size=32, ffn_dim=64, num_hidden_layers=2,
                        num_attention_heads=4, max_position_embeddings=64,
                        do_layer_norm_before=not post, word_embed_proj_dim=16 if post else 32,
                        dropout=0.0, attention_dropout=0.0, layerdrop=0.0,
                        activation_function="relu", pad_token_id=1, bos_token_id=2,
                        eos_token_id=2, tie_word_embeddings=True)
        cls = OPTForCausalLM
    elif name in ("llama2", "llama3", "llama_bias"):
        l3 = name == "llama3"
        # llama_bias: attention_bias and mlp_bias (q/k/v/o_proj and gate/up/down_proj get biases),
        # GQA as llama3, default rope, tied
        biased = name == "llama_bias"
        rope = {"rope_type": "default", "rope_theta": 10000.0}
        if l3:
            rope = {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0,
                    "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                    "original_max_position_embeddings": 16}
        cfg = LlamaConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=64,
                          num_hidden_layers=2, num_attention_heads=4,
                          num_key_value_heads=2 if l3 or biased else 4, max_position_embeddings=64,
                          rms_norm_eps=1e-5, rope_parameters=rope, hidden_act="silu",
                          attention_bias=biased, attention_dropout=0.0, mlp_bias=biased,
                          tie_word_embeddings=l3 or biased)
        cls = LlamaForCausalLM
    else:
        raise ValueError(f"unknown model {name}")
    cfg.dtype = torch.float32
    model = cls(cfg).float()
    model.set_attn_implementation("eager")
    return model


def randomise(model, gen):
    """Overwrite every parameter with draws from GEN, in named_parameters() order.

    The stock init (biases 0, norm weights 1, matrices N(0, 0.02)) would make the
    references blind to missing biases or norm weights and, with near-zero
    attention scores, to most of the RoPE.  These scales keep activations,
    attention scores and logits of order 1.
    """
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(".bias"):
                v = torch.randn(p.shape, generator=gen) * B_STD
            elif p.ndim == 1:   # LayerNorm / RMSNorm weight
                v = 1.0 + (torch.rand(p.shape, generator=gen) * 2.0 - 1.0) * G_HALF
            else:
                v = torch.randn(p.shape, generator=gen) * W_STD
            p.copy_(v)


def legacy_config(cfg_dict):
    """The same config as transformers 4.x wrote it (the era of pytorch_model.bin):
    "torch_dtype" instead of "dtype", LLaMA's rope as top-level rope_theta + rope_scaling."""
    d = dict(cfg_dict)
    if "dtype" in d:
        d["torch_dtype"] = d.pop("dtype")
    rp = d.pop("rope_parameters", None)
    if rp is not None:
        rp = dict(rp)
        d["rope_theta"] = rp.pop("rope_theta")
        d["rope_scaling"] = None if rp.get("rope_type", "default") == "default" else rp
    return d


def write_json(path, obj):
    with open(path, "w", encoding="utf-8") as f:
        f.write(json.dumps(obj, indent=2, sort_keys=True) + "\n")


def save_file_canonical(tensors, path, metadata):
    """safetensors.torch.save_file, then the header rewritten in a fixed order.

    save_file writes __metadata__ in hash-map order, which changes from run to
    run.  The rewritten header lists __metadata__ first with its keys sorted,
    then the tensors by data offset; the data bytes are untouched (offsets are
    relative to the end of the header)."""
    save_file(tensors, path, metadata=metadata)
    with open(path, "rb") as f:
        raw = f.read()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    data = raw[8 + n:]
    meta = header.pop("__metadata__", None)
    canon = {}
    if meta is not None:
        canon["__metadata__"] = {k: meta[k] for k in sorted(meta)}
    for k in sorted(header, key=lambda k: (header[k]["data_offsets"][0], k)):
        canon[k] = header[k]
    text = json.dumps(canon, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + data)
    back = load_file(path)
    assert sorted(back) == sorted(tensors)
    for k in tensors:
        assert torch.equal(back[k], tensors[k]), f"{path}: {k} changed by the header rewrite"


def shifted_ce(logits, labels):
    """Mean cross-entropy of logits[:, :-1] against labels[:, 1:], ignoring -100."""
    v = logits.shape[-1]
    return F.cross_entropy(logits[:, :-1].reshape(-1, v).double(),
                           labels[:, 1:].reshape(-1), ignore_index=IGNORE)


@torch.no_grad()
def greedy_manual(model, prompt):
    """Greedy decoding by full recomputation (no cache): tokens and top-1 minus top-2 margins."""
    seq = prompt[None].clone()
    margins = []
    for _ in range(NEW_TOKENS):
        last = model(seq, use_cache=False).logits[0, -1]
        top = torch.topk(last, 2)
        margins.append(float(top.values[0] - top.values[1]))
        seq = torch.cat([seq, top.indices[:1][None]], dim=1)
    return seq[0], torch.tensor(margins, dtype=torch.float32)


def save_checkpoints(model, out, name):
    """NAME/ via save_pretrained (safetensors); NAME_bin/ as pytorch_model.bin."""
    st_dir = os.path.join(out, name)
    bin_dir = os.path.join(out, name + "_bin")
    for d in (st_dir, bin_dir):
        if os.path.isdir(d):
            shutil.rmtree(d)
    model.save_pretrained(st_dir, safe_serialization=True)
    # transformers 5 no longer writes pytorch_model.bin (safe_serialization=False is
    # ignored), so write it as transformers 4.x did: torch.save of a plain dict of
    # the tensors, in state_dict() order, tied duplicates left out (the same keys
    # as model.safetensors).
    saved = load_file(os.path.join(st_dir, "model.safetensors"))
    order = [k for k in model.state_dict().keys() if k in saved]
    assert sorted(order) == sorted(saved), "state_dict and model.safetensors disagree on keys"
    os.makedirs(bin_dir)
    torch.save({k: saved[k].clone().contiguous() for k in order},
               os.path.join(bin_dir, "pytorch_model.bin"))
    with open(os.path.join(st_dir, "config.json"), encoding="utf-8") as f:
        cfg = json.load(f)
    write_json(os.path.join(bin_dir, "config.json"), legacy_config(cfg))
    shutil.copyfile(os.path.join(st_dir, "generation_config.json"),
                    os.path.join(bin_dir, "generation_config.json"))


def load_saved(out, name, bin_variant):
    d = os.path.join(out, name + ("_bin" if bin_variant else ""))
    m = transformers.AutoModelForCausalLM.from_pretrained(
        d, dtype=torch.float32, attn_implementation="eager", local_files_only=True)
    return m.eval()


def generate_one(out, name, k):
    seed = SEED + k
    torch.manual_seed(seed)
    model = make_model(name)
    gen = torch.Generator().manual_seed(seed)
    randomise(model, gen)
    model.eval()
    save_checkpoints(model, out, name)
    pristine = copy.deepcopy(model)   # the saved weights, for AdamW

    ref = {}
    ids = torch.randint(3, VOCAB, (BATCH, SEQ), generator=gen, dtype=torch.int64)
    labels = ids.clone()
    for r, t in IGNORED_LABELS:
        labels[r, t] = IGNORE
    ref["input_ids"] = ids
    ref["labels"] = labels

    with torch.no_grad():
        logits = model(ids).logits.float()
    ref["logits"] = logits.contiguous()

    model.zero_grad(set_to_none=True)
    outp = model(ids, labels=labels)
    outp.loss.backward()
    loss = outp.loss.detach().float()
    assert torch.equal(outp.logits.detach().float(), logits), "logits differ with labels"
    manual = shifted_ce(logits, labels)
    assert abs(float(manual) - float(loss)) < 1e-5, (float(manual), float(loss))
    ref["loss"] = loss.reshape(())
    names = []
    for pname, p in model.named_parameters():
        assert p.grad is not None, f"{name}: no gradient for {pname}"
        ref["grad." + pname] = p.grad.detach().float().clone().contiguous()
        names.append(pname)

    # AdamW from the saved weights on the same batch; loss recorded before each step.
    m2 = pristine
    m2.train()   # all dropouts are 0: same numbers as eval
    opt = torch.optim.AdamW(m2.parameters(), foreach=False, **ADAMW)
    losses = []
    for _ in range(ADAMW_STEPS):
        opt.zero_grad(set_to_none=True)
        l = m2(ids, labels=labels).loss
        l.backward()
        losses.append(float(l.detach()))
        opt.step()
    assert losses[0] == float(loss), "AdamW did not start from the saved weights"
    ref["adamw_losses"] = torch.tensor(losses, dtype=torch.float32)

    # Greedy generation.  Draw prompts until every step's top-2 logits are well
    # apart, so that a float32 reimplementation cannot pick the other token.
    for attempt in range(1000):
        prompt = torch.randint(3, VOCAB, (PROMPT_LEN,), generator=gen, dtype=torch.int64)
        manual_seq, margins = greedy_manual(model, prompt)
        if float(margins.min()) >= MIN_GREEDY_MARGIN:
            break
    else:
        raise RuntimeError(f"{name}: no prompt with greedy margins >= {MIN_GREEDY_MARGIN}")
    with torch.no_grad():
        g = model.generate(prompt[None], attention_mask=torch.ones(1, PROMPT_LEN, dtype=torch.int64),
                           do_sample=False, max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS,
                           eos_token_id=None, pad_token_id=0, use_cache=True)
    assert g.shape == (1, PROMPT_LEN + NEW_TOKENS), f"{name}: generate stopped early: {g.shape}"
    assert torch.equal(g[0], manual_seq), f"{name}: generate (KV cache) != argmax recomputation"
    ref["greedy_prompt"] = prompt
    ref["greedy_output"] = g[0].to(torch.int64).contiguous()
    ref["greedy_margin"] = margins

    meta = {
        "model": name,
        "architecture": type(model).__name__,
        "torch_version": torch.__version__,
        "transformers_version": transformers.__version__,
        "safetensors_version": safetensors.__version__,
        "seed": str(seed),
        "prompt_draws": str(attempt + 1),
        "init": f"matrices N(0,{W_STD}), biases N(0,{B_STD}), norm weights U({1 - G_HALF},{1 + G_HALF})",
        "loss": "mean CE(logits[:, :-1], labels[:, 1:]) over labels != -100",
        "adamw_lr": repr(ADAMW["lr"]),
        "adamw_beta1": repr(ADAMW["betas"][0]),
        "adamw_beta2": repr(ADAMW["betas"][1]),
        "adamw_eps": repr(ADAMW["eps"]),
        "adamw_weight_decay": repr(ADAMW["weight_decay"]),
        "adamw_steps": str(ADAMW_STEPS),
        "adamw_note": "torch.optim.AdamW(foreach=False) on model.parameters(), all parameters decayed; "
                      "adamw_losses[i] is the loss before update i",
        "tied_embeddings": str(bool(model.config.tie_word_embeddings)).lower(),
        "generate": f"generate(greedy_prompt[None], do_sample=False, max_new_tokens={NEW_TOKENS}, "
                    f"min_new_tokens={NEW_TOKENS}, eos_token_id=None, pad_token_id=0, use_cache=True)",
        "parameters": ",".join(names),
    }
    save_file_canonical(ref, os.path.join(out, name + "_ref.safetensors"), meta)
    return model


def verify_one(out, name):
    """The two checkpoints hold identical tensors, and reloading reproduces the references."""
    st = load_file(os.path.join(out, name, "model.safetensors"))
    bn = torch.load(os.path.join(out, name + "_bin", "pytorch_model.bin"),
                    map_location="cpu", weights_only=True)
    assert type(bn) is dict, f"{name}: pytorch_model.bin holds {type(bn)}"
    assert sorted(st) == sorted(bn), f"{name}: key sets differ"
    for k in st:
        assert st[k].dtype == bn[k].dtype and st[k].shape == bn[k].shape, k
        assert torch.equal(st[k], bn[k]), f"{name}: {k} differs between the two files"

    c1 = AutoConfig.from_pretrained(os.path.join(out, name)).to_dict()
    c2 = AutoConfig.from_pretrained(os.path.join(out, name + "_bin")).to_dict()
    c1.pop("_name_or_path", None)
    c2.pop("_name_or_path", None)
    assert c1 == c2, f"{name}: the legacy config.json parses differently"

    ref = load_file(os.path.join(out, name + "_ref.safetensors"))
    m1 = load_saved(out, name, False)
    m2 = load_saved(out, name, True)
    s1, s2 = m1.state_dict(), m2.state_dict()
    assert list(s1) == list(s2), f"{name}: loaded state dicts have different keys"
    for k in s1:
        assert torch.equal(s1[k], s2[k]), f"{name}: loaded {k} differs"
    if m1.config.tie_word_embeddings:
        assert m1.get_output_embeddings().weight.data_ptr() == \
            m1.get_input_embeddings().weight.data_ptr(), f"{name}: not tied after loading"
        assert "lm_head.weight" not in st, f"{name}: a tied checkpoint holds lm_head.weight"
    else:
        assert m1.get_output_embeddings().weight.data_ptr() != \
            m1.get_input_embeddings().weight.data_ptr(), f"{name}: tied after loading"
        assert torch.equal(m1.get_output_embeddings().weight, st["lm_head.weight"]), f"{name}: lm_head"
    with torch.no_grad():
        for m in (m1, m2):
            lg = m(ref["input_ids"]).logits.float()
            assert torch.equal(lg, ref["logits"]), f"{name}: reloaded model gives other logits"
    grads = sorted(k[5:] for k in ref if k.startswith("grad."))
    assert grads == sorted(n for n, _ in m1.named_parameters()), f"{name}: gradient names"
    return len(st)


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def write_manifest(out):
    """MANIFEST.md for every file under OUT; the header names every model present, so a
    subset run (--models) rewrites it as a full run would."""
    names = [n for n in MODEL_NAMES if os.path.isdir(os.path.join(out, n))]
    rows, total = [], 0
    for root, _, files in os.walk(out):
        for fn in files:
            p = os.path.join(root, fn)
            rel = os.path.relpath(p, out)
            if rel == "MANIFEST.md":
                continue
            size = os.path.getsize(p)
            total += size
            rows.append((rel, size, sha256(p)))
    rows.sort()
    lines = [
        "# tests/fixtures/hf",
        "",
        "Generated by tools/refgen/refgen.py; see tools/refgen/README.md for what each file holds.",
        "Do not edit by hand. Regenerate with:",
        "",
        "    tools/refgen/.venv/bin/python tools/refgen/refgen.py --out tests/fixtures/hf",
        "",
        f"torch {torch.__version__}, transformers {transformers.__version__}, "
        f"safetensors {safetensors.__version__}; models: {', '.join(names)}.",
        "",
        "| file | bytes | sha256 |",
        "|---|---:|---|",
    ]
    lines += [f"| {rel} | {size} | `{digest}` |" for rel, size, digest in rows]
    lines += ["", f"Total: {total} bytes in {len(rows)} files (MANIFEST.md not counted).", ""]
    with open(os.path.join(out, "MANIFEST.md"), "w", encoding="utf-8") as f:
        f.write("\n".join(lines))
    return total


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True, help="output folder, e.g. tests/fixtures/hf")
    ap.add_argument("--models", default=",".join(MODEL_NAMES),
                    help="comma-separated subset of " + ",".join(MODEL_NAMES))
    ap.add_argument("--verify-only", action="store_true",
                    help="only check existing output (checkpoint formats agree, logits reproduce)")
    args = ap.parse_args()
    names = [n for n in args.models.split(",") if n]
    for n in names:
        if n not in MODEL_NAMES:
            ap.error(f"unknown model {n!r}; choose from {', '.join(MODEL_NAMES)}")

    torch.set_num_threads(1)          # bit-identical reductions from run to run
    torch.use_deterministic_algorithms(True)
    transformers.utils.logging.disable_progress_bar()
    transformers.utils.logging.set_verbosity_error()

    os.makedirs(args.out, exist_ok=True)
    for n in names:
        if not args.verify_only:
            generate_one(args.out, n, MODEL_NAMES.index(n))
        nkeys = verify_one(args.out, n)
        print(f"{n}: ok ({nkeys} tensors in each checkpoint; bin == safetensors; logits reproduce)")
    if not args.verify_only:
        total = write_manifest(args.out)
        print(f"wrote {args.out}: {total} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())

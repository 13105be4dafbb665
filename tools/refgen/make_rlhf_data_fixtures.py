#!/usr/bin/env python3
"""Writes the RLHF data fixtures of tests/test_rlhf_data.c (models/lm/rlhf_data.c).

Run from the repository root with the refgen venv:
    tools/refgen/.venv/bin/python tools/refgen/make_rlhf_data_fixtures.py

Outputs (tests/fixtures/rlhf_data/):
  pairs.jsonl, kto.jsonl, prompts.jsonl   the data: every form rlhf_data.h reads
                                           (TRL strings, TRL message lists, TRL's
                                           implicit prompt, ColossalChat's
                                           "context"/"from" form), multi-turn
                                           contexts, system messages, non-ASCII
  expected.json   per tokenizer + chat template and per file, the token ids TRL
                  1.16 gives for each line: its own trainers' dataset preparation
                  (DPOTrainer._prepare_dataset, KTOTrainer._prepare_dataset,
                  GRPOTrainer._tokenize_prompts) run on each line as a dataset of
                  its own, so that TRL's per-dataset choices (is there a "prompt"?
                  is it conversational?) are made per line, as colossal makes them.
                  Also TRL's max_length (the filter in _prepare_dataset and the
                  collator's keep_start cut) and colossal's max_prompt /
                  max_completion (slices of TRL's ids: the prompt's last tokens,
                  the completions' first).
  tests/fuzz/corpus_rlhf_data/   the three files as seeds of the fuzzer (two
                  selector bytes in front: see tests/fuzz/fuzz_rlhf_data.c).
Tokenizers: the bundled assets with transformers' PreTrainedTokenizerFast and the
chat templates of tests/fixtures/chat/config_*.json (gpt2 + ChatML, whose markers
are plain text for GPT-2; gpt2 + plain; llama3 + its template; llama2 + its
template). ColossalChat lines are given to TRL in TRL's form (the roles mapped,
a single message object made a list): the mapping is colossal's, the tokens TRL's.
Deterministic: fixed texts, no randomness.
"""
import json
import logging
import os
import types

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["HF_DATASETS_OFFLINE"] = "1"
os.environ.setdefault("TQDM_DISABLE", "1")

import datasets  # noqa: E402
from datasets import Dataset  # noqa: E402
from tokenizers import Tokenizer, decoders, pre_tokenizers  # noqa: E402
from tokenizers.models import BPE  # noqa: E402
from transformers import PreTrainedTokenizerFast  # noqa: E402
from trl.trainer.dpo_trainer import DataCollatorForPreference, DPOTrainer  # noqa: E402
from trl.trainer.grpo_trainer import GRPOTrainer  # noqa: E402
from trl.trainer.kto_trainer import DataCollatorForUnpairedPreference, KTOTrainer  # noqa: E402

datasets.disable_progress_bars()
logging.getLogger("trl").setLevel(logging.ERROR)

OUT = "tests/fixtures/rlhf_data"
CORPUS = "tests/fuzz/corpus_rlhf_data"
A = "assets/tokenizers/"
U, S, AS = "user", "system", "assistant"


def m(role, content):
    return {"role": role, "content": content}


def f(frm, content):
    return {"from": frm, "content": content}


PAIRS = [
    {"prompt": "The sky is", "chosen": " blue.", "rejected": " green."},
    # the prompt's last word joins the completion's first: TRL's common prefix cuts the prompt short
    {"prompt": "Hello wor", "chosen": "ld!", "rejected": "ld?"},
    {"prompt": "\u00dcbersetze: Katze \u2192", "chosen": " \u732b (neko) \U0001f431", "rejected": " dog"},
    # completions already ending with an EOS text (GPT-2's, Llama 3's)
    {"prompt": "Q: 2+2?\nA:", "chosen": " 4<|endoftext|>", "rejected": " 5<|end_of_text|>"},
    None,  # a blank line
    {"prompt": [m(S, "You are terse."), m(U, "Capital of France?")], "chosen": [m(AS, "Paris.")],
     "rejected": [m(AS, "Lyon, I think.")]},
    {"prompt": [m(U, "2+2?"), m(AS, "4"), m(U, "Times 3?")], "chosen": [m(AS, "12")],
     "rejected": [m(AS, "  eleven \n")], "id": 7},
    # implicit prompt, message lists
    {"chosen": [m(U, "Say hi in Japanese."), m(AS, "\u3053\u3093\u306b\u3061\u306f\uff01")],
     "rejected": [m(U, "Say hi in Japanese."), m(AS, "Hello.")]},
    # ColossalChat
    {"context": [f("human", "Name a colour."), f("assistant", "Red."), f("human", "Another, with a dash.")],
     "chosen": [f("assistant", "Teal \u2014 a blue-green.")], "rejected": [f("assistant", "Seven.")]},
    # implicit prompt, strings (Anthropic HH style): the space before the answers goes to the completions
    {"chosen": "Human: hi\n\nAssistant: hello there", "rejected": "Human: hi\n\nAssistant: go away"},
    {"prompt": [m(U, "Quote: \"<b>x</b>\" & caf\u00e9")], "chosen": [m(AS, "Done.\nNew line.")],
     "rejected": [m(AS, "No")]},
    # implicit prompts where one is the start of the other: TRL's extract_prompt stops at the last item of the
    # shorter one
    {"chosen": "Answer: yes", "rejected": "Answer: yes!"},
    {"chosen": [m(U, "Pick one."), m(AS, "A")], "rejected": [m(U, "Pick one."), m(AS, "A"), m(U, "Sure?"),
                                                               m(AS, "B")]},
]

KTO = [
    {"prompt": "The capital of Japan is", "completion": " Tokyo.", "label": True},
    {"prompt": [m(U, "Is 7 prime?")], "completion": [m(AS, "Yes.")], "label": True},
    {"prompt": [m(S, "Answer in French."), m(U, "Thanks!")], "completion": [m(AS, "De rien \u2014 avec plaisir.")],
     "label": False},
    # ColossalChat: "from", a single completion object
    {"prompt": [f("human", "2+3?")], "completion": f("assistant", "6"), "label": False},
    {"prompt": "Fix the wor", "completion": "d order", "label": True},
]

PROMPTS = [
    {"messages": [m(U, "What is 6*7?")], "gt_answer": "42"},
    {"messages": [m(S, "Think step by step."), m(U, "Solve x+1=3.")], "gt_answer": 2},
    {"prompt": "Once upon a time"},
    {"prompt": [m(U, "Translate 'chat' to English.")], "gt_answer": 3.5},
    {"messages": [f("human", "Hi"), f("gpt", "Hello"), f("Human", "Tell me a joke \U0001f600")]},
]

GT_TEXT = {"42": "42", 2: "2", 3.5: "3.5"}


PLAIN = ("{% for message in messages %}{{ message['role'] + ': ' + message['content'] + '\n' }}{% endfor %}"
         "{% if add_generation_prompt %}{{ 'assistant: ' }}{% endif %}")


def template(family):
    if family == "plain":  # colossal's own format (tools/refgen/make_chat_fixtures.py)
        return PLAIN
    with open(f"tests/fixtures/chat/config_{family}.json", encoding="utf-8") as fh:
        return json.load(fh)["chat_template"]


def gpt2(family):
    t = Tokenizer(BPE.from_file(A + "gpt2/vocab.json", A + "gpt2/merges.txt"))
    t.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    t.decoder = decoders.ByteLevel()
    t.add_special_tokens(["<|endoftext|>"])
    return PreTrainedTokenizerFast(tokenizer_object=t, bos_token="<|endoftext|>", eos_token="<|endoftext|>",
                                   chat_template=template(family))


def from_file(name, bos, eos, family):
    return PreTrainedTokenizerFast(tokenizer_file=A + name + "/tokenizer.json", bos_token=bos, eos_token=eos,
                                   chat_template=template(family))


COMBOS = {
    "gpt2_chatml": ("gpt2", "chatml", lambda: gpt2("chatml")),
    "gpt2_plain": ("gpt2", "plain", lambda: gpt2("plain")),
    "llama3_llama3": ("llama3", "llama3", lambda: from_file("llama3", "<|begin_of_text|>", "<|end_of_text|>",
                                                            "llama3")),
    "llama2_llama2": ("llama2", "llama2", lambda: from_file("llama2", "<s>", "</s>", "llama2")),
}

ROLE = {"human": U, "user": U, "gpt": AS, "assistant": AS, "system": S}


def trl_messages(v):
    """ColossalChat turns -> TRL's; a single message -> a list."""
    if isinstance(v, str):
        return v
    if isinstance(v, dict):
        v = [v]
    return [{"role": ROLE[x["from"].lower()] if "from" in x else x["role"], "content": x["content"]} for x in v]


def one(rows):
    return Dataset.from_list(rows)


def dpo(tok, ex, max_length=None):
    row = {"prompt": trl_messages(ex["context"] if "context" in ex else ex["prompt"])} \
        if "context" in ex or "prompt" in ex else {}
    row["chosen"] = trl_messages(ex["chosen"])
    row["rejected"] = trl_messages(ex["rejected"])
    fake = types.SimpleNamespace(_tokenizer=tok)
    args = types.SimpleNamespace(dataset_num_proc=None, max_length=max_length, truncation_mode="keep_start")
    ds = DPOTrainer._prepare_dataset(fake, one([row]), tok, args, "train")
    if len(ds) == 0:
        return None
    r = ds[0]
    out = {"prompt": r["prompt_ids"], "a": r["chosen_ids"], "b": r["rejected_ids"]}
    if max_length is not None:
        col = DataCollatorForPreference(pad_token_id=0, max_length=max_length)(
            [{k: r[k] for k in ("prompt_ids", "chosen_ids", "rejected_ids")}])
        ids, cm, am = col["input_ids"].tolist(), col["completion_mask"].tolist(), col["attention_mask"].tolist()
        n = [sum(x) for x in am]
        np_ = len(r["prompt_ids"])
        assert ids[0][:np_] == r["prompt_ids"] and ids[1][:np_] == r["prompt_ids"]
        out["a"] = ids[0][np_:n[0]]
        out["b"] = ids[1][np_:n[1]]
        assert sum(cm[0]) == len(out["a"]) and sum(cm[1]) == len(out["b"])
    return out


def kto(tok, ex, max_length=None):
    row = {"prompt": trl_messages(ex["prompt"]), "completion": trl_messages(ex["completion"]), "label": ex["label"]}
    fake = types.SimpleNamespace(_tokenizer=tok, calculate_KL=False)
    args = types.SimpleNamespace(dataset_num_proc=None, max_length=max_length)
    ds = KTOTrainer._prepare_dataset(fake, one([row]), tok, args, "eval")
    if len(ds) == 0:
        return None
    r = ds[0]
    out = {"prompt": r["prompt_ids"], "a": r["completion_ids"], "desirable": r["label"]}
    if max_length is not None:
        col = DataCollatorForUnpairedPreference(pad_token_id=0, max_length=max_length)(
            [{k: r[k] for k in ("prompt_ids", "completion_ids", "label")}])
        ids, cm = col["input_ids"].tolist()[0], col["completion_mask"].tolist()[0]
        np_ = len(r["prompt_ids"])
        assert ids[:np_] == r["prompt_ids"]
        out["a"] = ids[np_:np_ + sum(cm)]
    return out


def grpo(tok, ex):
    p = trl_messages(ex["messages"] if "messages" in ex else ex["prompt"])
    fake = types.SimpleNamespace(processing_class=tok, _is_vlm=False, environment_factories=None, tools=None,
                                 chat_template=None, chat_template_kwargs={})
    ids, _, _ = GRPOTrainer._tokenize_prompts(fake, [p])
    out = {"prompt": list(ids[0])}
    if "gt_answer" in ex:
        out["gt_answer"] = GT_TEXT[ex["gt_answer"]]
    return out


FILES = {"pairs": ("pairs.jsonl", PAIRS, dpo), "kto": ("kto.jsonl", KTO, kto), "prompts": ("prompts.jsonl", PROMPTS,
                                                                                            grpo)}


def is_chat(ex):
    return any(isinstance(ex.get(k), (list, dict)) for k in ("prompt", "chosen", "context", "messages"))


def case(tok, combo, kind, max_length=0, max_prompt=0, max_completion=0):
    name, rows, fn = FILES[kind]
    out, dropped = [], 0
    for line, ex in enumerate(rows, 1):
        if ex is None:
            continue
        r = fn(tok, ex, max_length) if max_length else fn(tok, ex)
        if r is None:
            dropped += 1
            continue
        if max_prompt and len(r["prompt"]) > max_prompt:
            r["prompt"] = r["prompt"][-max_prompt:]
        for k in ("a", "b"):
            if max_completion and k in r:
                r[k] = r[k][:max_completion]
        r["line"] = line
        r["chat"] = is_chat(ex)
        out.append(r)
    return {"combo": combo, "kind": kind, "file": name, "max_length": max_length, "max_prompt": max_prompt,
            "max_completion": max_completion, "dropped": dropped, "examples": out}


def write_jsonl(name, rows):
    with open(os.path.join(OUT, name), "w", encoding="utf-8", newline="") as fh:
        for i, ex in enumerate(rows):
            if ex is None:
                fh.write("\n")
                continue
            # one line with Windows line ending; the others plain
            fh.write(json.dumps(ex, ensure_ascii=i % 2 == 0) + ("\r\n" if i == 2 else "\n"))


def write_corpus():
    """Seeds of tests/fuzz/fuzz_rlhf_data.c: byte 0 = kind + 3 * family (+ 128: Llama 3), byte 1 = options."""
    os.makedirs(CORPUS, exist_ok=True)
    families = ["llama2", "llama3", "chatml", "plain"]  # col_chat_family order
    for k, (kind, (name, _, _)) in enumerate(FILES.items()):
        with open(os.path.join(OUT, name), "rb") as fh:
            text = fh.read()
        for fam, opts in (("chatml", 1), ("llama3", 0x0f), ("llama2", 1)):
            sel = k + 3 * families.index(fam) + (128 if fam == "llama3" else 0)
            with open(os.path.join(CORPUS, f"{kind}_{fam}"), "wb") as fh:
                fh.write(bytes([sel, opts]) + text)


def main():
    os.makedirs(OUT, exist_ok=True)
    for kind, (name, rows, _) in FILES.items():
        write_jsonl(name, rows)
    write_corpus()
    combos, cases = [], []
    for combo, (tname, family, make) in COMBOS.items():
        tok = make()
        combos.append({"name": combo, "tokenizer": tname, "family": family, "eos": tok.eos_token_id})
        for kind in FILES:
            cases.append(case(tok, combo, kind))
        if combo == "llama3_llama3":
            cases.append(case(tok, combo, "pairs", max_length=22))
            cases.append(case(tok, combo, "kto", max_length=16))
            cases.append(case(tok, combo, "pairs", max_prompt=5, max_completion=3))
            cases.append(case(tok, combo, "prompts", max_prompt=7))
        if combo == "gpt2_chatml":
            cases.append(case(tok, combo, "pairs", max_length=12))
    for c in cases:
        if c["max_length"]:  # the cases must cut something and drop something
            cut = any(len(e["a"]) + len(e["prompt"]) == c["max_length"] for e in c["examples"])
            assert c["dropped"] > 0 and cut, (c["combo"], c["kind"], c["max_length"], c["dropped"], cut)
    with open(os.path.join(OUT, "expected.json"), "w", encoding="utf-8") as fh:
        json.dump({"combos": combos, "cases": cases}, fh, indent=None, separators=(",", ":"))
        fh.write("\n")
    print(f"wrote {OUT}: {len(cases)} cases")


if __name__ == "__main__":
    main()

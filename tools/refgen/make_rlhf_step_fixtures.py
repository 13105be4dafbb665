#!/usr/bin/env python3
"""Writes tests/fixtures/rlhf_step/: one step of each RLHF method through TRL's own trainers on a tiny model, for
tests/test_rlhf_step.c (the whole path: data file -> rows -> per-token log-probabilities -> loss -> every parameter's
gradient).

Run from the repository root with the refgen venv:
    tools/refgen/.venv/bin/python tools/refgen/make_rlhf_step_fixtures.py

The model: a GPT-2 of width 32, 2 blocks, 64 positions on the bundled byte tokenizer (vocab 257, EOS = PAD =
<|endoftext|>), random (seeded), dropout 0, fp32. The reference: the same model with seeded noise on every weight.
Data: string-form TRL datasets (pairs.jsonl, kto.jsonl) - TRL adds EOS to string completions.

Per method, <method>.safetensors holds "loss" [1] (float64), "grad.<param>" for every parameter (float64) and
"input_ids" / "completion_mask" (int64) of the batch TRL built:
  dpo    DPOTrainer, loss_type sigmoid, beta 0.1, explicit ref_model, pairs 0..1
  simpo  CPOTrainer (trl.experimental.cpo), loss_type simpo, cpo_alpha 0, beta 2.0, simpo_gamma 0.5, pairs 0..1
  orpo   ORPOTrainer (trl.experimental.orpo), beta 0.1, pairs 0..1
  kto    KTOTrainer, beta 0.1, weights 1/1, examples 0..3 (KL from the rotated completions)
  rm     RewardTrainer on GPT2ForSequenceClassification(num_labels=1) made from the policy (score seeded, saved in
         rm/), pairs 0..1; pad = EOS, so the reward is read before the final EOS
  grpo   GRPOTrainer._compute_loss on fixed completions: 2 prompts x 2 completions, given advantages-producing
         rewards, beta 0.04 with the reference's per-token log-probabilities, loss_type grpo, epsilon 0.2
  ppo    tools/refgen/ppo_ref.py (TRL has no PPO trainer any more) on the same rollout: rewards from rm/, the
         critic started from rm/, kl_coef 0.05, GAE gamma 1 lambda 0.95, clip 0.2, value clip 0.2, vf_coef 0.1;
         "loss" is the policy loss, "value_loss" the value loss, "cgrad.<param>" the critic's gradients
"""
import json
import os
import shutil
import tempfile
import warnings

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
warnings.filterwarnings("ignore")

import torch  # noqa: E402
from datasets import Dataset  # noqa: E402
from safetensors.torch import save_file  # noqa: E402
from transformers import (GPT2Config, GPT2ForSequenceClassification, GPT2LMHeadModel,  # noqa: E402
                          PreTrainedTokenizerFast)

OUT = "tests/fixtures/rlhf_step"
BYTES_TOK = "assets/tokenizers/bytes"

PAIRS = [
    {"prompt": "Q: 2+2?\nA:", "chosen": " 4.", "rejected": " five, I think"},
    {"prompt": "Name a colour:", "chosen": " blue", "rejected": " a cat"},
    {"prompt": "Say hi.", "chosen": " Hi!", "rejected": " No."},
    {"prompt": "Café or tea?", "chosen": " Tea, please.", "rejected": " Both"},
]
KTO = [
    {"prompt": "Q: 2+2?\nA:", "completion": " 4.", "label": True},
    {"prompt": "Name a colour:", "completion": " a cat", "label": False},
    {"prompt": "Say hi.", "completion": " Hi there!", "label": True},
    {"prompt": "Capital of France?", "completion": " Berlin", "label": False},
]


def tokenizer():
    tok = PreTrainedTokenizerFast.from_pretrained(BYTES_TOK)
    tok.pad_token = tok.eos_token
    return tok


def tiny_model(seed):
    torch.manual_seed(seed)
    cfg = GPT2Config(vocab_size=257, n_positions=64, n_embd=32, n_layer=2, n_head=2, resid_pdrop=0.0,
                     embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=256, eos_token_id=256, pad_token_id=256)
    return GPT2LMHeadModel(cfg).float()


def save_model(model, tok, d):
    os.makedirs(d, exist_ok=True)
    model.save_pretrained(d, safe_serialization=True)
    tok.save_pretrained(d)


def args_common(tmp, cls, **kw):
    return cls(output_dir=tmp, per_device_train_batch_size=kw.pop("batch", 2), bf16=False, fp16=False,
               report_to=[], use_cpu=True, dataloader_drop_last=False, remove_unused_columns=False, **kw)


def grads_of(model, prefix=""):
    out = {}
    for name, p in model.named_parameters():
        if p.grad is not None:
            out["grad." + prefix + name] = p.grad.detach().double().contiguous()
    return out


def dump(name, loss, model, batch, extra=None):
    t = {"loss": torch.tensor([float(loss)], dtype=torch.float64)}
    t.update(grads_of(model))
    for k, v in batch.items():  # the batch's token ids and masks
        if torch.is_tensor(v) and not v.is_floating_point() and (k.endswith("ids") or k.endswith("mask") or
                                                                  k.endswith("labels")):
            t[k] = v.to(torch.int64).contiguous()
    if extra:
        t.update(extra)
    save_file(t, f"{OUT}/{name}.safetensors")
    print(f"{name}: loss {float(loss):.6f}")


def batch_of(trainer, n):
    return trainer.data_collator([trainer.train_dataset[i] for i in range(n)])


def run_dpo(tmp, tok):
    from trl import DPOConfig, DPOTrainer
    policy, ref = load(f"{OUT}/policy"), load(f"{OUT}/ref")
    args = args_common(tmp, DPOConfig, beta=0.1, loss_type=["sigmoid"], max_length=None)
    tr = DPOTrainer(model=policy, ref_model=ref, args=args, train_dataset=Dataset.from_list(PAIRS),
                    processing_class=tok)
    policy.train()
    b = batch_of(tr, 2)
    loss = tr.compute_loss(policy, b)
    loss.backward()
    dump("dpo", loss, policy, b)


def run_simpo(tmp, tok):
    from trl.experimental.cpo import CPOConfig, CPOTrainer
    policy = load(f"{OUT}/policy")
    args = args_common(tmp, CPOConfig, beta=2.0, loss_type="simpo", cpo_alpha=0.0, simpo_gamma=0.5,
                       max_length=64, max_completion_length=None)
    tr = CPOTrainer(model=policy, args=args, train_dataset=Dataset.from_list(PAIRS), processing_class=tok)
    policy.train()
    b = batch_of(tr, 2)
    loss = tr.compute_loss(policy, b)
    loss.backward()
    dump("simpo", loss, policy, b)


def run_orpo(tmp, tok):
    from trl.experimental.orpo import ORPOConfig, ORPOTrainer
    policy = load(f"{OUT}/policy")
    args = args_common(tmp, ORPOConfig, beta=0.1, max_length=64, max_completion_length=None)
    tr = ORPOTrainer(model=policy, args=args, train_dataset=Dataset.from_list(PAIRS), processing_class=tok)
    policy.train()
    b = batch_of(tr, 2)
    loss = tr.compute_loss(policy, b)
    loss.backward()
    dump("orpo", loss, policy, b)


def run_kto(tmp, tok):
    from trl import KTOConfig, KTOTrainer
    policy, ref = load(f"{OUT}/policy"), load(f"{OUT}/ref")
    args = args_common(tmp, KTOConfig, batch=4, beta=0.1, desirable_weight=1.0, undesirable_weight=1.0,
                       max_length=None)
    tr = KTOTrainer(model=policy, ref_model=ref, args=args, train_dataset=Dataset.from_list(KTO),
                    processing_class=tok)
    policy.train()
    b = batch_of(tr, 4)
    loss = tr.compute_loss(policy, b)
    loss.backward()
    dump("kto", loss, policy, b)


def run_rm(tmp, tok):
    from trl import RewardConfig, RewardTrainer
    torch.manual_seed(11)
    rm = GPT2ForSequenceClassification.from_pretrained(f"{OUT}/policy", num_labels=1).float()
    rm.config.pad_token_id = tok.pad_token_id
    save_model(rm, tok, f"{OUT}/rm")
    args = args_common(tmp, RewardConfig, max_length=None)
    tr = RewardTrainer(model=rm, args=args, train_dataset=Dataset.from_list(PAIRS), processing_class=tok)
    rm.train()
    b = batch_of(tr, 2)
    loss = tr.compute_loss(rm, b)
    loss.backward()
    with torch.no_grad():
        rewards = rm(input_ids=b["input_ids"], attention_mask=b["attention_mask"]).logits.squeeze(-1)
    dump("rm", loss, rm, b, {"rewards": rewards.double().contiguous()})


def run_grpo(tmp, tok):
    from trl import GRPOConfig, GRPOTrainer
    policy, ref = load(f"{OUT}/policy"), load(f"{OUT}/ref")
    prompts = ["Q: 1+2=", "Q: 3+1="]  # same length: no prompt padding
    comps = [["3" + tok.eos_token, "12"], ["4" + tok.eos_token, "five" + tok.eos_token]]
    rewards = torch.tensor([[1.0, 0.0], [1.0, 0.0]])
    args = args_common(tmp, GRPOConfig, batch=4, beta=0.04, loss_type="grpo", epsilon=0.2, num_generations=2,
                       temperature=1.0, scale_rewards="group", use_bias_correction_kl=False,
                       max_completion_length=8)
    tr = GRPOTrainer(model=policy, reward_funcs=lambda completions, **kw: [0.0] * len(completions), args=args,
                     train_dataset=Dataset.from_list([{"prompt": p} for p in prompts]), processing_class=tok)
    pids = [tok(p)["input_ids"] for p in prompts]
    assert len(pids[0]) == len(pids[1])
    cids = [tok(c)["input_ids"] for row in comps for c in row]
    W = max(len(c) for c in cids)
    comp = torch.full((4, W), tok.pad_token_id, dtype=torch.long)
    cmask = torch.zeros((4, W), dtype=torch.long)
    for i, c in enumerate(cids):
        comp[i, :len(c)] = torch.tensor(c)
        cmask[i, :len(c)] = 1
    prompt = torch.tensor([pids[i // 2] for i in range(4)])
    # advantages as GRPO computes them: (r - group mean) / (group std + 1e-4)
    mean = rewards.mean(1, keepdim=True)
    std = rewards.std(1, keepdim=True)
    adv = ((rewards - mean) / (std + 1e-4)).reshape(-1)
    with torch.no_grad():
        ids = torch.cat([prompt, comp], 1)
        att = torch.cat([torch.ones_like(prompt), cmask], 1)
        logits = ref(input_ids=ids, attention_mask=att).logits[:, -W - 1:-1].float()
        ref_logps = torch.log_softmax(logits, -1).gather(-1, comp.unsqueeze(-1)).squeeze(-1)
    inputs = {"prompt_ids": prompt, "prompt_mask": torch.ones_like(prompt), "completion_ids": comp,
              "completion_mask": cmask, "advantages": adv, "ref_per_token_logps": ref_logps,
              "num_items_in_batch": cmask.sum()}
    policy.train()
    tr.current_gradient_accumulation_steps = 1  # set by the training loop, which is not run here
    loss = tr._compute_loss(policy, inputs)
    loss.backward()
    dump("grpo", loss, policy, {"input_ids": ids, "completion_mask": torch.cat([torch.zeros_like(prompt), cmask], 1)},
         {"rewards": rewards.reshape(-1).double().contiguous(), "advantages": adv.double().contiguous()})


def run_ppo(tmp, tok):
    """One PPO update on fixed rollouts with tools/refgen/ppo_ref.py's formulas (TRL ships no PPO trainer): the
    GRPO case's prompts and completions, the reward model rm/ as the scorer and as the critic's start."""
    import sys
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import ppo_ref
    policy, ref = load(f"{OUT}/policy"), load(f"{OUT}/ref")
    rm = GPT2ForSequenceClassification.from_pretrained(f"{OUT}/rm").float()
    critic = GPT2ForSequenceClassification.from_pretrained(f"{OUT}/rm").float()
    prompts = ["Q: 1+2=", "Q: 3+1="]
    comps = [["3" + tok.eos_token, "12"], ["4" + tok.eos_token, "five" + tok.eos_token]]
    pids = [tok(p)["input_ids"] for p in prompts]
    cids = [tok(c)["input_ids"] for row in comps for c in row]
    P, W = len(pids[0]), max(len(c) for c in cids)
    comp = torch.full((4, W), tok.pad_token_id, dtype=torch.long)
    mask = torch.zeros((4, W), dtype=torch.long)
    for i, c in enumerate(cids):
        comp[i, :len(c)] = torch.tensor(c)
        mask[i, :len(c)] = 1
    ids = torch.cat([torch.tensor([pids[i // 2] for i in range(4)]), comp], 1)
    att = torch.cat([torch.ones((4, P), dtype=torch.long), mask], 1)

    def logps(model):
        logits = model(input_ids=ids, attention_mask=att).logits[:, P - 1:-1].float()
        return torch.log_softmax(logits, -1).gather(-1, comp.unsqueeze(-1)).squeeze(-1)

    def values(model):  # the value of the state before each completion token, as the log-probabilities
        h = model.transformer(input_ids=ids, attention_mask=att).last_hidden_state
        return model.score(h).squeeze(-1)[:, P - 1:-1]

    with torch.no_grad():
        old_logp, ref_logp, old_values = logps(policy), logps(ref), values(critic)
        scores = rm(input_ids=ids, attention_mask=att).logits.squeeze(-1)  # at the last non-padding token
    cfg = dict(kl_coef=0.05, gamma=1.0, lam=0.95)
    _, adv, ret, _ = ppo_ref.rewards_advantages(old_logp.double(), ref_logp.double(), old_values.double(), mask,
                                               scores.double(), **cfg)
    policy.train()
    critic.train()
    loss, pg, vf, _ = ppo_ref.losses(logps(policy).double(), old_logp.double(), values(critic).double(),
                                     old_values.double(), adv, ret, mask, clip_range=0.2, value_clip=0.2, vf_coef=0.1)
    loss.backward()  # pg reaches the policy only, vf_coef * vf the critic only
    t = {"loss": torch.tensor([pg.item()], dtype=torch.float64),
         "value_loss": torch.tensor([vf.item()], dtype=torch.float64),
         "scores": scores.double().contiguous(), "input_ids": ids.contiguous(), "completion_mask": mask.contiguous()}
    t.update(grads_of(policy))
    for name, p in critic.named_parameters():
        if p.grad is not None:
            t["cgrad." + name] = p.grad.detach().double().contiguous()
    save_file(t, f"{OUT}/ppo.safetensors")
    print(f"ppo: policy loss {pg.item():.6f}, value loss {vf.item():.6f}")


def load(d):
    m = GPT2LMHeadModel.from_pretrained(d).float()
    m.config.pad_token_id = 256
    return m


def main():
    tok = tokenizer()
    shutil.rmtree(OUT, ignore_errors=True)
    os.makedirs(OUT)
    policy = tiny_model(1234)
    save_model(policy, tok, f"{OUT}/policy")
    torch.manual_seed(99)
    with torch.no_grad():
        for p in policy.parameters():
            p.add_(0.02 * torch.randn_like(p))
    save_model(policy, tok, f"{OUT}/ref")
    with open(f"{OUT}/pairs.jsonl", "w") as f:
        for e in PAIRS:
            f.write(json.dumps(e, ensure_ascii=False) + "\n")
    with open(f"{OUT}/kto.jsonl", "w") as f:
        for e in KTO:
            f.write(json.dumps(e, ensure_ascii=False) + "\n")
    with open(f"{OUT}/grpo_prompts.jsonl", "w") as f:
        for p, a in (("Q: 1+2=", "3"), ("Q: 3+1=", "4")):
            f.write(json.dumps({"prompt": p, "gt_answer": a}) + "\n")
    for run in (run_dpo, run_simpo, run_orpo, run_kto, run_rm, run_grpo, run_ppo):
        with tempfile.TemporaryDirectory() as tmp:
            run(tmp, tok)
    import trl
    import transformers
    with open(f"{OUT}/VERSIONS", "w") as f:
        f.write(f"torch {torch.__version__}\ntransformers {transformers.__version__}\ntrl {trl.__version__}\n")


if __name__ == "__main__":
    main()

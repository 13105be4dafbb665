#!/usr/bin/env python3
"""make_rlhf_loss_fixtures.py - references for tests/test_rlhf_loss.c (models/lm/rlhf_loss.h).

Writes tests/fixtures/rlhf_loss/{pref,kto,grpo_adv,grpo_loss,ppo_adv,ppo_loss}.json: random inputs
from fixed seeds (a few sizes and the edge cases) and what TRL 1.16's own loss code gives for them
under torch autograd in float64: the loss, its derivatives with respect to the inputs, and the
statistics TRL logs. Run with tools/refgen/.venv/bin/python (torch 2.15, trl 1.16.0):

    tools/refgen/.venv/bin/python tools/refgen/make_rlhf_loss_fixtures.py

How each reference is obtained (TRL's methods are called unbound on a stand-in `self` that holds the
settings and a stand-in model that returns the given log-probabilities, so that TRL's own lines
run; where that cannot give float64 a replica of TRL's lines is used and checked against TRL):
  DPO    DPOTrainer._compute_loss, loss_type ["sigmoid"] or ["robust"] (precomputed reference
         log-probs). The conservative form with label smoothing, which 1.16's DPO "sigmoid" no
         longer has, is CPOTrainer.cpo_loss (loss_type "sigmoid") on the log-ratios.
  SimPO  CPOTrainer.get_batch_loss_metrics (loss_type "simpo", cpo_alpha 0) with concatenated_forward
         replaced by the per-token averages sum / count (get_batch_logps' average_log_prob).
  ORPO   ORPOTrainer.odds_ratio_loss casts to float32, so the float64 reference replicates its lines
         (and get_batch_loss_metrics' nll - mean(losses)) without the cast; the script asserts that
         the real get_batch_loss_metrics agrees within float32 accuracy. The NLL term is
         concatenated_forward's CrossEntropyLoss (mean over the non-ignored tokens): -sum / count.
  RM     RewardTrainer.compute_loss (no margin, center_rewards_coefficient None).
  KTO    KTOTrainer._compute_loss, loss_type "kto", precomputed reference log-probs; the KL
         completions' forward (_compute_kl_logps) returns the given sums.
  GRPO   GRPOTrainer._compute_loss, loss_type "grpo", token-level importance sampling,
         use_bias_correction_kl False; the advantages replicate _generate_and_score_completions'
         lines (sum_then_normalize, one reward function) with TRL's nanstd.
  PPO    tools/refgen/ppo_ref.py (TRL no longer has a PPO trainer).
"""

import json
import math
import os
import sys
import types
import warnings
from collections import defaultdict

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
warnings.filterwarnings("ignore")

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from trl import DPOTrainer, GRPOTrainer, KTOTrainer, RewardTrainer  # noqa: E402
from trl.experimental.cpo import CPOTrainer  # noqa: E402
from trl.experimental.orpo import ORPOTrainer  # noqa: E402
from trl.experimental.orpo.orpo_trainer import log1mexp  # noqa: E402
from trl.trainer.utils import nanstd  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ppo_ref  # noqa: E402

torch.set_default_dtype(torch.float64)
OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "fixtures", "rlhf_loss")
D = torch.float64


def fl(x):
    """JSON numbers: floats as repr (exact), NaN as null; tensors flattened row-major ([B, T] -> B*T)."""
    if isinstance(x, torch.Tensor):
        x = x.detach().reshape(-1).tolist() if x.dim() > 0 else x.item()
    if isinstance(x, np.ndarray):
        x = x.reshape(-1).tolist() if x.ndim > 0 else x.item()
    if isinstance(x, list):
        return [fl(v) for v in x]
    if isinstance(x, bool):
        return x
    if isinstance(x, int):
        return x
    x = float(x)
    return None if math.isnan(x) else x


class Acc:
    """accelerate stand-in for one process."""

    device = torch.device("cpu")
    num_processes = 1
    sync_gradients = True

    def gather(self, t):
        return t

    def gather_for_metrics(self, t):
        return t

    def reduce(self, t, reduction="sum"):
        return t


def stand_in(**kw):
    ns = types.SimpleNamespace(
        accelerator=Acc(), model=types.SimpleNamespace(training=True), _metrics={"train": defaultdict(list)},
        _total_train_tokens=0, _tp_size=1, aux_loss_enabled=False)
    for k, v in kw.items():
        setattr(ns, k, v)
    return ns


def last(ns, key):
    return ns._metrics["train"][key][-1]


# ---------------------------------------------------------------- preference pairs

def lm_outputs(per_seq):
    """A fused-LM-head output whose per-token log-probs are one column holding each sequence's sum."""
    n = per_seq.shape[0]
    return types.SimpleNamespace(log_probs=per_seq.view(n, 1), entropy=torch.zeros(n, 1),
                                 mean_logits=torch.zeros(n, 1), is_top1=torch.zeros(n, 1, dtype=torch.bool))


def dpo_ref(pc, pr, rc, rr, beta, ls, robust):
    pc, pr = pc.clone().requires_grad_(), pr.clone().requires_grad_()
    n = pc.numel()
    if ls != 0 and not robust:  # conservative DPO: CPO's sigmoid loss on the log-ratios
        ns = stand_in(alpha=0.0, loss_type="sigmoid", simpo_gamma=0.0, beta=beta, label_smoothing=ls)
        losses, _, _ = CPOTrainer.cpo_loss(ns, pc - rc, pr - rr)
        loss = losses.mean()
        loss.backward()
        xc, xr = beta * (pc - rc).detach(), beta * (pr - rr).detach()
        stats = dict(chosen_reward=xc.mean().item(), rejected_reward=xr.mean().item(),
                     margin=(xc - xr).mean().item(), accuracy=(xc > xr).double().mean().item(),
                     chosen_logp=pc.mean().item(), rejected_logp=pr.mean().item())
        return loss.item(), pc.grad, pr.grad, stats
    ns = stand_in(ld_alpha=None, precompute_ref_logps=True, f_divergence_type="reverse_kl",
                  loss_types=["robust" if robust else "sigmoid"], loss_weights=[1.0], beta=beta,
                  label_smoothing=ls, use_weighting=False)
    inputs = {"input_ids": torch.ones(2 * n, 2, dtype=torch.long),
              "attention_mask": torch.ones(2 * n, 2, dtype=torch.long),
              "completion_mask": torch.ones(2 * n, 2, dtype=torch.long),
              "ref_chosen_logps": rc, "ref_rejected_logps": rr}
    model = lambda **kw: lm_outputs(torch.cat([pc, pr]))  # noqa: E731
    loss = DPOTrainer._compute_loss(ns, model, inputs, return_outputs=False)
    loss.backward()
    stats = dict(chosen_reward=last(ns, "rewards/chosen"), rejected_reward=last(ns, "rewards/rejected"),
                 margin=last(ns, "rewards/margins"), accuracy=last(ns, "rewards/accuracies"),
                 chosen_logp=last(ns, "logps/chosen"), rejected_logp=last(ns, "logps/rejected"))
    return loss.item(), pc.grad, pr.grad, stats


def simpo_ref(pc, pr, nc, nr, beta, gamma, ls):
    pc, pr = pc.clone().requires_grad_(), pr.clone().requires_grad_()
    ns = stand_in(alpha=0.0, loss_type="simpo", simpo_gamma=gamma, beta=beta, label_smoothing=ls, cpo_alpha=0.0)
    ns.cpo_loss = lambda a, b: CPOTrainer.cpo_loss(ns, a, b)
    z = torch.zeros(1, 1, 1)
    ns.concatenated_forward = lambda model, batch: (pc / nc, pr / nr, z, z, torch.tensor(0.0))
    loss, m = CPOTrainer.get_batch_loss_metrics(ns, None, {})
    loss.backward()
    stats = dict(chosen_reward=m["rewards/chosen"], rejected_reward=m["rewards/rejected"],
                 margin=m["rewards/margins"], accuracy=m["rewards/accuracies"],
                 chosen_logp=m["logps/chosen"], rejected_logp=m["logps/rejected"])
    return loss.item(), pc.grad, pr.grad, stats


def orpo_replica(ac, ar, beta):
    """ORPOTrainer.odds_ratio_loss without its .float() casts."""
    log_odds = (ac - ar) - (log1mexp(ac) - log1mexp(ar))
    ratio = F.logsigmoid(log_odds)
    losses = beta * ratio
    return losses, torch.mean(ratio), torch.mean(log_odds)


def orpo_ref(pc, pr, nc, nr, pnll, nnll, beta):
    def run(dtype, real):
        a = pc.to(dtype).clone().requires_grad_()
        b = pr.to(dtype).clone().requires_grad_()
        q = pnll.to(dtype).clone().requires_grad_()
        ac, ar = a / nc.to(dtype), b / nr.to(dtype)
        nll = -q.sum() / nnll.to(dtype).sum()  # CrossEntropyLoss's mean over the non-ignored tokens
        if real:
            ns = stand_in(beta=beta)
            ns.odds_ratio_loss = lambda x, y: ORPOTrainer.odds_ratio_loss(ns, x, y)
            z = torch.zeros(1, 1, 1, dtype=dtype)
            ns.concatenated_forward = lambda model, batch: (ac, ar, z, z, nll)
            loss, m = ORPOTrainer.get_batch_loss_metrics(ns, None, {})
        else:
            losses, lor, loc = orpo_replica(ac, ar, beta)
            loss = nll - losses.mean()
            xc, xr = beta * ac.detach(), beta * ar.detach()
            m = {"rewards/chosen": xc.mean().item(), "rewards/rejected": xr.mean().item(),
                 "rewards/margins": (xc - xr).mean().item(), "rewards/accuracies": (xc > xr).double().mean().item(),
                 "logps/chosen": ac.mean().item(), "logps/rejected": ar.mean().item(), "nll_loss": nll.item(),
                 "log_odds_ratio": lor.item(), "log_odds_chosen": loc.item()}
        loss.backward()
        return loss.item(), a.grad, b.grad, q.grad, m

    loss, gc, gr, gq, m = run(D, False)
    loss32, gc32, gr32, gq32, m32 = run(torch.float32, True)
    for x, y in [(loss, loss32), (gc, gc32), (gr, gr32), (gq, gq32)] + [(m[k], m32[k]) for k in m]:
        x, y = torch.as_tensor(x, dtype=D), torch.as_tensor(y, dtype=D)
        assert torch.allclose(x, y, rtol=1e-5, atol=1e-6), ("ORPO replica disagrees with TRL", x, y)
    # every NLL token of chosen sequence i has the seed d loss / d pnll[i]
    assert torch.allclose(gq, torch.full_like(gq, -1.0 / nnll.sum().item()))
    stats = dict(chosen_reward=m["rewards/chosen"], rejected_reward=m["rewards/rejected"],
                 margin=m["rewards/margins"], accuracy=m["rewards/accuracies"], chosen_logp=m["logps/chosen"],
                 rejected_logp=m["logps/rejected"], nll_loss=m["nll_loss"], log_odds_ratio=m["log_odds_ratio"],
                 log_odds_chosen=m["log_odds_chosen"], dnll=gq[0].item())
    return loss, gc, gr, stats


def rm_ref(rch, rrej):
    a, b = rch.clone().requires_grad_(), rrej.clone().requires_grad_()
    n = a.numel()
    ns = stand_in(args=types.SimpleNamespace(center_rewards_coefficient=None))
    model = lambda **kw: types.SimpleNamespace(logits=torch.cat([a, b]).view(2 * n, 1))  # noqa: E731
    loss = RewardTrainer.compute_loss(ns, model, {"attention_mask": torch.ones(2 * n, 3, dtype=torch.long)})
    loss.backward()
    stats = dict(chosen_reward=a.mean().item(), rejected_reward=b.mean().item(), margin=last(ns, "margin"),
                 accuracy=last(ns, "accuracy"), chosen_logp=a.mean().item(), rejected_logp=b.mean().item())
    return loss.item(), a.grad, b.grad, stats


def make_pref():
    cases = []
    rng = np.random.default_rng(1701)

    def sums(n, lo, hi):
        return torch.tensor(rng.uniform(lo, hi, n))

    def counts(n, hi):
        return torch.tensor(rng.integers(1, hi + 1, n), dtype=D)

    def add(kind, name, cfg, batch, res):
        loss, gc, gr, stats = res
        cases.append({"kind": kind, "name": name, "cfg": cfg, **{k: fl(v) for k, v in batch.items()},
                      "loss": fl(loss), "dpc": fl(gc), "dpr": fl(gr), "stats": {k: fl(v) for k, v in stats.items()}})

    # DPO: sizes, saturated pairs, label smoothing (conservative and robust), reference-free
    for n, beta, ls, robust, scale, reffree in [(1, 0.1, 0.0, False, 20, False), (4, 0.1, 0.0, False, 60, False),
                                                (16, 0.5, 0.0, False, 200, False), (8, 0.1, 0.1, False, 60, False),
                                                (8, 0.2, 0.25, True, 60, False), (6, 0.1, 0.0, False, 40, True),
                                                (5, 2.0, 0.0, False, 300, False), (7, 0.3, 0.15, False, 30, True)]:
        pc, pr = sums(n, -scale, -1), sums(n, -scale, -1)
        rc, rr = (torch.zeros(n), torch.zeros(n)) if reffree else (pc + sums(n, -8, 8), pr + sums(n, -8, 8))
        b = {"pc": pc, "pr": pr}
        if not reffree:
            b.update(rc=rc, rr=rr)
        add("dpo", f"dpo n{n} beta{beta} ls{ls}{' robust' if robust else ''}{' ref-free' if reffree else ''}",
            {"beta": beta, "label_smoothing": ls, "robust": robust}, b, dpo_ref(pc, pr, rc, rr, beta, ls, robust))
    # SimPO: averages over varying lengths; gamma in reward units (TRL's simpo_gamma)
    for n, beta, gamma, ls in [(1, 2.0, 0.5, 0.0), (4, 2.0, 1.0, 0.0), (12, 2.5, 1.4, 0.0), (6, 10.0, 3.0, 0.1),
                               (5, 2.0, -0.5, 0.3)]:
        nc, nr = counts(n, 40), counts(n, 40)
        pc, pr = sums(n, -3, -0.05) * nc, sums(n, -3, -0.05) * nr
        add("simpo", f"simpo n{n} beta{beta} gamma{gamma} ls{ls}", {"beta": beta, "gamma": gamma,
            "label_smoothing": ls}, {"pc": pc, "pr": pr, "nc": nc, "nr": nr},
            simpo_ref(pc, pr, nc, nr, beta, gamma, ls))
    # ORPO: averages on both sides of -ln 2 (log1mexp's two branches), down to -1e-3
    for n, beta, lo, hi in [(1, 0.1, -2, -0.1), (4, 0.1, -3, -0.01), (10, 0.25, -1.2, -0.3), (6, 1.0, -0.01, -0.001),
                            (8, 0.1, -9, -2)]:
        nc, nr = counts(n, 30), counts(n, 30)
        pc, pr = sums(n, lo, hi) * nc, sums(n, lo, hi) * nr
        nnll = nc + torch.tensor(rng.integers(0, 20, n), dtype=D)  # prompt + completion tokens
        if n > 1:
            nnll[0] = 0  # a chosen sequence with no NLL token (all prompt masked / padding)
        pnll = pc + sums(n, -30, 0) * (nnll - nc) / 10
        pnll[nnll == 0] = 0
        add("orpo", f"orpo n{n} beta{beta} avg[{lo},{hi}]", {"beta": beta},
            {"pc": pc, "pr": pr, "nc": nc, "nr": nr, "pnll": pnll, "nnll": nnll},
            orpo_ref(pc, pr, nc, nr, pnll, nnll, beta))
    # reward model: the rewards themselves
    for n, scale in [(1, 1), (8, 3), (32, 20)]:
        a, b = torch.tensor(rng.normal(0, scale, n)), torch.tensor(rng.normal(0, scale, n))
        add("rm", f"rm n{n} scale{scale}", {}, {"pc": a, "pr": b}, rm_ref(a, b))
    return cases


# ---------------------------------------------------------------- KTO

def kto_ref(p, r, labels, p_kl, r_kl, beta, wd, wu):
    p = p.clone().requires_grad_()
    n = p.numel()
    ns = stand_in(loss_type="kto", beta=beta, desirable_weight=wd, undesirable_weight=wu,
                  precompute_ref_logps=True, calculate_KL=True)
    ns._compute_kl_logps = lambda model, batch: p_kl.clone()
    batch = {"label": labels.long(), "input_ids": torch.ones(n, 2, dtype=torch.long),
             "attention_mask": torch.ones(n, 2, dtype=torch.long), "completion_mask": torch.ones(n, 2, dtype=torch.long),
             "ref_logps": r, "ref_KL_logps": r_kl}
    model = lambda **kw: lm_outputs(p)  # noqa: E731
    loss = KTOTrainer._compute_loss(ns, model, batch, return_outputs=False)
    loss.backward()
    m = ns._metrics["train"]
    get = lambda k: m[k][-1] if m[k] else float("nan")  # noqa: E731
    stats = dict(kl=get("kl"), chosen_reward=get("rewards/chosen"), rejected_reward=get("rewards/rejected"),
                 margin=get("rewards/margins"), chosen_logp=get("logps/chosen"), rejected_logp=get("logps/rejected"))
    return loss.item(), p.grad, stats


def make_kto():
    cases = []
    rng = np.random.default_rng(1702)
    for n, beta, wd, wu, mix, kl_shift in [(1, 0.1, 1.0, 1.0, "mixed", 0.0), (8, 0.1, 1.0, 1.0, "mixed", 0.0),
                                           (16, 0.5, 1.33, 1.0, "mixed", 2.0), (6, 0.1, 1.0, 1.0, "desirable", 0.0),
                                           (6, 0.2, 1.0, 0.75, "undesirable", 0.0),
                                           (9, 0.1, 1.0, 1.0, "mixed", -5.0)]:
        p = torch.tensor(rng.uniform(-120, -5, n))
        r = p + torch.tensor(rng.normal(0, 6, n))
        labels = {"mixed": rng.integers(0, 2, n) == 1, "desirable": np.ones(n, bool),
                  "undesirable": np.zeros(n, bool)}[mix]
        if mix == "mixed" and n > 1:
            labels[0], labels[1] = True, False
        p_kl = torch.tensor(rng.uniform(-150, -5, n))
        r_kl = p_kl + torch.tensor(rng.normal(kl_shift, 3, n))  # kl_shift < 0: the mean is negative, clamped to 0
        loss, g, stats = kto_ref(p, r, torch.tensor(labels), p_kl, r_kl, beta, wd, wu)
        cases.append({"name": f"kto n{n} {mix} beta{beta} w{wd}/{wu} klshift{kl_shift}",
                      "cfg": {"beta": beta, "desirable_weight": wd, "undesirable_weight": wu},
                      "p": fl(p), "r": fl(r), "desirable": [bool(x) for x in labels], "p_kl": fl(p_kl),
                      "r_kl": fl(r_kl), "loss": fl(loss), "dp": fl(g), "stats": {k: fl(v) for k, v in stats.items()}})
    return cases


# ---------------------------------------------------------------- GRPO

def grpo_advantages_ref(rewards, G, scale):
    """_generate_and_score_completions' lines (sum_then_normalize, one reward function, weight 1)."""
    rewards_per_func = rewards.view(-1, 1)
    unscorable_mask = torch.isnan(rewards_per_func).all(dim=1)
    rewards = (rewards_per_func * torch.ones(1).unsqueeze(0)).nansum(dim=1)
    rewards[unscorable_mask] = torch.nan
    mean_grouped_rewards = torch.nanmean(rewards.view(-1, G), dim=1)
    mean_grouped_rewards = mean_grouped_rewards.repeat_interleave(G, dim=0)
    if G > 1:
        std_rewards = nanstd(rewards.view(-1, G), dim=1)
        std_rewards = std_rewards.repeat_interleave(G, dim=0)
    else:
        std_rewards = torch.zeros_like(rewards)
    advantages = rewards - mean_grouped_rewards
    if scale:
        advantages = advantages / (std_rewards + 1e-4)
    is_std_zero = torch.isclose(std_rewards, torch.zeros_like(std_rewards))
    advantages = torch.nan_to_num(advantages, nan=0.0)
    stats = {"reward_mean": torch.nanmean(rewards).item(), "reward_std": nanstd(rewards).item(),
             "frac_reward_zero_std": is_std_zero.double().mean().item()}
    return advantages, stats


def f32(a):
    return np.asarray(a, dtype=np.float32)


def make_grpo_adv():
    cases = []
    rng = np.random.default_rng(1703)
    for ng, G, scale, kind in [(1, 4, True, "random"), (3, 8, True, "random"), (4, 4, False, "random"),
                               (2, 6, True, "equal"), (5, 1, True, "random"), (3, 4, True, "binary"),
                               (3, 5, True, "nan"), (2, 4, False, "nan")]:
        r = f32(rng.normal(0.5, 1.5, ng * G))
        if kind == "equal":
            r[:G] = 1.0  # an all-equal group: std 0, advantages 0
            r[G:] = f32(0.25)
        if kind == "binary":
            r = f32(rng.integers(0, 2, ng * G))
            r[:G] = 1.0
        if kind == "nan":
            r[1] = np.nan  # one unscorable completion
            r[G:2 * G - 1] = np.nan  # a group with a single scorable one
            if ng > 2:
                r[2 * G:3 * G] = np.nan  # a group with none
        adv, stats = grpo_advantages_ref(torch.tensor(r.astype(np.float64)), G, scale)
        cases.append({"name": f"grpo-adv {ng}x{G} {kind} scale{scale}", "n_groups": ng, "G": G, "scale_rewards": scale,
                      "rewards": fl(r.astype(np.float64)), "adv": fl(adv), "stats": {k: fl(v) for k, v in stats.items()}})
    return cases


def away_from(x, bounds, gap=1e-6):
    """Keeps the ratios off the clip bounds, where the branch would depend on the last bit of exp()."""
    for b in bounds:
        if abs(x - b) < gap:
            return False
    return True


def grpo_inputs(rng, B, T, spread):
    while True:
        logp = f32(rng.uniform(-6, -0.01, (B, T)))
        old = f32(logp + rng.normal(0, spread, (B, T)))
        ref = f32(logp + rng.normal(0, 0.5, (B, T)))
        r = np.exp(logp.astype(np.float64) - old.astype(np.float64))
        if all(away_from(x, [0.8, 1.2, 1.28, 0.9, 1.1]) for x in r.ravel()):
            return logp, old, ref


def grpo_loss_ref(logp, old, ref, mask, adv, beta, eps_low, eps_high):
    B, T = logp.shape
    lp = torch.tensor(logp.astype(np.float64), requires_grad=True)
    ns = stand_in(top_entropy_quantile=1.0, off_policy_mask_threshold=None, importance_sampling_level="token",
                  beta=beta, loss_type="grpo", epsilon_low=eps_low, epsilon_high=eps_high, use_vllm=False,
                  current_gradient_accumulation_steps=1, _entropy_bonus_enabled=False,
                  args=types.SimpleNamespace(use_bias_correction_kl=False, delta=None))
    ns._get_per_token_logps_and_entropies = lambda *a, **k: (lp, torch.zeros(B, T), None)
    inputs = {"prompt_ids": torch.ones(B, 1, dtype=torch.long), "prompt_mask": torch.ones(B, 1, dtype=torch.long),
              "completion_ids": torch.ones(B, T, dtype=torch.long), "completion_mask": torch.tensor(mask, dtype=torch.long),
              "advantages": torch.tensor(adv.astype(np.float64))}
    if old is not None:
        inputs["old_per_token_logps"] = torch.tensor(old.astype(np.float64))
    if beta != 0:
        inputs["ref_per_token_logps"] = torch.tensor(ref.astype(np.float64))
    loss = GRPOTrainer._compute_loss(ns, None, inputs)
    loss.backward()
    m = ns._metrics["train"]
    stats = {"clip_low": m["clip_ratio/low_mean"][-1], "clip_high": m["clip_ratio/high_mean"][-1],
             "clip_frac": m["clip_ratio/region_mean"][-1], "clip_low_min": m["clip_ratio/low_min"][-1],
             "clip_high_max": m["clip_ratio/high_max"][-1]}
    if beta != 0:
        stats["kl"] = m["kl"][-1]
    # not logged by TRL: the masked means colossal adds (what PPO logs as policy/approxkl_avg, val/ratio)
    mk = torch.tensor(mask, dtype=D)
    diff = lp.detach() - (inputs["old_per_token_logps"] if old is not None else lp.detach())
    stats["approx_kl"] = ((0.5 * diff**2 * mk).sum() / mk.sum().clamp(min=1.0)).item()
    stats["ratio_mean"] = ((torch.exp(diff) * mk).sum() / mk.sum()).item()
    stats["response_length"] = mk.sum(1).mean().item()
    return loss.item(), lp.grad, stats


def make_grpo_loss():
    cases = []
    rng = np.random.default_rng(1704)
    for B, T, beta, el, eh, kind in [(1, 5, 0.04, 0.2, 0.2, "plain"), (4, 7, 0.04, 0.2, 0.28, "plain"),
                                     (8, 16, 0.1, 0.2, 0.2, "masked"), (6, 9, 0.0, 0.2, 0.28, "noref"),
                                     (5, 6, 0.04, 0.1, 0.1, "onpolicy"), (4, 12, 0.5, 0.2, 0.2, "allmasked"),
                                     (3, 4, 0.04, 0.2, 0.2, "zeroadv")]:
        logp, old, ref = grpo_inputs(rng, B, T, 0.4)
        mask = np.ones((B, T), np.uint8)
        if kind in ("masked", "allmasked", "plain") and B > 1:
            for b in range(B):
                mask[b, rng.integers(1, T + 1):] = 0  # right padding of random length
        if kind in ("masked", "allmasked"):
            mask[1, :] = 0  # a row with no completion token
            logp[1, :] = 1.0  # garbage where masked (TRL pads log-probs with 1.0)
        if kind == "allmasked":
            mask[:, :] = 0
            mask[0, :3] = 1
        adv = f32(rng.normal(0, 1, B))
        if B > 2:
            adv[0], adv[1] = abs(adv[0]) + 0.1, -abs(adv[1]) - 0.1  # both signs, clipped on both sides
        if kind == "zeroadv":
            adv[2] = 0.0
        old_in = None if kind == "onpolicy" else old
        ref_in = None if beta == 0 else ref
        loss, g, stats = grpo_loss_ref(logp, old_in, ref_in, mask, adv, beta, el, eh)
        cases.append({"name": f"grpo {B}x{T} {kind} beta{beta} eps{el}/{eh}", "B": B, "T": T,
                      "cfg": {"beta": beta, "eps_low": el, "eps_high": eh}, "logp": fl(logp.astype(np.float64)),
                      "old_logp": None if old_in is None else fl(old.astype(np.float64)),
                      "ref_logp": None if ref_in is None else fl(ref.astype(np.float64)), "mask": mask.ravel().tolist(),
                      "adv": fl(adv.astype(np.float64)), "loss": fl(loss), "dlogp": fl(g), "stats":
                      {k: fl(v) for k, v in stats.items()}})
    return cases


# ---------------------------------------------------------------- PPO

def prefix_mask(rng, B, T, full_rows=1):
    mask = np.zeros((B, T), np.uint8)
    for b in range(B):
        mask[b, :T if b < full_rows else rng.integers(1, T + 1)] = 1
    return mask


def make_ppo_adv():
    cases = []
    rng = np.random.default_rng(1705)
    for B, T, kl_coef, gamma, lam, score_clip, whiten, kind in [
            (1, 6, 0.05, 1.0, 0.95, 0.0, True, "prefix"), (4, 8, 0.05, 1.0, 0.95, 0.0, True, "prefix"),
            (6, 12, 0.1, 0.99, 0.9, 2.0, True, "prefix"), (3, 5, 0.02, 0.9, 1.0, 0.0, False, "prefix"),
            (4, 7, 0.05, 1.0, 0.95, 1.0, True, "hole"), (5, 3, 0.0, 1.0, 0.0, 0.0, True, "prefix"),
            (4, 6, 0.0, 1.0, 0.95, 0.0, True, "small")]:
        mask = prefix_mask(rng, B, T)
        if kind == "hole":
            mask[:, :] = 1
            mask[0, 2] = mask[1, 0] = mask[2, T - 1] = mask[3, 1:3] = 0
        old = f32(rng.uniform(-5, -0.01, (B, T)))
        ref = f32(old + rng.normal(0, 0.3, (B, T)))
        vals = f32(rng.normal(0, 1, (B, T)))
        scores = f32(rng.normal(0, 2, B))
        if kind == "small":  # advantages of ~1e-2: the whitening's 1e-8 under the square root shows
            vals, scores = f32(vals * 0.01), f32(scores * 0.01)
        t = lambda a: torch.tensor(a.astype(np.float64))  # noqa: E731
        rw, adv, ret, stats = ppo_ref.rewards_advantages(t(old), t(ref), t(vals), torch.tensor(mask), t(scores),
                                                         kl_coef, gamma, lam, score_clip, whiten)
        cases.append({"name": f"ppo-adv {B}x{T} {kind} kl{kl_coef} g{gamma} l{lam} clip{score_clip} whiten{whiten}",
                      "B": B, "T": T, "cfg": {"kl_coef": kl_coef, "gamma": gamma, "lambda": lam,
                                              "score_clip": score_clip, "whiten_advantages": whiten},
                      "old_logp": fl(t(old)), "ref_logp": fl(t(ref)), "old_values": fl(t(vals)),
                      "mask": mask.ravel().tolist(), "scores": fl(t(scores)), "rewards": fl(rw), "adv": fl(adv),
                      "returns": fl(ret), "stats": {k: fl(v) for k, v in stats.items()}})
    return cases


def make_ppo_loss():
    cases = []
    rng = np.random.default_rng(1706)
    for B, T, clip, vclip, vf_coef in [(1, 5, 0.2, 0.2, 0.1), (4, 8, 0.2, 0.2, 0.1), (8, 16, 0.1, 0.5, 0.5),
                                       (3, 6, 0.2, math.inf, 1.0), (5, 7, 0.3, 0.05, 0.1)]:
        mask = prefix_mask(rng, B, T)
        while True:
            logp = f32(rng.uniform(-5, -0.01, (B, T)))
            old = f32(logp + rng.normal(0, 0.3, (B, T)))
            ov = f32(rng.normal(0, 1, (B, T)))
            v = f32(ov + rng.normal(0, 0.3, (B, T)))
            adv = f32(rng.normal(0, 1, (B, T)))
            ret = f32(ov + rng.normal(0, 1, (B, T)))
            r = np.exp(logp.astype(np.float64) - old.astype(np.float64))
            dv = v.astype(np.float64) - ov.astype(np.float64)
            ok = all(away_from(x, [1 - clip, 1 + clip]) for x in r.ravel())
            ok = ok and (math.isinf(vclip) or all(away_from(x, [-vclip, vclip]) for x in dv.ravel()))
            if ok:
                break
        t = lambda a: torch.tensor(a.astype(np.float64))  # noqa: E731
        lp, vv = t(logp).requires_grad_(), t(v).requires_grad_()
        loss, pg, vf, stats = ppo_ref.losses(lp, t(old), vv, t(ov), t(adv), t(ret), torch.tensor(mask), clip, vclip,
                                             vf_coef)
        loss.backward()
        cases.append({"name": f"ppo {B}x{T} clip{clip} vclip{vclip} vf{vf_coef}", "B": B, "T": T,
                      "cfg": {"clip_range": clip, "value_clip": None if math.isinf(vclip) else vclip,
                              "vf_coef": vf_coef},
                      "logp": fl(t(logp)), "old_logp": fl(t(old)), "values": fl(t(v)), "old_values": fl(t(ov)),
                      "adv": fl(t(adv)), "returns": fl(t(ret)), "mask": mask.ravel().tolist(),
                      "policy_loss": pg.item(), "value_loss": vf.item(), "dlogp": fl(lp.grad),
                      "dvalues": fl(vv.grad), "stats": {k: fl(v) for k, v in stats.items()}})
    return cases


def main():
    os.makedirs(OUT, exist_ok=True)
    files = {"pref": make_pref(), "kto": make_kto(), "grpo_adv": make_grpo_adv(), "grpo_loss": make_grpo_loss(),
             "ppo_adv": make_ppo_adv(), "ppo_loss": make_ppo_loss()}
    for name, cases in files.items():
        with open(os.path.join(OUT, name + ".json"), "w") as f:
            json.dump({"generator": "tools/refgen/make_rlhf_loss_fixtures.py", "trl": "1.16.0",
                       "torch": torch.__version__.split("+")[0], "cases": cases}, f, allow_nan=False)
            f.write("\n")
        print(f"{name}.json: {len(cases)} cases")


if __name__ == "__main__":
    main()

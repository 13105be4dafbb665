"""ppo_ref.py - a short torch reference of colossal's PPO formulas (docs/RLHF.md, "PPO").

TRL no longer ships a PPO trainer; these are the formulas of its former PPOTrainer (the "PPOv2" of
TRL 0.11-0.19, trl/trainer/ppo_trainer.py) on fixed rollouts, written as plain functions so that the
C code (models/lm/rlhf_pg.c) can be compared with them under torch autograd. Two deliberate
departures from that trainer, both about where a completion ends (docs/RLHF.md explains them):
  - the score is added to the reward of the row's last completion token (TRL added it one position
    after, on the first padding slot, when there was one);
  - the value loss and its clip fraction use the same completion mask as the policy loss (TRL used
    a mask one position longer).
A row's completion tokens are the positions where mask is 1, taken in order; GAE runs over them
(for a completion that is one run of positions, the usual case, this is TRL's loop exactly).

All tensors are [B, T] (scores: [B]); mask is 1 on completion tokens.
"""

import torch


def masked_mean(x, mask):
    """TRL core.masked_mean: (x * mask).sum() / mask.sum()."""
    return (x * mask).sum() / mask.sum()


def masked_var(x, mask):
    """TRL core.masked_var (unbiased=True): the masked mean square, times n / (n - 1)."""
    mean = masked_mean(x, mask)
    var = masked_mean((x - mean) ** 2, mask)
    n = mask.sum()
    return var * (n / (n - 1))


def masked_whiten(x, mask):
    """TRL core.masked_whiten (shift_mean=True)."""
    mean, var = masked_mean(x, mask), masked_var(x, mask)
    return (x - mean) * torch.rsqrt(var + 1e-8)


def rewards_advantages(old_logp, ref_logp, old_values, mask, scores, kl_coef, gamma, lam,
                       score_clip=0.0, whiten=True):
    """The rollout's per-token rewards, advantages and returns (0 off the mask), and TRL's stats.

    reward_t = -kl_coef * (old_logp - ref_logp)  (k1 per token), plus the clipped score at the last
    completion token; GAE backward over the completion; returns = advantages + values (before
    whitening); advantages whitened over all completion tokens of the batch.
    """
    m = mask.to(old_logp.dtype)
    B, T = old_logp.shape
    if score_clip > 0:
        scores = torch.clamp(scores, -score_clip, score_clip)
    kl = (old_logp - ref_logp) * m
    non_score_reward = -kl_coef * kl
    rewards = non_score_reward.clone()
    values = old_values * m
    advantages = torch.zeros_like(rewards)
    for b in range(B):
        idx = torch.nonzero(mask[b]).view(-1)  # the completion tokens, in order
        rewards[b, idx[-1]] += scores[b]
        r, v = rewards[b, idx], values[b, idx]
        lastgaelam = 0.0
        out = []
        n = idx.numel()
        for k in reversed(range(n)):
            nextvalues = v[k + 1] if k < n - 1 else 0.0
            delta = r[k] + gamma * nextvalues - v[k]
            lastgaelam = delta + gamma * lam * lastgaelam
            out.append(lastgaelam)
        advantages[b, idx] = torch.stack(out[::-1])
    returns = (advantages + values) * m
    if whiten:
        advantages = masked_whiten(advantages, m)
    advantages = advantages * m
    stats = {
        "reward_mean": scores.mean().item(),
        "reward_std": scores.std().item() if B > 1 else float("nan"),
        "kl": kl.sum(1).mean().item(),  # objective/kl
        "entropy": (-old_logp * m).sum(1).mean().item(),  # objective/entropy
        "non_score_reward": non_score_reward.sum(1).mean().item(),
        "rlhf_reward": (non_score_reward.sum(1).mean() + scores.mean()).item(),
        "response_length": m.sum(1).mean().item(),
    }
    return rewards * m, advantages, returns, stats


def losses(logp, old_logp, values, old_values, advantages, returns, mask, clip_range, value_clip, vf_coef):
    """One PPO update: (loss, pg_loss, vf_loss, stats), TRL's lines with masked means over `mask`."""
    m = mask.to(logp.dtype)
    vpredclipped = torch.clamp(values, old_values - value_clip, old_values + value_clip)
    vf_losses1 = torch.square(values - returns)
    vf_losses2 = torch.square(vpredclipped - returns)
    vf_loss_max = torch.max(vf_losses1, vf_losses2)
    vf_loss = 0.5 * masked_mean(vf_loss_max, m)
    vf_clipfrac = masked_mean((vf_losses2 > vf_losses1).to(m.dtype), m)
    logprobs_diff = logp - old_logp
    ratio = torch.exp(logprobs_diff)
    pg_losses = -advantages * ratio
    pg_losses2 = -advantages * torch.clamp(ratio, 1.0 - clip_range, 1.0 + clip_range)
    pg_loss_max = torch.max(pg_losses, pg_losses2)
    pg_loss = masked_mean(pg_loss_max, m)
    loss = pg_loss + vf_coef * vf_loss
    with torch.no_grad():
        stats = {
            "policy_loss": pg_loss.item(),
            "value_loss": vf_loss.item(),
            "clip_frac": masked_mean((pg_losses2 > pg_losses).to(m.dtype), m).item(),
            "value_clip_frac": vf_clipfrac.item(),
            "approx_kl": masked_mean(0.5 * logprobs_diff**2, m).item(),
            "ratio_mean": masked_mean(ratio, m).item(),
        }
    return loss, pg_loss, vf_loss, stats

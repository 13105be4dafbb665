#!/usr/bin/env python3
"""Writes the fixtures of tests/test_token_logprob.c: PyTorch's per-token
log-probabilities (log_softmax over the last dim, then gather of the target),
forward and gradient, on small random logits.

Run from the repository root with the refgen venv:
    tools/refgen/.venv/bin/python tools/refgen/make_rlhf_logprob_fixtures.py

Output: tests/fixtures/rlhf_logprob/logprob.safetensors (about 110 KB). For
each case k:
  c{k}.ignore   i64 [1]: the ignore_index
  c{k}.logits   f32 [..., V]
  c{k}.targets  i64 [...]: classes in [0, V), or ignore_index
  c{k}.lp       f32 [...]: log_softmax(logits, -1).gather(-1, targets[..., None])[..., 0],
                with 0 where targets == ignore_index (those rows gather class 0 and are masked)
  c{k}.d        f32 [...]: a random upstream gradient
  c{k}.dlogits  f32 [..., V]: the gradient of sum(lp * d) with respect to the logits
All in float32, as TRL computes its per-token log-probabilities; the script
checks that trl.trainer.utils.selective_log_softmax (what TRL's DPO / GRPO
trainers call) gives the same values (within 1e-5; for the cases with a
leading dim, which it needs). torch runs on one thread with
deterministic algorithms; safetensors.numpy.save_file writes the file (its
metadata keys then sorted), so a rerun with the same versions gives the same
bytes (the versions are in the header's metadata). Nothing is downloaded.
"""
import json
import os
import struct
import sys

os.environ["HF_HUB_OFFLINE"] = "1"

import numpy as np  # noqa: E402
import safetensors  # noqa: E402
import torch  # noqa: E402
from safetensors.numpy import save_file  # noqa: E402

OUT = os.path.join("tests", "fixtures", "rlhf_logprob")

# (leading shape, V, ignore_index, logit scale, rising: + 0.01 * class, rows set to ignore_index)
CASES = [
    ((7,), 11, -100, 2.0, False, (1, 4)),          # 2-D logits, two ignored rows
    ((2, 5), 37, -100, 1.5, False, (3, 8)),        # 3-D logits [B, T, V], as a language model's
    ((2, 2), 3001, -1, 3.0, True, (2,)),           # several 512-wide blocks, the max growing block after block
    ((9,), 23, 2, 1.0, False, (0, 5, 6)),          # ignore_index is a class: its rows count as ignored
    ((), 13, -100, 2.0, False, ()),                # 1-D logits, a scalar target
    ((3, 1, 4), 5, -100, 4.0, False, (0, 1, 2, 3)),  # 4-D logits, the first rows ignored
]


def case(gen, lead, V, ign, scale, rising, ignored):
    logits = scale * torch.randn((*lead, V), generator=gen, dtype=torch.float32)
    if rising:
        logits += 0.01 * torch.arange(V, dtype=torch.float32)
    n = int(np.prod(lead, dtype=np.int64))
    t = torch.randint(0, V, (n,), generator=gen, dtype=torch.int64)
    for r in ignored:
        t[r] = ign
    if 0 <= ign < V:  # make sure some row has the class that is ignore_index
        assert (t == ign).any()
    targets = t.reshape(lead)
    d = torch.randn(tuple(lead), generator=gen, dtype=torch.float32)
    x = logits.clone().requires_grad_()
    keep = targets != ign
    safe = torch.where(keep, targets, torch.zeros_like(targets))
    gathered = torch.log_softmax(x, dim=-1).gather(-1, safe.unsqueeze(-1)).squeeze(-1)
    lp = torch.where(keep, gathered, torch.zeros_like(gathered))
    (lp * d).sum().backward()
    if logits.ndim >= 2:  # selective_log_softmax loops over dim 0: it needs a leading dim
        check_trl(logits, safe, keep, lp)
    return {"ignore": torch.tensor([ign], dtype=torch.int64), "logits": logits, "targets": targets,
            "lp": lp.detach(), "d": d, "dlogits": x.grad}


def check_trl(logits, safe, keep, lp):
    from trl.trainer.utils import selective_log_softmax

    with torch.no_grad():
        ref = torch.where(keep, selective_log_softmax(logits, safe), torch.zeros_like(lp))
    err = (ref - lp.detach()).abs().max().item() if lp.numel() else 0.0
    if err > 1e-5:
        sys.exit(f"selective_log_softmax differs from log_softmax + gather by {err}")


def sort_metadata(path):
    """save_file writes the metadata in a hash map's order, which changes from run to run: the
    header is rewritten with the metadata keys sorted (the same length, so the data stay put)."""
    with open(path, "rb") as f:
        blob = f.read()
    n = struct.unpack("<Q", blob[:8])[0]
    header = json.loads(blob[8:8 + n])
    header["__metadata__"] = dict(sorted(header["__metadata__"].items()))
    h = json.dumps(header, separators=(",", ":")).encode()
    assert len(h) <= n
    with open(path, "wb") as f:
        f.write(blob[:8] + h + b" " * (n - len(h)) + blob[8 + n:])


def main():
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    os.makedirs(OUT, exist_ok=True)
    import trl

    gen = torch.Generator().manual_seed(20250717)
    tensors = {}
    for k, c in enumerate(CASES):
        for name, t in case(gen, *c).items():
            tensors[f"c{k}.{name}"] = t.detach().contiguous().numpy().copy()  # (ascontiguousarray makes 0-d 1-d)
    meta = {"generator": "tools/refgen/make_rlhf_logprob_fixtures.py", "torch": torch.__version__,
            "numpy": np.__version__, "safetensors": safetensors.__version__, "trl": trl.__version__,
            "python": sys.version.split()[0], "cases": str(len(CASES))}
    path = os.path.join(OUT, "logprob.safetensors")
    save_file(tensors, path, metadata=meta)
    sort_metadata(path)
    print(path, os.path.getsize(path))


if __name__ == "__main__":
    main()

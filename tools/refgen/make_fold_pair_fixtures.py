#!/usr/bin/env python3
"""make_fold_pair_fixtures.py - references for the pair side of the Evoformer (models/fold/fold_pair.c).

Each case calls one module class of DeepMind's alphafold.model.modules under hk.transform, with the
config of fold_ref.make_config() (float32, no subbatching, unfused triangle projections) and the
module's own Haiku name, so the parameter names are those of DeepMind's files relative to the block:

  tri_mul_out     TriangleMultiplication  'triangle_multiplication_outgoing'   (equation ikc,jkc->ijc)
  tri_mul_in      TriangleMultiplication  'triangle_multiplication_incoming'   (equation kjc,kic->ijc)
  tri_att_start   TriangleAttention       'triangle_attention_starting_node'   (per_row)
  tri_att_end     TriangleAttention       'triangle_attention_ending_node'     (per_column)

at the real widths (c_z 128, 128 intermediate channels, 4 heads) and a few residues, every residue real
(mask all ones). The extra-MSA stack's triangle modules have the same config and widths. Weights are
fold_ref.perturb'ed (attention projections
scaled down: see attention_scale). One safetensors file per case: the weights under "MODULE/SUB//PARAM", "in/pair"
[N, N, c_z] and "out/update" [N, N, c_z] (the module's update, without the residual).

    tools/refgen/.venv/bin/python tools/refgen/make_fold_pair_fixtures.py --out tests/fixtures/fold_pair
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fold_ref  # noqa: E402  (sets JAX to the CPU and the highest matmul precision)

import haiku as hk  # noqa: E402
import jax  # noqa: E402
import numpy as np  # noqa: E402
from alphafold.model import modules  # noqa: E402
from safetensors.numpy import save_file  # noqa: E402

SEED = 20261201

# case: (module class, config key, Haiku name, N_res)
CASES = {
    'tri_mul_out': (modules.TriangleMultiplication, 'triangle_multiplication_outgoing', 12),
    'tri_mul_in': (modules.TriangleMultiplication, 'triangle_multiplication_incoming', 9),
    'tri_att_start': (modules.TriangleAttention, 'triangle_attention_starting_node', 10),
    'tri_att_end': (modules.TriangleAttention, 'triangle_attention_ending_node', 8),
}


def attention_scale(params):
    """fold_ref.perturb draws an attention projection [c_in, heads, c] with fan-in `heads` (its
    shape[-2]), 32x the variance of fan-in c_in at these widths: logits of std ~30, a saturated
    softmax that tests little. Those are scaled by 1/4 here (a power of two keeps the rounded
    mantissas): logits of std ~1."""
    for mod in params:
        for name in params[mod]:
            if name in ('query_w', 'key_w', 'value_w', 'gating_w'):
                params[mod][name] = (params[mod][name] * np.float32(0.25)).astype(np.float32)
    return params


def make_case(k, name, cls, key, n):
    cfg = fold_ref.make_config()
    evo = cfg.model.embeddings_and_evoformer.evoformer
    gc = cfg.model.global_config
    mcfg = evo[key]
    if 'fuse_projection_weights' in mcfg:
        assert not mcfg.fuse_projection_weights
    c_z = cfg.model.embeddings_and_evoformer.pair_channel

    def fn(pair, mask):
        return cls(mcfg, gc, name=key)(pair, mask, is_training=False)

    f = hk.transform(fn)
    rng = np.random.default_rng(SEED + k)
    pair = rng.standard_normal((n, n, c_z)).astype(np.float32)
    mask = np.ones((n, n), np.float32)
    params = f.init(jax.random.PRNGKey(SEED + k), pair, mask)
    params = attention_scale(fold_ref.perturb(hk.data_structures.to_mutable_dict(params), SEED + k))
    out = np.asarray(jax.jit(f.apply)(params, None, pair, mask), np.float32)
    tensors = {kk: np.ascontiguousarray(v) for kk, v in fold_ref.flat(params).items()}
    tensors['in/pair'] = pair
    tensors['out/update'] = np.ascontiguousarray(out)
    return tensors


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument('--out', required=True)
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    for k, (name, (cls, key, n)) in enumerate(CASES.items()):
        t = make_case(k, name, cls, key, n)
        path = os.path.join(a.out, name + '.safetensors')
        save_file(t, path)
        print(f'{path}: N {n}, {len(t)} tensors, |out| max {np.abs(t["out/update"]).max():.3f}')


if __name__ == '__main__':
    main()

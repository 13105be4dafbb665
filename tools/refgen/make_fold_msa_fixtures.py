#!/usr/bin/env python3
"""make_fold_msa_fixtures.py - references for AlphaFold's attention and MSA-side Evoformer modules.

Runs DeepMind's modules (alphafold.model.modules: Attention, GlobalAttention,
MSARowAttentionWithPairBias, MSAColumnAttention, MSAColumnGlobalAttention, Transition,
OuterProductMean) one at a time under hk.transform, float32 on the CPU, with the config of
fold_ref.make_config() (no subbatching) and each module's Haiku name, and writes one
safetensors file per case into tests/fixtures/fold_msa/:

    tools/refgen/.venv/bin/python tools/refgen/make_fold_msa_fixtures.py [--out DIR]

A file holds the module's weights under Haiku's names with the module at the root
("msa_row_attention_with_pair_bias/attention//query_w"; bfloat16, which holds the perturbed
values exactly), its inputs as "in/NAME" and its outputs as "out/NAME" (float32). Masks
are all ones (the C model never pads) except where a case says otherwise.

Weights: fold_ref.perturb, then the projections whose fan-in perturb misreads (it takes
the second-last axis) scaled by the power of two nearest 1/sqrt(true fan-in / that axis):
[c_in, heads, c] attention projections, [heads, c, c_out] outputs, OPM's [c, c, c_z]. Without
it the attention logits reach the hundreds and every softmax is a one-hot, which would hide
a missing key_dim**-0.5 from the tests.
"""
import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fold_ref  # noqa: E402  (sets JAX to the CPU and highest matmul precision)

import haiku as hk  # noqa: E402
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import ml_collections  # noqa: E402
import ml_dtypes  # noqa: E402
from safetensors.numpy import save_file  # noqa: E402

from alphafold.model import modules  # noqa: E402

SEED = 20261201


def rescale(params):
    """Power-of-two corrections of perturb's fan-in for 3-d weights (see the module doc)."""
    out = {}
    for mod, d in params.items():
        out[mod] = {}
        for name, a in d.items():
            a = np.asarray(a)
            if a.ndim == 3:
                if name in ('output_w',):                      # [h, c, o] or OPM [c, e, f]: fan-in h*c
                    true_fan, used = a.shape[0] * a.shape[1], a.shape[1]
                else:                                           # [a, h, c]: fan-in a
                    true_fan, used = a.shape[0], a.shape[1]
                k = int(np.round(np.log2(np.sqrt(true_fan / used))))
                a = np.ldexp(a, -k).astype(np.float32)
            out[mod][name] = a
    return out


def weights(fn, args, seed):
    """Initialised, perturbed and rescaled parameters of the transformed fn for args."""
    t = hk.transform(fn)
    p = t.init(jax.random.PRNGKey(0), *args)
    p = rescale(fold_ref.perturb(hk.data_structures.to_mutable_dict(p), seed))
    return t, p


def apply(t, p, args):
    jp = {m: {n: jnp.asarray(v) for n, v in d.items()} for m, d in p.items()}
    return np.asarray(t.apply(jp, jax.random.PRNGKey(0), *args), dtype=np.float32)


def save(out_dir, name, p, ins, outs):
    tensors = {}
    for mod, d in p.items():
        for n, v in d.items():
            b = np.asarray(v, np.float32).astype(ml_dtypes.bfloat16)
            assert np.array_equal(b.astype(np.float32), np.asarray(v, np.float32)), f'{mod}//{n} not bf16-exact'
            tensors[f'{mod}//{n}'] = b
    for k, v in ins.items():
        tensors[f'in/{k}'] = np.ascontiguousarray(np.asarray(v, np.float32))
    for k, v in outs.items():
        tensors[f'out/{k}'] = np.ascontiguousarray(np.asarray(v, np.float32))
    path = os.path.join(out_dir, f'{name}.safetensors')
    save_file(tensors, path)
    print(f'{path}: {os.path.getsize(path)} bytes;',
          ', '.join(f'{k} |max| {np.abs(v).max():.3g}' for k, v in outs.items()))


def attention_cases(out_dir, gc, rng):
    # gated self-attention at the extra stack's width (64 channels, 8 heads of 8), a key bias [B,1,1,K]
    # with one masked key (AlphaFold's mask_to_bias: -1e9)
    B, Q, C = 3, 7, 64
    cfg = ml_collections.ConfigDict({'num_head': 8, 'gating': True})
    q = rng.standard_normal((B, Q, C)).astype(np.float32)
    bias = (0.5 * rng.standard_normal((B, 1, 1, Q))).astype(np.float32)
    bias[1, 0, 0, 2] = -1e9

    def fn(q_data, m_data, b):
        return modules.Attention(cfg, gc, C, name='attention')(q_data, m_data, b)
    t, p = weights(fn, (q, q, bias), SEED)
    save(out_dir, 'attention_gated', p, {'q_data': q, 'bias': bias}, {'out': apply(t, p, (q, q, bias))})

    # ungated cross-attention, key_dim 32 / value_dim 48 over 4 heads, c_out 40, a shared bias [H,Q,K]
    B, Q, K, C, H = 2, 5, 6, 64, 4
    cfg = ml_collections.ConfigDict({'num_head': H, 'gating': False, 'key_dim': 32, 'value_dim': 48})
    q = rng.standard_normal((B, Q, C)).astype(np.float32)
    m = rng.standard_normal((B, K, C)).astype(np.float32)
    nb = rng.standard_normal((H, Q, K)).astype(np.float32)
    zero = np.zeros((B, 1, 1, K), np.float32)

    def fn2(q_data, m_data, b, n):
        return modules.Attention(cfg, gc, 40, name='attention')(q_data, m_data, b, n)
    t, p = weights(fn2, (q, m, zero, nb), SEED + 1)
    save(out_dir, 'attention_cross', p, {'q_data': q, 'm_data': m, 'bias': nb[None]},
         {'out': apply(t, p, (q, m, zero, nb))})

    # global attention (modules.GlobalAttention) at 64 channels, 8 heads, all rows valid; gated and not
    B, K, C = 5, 4, 64
    m = rng.standard_normal((B, K, C)).astype(np.float32)
    mask = np.ones((B, K, 1), np.float32)
    outs, params = {}, {}
    for gating in (True, False):
        cfg = ml_collections.ConfigDict({'num_head': 8, 'gating': gating})
        name = 'gated' if gating else 'ungated'

        def fn3(x, mk, cfg=cfg, name=name):
            return modules.GlobalAttention(cfg, gc, C, name=name)(x, x, mk)
        t, p = weights(fn3, (m, mask), SEED + 2)
        o = apply(t, p, (m, mask))
        outs[name] = np.broadcast_to(o, (B, K, C))
        params.update(p)
    save(out_dir, 'global_attention', params, {'m_data': m}, outs)


def msa_cases(out_dir, cfg, rng):
    e = cfg.model.embeddings_and_evoformer
    gc = cfg.model.global_config
    ev = e.evoformer
    cz = e.pair_channel
    for tag, S, N, cm in (('evo', 4, 10, e.msa_channel), ('extra', 6, 8, e.extra_msa_channel)):
        msa = rng.standard_normal((S, N, cm)).astype(np.float32)
        pair = rng.standard_normal((N, N, cz)).astype(np.float32)
        ones = np.ones((S, N), np.float32)

        def row(m, mk, pr):
            return modules.MSARowAttentionWithPairBias(ev.msa_row_attention_with_pair_bias, gc,
                                                       name='msa_row_attention_with_pair_bias')(m, mk, pr)
        t, p = weights(row, (msa, ones, pair), SEED + 10)
        save(out_dir, f'row_attention_{tag}', p, {'msa': msa, 'pair': pair},
             {'update': apply(t, p, (msa, ones, pair))})

        if tag == 'evo':
            # the column attention with the row attention's query_norm and attention weights (the same shapes):
            # the file holds only its input and output, the weights stay in row_attention_evo
            def col(m, mk):
                return modules.MSAColumnAttention(ev.msa_column_attention, gc, name='msa_column_attention')(m, mk)
            t, _ = weights(col, (msa, ones), SEED + 11)
            src = 'msa_row_attention_with_pair_bias'
            pc = {'msa_column_attention/query_norm': p[src + '/query_norm'],
                  'msa_column_attention/attention': p[src + '/attention']}
            save(out_dir, 'column_attention_evo', {}, {'msa': msa}, {'update': apply(t, pc, (msa, ones))})

            # the pair transition (128 channels, factor 4); the MSA one is the same code (tested at 64 below)
            pmask = np.ones((N, N), np.float32)

            def ptr(x, mk):
                return modules.Transition(ev.pair_transition, gc, name='pair_transition')(x, mk)
            t, p = weights(ptr, (pair, pmask), SEED + 12)
            save(out_dir, 'pair_transition', p, {'act': pair}, {'update': apply(t, p, (pair, pmask))})

            def opm(m, mk):
                return modules.OuterProductMean(ev.outer_product_mean, gc, cz, name='outer_product_mean')(m, mk)
            t, p = weights(opm, (msa, ones), SEED + 15)
            # update_no_rows: an MSA without rows, as AlphaFold's module computes it on rows that are all masked
            save(out_dir, 'outer_product_mean_evo', p, {'msa': msa},
                 {'update': apply(t, p, (msa, ones)), 'update_no_rows': apply(t, p, (msa, np.zeros_like(ones)))})
        else:
            def gcol(m, mk):
                return modules.MSAColumnGlobalAttention(ev.msa_column_attention, gc,
                                                        name='msa_column_global_attention')(m, mk)
            t, p = weights(gcol, (msa, ones), SEED + 13)
            save(out_dir, 'column_global_attention_extra', p, {'msa': msa}, {'update': apply(t, p, (msa, ones))})

            def mtr(x, mk):
                return modules.Transition(ev.msa_transition, gc, name='msa_transition')(x, mk)
            t, p = weights(mtr, (msa, ones), SEED + 14)
            save(out_dir, 'msa_transition_extra', p, {'act': msa}, {'update': apply(t, p, (msa, ones))})


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--out', default=os.path.join(os.path.dirname(__file__), '..', '..', 'tests', 'fixtures',
                                                  'fold_msa'))
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    cfg = fold_ref.make_config()
    rng = np.random.default_rng(SEED)
    attention_cases(a.out, cfg.model.global_config, rng)
    msa_cases(a.out, cfg, rng)


if __name__ == '__main__':
    main()

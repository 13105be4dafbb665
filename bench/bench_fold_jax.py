#!/usr/bin/env python3
"""bench_fold_jax.py - DeepMind's AlphaFold2 (JAX on the CPU) as the peer of bench/bench_fold.

Makes (once) a full-size model_3_ptm parameter file with random weights in DeepMind's npz
layout (48 Evoformer blocks, 4 extra-MSA blocks, the real widths), then times AlphaFold's
float32 inference for single-sequence inputs of the given lengths with --recycles extra
passes, and prints one JSON line per length: the seconds of all passes (after a warm-up
compile) and the pLDDT mean (a check the same parameters ran).

    tools/refgen/.venv/bin/python bench/bench_fold_jax.py --params /tmp/fold_full.npz --lengths 128 256
"""
import argparse
import json
import os
import sys
import time

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, '..', 'tools', 'refgen'))
import fold_ref  # noqa: E402
import numpy as np  # noqa: E402

AA = "ARNDCQEGHILKMFPSTWYV"


def sequence(n, seed=0):
    rng = np.random.default_rng(seed)
    return ''.join(AA[i] for i in rng.integers(0, 20, n))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--params', required=True, help='the npz to use, written first if missing')
    ap.add_argument('--lengths', type=int, nargs='+', default=[128])
    ap.add_argument('--recycles', type=int, default=3)
    ap.add_argument('--evoformer-blocks', type=int, default=48)
    ap.add_argument('--extra-blocks', type=int, default=4)
    a = ap.parse_args()
    cfg = fold_ref.make_config(n_evo=a.evoformer_blocks, n_extra=a.extra_blocks, num_recycle=a.recycles,
                               max_extra_msa=1)
    if not os.path.exists(a.params):
        feat = fold_ref.features_of(sequence(16), cfg=cfg)
        params = fold_ref.init_params(cfg, feat, seed=3)
        fold_ref.save_npz(a.params, params)
    flat = dict(np.load(a.params))
    params = {}
    for k, v in flat.items():
        mod, name = k.split('//')
        params.setdefault(mod, {})[name] = v
    for n in a.lengths:
        feat = fold_ref.features_of(sequence(n), cfg=cfg)
        fold_ref.run(cfg, params, feat, 0)          # compile
        t = time.perf_counter()
        outs = fold_ref.run(cfg, params, feat, a.recycles)
        secs = time.perf_counter() - t
        print(json.dumps({'impl': 'alphafold-jax', 'length': n, 'recycles': a.recycles, 'seconds': round(secs, 3),
                          'mean_plddt': float(np.mean(outs[-1]['plddt']))}), flush=True)


if __name__ == '__main__':
    main()

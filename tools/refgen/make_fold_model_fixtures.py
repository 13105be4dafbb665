"""make_fold_model_fixtures.py - end-to-end references for colossal-fold.

Writes tests/fixtures/fold_model/:
  real.npz            random parameters at AlphaFold's real widths (c_m 256, c_z 128, c_s 384, c_e 64),
                      1 Evoformer block and 1 extra-MSA block, in DeepMind's npz layout (model_3_ptm)
  narrow.npz          narrow widths (c_m 32, c_z 16, c_s 48, c_e 16), 2 Evoformer and 2 extra blocks
  query.fasta, msa.a3m  the inputs (the a3m: query + 7 rows with gaps, insertions and a duplicate)
  CASE_ref.safetensors  per case: the features AlphaFold's pipeline made, and the outputs of the
                      last pass (final atom37 positions and mask, pLDDT, PAE, pTM, single/pair/msa_first_row,
                      the structure module's single activation) plus the first pass's representations.
Cases: real_msa (real.npz, the a3m, max_msa_clusters 4 and max_extra_msa 8, 1 recycle),
       real_single (real.npz, no MSA: the extra MSA is empty, 0 recycles),
       narrow_msa (narrow.npz, the a3m, 2 recycles).
Run: tools/refgen/.venv/bin/python tools/refgen/make_fold_model_fixtures.py [--out DIR]
"""
import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fold_ref  # noqa: E402
from safetensors.numpy import save_file  # noqa: E402

QUERY = "MKTAYIAKGRQWSF"
A3M = """#14\t1
>query
MKTAYIAKGRQWSF
>row1
MKTAYLAKGRQ-SF
>row2
MRTAYIAkkKGRQWSA
>row3
-KTVYIAKGRQWSF
>row4
MKTAYIAKGRQWSF
>row5
MKSAYIAKGEQWSFaa
>row6
AKTAYIdAKGRQWHF
>row7
MKTAY--KGRQWSY
"""


def case(out, name, cfg, params, a3m, recycles):
    feat = fold_ref.features_of(QUERY, a3m=a3m, cfg=cfg)
    outs = fold_ref.run(cfg, params, feat, recycles)
    last, first = outs[-1], outs[0]
    t = {}
    for k in ('aatype', 'residue_index', 'target_feat', 'msa_feat', 'extra_msa', 'extra_has_deletion',
              'extra_deletion_value', 'extra_msa_mask', 'msa_mask', 'seq_mask'):
        v = np.asarray(feat[k])[0]
        t['feat/' + k] = np.ascontiguousarray(v.astype(np.int32 if v.dtype.kind in 'iu' else np.float32))
    sm = last['structure_module']
    t['out/final_atom_positions'] = np.asarray(sm['final_atom_positions'], np.float32)
    t['out/final_atom_mask'] = np.asarray(sm['final_atom_mask'], np.float32)
    t['out/plddt'] = np.asarray(last['plddt'], np.float32)
    if 'predicted_aligned_error' in last:
        t['out/predicted_aligned_error'] = np.asarray(last['predicted_aligned_error'], np.float32)
        t['out/ptm'] = np.asarray(last['ptm'], np.float32).reshape(1)
    rep = last['representations']
    for k in ('single', 'pair', 'msa_first_row', 'structure_module'):
        t['out/' + k] = np.asarray(rep[k], np.float32)
    for k in ('single', 'pair', 'msa_first_row'):
        t['first/' + k] = np.asarray(first['representations'][k], np.float32)
    t['first/final_atom_positions'] = np.asarray(first['structure_module']['final_atom_positions'], np.float32)
    t = {k: np.ascontiguousarray(v) for k, v in t.items()}
    save_file(t, os.path.join(out, name + '_ref.safetensors'),
              metadata={'recycles': str(recycles), 'max_msa_clusters': str(cfg.data.eval.max_msa_clusters),
                        'max_extra_msa': str(cfg.data.common.max_extra_msa)})
    print(name, 'plddt', float(np.mean(t['out/plddt'])), 'ptm', t.get('out/ptm'))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--out', default=os.path.join(os.path.dirname(__file__), '..', '..', 'tests', 'fixtures',
                                                  'fold_model'))
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, 'query.fasta'), 'w') as f:
        f.write('>query test protein\n' + QUERY[:8] + '\n' + QUERY[8:] + '\n')
    with open(os.path.join(a.out, 'msa.a3m'), 'w') as f:
        f.write(A3M)

    cfg = fold_ref.make_config(n_evo=1, n_extra=1, max_msa_clusters=4, max_extra_msa=8, num_recycle=1)
    feat = fold_ref.features_of(QUERY, a3m=A3M, cfg=cfg)
    real = fold_ref.init_params(cfg, feat, seed=1, bits=4)
    fold_ref.save_npz(os.path.join(a.out, 'real.npz'), real)
    case(a.out, 'real_msa', cfg, real, A3M, 1)
    cfg1 = fold_ref.make_config(n_evo=1, n_extra=1, max_msa_clusters=4, max_extra_msa=8, num_recycle=0)
    case(a.out, 'real_single', cfg1, real, None, 0)

    widths = {'msa': 32, 'pair': 16, 'seq': 48, 'extra': 16}
    cfgn = fold_ref.make_config(n_evo=2, n_extra=2, max_msa_clusters=4, max_extra_msa=8, num_recycle=2, widths=widths)
    featn = fold_ref.features_of(QUERY, a3m=A3M, cfg=cfgn)
    narrow = fold_ref.init_params(cfgn, featn, seed=2, bits=4)
    fold_ref.save_npz(os.path.join(a.out, 'narrow.npz'), narrow)
    case(a.out, 'narrow_msa', cfgn, narrow, A3M, 2)


if __name__ == '__main__':
    main()

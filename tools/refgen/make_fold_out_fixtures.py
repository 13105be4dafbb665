#!/usr/bin/env python3
"""make_fold_out_fixtures.py - references for AlphaFold2's heads, confidence metrics and output files.

Writes into tests/fixtures/fold_out/ (tests/test_fold_heads.c, tests/test_fold_pdb.c):

  heads.safetensors   PredictedLDDTHead, PredictedAlignedErrorHead and DistogramHead of
                      alphafold.model.modules under hk.transform with fold_ref.make_config()'s head
                      configs and real widths (c_s 384, c_z 128), weights perturbed with
                      fold_ref.perturb under their Haiku names ("predicted_lddt_head/act_0//weights"),
                      random representations in/single [N, c_s] and in/pair [N, N, c_z]; out/ the
                      three heads' logits and breaks, and what alphafold.common.confidence computes from
                      the logits: pLDDT, PAE and its maximum, pTM (weights all ones, and with a mask);
                      also pTM of random logits for 24 residues (d0 not clipped at 19 residues).
  protein_*.safetensors  a random protein (atom37 positions and masks, aatype with glycine and X,
                      residue numbers, chains, pLDDT) and the bytes of protein.to_pdb and
                      protein.to_mmcif (file id "test") for it; b-factors are the residue's pLDDT on
                      every atom, as run_alphafold.py and ColabFold give them.
  json.safetensors    PAE, pLDDT and pTM values and the JSON files written from them: AlphaFold's
                      pae json and confidence json (alphafold/common/confidence.py of DeepMind's v2.3.2,
                      which alphafold-colabfold 2.3.27 does not ship: the two functions are restated
                      below), and ColabFold's *_scores_*.json (colabfold/batch.py: json.dump of plddt,
                      max_pae, pae, ptm rounded with np.around).

    tools/refgen/.venv/bin/python tools/refgen/make_fold_out_fixtures.py --out tests/fixtures/fold_out
"""
import argparse
import hashlib
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fold_ref  # noqa: E402  (sets JAX to the CPU, float32 'highest' matmuls)

import jax  # noqa: E402
import haiku as hk  # noqa: E402
from safetensors.numpy import save_file  # noqa: E402

from alphafold.model import modules  # noqa: E402
from alphafold.common import confidence, protein, residue_constants as rc  # noqa: E402

SEED = 20261201
N_RES = 12


def heads_case(rng):
    cfg = fold_ref.make_config()
    h, gc = cfg.model.heads, cfg.model.global_config
    c_s = cfg.model.embeddings_and_evoformer.seq_channel
    c_z = cfg.model.embeddings_and_evoformer.pair_channel

    def fn(single, pair):
        rep = {'structure_module': single, 'pair': pair}
        lddt = modules.PredictedLDDTHead(h.predicted_lddt, gc)(rep, None, False)
        pae = modules.PredictedAlignedErrorHead(h.predicted_aligned_error, gc)(rep, None, False)
        dist = modules.DistogramHead(h.distogram, gc)(rep, None, False)
        return lddt, pae, dist

    f = hk.transform(fn)
    single = rng.standard_normal((N_RES, c_s)).astype(np.float32)
    pair = rng.standard_normal((N_RES, N_RES, c_z)).astype(np.float32)
    params = f.init(jax.random.PRNGKey(0), single, pair)
    params = fold_ref.perturb(hk.data_structures.to_mutable_dict(params), SEED)
    lddt, pae, dist = jax.tree_util.tree_map(np.asarray, f.apply(params, None, single, pair))

    out = {k: np.ascontiguousarray(v) for k, v in fold_ref.flat(params).items()}
    out['in/single'] = single
    out['in/pair'] = pair
    out['out/plddt_logits'] = lddt['logits']
    out['out/pae_logits'] = pae['logits']
    out['out/pae_breaks'] = pae['breaks']
    out['out/distogram_logits'] = dist['logits']
    out['out/distogram_edges'] = dist['bin_edges']

    # confidence.py on the heads' logits (numpy path, as RunModel's postprocessing)
    out['out/plddt'] = np.asarray(confidence.compute_plddt(lddt['logits']), np.float64)
    pe = confidence.compute_predicted_aligned_error(pae['logits'], pae['breaks'])
    out['out/pae'] = np.asarray(pe['predicted_aligned_error'], np.float64)
    out['out/max_pae'] = np.asarray([pe['max_predicted_aligned_error']], np.float64)
    out['out/ptm'] = np.asarray([confidence.predicted_tm_score(pae['logits'], pae['breaks'])], np.float64)
    mask = np.ones(N_RES, np.float32)
    mask[[3, N_RES - 1]] = 0.0
    out['in/ptm_weights'] = mask
    out['out/ptm_masked'] = np.asarray(
        [confidence.predicted_tm_score(pae['logits'], pae['breaks'], residue_weights=mask)], np.float64)
    # 24 residues: d0 from the residue count itself (not clipped at 19)
    logits24 = (2.0 * rng.standard_normal((24, 24, h.predicted_aligned_error.num_bins))).astype(np.float32)
    out['in/pae_logits24'] = logits24
    out['out/ptm24'] = np.asarray([confidence.predicted_tm_score(logits24, pae['breaks'])], np.float64)
    return out, cfg


def random_protein(rng, aatype, residue_index, chain_index):
    n = len(aatype)
    mask = rc.STANDARD_ATOM_MASK[aatype].astype(np.float32)
    x = np.where(aatype == 20)[0]
    mask[x, :] = 0.0
    mask[x[:, None], [rc.atom_order[a] for a in ('N', 'CA', 'C', 'O')]] = 1.0   # X: a backbone
    mask[n - 1, rc.atom_order['OXT']] = 1.0
    # masks as the model never gives them: kept from 0.5 up, dropped below (to_pdb's mask < 0.5)
    mask[0, rc.atom_order['CB']] = 0.5
    mask[1, rc.atom_order['O']] = 0.4999
    pos = rng.uniform(-60.0, 130.0, (n, 37, 3)).astype(np.float32)
    pos[0, 0] = [-123.4567, 999.9995, 0.375]    # wide values, a tie of %.3f (0.375 is exact)
    pos[1, 1] = [-0.0001, 0.0004, -1e-7]        # negative zero after rounding
    plddt = rng.uniform(20.0, 99.0, n).astype(np.float32)
    plddt[2] = 50.125                            # a tie of %.2f (exact in binary)
    plddt[3] = 100.0
    return dict(aatype=aatype.astype(np.int32), residue_index=residue_index.astype(np.int32),
                chain_index=chain_index.astype(np.int32), atom_positions=pos, atom_mask=mask, plddt=plddt)


def protein_case(p, model_type):
    b = np.repeat(p['plddt'][:, None], rc.atom_type_num, axis=-1)
    prot = protein.Protein(atom_positions=p['atom_positions'], aatype=p['aatype'], atom_mask=p['atom_mask'],
                           residue_index=p['residue_index'], chain_index=p['chain_index'], b_factors=b)
    pdb = protein.to_pdb(prot)
    cif = protein.to_mmcif(prot, 'test', model_type)
    out = {f'in/{k}': v for k, v in p.items()}
    out['out/pdb'] = np.frombuffer(pdb.encode('ascii'), np.uint8).copy()
    out['out/cif'] = np.frombuffer(cif.encode('ascii'), np.uint8).copy()
    return out


# ---- DeepMind's alphafold/common/confidence.py (v2.3.2), not in alphafold-colabfold 2.3.27 ----
def _confidence_category(score):
    if 0 <= score < 50:
        return 'D'
    if 50 <= score < 70:
        return 'L'
    elif 70 <= score < 90:
        return 'M'
    elif 90 <= score <= 100:
        return 'H'
    raise ValueError(f'Invalid pLDDT score {score}')


def confidence_json(plddt):
    c = {'residueNumber': list(range(1, len(plddt) + 1)),
         'confidenceScore': [round(float(s), 2) for s in plddt],
         'confidenceCategory': [_confidence_category(s) for s in plddt]}
    return json.dumps(c, indent=None, separators=(',', ':'))


def pae_json(pae, max_pae):
    rounded_errors = np.round(pae.astype(np.float64), decimals=1)
    formatted_output = [{'predicted_aligned_error': rounded_errors.tolist(),
                         'max_predicted_aligned_error': max_pae}]
    return json.dumps(formatted_output, indent=None, separators=(',', ':'))


# ---- ColabFold's scores json (colabfold/batch.py, predict_structure) ----
def colabfold_scores(plddt, pae, ptm):
    scores = {'plddt': np.around(plddt.astype(float), 2).tolist()}
    if pae is not None:
        scores.update({'max_pae': pae.max().astype(float).item(), 'pae': np.around(pae.astype(float), 2).tolist()})
        scores['ptm'] = np.around(float(ptm), 2).item()
    return json.dumps(scores)


def json_case(rng):
    n = 9
    plddt = rng.uniform(0.0, 100.0, n).astype(np.float32)
    plddt[:6] = [50.125, 49.995, 69.99999, 90.0, 0.0, 100.0]   # ties, category edges, the extremes
    pae = rng.uniform(0.25, 31.75, (n, n)).astype(np.float32)
    pae[0, :5] = [1.25, 0.05, 2.675, 10.0, 31.75]              # ties of both roundings
    ptm = 0.155   # np.around: 0.155 * 100 rounds to 15.5, a tie, to 0.16; Python's round gives 0.15
    max_pae = 31.75
    return {
        'in/plddt': plddt, 'in/pae': pae, 'in/ptm': np.asarray([ptm], np.float64),
        'in/max_pae': np.asarray([max_pae], np.float64),
        'out/pae_json': np.frombuffer(pae_json(pae, max_pae).encode(), np.uint8).copy(),
        'out/confidence_json': np.frombuffer(confidence_json(plddt).encode(), np.uint8).copy(),
        'out/scores_json': np.frombuffer(colabfold_scores(plddt, pae, ptm).encode(), np.uint8).copy(),
        'out/scores_json_plddt_only': np.frombuffer(colabfold_scores(plddt, None, None).encode(), np.uint8).copy(),
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--out', default='tests/fixtures/fold_out')
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    rng = np.random.default_rng(SEED)
    files = {}
    files['heads.safetensors'], _ = heads_case(rng)

    aatype = np.array([rc.restype_order_with_x[c] for c in 'MGKWXAVLSEG'] + [20])   # glycine, X inside and last
    mono = random_protein(rng, aatype, np.arange(1, 13) + np.array([0] * 6 + [3] * 6), np.zeros(12))
    files['protein_mono.safetensors'] = protein_case(mono, 'Monomer')
    aatype2 = np.array([rc.restype_order[c] for c in 'GCHYPDNQR'])
    multi = random_protein(rng, aatype2, np.array([3, 4, 5, 7, 8, -1, 0, 2, 5]),
                           np.array([0, 0, 0, 0, 0, 2, 2, 2, 2]))    # chains A and C: no chain 1
    files['protein_multi.safetensors'] = protein_case(multi, 'Multimer')
    files['json.safetensors'] = json_case(rng)

    manifest = ['# tests/fixtures/fold_out', '',
                'Generated by tools/refgen/make_fold_out_fixtures.py (see tools/refgen/README.md). '
                'Do not edit by hand.', '', '| file | bytes | sha256 |', '|---|---:|---|']
    for name, tensors in files.items():
        path = os.path.join(args.out, name)
        save_file(tensors, path)
        data = open(path, 'rb').read()
        manifest.append(f'| {name} | {len(data)} | `{hashlib.sha256(data).hexdigest()}` |')
    with open(os.path.join(args.out, 'MANIFEST.md'), 'w') as f:
        f.write('\n'.join(manifest) + '\n')


if __name__ == '__main__':
    main()

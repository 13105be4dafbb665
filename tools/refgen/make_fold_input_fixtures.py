#!/usr/bin/env python3
"""make_fold_input_fixtures.py - what AlphaFold's own data code makes of FASTA and a3m text.

For models/fold/fold_input.c and fold_features.c (tests/test_fold_input.c):

  fasta_*.safetensors  a FASTA text (in/fasta) and, per record k, its description, residues and
                       pipeline.make_sequence_features' aatype and residue_index (out/K/...)
  a3m_*.safetensors    an a3m text (in/a3m), the query (in/sequence) and the MSA as
                       parsers.parse_a3m + pipeline.make_msa_features (with DeepMind's repeated-row
                       filter, see below) + data_transforms.correct_msa_restypes make it:
                       out/msa, out/deletions [S, N] int32
  feat_*.safetensors   the sequence and a3m (or none), the two MSA sizes (in/max_msa_clusters,
                       in/max_extra_msa) and fold_ref.features_of(...) with
                       fold_ref.make_config(max_msa_clusters=..., max_extra_msa=...): the unpadded rows
                       of msa_feat, extra_msa, extra_has_deletion, extra_deletion_value and target_feat,
                       aatype, residue_index (out/n_clust, out/n_extra say how many rows are real: the
                       script checks the padded ones are masked)

Repeated rows: DeepMind's pipeline.make_msa_features (AlphaFold 2.3) drops a row whose aligned
sequence was seen before; alphafold-colabfold's copy has those lines commented out. The fixtures
follow DeepMind: the rows are filtered here, exactly as those lines do, before make_msa_features.
ColabFold's '#' first line (which parse_a3m does not skip) is removed before parse_a3m.

The text of each case also goes to the fuzzers' seed corpora (tests/fuzz/corpus_fasta, corpus_a3m).

    tools/refgen/.venv/bin/python tools/refgen/make_fold_input_fixtures.py \
        --out tests/fixtures/fold_input --corpus tests/fuzz
"""
import argparse
import hashlib
import os
import string
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fold_ref  # noqa: E402  (sets JAX to the CPU)
from alphafold.common import residue_constants as rc  # noqa: E402
from alphafold.data import parsers, pipeline  # noqa: E402
from alphafold.model.tf import data_transforms  # noqa: E402
from safetensors.numpy import save_file  # noqa: E402

SEED = 20261201


def u8(text):
    return np.frombuffer(text.encode('latin-1'), dtype=np.uint8).copy()


def i32(*v):
    return np.asarray(v, dtype=np.int32)


def deepmind_msa(a3m):
    """parse_a3m after dropping '#' lines, then DeepMind's seen_sequences filter."""
    text = '\n'.join(l for l in a3m.splitlines() if not l.strip().startswith('#'))
    msa = parsers.parse_a3m(text)
    seen, keep = set(), []
    for k, s in enumerate(msa.sequences):
        if s in seen:
            continue
        seen.add(s)
        keep.append(k)
    raw = parsers.parse_fasta(text)[0]
    return parsers.Msa(sequences=[msa.sequences[k] for k in keep],
                       deletion_matrix=[msa.deletion_matrix[k] for k in keep],
                       descriptions=[msa.descriptions[k] for k in keep]), [raw[k] for k in keep]


def msa_ids(a3m):
    msa, _ = deepmind_msa(a3m)
    feat = pipeline.make_msa_features([msa])
    prot = data_transforms.correct_msa_restypes({'msa': feat['msa']})
    return np.asarray(prot['msa'], np.int32), np.asarray(feat['deletion_matrix_int'], np.int32)


def filtered_a3m(a3m):
    """The a3m text of the rows deepmind_msa keeps (lowercase insertions intact), for features_of."""
    msa, raw = deepmind_msa(a3m)
    return ''.join(f'>{d}\n{s}\n' for d, s in zip(msa.descriptions, raw))


# ---------------------------------------------------------------- the texts

QUERY = 'MKTAYIAKQRQISFVKSHFSRQ'   # 22 residues


def mutate(rng, seq, p_sub=0.25, p_gap=0.12, p_ins=0.12, letters=rc.restypes + ['X', 'B', 'Z', 'U', 'O', 'J']):
    """An a3m row aligned to seq: substitutions, gaps, lowercase insertions (some before the first
    column, some after the last)."""
    out = []
    for c in seq:
        if rng.random() < p_ins:
            out.append(''.join(rng.choice(list(string.ascii_lowercase), size=int(rng.integers(1, 5)))))
        r = rng.random()
        if r < p_gap:
            out.append('-')
        elif r < p_gap + p_sub:
            out.append(str(rng.choice(letters)))
        else:
            out.append(c)
    if rng.random() < 0.3:
        out.append('kq')
    return ''.join(out)


def make_big_a3m(rng, n_rows):
    rows = [('query', QUERY)]
    for k in range(1, n_rows):
        if k % 7 == 3:   # a repeat of an earlier row (aligned letters equal, insertions may differ)
            src = rows[int(rng.integers(0, len(rows)))][1]
            aligned = ''.join(c for c in src if not c.islower())
            rows.append((f'dup{k}', aligned))
        else:
            rows.append((f'hit{k} some description', mutate(rng, QUERY)))
    return ''.join(f'>{n}\n{s}\n' for n, s in rows)


FASTA_CASES = {
    'fasta_multi': (">first one protein\nMKTAYIAKQR\nQISFVKSHFS\n\n>second\n  acdefghikl mnpqrstvwy \nX*\n"
                    ">third\tdesc with\ttabs\r\nGGGG\r\nWWXX\r\n"),
    'fasta_single': ">1abc_A  chain A\nMVLSPADKTNVKAAWGKVGAHAGEYGAEALERMFLSFPTTKTYFPHF*\n",
    'fasta_noname': ">\nACD\n>  \nEFG\n",
}

A3M_CASES = {
    # insertions (before the first column, inside, after the last), gaps, a repeat, X
    'a3m_basic': (">query\nACDEFGHIKL\n>a\nAC-EFgGHIKL\n>b\naaACDEF--IKLyy\n>c\nACDEFGHIKL\n"
                  ">d\nXCDEFGHIKL\n>e\nACdDEFGHiiIKV\n>f\nACDEFGHIKL\n", 'ACDEFGHIKL'),
    # ColabFold: '#' first line, CRLF, blank lines, the query repeated later, rows repeated with other
    # insertions, every HHblits letter (B Z U O J X) and wrapped rows
    'a3m_colabfold': ("#10\t1\r\n>101\r\nMKTAYIAKQR\r\n\r\n>UniRef100_A0A0 hit one\r\nMKTAyyYIAKQK\r\n"
                      ">UniRef100_B1\r\nMBZUOJXAKQ\r\n>101\r\nMKTAYIAKQR\r\n>UniRef100_C2\r\nMKTA\r\nYIAKQR\r\n"
                      ">UniRef100_D3\r\nM-TAY--KQR\r\n>UniRef100_E4\r\nM-TAYkkk--KQR\r\n", 'MKTAYIAKQR'),
    'a3m_query_only': (">q\nMKTAYIAKQR\n", 'MKTAYIAKQR'),
}

# nearest_neighbor_clusters' rules, by hand: ties go to the first centre (e1, e2, e5), gaps agree with
# nothing (e3 would join c1 if they did), X agrees with X (e4 joins c2)
TIES_A3M = (">q\nACDEFGHIKL\n>c1\nACDEF-----\n>c2\nXX---GHIKL\n>e1\nACDEFWWWWW\n>e2\nWWWWWGHIKL\n"
            ">e3\nACDaaEW-----\n>e4\nXXWWWWWWWW\n>e5\n-----WWWWW\n")


# features: name -> (sequence, a3m or None, max_msa_clusters, max_extra_msa)
def feature_cases(rng):
    small = make_big_a3m(rng, 6)
    big = make_big_a3m(rng, 24)
    return {
        'feat_ties': ('ACDEFGHIKL', TIES_A3M, 3, 2),
        'feat_single': (QUERY, None, 512, 5120),
        'feat_small': (QUERY, small, 512, 5120),        # every row a cluster centre, no extra row
        'feat_big': (QUERY, big, 4, 8),                 # 4 centres, 8 extra rows kept of more, all clustered
        'feat_noextra': (QUERY, big, 5, 0),             # the extra MSA deleted (its rows still clustered)
    }


def fasta_case(text):
    descs_seqs = parsers.parse_fasta(text)
    t = {'in/fasta': u8(text), 'out/n': i32(len(descs_seqs[0]))}
    for k, (s, d) in enumerate(zip(*descs_seqs)):
        seq = ''.join(s.split()).upper().rstrip('*')   # the normalization fold_input.c documents
        f = pipeline.make_sequence_features(sequence=seq, description=d, num_res=len(seq))
        t[f'out/{k}/description'] = u8(d.strip())
        t[f'out/{k}/residues'] = u8(seq)
        t[f'out/{k}/aatype'] = np.argmax(f['aatype'], axis=-1).astype(np.int32)
        t[f'out/{k}/residue_index'] = f['residue_index'].astype(np.int32)
    return t


def a3m_case(text, query):
    msa, dels = msa_ids(text)
    return {'in/a3m': u8(text), 'in/sequence': u8(query), 'out/msa': msa, 'out/deletions': dels}


def feature_case(seq, a3m, max_clusters, max_extra):
    cfg = fold_ref.make_config(max_msa_clusters=max_clusters, max_extra_msa=max_extra)
    f = fold_ref.features_of(seq, filtered_a3m(a3m) if a3m else None, cfg)
    f = {k: v[0] for k, v in f.items()}   # the one ensemble member
    n_rows = len(deepmind_msa(a3m)[0].sequences) if a3m else 1
    n_clust = min(max_clusters, n_rows)
    n_extra = min(max_extra, n_rows - n_clust)
    assert f['msa_mask'].shape[0] == max_clusters and f['msa_mask'][:n_clust].all() and not f['msa_mask'][n_clust:].any()
    t = {'in/sequence': u8(seq), 'in/max_msa_clusters': i32(max_clusters), 'in/max_extra_msa': i32(max_extra),
         'out/n_clust': i32(n_clust), 'out/n_extra': i32(n_extra),
         'out/aatype': f['aatype'].astype(np.int32), 'out/residue_index': f['residue_index'].astype(np.int32),
         'out/target_feat': f['target_feat'].astype(np.float32),
         'out/msa_feat': np.ascontiguousarray(f['msa_feat'][:n_clust], np.float32)}
    if a3m:
        t['in/a3m'] = u8(a3m)
    if max_extra:
        m = f['extra_msa_mask']
        assert m.shape[0] == max_extra and m[:n_extra].all() and not m[n_extra:].any()
    else:
        assert 'extra_msa' not in f
    if n_extra:
        t['out/extra_msa'] = np.ascontiguousarray(f['extra_msa'][:n_extra], np.int32)
        t['out/extra_has_deletion'] = np.ascontiguousarray(f['extra_has_deletion'][:n_extra], np.float32)
        t['out/extra_deletion_value'] = np.ascontiguousarray(f['extra_deletion_value'][:n_extra], np.float32)
    return t


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--out', default='tests/fixtures/fold_input')
    ap.add_argument('--corpus', default='tests/fuzz', help='where corpus_fasta/ and corpus_a3m/ go')
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    rng = np.random.default_rng(SEED)
    files = {}
    for name, text in FASTA_CASES.items():
        files[name] = fasta_case(text)
    for name, (text, query) in A3M_CASES.items():
        files[name] = a3m_case(text, query)
    feats = feature_cases(rng)
    for name, (seq, a3m, mc, me) in feats.items():
        files[name] = feature_case(seq, a3m, mc, me)
    manifest = ['# tests/fixtures/fold_input', '',
                'Generated by tools/refgen/make_fold_input_fixtures.py (see tools/refgen/README.md). '
                'Do not edit by hand.', '', '| file | bytes | sha256 |', '|---|---:|---|']
    for name, t in files.items():
        path = os.path.join(a.out, name + '.safetensors')
        save_file(t, path)
        data = open(path, 'rb').read()
        manifest.append(f'| {name}.safetensors | {len(data)} | `{hashlib.sha256(data).hexdigest()}` |')
    with open(os.path.join(a.out, 'MANIFEST.md'), 'w') as fh:
        fh.write('\n'.join(manifest) + '\n')
    cf = os.path.join(a.corpus, 'corpus_fasta')
    ca = os.path.join(a.corpus, 'corpus_a3m')
    os.makedirs(cf, exist_ok=True)
    os.makedirs(ca, exist_ok=True)
    for name, text in FASTA_CASES.items():
        open(os.path.join(cf, name + '.fa'), 'wb').write(text.encode())
    for name, (text, _) in A3M_CASES.items():
        open(os.path.join(ca, name + '.a3m'), 'wb').write(text.encode())
    for name, (_, a3m, _, _) in feats.items():
        if a3m:
            open(os.path.join(ca, name + '.a3m'), 'wb').write(a3m.encode())
    for name in files:
        t = files[name]
        print(name, {k: v.shape for k, v in t.items() if k.startswith('out/')})


if __name__ == '__main__':
    main()

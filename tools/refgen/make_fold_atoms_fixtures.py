"""make_fold_atoms_fixtures.py - references for models/fold/fold_atoms.c and the
residue tables (fold_residues.h), from DeepMind's AlphaFold (JAX, CPU, fp32).

Writes tests/fixtures/fold_atoms/:
  tables.safetensors   the residue constants as arrays (names as zero-padded
                       ASCII bytes), straight from alphafold.common.residue_constants
                       and alphafold.model.all_atom_multimer (which builds the
                       atom14/atom37 maps of data_transforms.make_atom14_masks
                       without TensorFlow), and the residue types
                       residue_constants.sequence_to_onehot gives some letters.
  CASE.safetensors     random backbones through the structure module's last steps:
                       in/aatype [N] int32, in/rot [N,3,3], in/trans [N,3],
                       in/angles [N,7,2] (sin, cos); out/frames [N,8,12]
                       (r3.rigids_to_tensor_flat12 of all_atom.torsion_angles_to_frames),
                       out/atom14 [N,14,3], out/atom14_mask [N,14]
                       (frames_and_literature_positions_to_atom14_pos, atom14_atom_exists),
                       out/atom37 [N,37,3], out/atom37_mask [N,37] (folding.py's
                       final_atom_positions / final_atom_mask), out/pseudo_beta [N,3]
                       (modules.pseudo_beta_fn).

Backbones: random unit quaternions (QuatAffine, as folding.py builds its affines,
then r3.rigids_from_quataffine) and translations of tens of Angstrom; angles: random
(sin, cos) pairs, l2-normalized as folding.py does. Deterministic (numpy seed).
Run: tools/refgen/.venv/bin/python tools/refgen/make_fold_atoms_fixtures.py
"""
import os

import numpy as np

import jax
jax.config.update("jax_platforms", "cpu")
jax.config.update("jax_default_matmul_precision", "highest")
import jax.numpy as jnp
from safetensors.numpy import save_file

from alphafold.common import residue_constants as rc
from alphafold.model import all_atom, all_atom_multimer as aam, modules, quat_affine, r3

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..'))
OUT = os.path.join(ROOT, 'tests', 'fixtures', 'fold_atoms')


def names_bytes(names, width=4):
    a = np.zeros([len(names), width], np.uint8)
    for i, n in enumerate(names):
        b = n.encode('ascii')
        assert len(b) < width
        a[i, :len(b)] = list(b)
    return a


def tables():
    names3 = [rc.restype_1to3[r] for r in rc.restypes] + [rc.unk_restype]
    letters = 'ARNDCQEGHILKMFPSTWYVXBZUOJ'
    onehot = rc.sequence_to_onehot(letters, rc.restype_order_with_x, map_unknown_to_x=True)
    t = {
        'letters': np.frombuffer(''.join(rc.restypes_with_x).encode(), np.uint8).copy(),
        'names3': names_bytes(names3),
        'atom37_names': names_bytes(rc.atom_types),
        'atom37_elements': names_bytes([a[0] for a in rc.atom_types]),   # protein.to_pdb
        'atom14_names': np.stack([names_bytes(rc.restype_name_to_atom14_names[n]) for n in names3]),
        'atom14_to_atom37': aam.RESTYPE_ATOM14_TO_ATOM37,
        'atom37_to_atom14': aam.RESTYPE_ATOM37_TO_ATOM14,
        'atom14_mask': rc.restype_atom14_mask,
        'atom37_mask': aam.RESTYPE_ATOM37_MASK,
        'atom14_to_rigid_group': rc.restype_atom14_to_rigid_group,
        'atom14_rigid_group_positions': rc.restype_atom14_rigid_group_positions,
        'rigid_group_default_frame': rc.restype_rigid_group_default_frame,
        'chi_angles_mask': np.asarray(list(rc.chi_angles_mask) + [[0.0] * 4]),
        'chi_pi_periodic': np.asarray(rc.chi_pi_periodic),
        'chi_angles_atom_indices': np.concatenate([rc.chi_angles_atom_indices, np.zeros([1, 4, 4])]),
        # glycine's residue type; the atom37 indices of N, CA, C, CB, O
        'indices': np.asarray([rc.restype_order['G']] + [rc.atom_order[a] for a in ('N', 'CA', 'C', 'CB', 'O')]),
        'lookup_letters': np.frombuffer(letters.encode(), np.uint8).copy(),
        'lookup_restype': np.argmax(onehot, axis=-1),
    }
    out = {}
    for k, v in t.items():
        v = np.asarray(v)
        out['tables/' + k] = v if v.dtype in (np.uint8, np.float32) else v.astype(np.int32)
    return out


def case(aatype, seed):
    rng = np.random.default_rng(seed)
    n = len(aatype)
    aatype = jnp.asarray(aatype, jnp.int32)
    quat = rng.standard_normal([n, 4]).astype(np.float32)
    trans = (rng.standard_normal([n, 3]) * 15.0).astype(np.float32)
    affine = quat_affine.QuatAffine(jnp.asarray(quat), jnp.asarray(trans), unstack_inputs=True)
    rot = np.asarray(quat_affine.rot_list_to_tensor(affine.rotation), np.float32)
    raw = rng.standard_normal([n, 7, 2]).astype(np.float32)
    angles = np.asarray(raw / np.linalg.norm(raw, axis=-1, keepdims=True), np.float32)

    backb_to_global = r3.rigids_from_quataffine(affine)
    frames = all_atom.torsion_angles_to_frames(aatype, backb_to_global, jnp.asarray(angles))
    atom14 = r3.vecs_to_tensor(all_atom.frames_and_literature_positions_to_atom14_pos(aatype, frames))
    batch = {   # the features data_transforms.make_atom14_masks adds
        'residx_atom37_to_atom14': jnp.asarray(aam.RESTYPE_ATOM37_TO_ATOM14)[aatype],
        'atom37_atom_exists': jnp.asarray(aam.RESTYPE_ATOM37_MASK)[aatype],
        'atom14_atom_exists': jnp.asarray(rc.restype_atom14_mask)[aatype],
    }
    atom37 = all_atom.atom14_to_atom37(atom14, batch)            # as folding.py, line for line
    atom37 = atom37 * batch['atom37_atom_exists'][:, :, None]
    pb = modules.pseudo_beta_fn(aatype, atom37, None)
    f32 = lambda x: np.ascontiguousarray(np.asarray(x, np.float32))
    return {
        'in/aatype': np.asarray(aatype, np.int32),
        'in/rot': rot,
        'in/trans': trans,
        'in/angles': angles,
        'out/frames': f32(r3.rigids_to_tensor_flat12(frames)),
        'out/atom14': f32(atom14),
        'out/atom14_mask': f32(batch['atom14_atom_exists']),
        'out/atom37': f32(atom37),
        'out/atom37_mask': f32(batch['atom37_atom_exists']),
        'out/pseudo_beta': f32(pb),
    }


def main():
    os.makedirs(OUT, exist_ok=True)
    save_file(tables(), os.path.join(OUT, 'tables.safetensors'))
    rng = np.random.default_rng(20261124)
    cases = {
        'all21': rng.permutation(21),                       # every residue type and X once
        'rand16': np.concatenate([[7, 20], rng.integers(0, 21, 14)]),   # glycine, X, then any
    }
    for i, (name, aat) in enumerate(cases.items()):
        save_file(case(aat, 1000 + i), os.path.join(OUT, name + '.safetensors'))
    with open(os.path.join(OUT, 'MANIFEST.md'), 'w') as f:
        f.write('# tests/fixtures/fold_atoms\n\nWritten by tools/refgen/make_fold_atoms_fixtures.py '
                '(see its docstring). Cases: ' + ', '.join('%s (N=%d)' % (k, len(v)) for k, v in cases.items())
                + '; tables.safetensors: the residue constants.\n')
    print('wrote', OUT)


if __name__ == '__main__':
    main()

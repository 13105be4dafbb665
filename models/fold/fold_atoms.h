/* fold_atoms.h - from backbone frames and torsion angles to atom positions,
 * as AlphaFold2's structure module does it (DeepMind's alphafold/model/
 * all_atom.py: torsion_angles_to_frames, frames_and_literature_positions_
 * to_atom14_pos, atom14_to_atom37; modules.pseudo_beta_fn).
 *
 * Host code on float arrays (the work per residue is tiny), double precision
 * inside. A rigid transform is a rotation R and a translation t mapping a
 * point x of the local frame to R x + t in the global one; R is row-major
 * [3][3] (r3.Rots' xx xy xz / yx yy yz / zx zy zz). A frame is stored as 12
 * floats, R row-major then t: r3.rigids_to_tensor_flat12's layout.
 * Positions are in Angstrom. aatype is AlphaFold's residue type, 0..20
 * (fold_residues.h); the functions refuse any other value, and a NULL array
 * where n_res > 0, with COL_EINVAL. Optional outputs may be NULL. */
#ifndef COL_FOLD_ATOMS_H
#define COL_FOLD_ATOMS_H
#include <stdint.h>

#include "fold_residues.h"
#include "status.h"

#define FOLD_FRAME_FLOATS 12   /* R (9, row-major) then t (3) */

/* The global frame of each of the 8 rigid groups of every residue
 * (all_atom.torsion_angles_to_frames): the backbone frame (rot [n_res][3][3],
 * trans [n_res][3]) times each group's default frame times a rotation about
 * its x axis by the group's torsion; chi2..chi4 chain on the previous chi
 * group. angles [n_res][7][2] holds (sin, cos) of omega, phi, psi, chi1..chi4,
 * used as given (AlphaFold normalizes them before). frames out:
 * [n_res][8][FOLD_FRAME_FLOATS]. */
col_status fold_torsion_angles_to_frames(const int32_t *aatype, int64_t n_res, const float *rot, const float *trans,
                                         const float *angles, float *frames, col_err *err);

/* The atom14 positions (all_atom.frames_and_literature_positions_to_atom14_pos):
 * every atom's literature position put through its rigid group's frame
 * (frames as fold_torsion_angles_to_frames writes them), 0 for the slots the
 * residue type does not have. atom14 out: [n_res][14][3]; atom14_mask out
 * (optional): [n_res][14], 1 or 0 (AlphaFold's atom14_atom_exists). */
col_status fold_frames_to_atom14(const int32_t *aatype, int64_t n_res, const float *frames, float *atom14,
                                 float *atom14_mask, col_err *err);

/* atom14 [n_res][14][3] to atom37 [n_res][37][3] (all_atom.atom14_to_atom37,
 * as folding.py makes final_atom_positions): 0 for the atoms the residue type
 * does not have. atom37_mask out (optional): [n_res][37], 1 or 0 (AlphaFold's
 * atom37_atom_exists, final_atom_mask). */
col_status fold_atom14_to_atom37(const int32_t *aatype, int64_t n_res, const float *atom14, float *atom37,
                                 float *atom37_mask, col_err *err);

/* The pseudo-beta atom of each residue (modules.pseudo_beta_fn): CB, or CA for
 * glycine, from atom37 [n_res][37][3]; out [n_res][3]. The recycling embedder
 * bins the distances between these. */
col_status fold_pseudo_beta(const int32_t *aatype, int64_t n_res, const float *atom37, float *out, col_err *err);

#endif

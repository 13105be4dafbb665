/* fold_structure.h - AlphaFold2's structure module (folding.StructureModule,
 * monomer inference) as a graph: invariant point attention over the
 * single and pair representations, the transition, the quaternion backbone
 * updates of every layer (the layers share their weights), and the angle
 * ResNet on the last layer's activation.
 *
 * Frames are carried as graph values: a unit quaternion (a, b, c, d) per
 * residue, its rotation matrix R and a translation t in nanometres
 * (AlphaFold's units inside the module); x_global = R x_local + t. The
 * outputs are what the host needs to build atoms (fold_atoms.h): the last
 * layer's rotation and translation in Angstrom (position_scale 10) and its
 * normalised torsion angles.
 */
#ifndef COL_FOLD_STRUCTURE_H
#define COL_FOLD_STRUCTURE_H
#include <stdint.h>
#include "fold_config.h"
#include "fold_layers.h"

typedef struct {
    col_node *single;               /* [N, c_s]: representations['structure_module'] (the pLDDT head's input) */
    col_node *rotation;             /* [N, 3, 3] row-major R of the final backbone frames */
    col_node *translation;          /* [N, 3] Angstrom */
    col_node *angles;               /* [N, 7, 2] (sin, cos), normalised */
    col_node *unnormalized_angles;  /* [N, 7, 2] */
} fold_sm_outputs;

/* The structure module named "structure_module/..." under the builder's
 * prefix, on single [N, c_s] and pair [N, N, c_z] (the trunk's outputs).
 * Errors are the builder's (mb_builder_status). */
void fold_structure_module_build(fold_ctx *c, const fold_config *cfg, int64_t n_res, col_node *single,
                                 col_node *pair, fold_sm_outputs *out);

#endif

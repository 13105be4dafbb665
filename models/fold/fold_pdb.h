/* fold_pdb.h - a predicted structure as a PDB or mmCIF file, byte for byte
 * what DeepMind's alphafold/common/protein.py writes (to_pdb, to_mmcif of
 * alphafold-colabfold 2.3.27, AlphaFold v2.3.2's metadata), into a growing
 * text buffer the caller owns (col_strbuf, textio.h): the program writes it
 * out atomically (col_write_file_atomic). The writers append to *out; after
 * an error what they appended is undefined (discard the buffer).
 *
 * PDB (to_pdb): "MODEL     1", one ATOM record per present atom in the
 * standard columns (serial, name, residue, chain, residue number, x y z
 * %8.3f, occupancy 1.00, B-factor %6.2f, element), a TER record closing each
 * chain (the serial counts it), "ENDMDL", "END", every line padded with
 * spaces to 80 columns.
 *
 * mmCIF (to_mmcif, formatted as Biopython's MMCIFIO writes a dictionary):
 * _entry, _struct_asym, _entity_poly, _entity, _entity_poly_seq (gaps in the
 * numbering filled with UNK), _chem_comp, _atom_site and DeepMind's ModelCIF
 * metadata (licence, authors, citation, software, the global pLDDT: the mean
 * of the atoms' B-factors as written).
 *
 * Residue types are AlphaFold's order ARNDCQEGHILKMFPSTWYV, 20 = X (written
 * UNK); atoms are atom37 (residue_constants.atom_types: N, CA, C, CB, O, CG,
 * ...). The names are a small table of this file's own (fold_pdb.c). */
#ifndef COL_FOLD_PDB_H
#define COL_FOLD_PDB_H
#include <stdbool.h>
#include <stdint.h>
#include "status.h"
#include "textio.h"

typedef struct {
    int64_t n_res;                /* 1 .. 1 << 20 */
    const int32_t *aatype;        /* [n_res] 0 .. 20 */
    const int32_t *residue_index; /* [n_res] the residue numbers written, -999 .. 9999 (AlphaFold's
                                     feature residue_index + 1, as protein.from_prediction) */
    const int32_t *chain_index;   /* [n_res] chain of each residue 0 .. 61 (written A, B, ...), or NULL: all A */
    const float *atom_positions;  /* [n_res, 37, 3] in angstroms */
    const float *atom_mask;       /* [n_res, 37]: an atom is written when its mask is >= 0.5 */
    const float *plddt;           /* [n_res] every atom's B-factor (the residue's pLDDT), or NULL: 0 */
} fold_protein;

/* The PDB text of p appended to out. COL_EINVAL naming the residue for a
 * residue type, number or chain out of range, COL_EINVAL when no atom is
 * present, COL_ENOMEM when out cannot grow. */
col_status fold_pdb_write(const fold_protein *p, col_strbuf *out, col_err *err);

/* The mmCIF text of p appended to out: data_ and _entry.id are file_id in
 * upper case (1 to 64 printable characters, no space), the model group
 * "AlphaFold Monomer v2.3.2 model" or, with multimer, "AlphaFold Multimer
 * v2.3.2 model". Errors as fold_pdb_write's, and COL_EINVAL for a bad file_id. */
col_status fold_mmcif_write(const fold_protein *p, const char *file_id, bool multimer, col_strbuf *out, col_err *err);

#endif

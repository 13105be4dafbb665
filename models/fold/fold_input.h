/* fold_input.h - what AlphaFold2 folds: protein sequences from FASTA text and
 * their multiple sequence alignments from a3m text (HHblits, ColabFold).
 *
 * Both parsers read untrusted text from a memory buffer (or a file through
 * col_read_file, plain or compressed) and fail with COL_EFORMAT and one line
 * naming the record, the line and what is wrong.
 *
 * Residue ids are AlphaFold's (residue_constants.restypes):
 *   A R N D C Q E G H I L K M F P S T W Y V  ->  0 .. 19,  X (unknown) 20,  '-' (gap) 21.
 *
 * FASTA: records start with a line '>NAME DESCRIPTION'; the record's name is
 * the first word, its description the whole header after '>'. Sequence lines
 * are concatenated, whitespace ignored, lowercase read as uppercase, one '*'
 * may end a record. The letters read are the 20 standard amino acids and X;
 * any other (B, Z, J, O, U, digits, punctuation) is an error naming the
 * record, the residue's 1-based position and the letter.
 *
 * a3m: the semantics of alphafold.data.parsers.parse_a3m followed by
 * pipeline.make_msa_features and data_transforms.correct_msa_restypes:
 * uppercase letters and '-' are the aligned columns, lowercase letters are
 * insertions (dropped from the row, counted in its deletion matrix at the
 * next aligned column; insertions after the last column are not counted);
 * every row has the query's number of aligned columns; rows whose aligned
 * letters repeat an earlier row are dropped (DeepMind's make_msa_features);
 * letters map through residue_constants.HHBLITS_AA_TO_ID and
 * MAP_HHBLITS_AATYPE_TO_OUR_AATYPE (B -> D, Z -> E, U -> C, J and O -> X).
 * Lines starting with '#' are skipped (ColabFold writes one at the top). */
#ifndef COL_FOLD_INPUT_H
#define COL_FOLD_INPUT_H

#include <stddef.h>
#include <stdint.h>

#include "status.h"

#define FOLD_MAX_RESIDUES 100000   /* the longest sequence read */
#define FOLD_AA_UNKNOWN 20         /* X */
#define FOLD_AA_GAP 21             /* '-' in an MSA */

/* One protein sequence. */
typedef struct {
    char *name;             /* the first word of the header ("" when the header is empty) */
    char *description;      /* the header after '>', surrounding whitespace removed */
    char *residues;         /* n_res uppercase letters (the 20 standard ones and X), NUL-terminated */
    int64_t n_res;
    int32_t *aatype;        /* [n_res] residue ids (restype order, X = 20) */
    int32_t *residue_index; /* [n_res] 0 .. n_res - 1 */
} fold_sequence;

/* The records of a FASTA text, in file order. */
typedef struct {
    fold_sequence *seqs;
    int n;
} fold_fasta;

/* Parses len bytes of FASTA text (no NUL needed) into out (one record at
 * least). On failure out is left empty. */
col_status fold_fasta_parse(const char *text, size_t len, fold_fasta *out, col_err *err);
/* The same from a file (plain or compressed); messages start with the path. */
col_status fold_fasta_read(const char *path, fold_fasta *out, col_err *err);
void fold_fasta_free(fold_fasta *f);

/* A sequence made from residue letters (as a FASTA record's), named name. */
col_status fold_sequence_make(const char *name, const char *residues, fold_sequence *out, col_err *err);
void fold_sequence_free(fold_sequence *s);

/* The residue id of one letter (either case) of a FASTA sequence: 0..19 for
 * the standard amino acids, 20 for X, -1 for any other character. */
int fold_aatype_of(char c);

/* A multiple sequence alignment: row 0 is the query. */
typedef struct {
    int64_t n_seq, n_res;
    int32_t *msa;           /* [n_seq][n_res] residue ids (restype order, X = 20, gap = 21) */
    int32_t *deletions;     /* [n_seq][n_res] insertions before each aligned column (deletion_matrix_int) */
    int64_t n_duplicates;   /* rows dropped as repeats of an earlier row */
} fold_msa;

/* Parses len bytes of a3m text into out. When query is not NULL, the first
 * row's aligned letters must be exactly query (a sequence's residues, as
 * fold_sequence.residues); NULL takes the first row as it is. On failure out
 * is left empty. */
col_status fold_a3m_parse(const char *text, size_t len, const char *query, fold_msa *out, col_err *err);
/* The same from a file (plain or compressed); messages start with the path. */
col_status fold_a3m_read(const char *path, const char *query, fold_msa *out, col_err *err);
/* The alignment of the sequence alone (one row, no deletions): what
 * AlphaFold folds when it has no MSA. */
col_status fold_msa_single(const fold_sequence *seq, fold_msa *out, col_err *err);
void fold_msa_free(fold_msa *m);

#endif

/* fuzz_fasta.c - FASTA text must never crash, leak or hang the reader; every
 * record it accepts must be a valid sequence (remade from its residues) whose
 * single-sequence features can be made. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fold_features.h"
#include "fold_input.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fold_fasta f;
    col_err err = {0};
    if (fold_fasta_parse((const char *)data, size, &f, &err) != COL_OK) {
        if (!err.msg[0] || f.n || f.seqs) abort(); /* a failure says why and leaves nothing */
        return 0;
    }
    if (f.n < 1) abort();
    for (int k = 0; k < f.n; k++) {
        const fold_sequence *s = &f.seqs[k];
        if (s->n_res < 1 || s->n_res > FOLD_MAX_RESIDUES || (int64_t)strlen(s->residues) != s->n_res) abort();
        for (int64_t j = 0; j < s->n_res; j++)
            if (s->aatype[j] != fold_aatype_of(s->residues[j]) || s->aatype[j] < 0 || s->residue_index[j] != j) abort();
        fold_sequence again;
        if (fold_sequence_make(s->name, s->residues, &again, &err) != COL_OK) abort();
        fold_sequence_free(&again);
        if (s->n_res <= 2000) {
            fold_feature_config cfg = {.max_msa_clusters = 4, .max_extra_msa = 4};
            fold_features ft;
            if (fold_features_make(s, NULL, &cfg, &ft, &err) != COL_OK || ft.n_clust != 1 || ft.n_extra != 0) abort();
            fold_features_free(&ft);
        }
    }
    fold_fasta_free(&f);
    return 0;
}

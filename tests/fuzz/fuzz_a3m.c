/* fuzz_a3m.c - a3m text must never crash, leak or hang the reader; an MSA it
 * accepts holds ids 0..21 and deletions >= 0, and when its first row is a
 * plain sequence, the features of that sequence with it can be made (cluster
 * and extra sizes from the text's length) and the text re-read with that query. */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fold_features.h"
#include "fold_input.h"

static const char LETTERS[] = "ARNDCQEGHILKMFPSTWYVX";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* the sizes vary with the input's length (so the seeds are plain a3m files) */
    fold_feature_config cfg = {.max_msa_clusters = 1 + (int64_t)(size % 7), .max_extra_msa = (int64_t)(size / 7 % 9)};
    const char *text = (const char *)data;
    size_t len = size;
    fold_msa m;
    col_err err = {0};
    if (fold_a3m_parse(text, len, NULL, &m, &err) != COL_OK) {
        if (!err.msg[0] || m.msa || m.n_seq) abort();
        return 0;
    }
    if (m.n_seq < 1 || m.n_res < 1 || m.n_res > FOLD_MAX_RESIDUES || m.n_duplicates < 0) abort();
    bool plain = true;
    for (int64_t i = 0; i < m.n_seq * m.n_res; i++) {
        if (m.msa[i] < 0 || m.msa[i] > FOLD_AA_GAP || m.deletions[i] < 0) abort();
        if (i < m.n_res && m.msa[i] > FOLD_AA_UNKNOWN) plain = false;
    }
    if (plain && m.n_seq * m.n_res <= 200000) {
        char *q = malloc((size_t)m.n_res + 1);
        if (!q) abort();
        for (int64_t j = 0; j < m.n_res; j++) q[j] = LETTERS[m.msa[j]];
        q[m.n_res] = 0;
        fold_sequence s;
        fold_features ft;
        if (fold_sequence_make("q", q, &s, &err) != COL_OK) abort();
        if (fold_features_make(&s, &m, &cfg, &ft, &err) != COL_OK) abort();
        int64_t sc = m.n_seq < cfg.max_msa_clusters ? m.n_seq : cfg.max_msa_clusters;
        if (ft.n_clust != sc || ft.n_extra > cfg.max_extra_msa || ft.n_clust + ft.n_extra > m.n_seq) abort();
        for (int64_t i = 0; i < ft.n_clust * ft.n_res * FOLD_MSA_FEAT; i++)
            if (!(ft.msa_feat[i] >= 0.0f && ft.msa_feat[i] <= 1.0f)) abort();
        fold_features_free(&ft);
        /* the first row's letters as the query: accepted unless the row spells a residue
         * with another letter (B, Z, U, J, O) */
        fold_msa again;
        if (fold_a3m_parse(text, len, q, &again, &err) == COL_OK) {
            if (again.n_seq != m.n_seq || memcmp(again.msa, m.msa, sizeof(int32_t) * (size_t)(m.n_seq * m.n_res))) abort();
            fold_msa_free(&again);
        }
        fold_sequence_free(&s);
        free(q);
    }
    fold_msa_free(&m);
    return 0;
}

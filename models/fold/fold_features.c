/* fold_features.c - AlphaFold2's input features (alphafold/model/tf/data_transforms.py,
 * input_pipeline.ensembled_map_fns) for one ensemble member, unshuffled and unpadded.
 *
 * Float arithmetic follows the pipeline's float32 NumPy: deletion values are
 * atan(d / 3) * (2 / pi) in float32, cluster profiles are counts divided by
 * float32(1e-6 + 1 + n) (fast_summarize_clusters). */
#include "fold_features.h"

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define TWO_OVER_PI 0.63661977236758134308  /* 2. / np.pi */

void fold_feature_config_default(fold_feature_config *c)
{
    c->max_msa_clusters = 512;
    c->max_extra_msa = 5120;
}

void fold_features_free(fold_features *f)
{
    if (!f) return;
    free(f->aatype);
    free(f->residue_index);
    free(f->target_feat);
    free(f->msa_feat);
    free(f->extra_msa);
    free(f->extra_has_deletion);
    free(f->extra_deletion_value);
    memset(f, 0, sizeof *f);
}

/* make_msa_feat's deletion transform: tf.atan(d / 3.) * (2. / np.pi), float32. */
static float deletion_value(float d) { return atanf(d / 3.0f) * (float)TWO_OVER_PI; }

/* The bytes of a * b * c elements of size el (at least 1, for malloc), or SIZE_MAX
 * (which no allocation gets) on overflow. */
static size_t bytes_of(int64_t a, int64_t b, int64_t c, size_t el)
{
    if (a < 0 || b < 0 || c < 0) return SIZE_MAX;
    size_t n = el;
    int64_t d[3] = {a, b, c};
    for (int i = 0; i < 3; i++) {
        if (d[i] && n > SIZE_MAX / 2 / (size_t)d[i]) return SIZE_MAX;
        n *= (size_t)d[i];
    }
    return n ? n : 1;
}

/* n elements of size el for malloc: at least one byte */
static size_t alloc_size(int64_t n, size_t el) { return n > 0 ? (size_t)n * el : 1; }

static col_status check_inputs(const fold_sequence *seq, const fold_msa *m, const fold_feature_config *cfg, col_err *err)
{
    if (!seq || !seq->aatype || !seq->residue_index || seq->n_res < 1 || seq->n_res > FOLD_MAX_RESIDUES)
        return col_err_set(err, COL_EINVAL, "fold features: not a parsed sequence");
    if (!cfg || cfg->max_msa_clusters < 1 || cfg->max_extra_msa < 0)
        return col_err_set(err, COL_EINVAL, "fold features: the MSA cluster count must be at least 1 and the extra "
                           "MSA row count at least 0 (got %lld and %lld)",
                           cfg ? (long long)cfg->max_msa_clusters : 0, cfg ? (long long)cfg->max_extra_msa : 0);
    for (int64_t j = 0; j < seq->n_res; j++)
        if (seq->aatype[j] < 0 || seq->aatype[j] > FOLD_AA_UNKNOWN)
            return col_err_set(err, COL_EINVAL, "fold features: residue %lld has id %d, not 0..20", (long long)j + 1,
                               (int)seq->aatype[j]);
    if (!m) return COL_OK;
    if (!m->msa || !m->deletions || m->n_seq < 1)
        return col_err_set(err, COL_EINVAL, "fold features: the alignment has no rows");
    if (m->n_res != seq->n_res)
        return col_err_set(err, COL_EINVAL, "the alignment has %lld columns, the sequence %lld residues",
                           (long long)m->n_res, (long long)seq->n_res);
    if (bytes_of(m->n_seq, m->n_res, FOLD_MSA_FEAT, sizeof(float)) == SIZE_MAX)
        return col_err_set(err, COL_ENOMEM, "fold features: an alignment of %lld rows is too large", (long long)m->n_seq);
    for (int64_t j = 0; j < seq->n_res; j++)
        if (m->msa[j] != seq->aatype[j])
            return col_err_set(err, COL_EINVAL, "the alignment's first row is not the sequence (residue %lld differs)",
                               (long long)j + 1);
    size_t cells = (size_t)m->n_seq * (size_t)m->n_res;
    for (size_t i = 0; i < cells; i++)
        if (m->msa[i] < 0 || m->msa[i] > FOLD_AA_GAP || m->deletions[i] < 0)
            return col_err_set(err, COL_EINVAL, "fold features: alignment row %lld, column %lld holds id %d and %d "
                               "deletions (ids are 0..21, deletions at least 0)",
                               (long long)(i / (size_t)m->n_res) + 1, (long long)(i % (size_t)m->n_res) + 1,
                               (int)m->msa[i], (int)m->deletions[i]);
    return COL_OK;
}

/* nearest_neighbor_clusters (fast_nearest_neighbor_clusters, gap_agreement_weight 0):
 * each extra row goes to the cluster centre it agrees with at the most columns,
 * counting only agreements on residues (ids 0..20: gaps and the mask token
 * weigh nothing), the first such centre on a tie (argmax). xr holds the extra
 * rows with ids above 20 replaced by a byte no centre holds. */
static void assign_clusters(const uint8_t *centres, int64_t n_clust, const uint8_t *xr, int64_t n_rest, int64_t n_res,
                            int32_t *assign)
{
#pragma omp parallel for schedule(dynamic, 16) if (n_rest * n_clust * n_res > (1 << 20))
    for (int64_t e = 0; e < n_rest; e++) {
        const uint8_t *x = xr + e * n_res;
        int64_t best = -1;
        int32_t at = 0;
        for (int64_t c = 0; c < n_clust; c++) {
            const uint8_t *y = centres + c * n_res;
            int64_t agree = 0;
            for (int64_t j = 0; j < n_res; j++) agree += x[j] == y[j];
            if (agree > best) best = agree, at = (int32_t)c;
        }
        assign[e] = at;
    }
}

col_status fold_features_make(const fold_sequence *seq, const fold_msa *msa, const fold_feature_config *cfg,
                              fold_features *out, col_err *err)
{
    if (!out) return col_err_set(err, COL_EINVAL, "fold_features_make: no output");
    memset(out, 0, sizeof *out);
    col_status st = check_inputs(seq, msa, cfg, err);
    if (st != COL_OK) return st;
    fold_msa single = {0};
    if (!msa) {
        if ((st = fold_msa_single(seq, &single, err)) != COL_OK) return st;
        msa = &single;
    }
    const int64_t N = seq->n_res, S = msa->n_seq;
    /* sample_msa: the first max_msa_clusters rows (row 0, then the identity shuffle);
     * the rest become extra_*, of which crop_extra_msa keeps max_extra_msa */
    const int64_t Sc = S < cfg->max_msa_clusters ? S : cfg->max_msa_clusters;
    const int64_t Sx = S - Sc;
    const int64_t Se = Sx < cfg->max_extra_msa ? Sx : cfg->max_extra_msa;
    fold_features f = {.n_res = N, .n_clust = Sc, .n_extra = Se};
    /* check_inputs bounded S * N * 49 * 4 bytes, so these products fit */
    f.aatype = malloc(alloc_size(N, sizeof(int32_t)));
    f.residue_index = malloc(alloc_size(N, sizeof(int32_t)));
    f.target_feat = calloc(1, alloc_size(N * FOLD_TARGET_FEAT, sizeof(float)));
    f.msa_feat = calloc(1, alloc_size(Sc * N * FOLD_MSA_FEAT, sizeof(float)));
    f.extra_msa = malloc(alloc_size(Se * N, sizeof(int32_t)));
    f.extra_has_deletion = malloc(alloc_size(Se * N, sizeof(float)));
    f.extra_deletion_value = malloc(alloc_size(Se * N, sizeof(float)));
    uint8_t *centres = malloc(alloc_size(Sc * N, 1));
    uint8_t *xr = malloc(alloc_size(Sx * N, 1));
    int32_t *assign = malloc(alloc_size(Sx, sizeof(int32_t)));
    int64_t *count = calloc(1, alloc_size(Sc, sizeof(int64_t)));
    int64_t *del_sum = calloc(1, alloc_size(Sc * N, sizeof(int64_t)));
    if (!f.aatype || !f.residue_index || !f.target_feat || !f.msa_feat || !f.extra_msa || !f.extra_has_deletion ||
        !f.extra_deletion_value || !centres || !xr || !assign || !count || !del_sum) {
        st = col_err_set(err, COL_ENOMEM, "out of memory for the features of %lld residues and %lld MSA rows",
                         (long long)N, (long long)S);
        goto done;
    }

    /* make_msa_feat's target_feat: has_break (between_segment_residues, all 0), one_hot(aatype, 21) */
    for (int64_t j = 0; j < N; j++) {
        f.aatype[j] = seq->aatype[j];
        f.residue_index[j] = seq->residue_index[j];
        f.target_feat[j * FOLD_TARGET_FEAT + 1 + seq->aatype[j]] = 1.0f;
    }

    /* nearest_neighbor_clusters over every row past the centres */
    for (int64_t i = 0; i < Sc * N; i++) centres[i] = (uint8_t)msa->msa[i];
    for (int64_t i = 0; i < Sx * N; i++) {
        int32_t id = msa->msa[Sc * N + i];
        xr[i] = id <= FOLD_AA_UNKNOWN ? (uint8_t)id : 0xff;
    }
    assign_clusters(centres, Sc, xr, Sx, N, assign);

    /* summarize_clusters (fast_summarize_clusters): msa_sum = segment_sum of the
     * extra rows' one-hots (kept in the profile channels of msa_feat), counts,
     * del_sum; every mask is one */
    for (int64_t e = 0; e < Sx; e++) {
        int64_t c = assign[e];
        const int32_t *row = msa->msa + (Sc + e) * N, *dl = msa->deletions + (Sc + e) * N;
        float *feat = f.msa_feat + c * N * FOLD_MSA_FEAT;
        count[c]++;
        for (int64_t j = 0; j < N; j++) {
            feat[j * FOLD_MSA_FEAT + 25 + row[j]] += 1.0f;
            del_sum[c * N + j] += dl[j];
        }
    }

    /* make_msa_feat: msa_1hot (23), has_deletion, deletion_value, cluster_profile (23),
     * deletion_mean_value; msa_sum += one_hot(msa, 23), mask_counts = 1e-6 + msa_mask + counts */
    for (int64_t c = 0; c < Sc; c++) {
        const float mask_count = (1e-6f + 1.0f) + (float)count[c];
        for (int64_t j = 0; j < N; j++) {
            float *v = f.msa_feat + (c * N + j) * FOLD_MSA_FEAT;
            int32_t id = msa->msa[c * N + j];
            float d = (float)msa->deletions[c * N + j];
            v[id] = 1.0f;
            v[23] = d > 0 ? 1.0f : 0.0f;
            v[24] = deletion_value(d);
            v[25 + id] += 1.0f;
            for (int k = 0; k < 23; k++) v[25 + k] = v[25 + k] / mask_count;
            float mean = ((float)del_sum[c * N + j] + d) / mask_count;
            v[48] = deletion_value(mean);
        }
    }

    /* the extra MSA: crop_extra_msa keeps the first max_extra_msa rows (identity shuffle);
     * make_msa_feat's extra_has_deletion and extra_deletion_value */
    for (int64_t i = 0; i < Se * N; i++) {
        float d = (float)msa->deletions[Sc * N + i];
        f.extra_msa[i] = msa->msa[Sc * N + i];
        f.extra_has_deletion[i] = d > 0 ? 1.0f : 0.0f;
        f.extra_deletion_value[i] = deletion_value(d);
    }
    *out = f;
    memset(&f, 0, sizeof f);
done:
    fold_features_free(&f);
    free(centres);
    free(xr);
    free(assign);
    free(count);
    free(del_sum);
    fold_msa_free(&single);
    return st;
}

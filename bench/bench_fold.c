/* bench_fold - AlphaFold2 inference on colossal's CPU backend: seconds and memory by length.
 *
 *   bench/bench_fold PARAMS.npz LENGTH [recycles] [chunk: 0 = none, N rows, -1 = each of none/64/16]
 *   bench/bench_fold PARAMS.npz LENGTH plan CHUNK    (the activation arena the plan needs; nothing runs)
 *
 * PARAMS is a DeepMind-layout parameter file (bench/bench_fold_jax.py writes a full-size one with
 * random weights; speed does not depend on their values). The input is a single sequence of
 * LENGTH residues drawn from the counter-based RNG (single-sequence mode: one MSA row, no extra
 * MSA), run with `recycles` extra passes (AlphaFold's default 3). Prints one JSON line per chunk
 * setting: the seconds of all passes (the plan built once before), the plan's activation arena,
 * and the process's peak resident memory over that run (VmHWM, reset before it). */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend_cpu.h"
#include "bench_util.h"
#include "fold_features.h"
#include "fold_input.h"
#include "fold_model.h"
#include "procmem.h"
#include "procsetup.h"
#include "rng.h"

static void die(const char *what, const col_err *e)
{
    fprintf(stderr, "bench_fold: %s: %s\n", what, e->msg);
    exit(1);
}

static void run(fold_model *m, const fold_inputs *in, int recycles, int64_t chunk)
{
    col_err err = {0};
    col_procmem_reset_peak();
    fold_run_config rc = {.recycles = recycles, .chunk = chunk};
    fold_result r;
    double t = bench_now();
    if (fold_model_predict(m, in, &rc, &r, &err) != COL_OK) die("predict", &err);
    double secs = bench_now() - t;
    col_procmem pm = {0};
    col_procmem_read(&pm);
    printf("{\"impl\": \"colossal\", \"length\": %lld, \"recycles\": %d, \"chunk\": %lld, \"seconds\": %.3f, "
           "\"plan_seconds\": %.3f, \"arena_mib\": %.1f, \"peak_rss_mib\": %.1f, \"mean_plddt\": %.3f}\n",
           (long long)in->n_res, recycles, (long long)chunk, secs - r.seconds_build, r.seconds_build,
           r.arena_bytes / 1048576.0, pm.peak / 1048576.0, r.mean_plddt);
    fflush(stdout);
    fold_result_free(&r);
}

int main(int argc, char **argv)
{
    col_proc_setup(argv);
    if (argc < 3) {
        fprintf(stderr, "usage: bench_fold PARAMS.npz LENGTH [recycles] [chunk]\n");
        return 2;
    }
    int64_t n = atoll(argv[2]);
    bool plan_only = argc > 3 && strcmp(argv[3], "plan") == 0;
    int recycles = argc > 3 ? atoi(argv[3]) : 3;
    int64_t chunk = argc > 4 ? atoll(argv[4]) : -1;
    if (plan_only) recycles = 0;
    if (n < 1 || n > 100000 || recycles < 0) {
        fprintf(stderr, "bench_fold: bad length or recycles\n");
        return 2;
    }
    col_err err = {0};
    col_backend be;
    if (col_cpu_backend_init(&be, &err) != COL_OK) die("cpu backend", &err);
    fold_model *m = NULL;
    mb_store_config sc = {0};
    if (fold_model_open(argv[1], &be, &sc, &m, &err) != COL_OK) die(argv[1], &err);
    static const char aa[] = "ARNDCQEGHILKMFPSTWYV";
    char *res = malloc((size_t)n + 1);
    for (int64_t i = 0; i < n; i++) res[i] = aa[(int)(col_rand_uniform(7, (uint64_t)i) * 20.0f) % 20];
    res[n] = '\0';
    fold_sequence seq;
    fold_msa msa;
    fold_features f;
    fold_feature_config fc;
    fold_feature_config_default(&fc);
    if (fold_sequence_make("bench", res, &seq, &err) != COL_OK || fold_msa_single(&seq, &msa, &err) != COL_OK ||
        fold_features_make(&seq, &msa, &fc, &f, &err) != COL_OK)
        die("features", &err);
    if (plan_only) {
        size_t bytes = 0;
        double t = bench_now();
        if (fold_model_arena_bytes(m, f.n_res, f.n_clust, f.n_extra, chunk < 0 ? 0 : chunk, &bytes, &err) != COL_OK)
            die("plan", &err);
        printf("{\"impl\": \"colossal\", \"length\": %lld, \"chunk\": %lld, \"arena_mib\": %.1f, \"plan_seconds\": %.2f}\n",
               (long long)n, (long long)(chunk < 0 ? 0 : chunk), bytes / 1048576.0, bench_now() - t);
        return 0;
    }
    fold_inputs in = {.n_res = f.n_res, .n_seq = f.n_clust, .n_extra = f.n_extra, .aatype = f.aatype,
                      .residue_index = f.residue_index, .target_feat = f.target_feat, .msa_feat = f.msa_feat,
                      .extra_msa = f.extra_msa, .extra_has_deletion = f.extra_has_deletion,
                      .extra_deletion_value = f.extra_deletion_value};
    if (chunk >= 0) {
        run(m, &in, recycles, chunk);
    } else {
        run(m, &in, recycles, 0);
        if (n > 64) run(m, &in, recycles, 64);
        if (n > 16) run(m, &in, recycles, 16);
    }
    fold_features_free(&f);
    fold_msa_free(&msa);
    fold_sequence_free(&seq);
    free(res);
    fold_model_free(m);
    col_cpu_backend_free(&be);
    return 0;
}

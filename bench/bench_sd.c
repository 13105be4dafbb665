/* bench_sd - Stable Diffusion 1.5's UNet step and VAE decode on colossal's CPU backend.
 *
 *   bench/bench_sd [unet|vae|all] [runs] [size] [compute-budget-MiB]
 *
 * The shapes are SD 1.5's (bench/sd15/unet_config.json, vae_config.json) with
 * random weights (speed does not depend on their values): one denoising step
 * at size x size pixels (latents size/8), batch 2 (classifier-free
 * guidance), 77 text tokens of width 768; then the VAE decoder on one latent.
 * Prints one JSON line: median seconds, the weights' bytes, the activation
 * arena, the process's peak resident memory. With a compute budget the UNet
 * runs through a memtier compute tier of that size (the --gpu-mem path; on
 * the CPU the tier is host memory, so this measures the budget that suffices).
 * bench/bench_sd_torch.py gives diffusers' figures for the same shapes. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend_cpu.h"
#include "bench_util.h"
#include "mb_store.h"
#include "dm_unet.h"
#include "dm_vae.h"
#include "procmem.h"
#include "procsetup.h"
#include "rng.h"

#ifndef BENCH_DIR
#define BENCH_DIR "bench"
#endif

/* weights N(0, 0.02) by name hash, biases and norm weights alike: a UNet that computes finite numbers */
static col_status rand_read(const mb_source *s, const char *name, int ndim, const int64_t *shape, float *dst,
                            col_err *err)
{
    (void)s, (void)err;
    uint64_t h = 1469598103934665603ULL;
    for (const char *c = name; *c; c++) h = (h ^ (uint8_t)*c) * 1099511628211ULL;
    int64_t n = 1;
    for (int d = 0; d < ndim; d++) n *= shape[d];
    bool norm = strstr(name, "norm") != NULL && strstr(name, ".weight") != NULL;
    for (int64_t i = 0; i < n; i++) dst[i] = (norm ? 1.0f : 0.0f) + 0.02f * col_rand_normal(h, (uint64_t)i);
    return COL_OK;
}
static int rand_has(const mb_source *s, const char *name) { (void)s, (void)name; return 1; }

static void die(const char *what, const col_err *e)
{
    fprintf(stderr, "bench_sd: %s: %s\n", what, e->msg);
    exit(1);
}

static void fill(float *x, size_t n, uint64_t seed)
{
    for (size_t i = 0; i < n; i++) x[i] = col_rand_normal(seed, i);
}

int main(int argc, char **argv)
{
    col_proc_setup(argv);
    const char *what = argc > 1 ? argv[1] : "all";
    int runs = argc > 2 ? atoi(argv[2]) : 3, size = argc > 3 ? atoi(argv[3]) : 512;
    size_t budget = argc > 4 ? (size_t)atol(argv[4]) << 20 : 0;
    if (runs < 1 || size < 64 || size % 8) {
        fprintf(stderr, "usage: bench_sd [unet|vae|all] [runs >= 1] [size, a multiple of 8] [compute budget MiB]\n");
        return 2;
    }
    col_backend be;
    col_err err = {0};
    if (col_cpu_backend_init(&be, &err) != COL_OK) die("cpu backend", &err);
    dm_unet_config uc;
    dm_vae_config vc;
    if (dm_unet_load_config(BENCH_DIR "/sd15/unet_config.json", &uc, &err) != COL_OK) die("unet config", &err);
    if (dm_vae_load_config(BENCH_DIR "/sd15/vae_config.json", &vc, &err) != COL_OK) die("vae config", &err);
    mb_source src = {.read = rand_read, .has = rand_has};
    mb_store_config mc = {.compute_budget = budget};
    mb_store *store = NULL;
    if (mb_store_create(&mc, &be, &store, &err) != COL_OK) die("store", &err);
    int lat = size / 8, B = 2;
    double unet_s = 0, vae_s = 0;
    size_t unet_arena = 0, vae_arena = 0, unet_bytes = 0;
    if (strcmp(what, "unet") == 0 || strcmp(what, "all") == 0) {
        col_graph *g = col_graph_new();
        mb_builder b;
        mb_builder_init(&b, g, false, COL_F32);
        dm_unet_io io;
        mb_exec *x = NULL;
        if (dm_unet_build(&b, &uc, B, lat, lat, 77, &io, &err) != COL_OK) die("unet graph", &err);
        if (mb_store_bind(store, &b, &src, &err) != COL_OK) die("unet weights", &err);
        unet_bytes = mb_store_bytes(store);
        if (mb_exec_create(store, g, &io.out, 1, &x, &err) != COL_OK) die("unet plan", &err);
        unet_arena = mb_exec_arena_bytes(x);
        size_t ns = (size_t)B * 4 * lat * lat, nc = (size_t)B * 77 * 768;
        float *sample = malloc(ns * 4), *ctx = malloc(nc * 4), *tp = malloc((size_t)B * 320 * 4);
        fill(sample, ns, 1);
        fill(ctx, nc, 2);
        float t[2] = {500, 500};
        dm_unet_time_proj(&uc, t, B, tp);
        double *ts = malloc(sizeof(double) * (size_t)runs);
        for (int r = -1; r < runs; r++) { /* one warm-up run */
            double t0 = bench_now();
            if (mb_exec_upload(x, io.sample, sample, ns * 4, &err) != COL_OK ||
                mb_exec_upload(x, io.t_proj, tp, (size_t)B * 320 * 4, &err) != COL_OK ||
                mb_exec_upload(x, io.context, ctx, nc * 4, &err) != COL_OK || mb_exec_run(x, &err) != COL_OK)
                die("unet run", &err);
            if (r >= 0) ts[r] = bench_now() - t0;
        }
        unet_s = bench_median(ts, runs);
        free(ts);
        free(sample);
        free(ctx);
        free(tp);
        mb_exec_free(x);
        mb_builder_free(&b);
        col_graph_free(g);
    }
    if (strcmp(what, "vae") == 0 || strcmp(what, "all") == 0) {
        col_graph *g = col_graph_new();
        mb_builder b;
        mb_builder_init(&b, g, false, COL_F32);
        col_node *z = col_input(g, "latents", COL_F32, 4, (int64_t[]){1, 4, lat, lat}), *out = NULL;
        mb_exec *x = NULL;
        if (dm_vae_build_decoder(&b, &vc, z, &out) != COL_OK) die("vae graph", &b.err);
        if (mb_store_bind(store, &b, &src, &err) != COL_OK) die("vae weights", &err);
        if (mb_exec_create(store, g, &out, 1, &x, &err) != COL_OK) die("vae plan", &err);
        vae_arena = mb_exec_arena_bytes(x);
        size_t nz = (size_t)4 * lat * lat;
        float *zz = malloc(nz * 4);
        fill(zz, nz, 3);
        double *ts = malloc(sizeof(double) * (size_t)runs);
        for (int r = -1; r < runs; r++) {
            double t0 = bench_now();
            if (mb_exec_upload(x, z, zz, nz * 4, &err) != COL_OK || mb_exec_run(x, &err) != COL_OK) die("vae run", &err);
            if (r >= 0) ts[r] = bench_now() - t0;
        }
        vae_s = bench_median(ts, runs);
        free(ts);
        free(zz);
        mb_exec_free(x);
        mb_builder_free(&b);
        col_graph_free(g);
    }
    col_procmem pm = {0};
    col_procmem_read(&pm);
    printf("{\"impl\": \"colossal\", \"threads\": %d, \"size\": %d, \"batch\": %d, \"runs\": %d, \"unet_step_s\": %.3f, "
           "\"vae_decode_s\": %.3f, \"unet_weights_mb\": %.1f, \"weights_mb\": %.1f, \"unet_arena_mb\": %.1f, "
           "\"vae_arena_mb\": %.1f, \"compute_budget_mb\": %zu, \"peak_rss_mb\": %.1f}\n",
           col_cpu_backend_threads(&be), size, B, runs, unet_s, vae_s, unet_bytes / 1e6, mb_store_bytes(store) / 1e6,
           unet_arena / 1e6, vae_arena / 1e6, budget >> 20, pm.peak / 1e6);
    mb_store_free(store);
    return 0;
}

/* bench_lm - whole-model speed on the CPU: a training step of GPT-2 124M
 * (B=4, T=64, f32, forward + backward + AdamW) against the sgemm rate, and
 * generation (prompt and per-token decode with the KV cache) for GPT-2 124M
 * and a ~1B LLaMA-shaped model (or a model directory, in a quantized format)
 * against the memory bandwidth, both ceilings measured in the same run. Weights are random (--init random): speed does
 * not depend on their values.
 *
 *   bench_lm [train|generate|tier|nvme|precision|all] [reps]
 *   bench_lm generate [reps] [MODEL [FORMAT]]
 *
 * generate (bench_decode.c): MODEL a preset or a Hugging Face model directory ($COL_BENCH_MODEL; default:
 * gpt2, then llama-1b-shaped), FORMAT f32 or a quantized format (int8, q4, q8_0, q4_0, q4_K, q6_K;
 * $COL_BENCH_QUANT; default f32, or what a colossal-quantize directory holds).
 *
 * precision: the training step in fp32, bf16 (16-bit operands converted to f32
 * tiles for sgemm, and through OpenBLAS's sbgemm when the library has one) and
 * fp16 mixed precision (lm_trainer.h, compute_dtype), with its split into
 * forward + backward and optimizer, and the bytes of weights, gradients and
 * states.
 *
 * nvme: the same training step with the optimizer states, then everything, on
 * the NVMe tier ($COL_BENCH_NVME_DIR, default /var/tmp): step and optimizer
 * time and the NVMe bytes per step.
 *
 * tier: the same training step with parameters and gradients moved through a
 * budgeted compute tier (memtier mt_resident, 16 MiB chunks) at the smallest
 * budget the step allows and at twice that, with the transfers on the calling
 * thread (sync) and on the tier's transfer thread (async), against the step
 * with everything in place, and the time each step waited for transfers;
 * without CUDA every transfer is a memcpy.
 *
 * The training step also prints the fastest step and the CPU time per step
 * (user + system, all threads; median): CPU time that grows on a loaded
 * machine is time spent waiting actively (bench/bench_load.sh).
 *
 * Training FLOPs per step: 6 * N * tokens + 6 * L * C * T * tokens (llm.c's
 * count, N = parameters without position embeddings... here all parameters).
 * Decode is bandwidth-bound: every new token reads all weights once, so its
 * ceiling is weight bytes / bandwidth (bench_decode.c). */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "blas.h"
#include "hf_config.h"
#include "lm_trainer.h"
#include "mt_resident.h"
#include "rng.h"
#include "bench_util.h"
#include "bench_decode.h"
#include "backend_cpu.h"
#include "procsetup.h"

static double sgemm_rate(const col_blas *blas, int M, int K, int N)
{
    float *a = calloc((size_t)M * K, 4), *b = calloc((size_t)K * N, 4), *c = calloc((size_t)M * N, 4);
    col_fill_uniform(a, (int64_t)M * K, 1, -1, 1);
    col_fill_uniform(b, (int64_t)K * N, 2, -1, 1);
    double t[5];
    for (int r = 0; r < 6; r++) {
        double t0 = bench_now();
        blas->sgemm(COL_BLAS_ROW_MAJOR, COL_BLAS_NO_TRANS, COL_BLAS_NO_TRANS, M, N, K, 1, a, K, b, N, 0, c, N);
        if (r)
            t[r - 1] = bench_now() - t0;
    }
    free(a), free(b), free(c);
    return 2.0 * M * K * N / bench_median(t, 5) / 1e9;
}

static col_lm_trainer *session_tiered(const char *preset, int B, int T, size_t budget, col_backend *be)
{
    col_lm_config m;
    col_err err = {0};
    if (col_lm_preset(preset, &m, &err) != COL_OK) {
        fprintf(stderr, "bench_lm: %s\n", err.msg);
        exit(1);
    }
    col_lm_train_config c = {.model = m, .batch = B, .seq = T, .opt = col_opt_defaults(COL_OPT_ADAMW), .seed = 1};
    c.lr.lr_max = 1e-4f;
    if (budget) {
        c.compute_budget = budget;
        c.chunk_bytes = (size_t)16 << 20;
    }
    col_lm_trainer *t = NULL;
    if (col_lm_trainer_create(&c, be, &t, &err) != COL_OK) {
        fprintf(stderr, "bench_lm: %s: %s\n", preset, err.msg);
        exit(1);
    }
    return t;
}

static col_lm_trainer *session(const char *preset, int B, int T, col_backend *be)
{
    return session_tiered(preset, B, T, 0, be);
}

/* GPT-2 token ids and targets drawn from a fixed seed */
static void random_batch(int32_t *ids, int32_t *tg, int n)
{
    col_rng r;
    col_rng_init(&r, 3);
    for (int i = 0; i < n; i++)
        ids[i] = (int32_t)col_rng_below(&r, 50257), tg[i] = (int32_t)col_rng_below(&r, 50257);
}

/* CPU time (user + system, all threads) this process has used, in seconds */
static double cpu_seconds(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) + 1e-6 * (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
}

/* what step_times measures: medians of the wall and CPU time per step, the fastest step */
typedef struct {
    double wall, cpu, fastest;
} step_fig;

/* reps steps after one warm-up */
static step_fig step_times(col_lm_trainer *t, const int32_t *ids, const int32_t *tg, int reps)
{
    double times[32], cpu[32];
    col_err err = {0};
    col_lm_step_info info;
    for (int k = 0; k <= reps; k++) {
        double t0 = bench_now(), c0 = cpu_seconds();
        if (col_lm_trainer_step(t, ids, tg, &info, &err) != COL_OK) {
            fprintf(stderr, "bench_lm: %s\n", err.msg);
            exit(1);
        }
        if (k)
            times[k - 1] = bench_now() - t0, cpu[k - 1] = cpu_seconds() - c0;
    }
    step_fig f = {.wall = bench_median(times, reps), .cpu = bench_median(cpu, reps)};
    f.fastest = times[0]; /* sorted */
    return f;
}

/* median step time of reps steps after one warm-up */
static double step_time(col_lm_trainer *t, const int32_t *ids, const int32_t *tg, int reps)
{
    return step_times(t, ids, tg, reps).wall;
}

/* reps steps after one warm-up (the traced step) through a compute tier: medians of the step time, of the time
 * the step waited for transfers and of the transfer time (all links); bytes moved and slid together per step */
typedef struct {
    double step, wait, busy, moved, compacted, horizon;
} tier_fig;

static tier_fig tier_steps(col_lm_trainer *t, const int32_t *ids, const int32_t *tg, int reps)
{
    double times[32], waits[32], busy[32];
    col_err err = {0};
    col_lm_step_info info;
    mt_resident *r = col_lm_trainer_compute_tier(t);
    mt_resident_stats rs, r0;
    tier_fig f = {0};
    for (int k = 0; k <= reps; k++) {
        if (k == 1)
            mt_resident_get_stats(r, &r0);
        double t0 = bench_now();
        if (col_lm_trainer_step(t, ids, tg, &info, &err) != COL_OK) {
            fprintf(stderr, "bench_lm: %s\n", err.msg);
            exit(1);
        }
        double s = bench_now() - t0;
        mt_resident_get_stats(r, &rs);
        if (k) { /* one run of the tier per step (no gradient accumulation) */
            times[k - 1] = s;
            waits[k - 1] = rs.wait_s;
            busy[k - 1] = 0;
            for (int l = 0; l < MT_NLINKS; l++)
                busy[k - 1] += rs.busy_s[l];
        }
    }
    f.step = bench_median(times, reps);
    f.wait = bench_median(waits, reps);
    f.busy = bench_median(busy, reps);
    f.moved = (double)(rs.bytes[MT_LINK_H2C] - r0.bytes[MT_LINK_H2C] + rs.bytes[MT_LINK_C2H] - r0.bytes[MT_LINK_C2H]) / reps;
    f.compacted = (double)(rs.compacted - r0.compacted) / reps;
    mt_plan_summary sum;
    mt_resident_get_plan_summary(r, &sum);
    f.horizon = sum.prefetch_s;
    return f;
}

static void bench_tier(col_backend *be, int reps)
{
    enum { B = 4, T = 64 };
    int32_t ids[B * T], tg[B * T];
    random_batch(ids, tg, B * T);
    /* the smallest budget, from a tier that holds everything */
    col_lm_trainer *t = session_tiered("gpt2", B, T, (size_t)1 << 40, be);
    mt_resident_stats rs;
    mt_resident_get_stats(col_lm_trainer_compute_tier(t), &rs);
    size_t least = rs.min_budget;
    col_lm_trainer_free(t);
    double copy = bench_copy_rate((size_t)64 << 20);
    t = session("gpt2", B, T, be);
    double base = step_time(t, ids, tg, reps);
    col_lm_trainer_free(t);
    printf("tier gpt2 124M, B=%d T=%d: everything in place %.0f ms/step; copy rate %.1f GB/s\n", B, T, 1000 * base, copy);
    for (int f = 1; f <= 2; f++)
        for (int async = 0; async <= 1; async++) {
            t = session_tiered("gpt2", B, T, least * (size_t)f, be);
            mt_resident_set_async(col_lm_trainer_compute_tier(t), async);
            tier_fig g = tier_steps(t, ids, tg, reps);
            printf("tier gpt2 124M, compute tier %.0f MB (%dx the smallest), %-5s: %.0f ms/step, %.2fx the in-place "
                   "step; waited %.0f ms/step for transfers (links busy %.0f ms); %.2f GB moved per step (%.0f ms at the copy "
                   "rate), %.2f GB slid together; prefetch horizon %.1f ms\n",
                   (double)least * f / 1e6, f, async ? "async" : "sync", 1000 * g.step, g.step / base, 1000 * g.wait,
                   1000 * g.busy, g.moved / 1e9, 1000 * g.moved / (copy * 1e9), g.compacted / 1e9, 1000 * g.horizon);
            col_lm_trainer_free(t);
        }
}

/* the optimizer states, then parameters, gradients and states, on the NVMe tier (a scratch file in
 * $COL_BENCH_NVME_DIR, default /var/tmp): the step, its optimizer part and the NVMe traffic per step */
static void bench_nvme(col_backend *be, int reps)
{
    enum { B = 4, T = 64 };
    const char *dir = getenv("COL_BENCH_NVME_DIR") ? getenv("COL_BENCH_NVME_DIR") : "/var/tmp";
    int32_t ids[B * T], tg[B * T];
    random_batch(ids, tg, B * T);
    col_lm_trainer *t = session_tiered("gpt2", B, T, (size_t)1 << 40, be);
    mt_resident_stats rs;
    mt_resident_get_stats(col_lm_trainer_compute_tier(t), &rs);
    col_lm_trainer_free(t);
    struct {
        const char *what;
        unsigned kinds;
        size_t budget;
    } cases[] = {
        {"everything on the host", 0, 0},
        {"optimizer states on NVMe", COL_LM_STATES, 0},
        {"everything on NVMe, through a compute tier of ~2x the smallest", COL_LM_PARAMS | COL_LM_GRADS | COL_LM_STATES, 0},
    };
    double base = 0;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        col_lm_config m;
        col_err err = {0};
        col_lm_preset("gpt2", &m, &err);
        col_lm_train_config c = {.model = m, .batch = B, .seq = T, .opt = col_opt_defaults(COL_OPT_ADAMW), .seed = 1};
        c.lr.lr_max = 1e-4f;
        c.chunk_bytes = (size_t)16 << 20;
        c.nvme_dir = cases[i].kinds ? dir : NULL;
        c.nvme_kinds = cases[i].kinds;
        if (cases[i].kinds & COL_LM_PARAMS) {
            /* NVMe chunks take 4 KiB-rounded room: ask for twice the host-home smallest, plus slack */
            c.compute_budget = 2 * rs.min_budget + ((size_t)64 << 20);
        }
        t = NULL;
        if (col_lm_trainer_create(&c, be, &t, &err) != COL_OK) {
            fprintf(stderr, "bench_lm: %s\n", err.msg);
            exit(1);
        }
        const mt_pool *pool = col_lm_trainer_pool(t);
        double times[32], optim[32];
        uint64_t w0 = 0, r0 = 0;
        for (int k = 0; k <= reps; k++) {
            col_lm_step_info info;
            if (k == 1)
                w0 = mt_nvme_bytes_written(pool), r0 = mt_nvme_bytes_read(pool);
            double t0 = bench_now();
            if (col_lm_trainer_step(t, ids, tg, &info, &err) != COL_OK) {
                fprintf(stderr, "bench_lm: %s\n", err.msg);
                exit(1);
            }
            if (k)
                times[k - 1] = bench_now() - t0, optim[k - 1] = info.optim_s;
        }
        double step = bench_median(times, reps), opt = bench_median(optim, reps);
        double wr = (double)(mt_nvme_bytes_written(pool) - w0) / reps, rd = (double)(mt_nvme_bytes_read(pool) - r0) / reps;
        if (i == 0)
            base = step;
        printf("nvme gpt2 124M, B=%d T=%d, %s: %.0f ms/step (%.2fx), optimizer %.0f ms; NVMe per step: %.2f GB "
               "written, %.2f GB read (%.2f GB/s over the step)\n", B, T, cases[i].what, 1000 * step, step / base,
               1000 * opt, wr / 1e9, rd / 1e9, (wr + rd) / step / 1e9);
        col_lm_trainer_free(t);
    }
    printf("nvme: scratch files in %s; compare with bench/bench_nvme.sh %s (fio on the same directory)\n", dir, dir);
}

static void bench_train(col_backend *be, const col_blas *blas, int reps)
{
    enum { B = 4, T = 64 };
    col_lm_trainer *t = session("gpt2", B, T, be);
    const col_lm_config *m = &col_lm_trainer_config(t)->model;
    int32_t ids[B * T], tg[B * T];
    random_batch(ids, tg, B * T);
    double ceil1 = sgemm_rate(blas, B * T, 768, 3072);
    step_fig f = step_times(t, ids, tg, reps);
    double step = f.wall;
    double ceil2 = sgemm_rate(blas, B * T, 768, 3072), ceiling = ceil1 > ceil2 ? ceil1 : ceil2;
    double N = (double)col_lm_trainer_param_count(t), tokens = B * T;
    double flops = 6 * N * tokens + 6.0 * m->n_layer * m->hidden * T * tokens;
    printf("train gpt2 124M (%.1fM params), B=%d T=%d, AdamW: %.0f ms/step (fastest %.0f; %.2f CPU s/step), %.0f tok/s, "
           "%.1f GFLOP/s, %.2f of sgemm (%.1f GFLOP/s on %dx768x3072, best of 2 samples %.1f/%.1f)\n",
           N / 1e6, B, T, 1000 * step, 1000 * f.fastest, f.cpu, tokens / step, flops / step / 1e9,
           flops / step / 1e9 / ceiling, ceiling, B * T, ceil1, ceil2);
    col_lm_trainer_free(t);
}

/* median seconds of one matmul node x [M,K] @ w [K,N] in dtype dt (the operands converted from the same
 * random values), reps runs after one */
static double matmul_time(col_backend *be, col_dtype dt, int M, int K, int N, int reps)
{
    col_graph *g = col_graph_new();
    int64_t sx[2] = {M, K}, sw[2] = {K, N};
    col_node *x = col_input(g, "x", dt, 2, sx), *w = col_input(g, "w", dt, 2, sw);
    size_t es = col_dtype_size(dt);
    float *f = malloc(sizeof(float) * (size_t)K * (size_t)(M > N ? M : N));
    void *xd = malloc(es * (size_t)M * K), *wd = malloc(es * (size_t)K * N);
    col_fill_uniform(f, (int64_t)M * K, 1, -1, 1);
    col_convert(xd, dt, f, COL_F32, (int64_t)M * K);
    col_fill_uniform(f, (int64_t)K * N, 2, -1, 1);
    col_convert(wd, dt, f, COL_F32, (int64_t)K * N);
    col_bind(x, xd, NULL);
    col_bind(w, wd, NULL);
    col_node *y = col_matmul(g, x, w);
    col_mark_output(y);
    col_plan *p = NULL;
    col_err err = {0};
    double t[32];
    if (col_plan_create(g, &p, &err) != COL_OK) {
        fprintf(stderr, "bench_lm: %s\n", err.msg);
        exit(1);
    }
    for (int k = 0; k <= reps; k++) {
        double t0 = bench_now();
        if (col_plan_run(p, be, &err) != COL_OK) {
            fprintf(stderr, "bench_lm: %s\n", err.msg);
            exit(1);
        }
        if (k)
            t[k - 1] = bench_now() - t0;
    }
    col_plan_free(p);
    col_graph_free(g);
    free(f), free(xd), free(wd);
    return bench_median(t, reps);
}

/* the training step of bench_train in each compute precision: step, forward + backward and optimizer medians,
 * the ratio to f32; bf16 once more through OpenBLAS's sbgemm when the library has one. The sessions take their
 * steps in turn (one step of each per round), so a machine whose load changes slows them alike. */
static void bench_precision(col_backend *be, int reps)
{
    enum { B = 4, T = 64, NC = 4 };
    int32_t ids[B * T], tg[B * T];
    random_batch(ids, tg, B * T);
    struct {
        col_dtype dt;
        col_cpu_bf16_gemm gemm;
        const char *what;
        col_lm_trainer *t;
        double times[32], comp[32], opt[32];
    } cs[NC] = {{COL_F32, COL_CPU_BF16_AUTO, "fp32"},
                {COL_BF16, COL_CPU_BF16_TILES, "bf16, f32 tiles"},
                {COL_BF16, COL_CPU_BF16_SBGEMM, "bf16, sbgemm"},
                {COL_F16, COL_CPU_BF16_AUTO, "fp16, f32 tiles"}};
    printf("# precision: bf16 GEMM by default: %s; AVX512_BF16 %s; steps taken in turn\n", col_cpu_backend_bf16_gemm(be),
           col_cpu_has_avx512_bf16() ? "yes" : "no");
    /* the MLP's first GEMM of this step alone, in each dtype, in turn */
    double mm[3][32];
    const col_dtype mdt[3] = {COL_F32, COL_BF16, COL_F16};
    for (int k = 0; k < reps; k++)
        for (int d = 0; d < 3; d++)
            mm[d][k] = matmul_time(be, mdt[d], B * T, 768, 3072, 3);
    double m32 = bench_median(mm[0], reps);
    for (int d = 0; d < 3; d++) {
        double v = bench_median(mm[d], reps);
        printf("precision matmul %dx768 @ 768x3072, %s (%s): %.2f ms, %.1f GFLOP/s, %.2fx f32\n", B * T,
               col_dtype_name(mdt[d]), d == 0 ? "sgemm" : d == 1 ? col_cpu_backend_bf16_gemm(be) : "f32 tiles", 1000 * v, 2.0 * B * T * 768 * 3072 / v / 1e9, v / m32);
    }
    for (int i = 0; i < NC; i++) {
        const char *how = col_cpu_backend_set_bf16_gemm(be, cs[i].gemm);
        if (cs[i].gemm == COL_CPU_BF16_SBGEMM && strcmp(how, "sbgemm") != 0) {
            printf("precision gpt2 124M, %s: skipped, the loaded OpenBLAS has no cblas_sbgemm\n", cs[i].what);
            continue;
        }
        col_lm_config m;
        col_err err = {0};
        col_lm_preset("gpt2", &m, &err);
        col_lm_train_config c = {.model = m, .batch = B, .seq = T, .opt = col_opt_defaults(COL_OPT_ADAMW), .seed = 1,
                                 .compute_dtype = cs[i].dt};
        c.lr.lr_max = 1e-4f;
        if (col_lm_trainer_create(&c, be, &cs[i].t, &err) != COL_OK) {
            fprintf(stderr, "bench_lm: %s\n", err.msg);
            exit(1);
        }
    }
    for (int k = 0; k <= reps; k++) /* round 0 warms up */
        for (int i = 0; i < NC; i++) {
            if (!cs[i].t)
                continue;
            col_cpu_backend_set_bf16_gemm(be, cs[i].gemm);
            col_lm_step_info info;
            col_err err = {0};
            double t0 = bench_now();
            if (col_lm_trainer_step(cs[i].t, ids, tg, &info, &err) != COL_OK) {
                fprintf(stderr, "bench_lm: %s\n", err.msg);
                exit(1);
            }
            if (k)
                cs[i].times[k - 1] = bench_now() - t0, cs[i].comp[k - 1] = info.compute_s, cs[i].opt[k - 1] = info.optim_s;
        }
    double base = bench_median(cs[0].times, reps);
    for (int i = 0; i < NC; i++) {
        if (!cs[i].t)
            continue;
        double step = bench_median(cs[i].times, reps), fb = bench_median(cs[i].comp, reps), o = bench_median(cs[i].opt, reps);
        mt_pool_stats ps;
        mt_stats(col_lm_trainer_pool(cs[i].t), &ps);
        printf("precision gpt2 124M, B=%d T=%d, AdamW, %-16s: %.0f ms/step (%.2fx fp32; fastest %.0f), forward+backward "
               "%.0f ms, optimizer %.0f ms; weights+grads %.0f MB, states %.0f MB\n", B, T, cs[i].what, 1000 * step,
               step / base, 1000 * cs[i].times[0], 1000 * fb, 1000 * o,
               (double)(ps.tensor_bytes[MT_PARAM] + ps.tensor_bytes[MT_GRAD]) / 1e6,
               (double)ps.tensor_bytes[MT_OPTSTATE] / 1e6);
        col_lm_trainer_free(cs[i].t);
    }
    col_cpu_backend_set_bf16_gemm(be, COL_CPU_BF16_AUTO);
}

int main(int argc, char **argv)
{
    const char *what = argc > 1 ? argv[1] : "all";
    if (!strcmp(what, "generate")) /* decoding: the settings colossal-chat and colossal-serve run with */
        col_proc_setup_decode(argv);
    else
        col_proc_setup(argv);
    int reps = argc > 2 ? atoi(argv[2]) : 5;
    bool gen = !strcmp(what, "generate");
    const char *model = gen && argc > 3 ? argv[3] : getenv("COL_BENCH_MODEL");
    const char *format = gen && argc > 4 ? argv[4] : getenv("COL_BENCH_QUANT");
    if (reps < 1 || reps > 31 || argc > (gen ? 5 : 3) ||
        (strcmp(what, "train") && !gen && strcmp(what, "tier") && strcmp(what, "nvme") &&
         strcmp(what, "precision") && strcmp(what, "all"))) {
        fprintf(stderr, "usage: bench_lm [train|generate|tier|nvme|precision|all] [reps 1..31]\n"
                        "       bench_lm generate [reps] [MODEL [FORMAT]]\n");
        return 2;
    }
    int rc = 0;
    col_err err = {0};
    col_backend be;
    col_blas blas;
    if (col_cpu_backend_init(&be, &err) != COL_OK || col_blas_load(&blas, &err) != COL_OK) {
        fprintf(stderr, "bench_lm: %s\n", err.msg);
        return 1;
    }
    char proc[256];
    col_proc_describe(proc, sizeof proc);
    printf("# bench_lm: %d threads, OpenBLAS %s (%s, %s build), median of %d\n# process: %s\n", col_cpu_backend_threads(&be),
           blas.core, blas.path, blas.parallel == COL_BLAS_OPENMP ? "OpenMP" : blas.parallel == COL_BLAS_PTHREAD ? "pthread" : "other",
           reps, proc);
    if (!strcmp(what, "train") || !strcmp(what, "all"))
        bench_train(&be, &blas, reps);
    if (!strcmp(what, "precision") || !strcmp(what, "all"))
        bench_precision(&be, reps);
    if (!strcmp(what, "nvme") || !strcmp(what, "all"))
        bench_nvme(&be, reps);
    if (!strcmp(what, "tier") || !strcmp(what, "all"))
        bench_tier(&be, reps);
    if ((gen || !strcmp(what, "all")) && model && *model)
        rc = bench_generate(&be, model, format && *format ? format : NULL, reps);
    else if (gen || !strcmp(what, "all"))
        {
        const char *f = format && *format ? format : NULL;
        rc = bench_generate(&be, "gpt2", f, reps) || bench_generate(&be, "llama-1b-shaped", f, reps);
    }
    col_cpu_backend_free(&be);
    return rc;
}

/* bench_cuda - the CUDA backend's speed on one GPU (issue 6).
 *
 *   bench_cuda [gemm|gpt2|attention|kernels|all] [reps] [preset]   (default all, 5 reps, gpt2)
 *
 * gemm: the ceiling, a MATMUL node of 4096 x 4096 x 4096 (cuBLASLt through
 *   the backend's kernel) in full f32 and in TF32, 2 n^3 flops per product.
 * gpt2: a GPT-2 124M training step on the device (preset "gpt2": 50257
 *   tokens, 12 layers, C = 768, T = 1024; B = 8, or 4 / 2 / 1 when the
 *   activations do not fit): zero the gradients, forward + backward through a
 *   plan made with col_plan_create_on, one fused AdamW step
 *   (col_cuda_opt_step), in f32 and in TF32 matmuls (bf16 compute is not in
 *   yet); another preset of hf_config.h (e.g. gpt2-medium) can be named
 *   instead, trained at its full context. Tokens/s, and MFU as llm.c computes it: flops per token
 *   6 N + 6 L C T (N = all parameters, position embeddings included; L
 *   layers, C width, T sequence), against the datasheet dense peak of the
 *   dtype the matmuls use (f32: the non-tensor FP32 peak; TF32: the TF32
 *   tensor peak; the device name picks the datasheet, printed), and as a
 *   fraction of the GEMM rate measured in the same run with the same dtype.
 * attention: the flash-attention kernels alone (ATTENTION and ATTENTION_BWD,
 *   f32, causal, D = 64, H = 16, B = 64k / T so every size has 64k query
 *   rows per head group) at T = 1k, 2k, 4k, 8k. Flops, causal: forward
 *   half of 4 B H T^2 D (the two T x T x D products, the upper triangle
 *   skipped), backward 2.5 x forward (five products instead of two);
 *   against the f32 GEMM rate (the kernels run on the CUDA cores, not the
 *   tensor cores) and the TF32 one.
 *
 * kernels: single kernels at GPT-2 124M sizes (V = 50257, C = 768, B T =
 *   8 x 1024 tokens): embedding backward (the sort by token and the
 *   per-token row sums) with uniform random ids and with one id everywhere
 *   (one run of 8192 rows, the worst case), checked bitwise the same on two
 *   runs; the cross-entropy forward (its loss reduced in two passes); a full
 *   sum of 64 Mi floats (two passes, GB/s read); and the host time of one
 *   MATMUL call: the first of its shape (cuBLASLt descriptors and heuristic
 *   built) against the later ones (found in the backend's cache), for a
 *   decode-sized [1,768] @ [768,2304] and a training-sized [8000,768] @
 *   [768,768].
 *
 * Times are CUDA events on the backend's stream, each figure the median of
 * reps timed runs after a warm-up. Without a device it says so and exits 0. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend_cuda.h"
#include "bench_util.h"
#include "hf_config.h"
#include "lm.h"
#include "plan.h"
#include "rng.h"

static col_backend gpu;
static col_cuda_event *ev[3];
static int reps = 5;

#ifndef GEMM_N
#define GEMM_N 4096
#endif
#define GEMM_ITERS 10
#ifndef ATT_ROWS /* B * T of every attention size */
#define ATT_ROWS 65536
#endif
#ifndef ATT_TMAX
#define ATT_TMAX 8192
#endif
static const char *preset = "gpt2";

static void die(const char *what, const col_err *err)
{
    fprintf(stderr, "bench_cuda: %s: %s\n", what, err->msg);
    exit(1);
}

/* ---- datasheet dense peaks, TFLOP/s ---- */

typedef struct {
    const char *match, *match2; /* substrings of the device name (match2 may be NULL) */
    const char *label;
    double f32, tf32, bf16;
} peak_t;

static const peak_t peaks[] = {
    {"H200", "NVL", "H200 NVL", 60.0, 417.5, 835.5},
    {"H200", NULL, "H200 SXM", 66.9, 494.7, 989.4},
    {"H100", "PCIe", "H100 PCIe", 51.2, 378.0, 756.5},
    {"H100", "NVL", "H100 NVL", 60.0, 417.5, 835.5},
    {"H100", NULL, "H100 SXM", 66.9, 494.7, 989.4},
    {"A100", NULL, "A100", 19.5, 156.0, 312.0},
};

static const peak_t *peak_of(const char *name)
{
    for (size_t i = 0; i < sizeof peaks / sizeof peaks[0]; i++)
        if (strstr(name, peaks[i].match) && (!peaks[i].match2 || strstr(name, peaks[i].match2)))
            return &peaks[i];
    return NULL;
}

/* ---- timing ---- */

static void record(int i)
{
    col_err err = {0};
    if (col_cuda_event_record(&gpu, ev[i], &err) != COL_OK)
        die("event", &err);
}

static double ms_between(int a, int b)
{
    col_err err = {0};
    float ms = 0;
    if (col_cuda_event_ms(ev[a], ev[b], &ms, &err) != COL_OK)
        die("event time", &err);
    return ms;
}

/* median ms of one call of kernel k on node n, over reps runs of iters calls */
static double kernel_ms(const col_node *n, int iters)
{
    col_exec ex = {.scratch = NULL, .scratch_bytes = 0, .be = &gpu};
    col_err err = {0};
    col_kernel_fn k = gpu.kernel[n->op];
    double t[64];
    for (int r = 0; r <= reps; r++) {
        record(0);
        for (int i = 0; i < iters; i++)
            if (k(n, &ex, &err) != COL_OK)
                die(col_op_name(n->op), &err);
        record(1);
        double ms = ms_between(0, 1) / iters;
        if (r)
            t[r - 1] = ms;
    }
    return bench_median(t, reps);
}

static col_node *find_op(const col_plan *p, col_op op)
{
    for (int i = 0; i < col_plan_length(p); i++)
        if (col_plan_node(p, i)->op == op)
            return col_plan_node(p, i);
    return NULL;
}

/* device buffer of n floats, uniform in [-1, 1) */
static float *device_random(int64_t n, uint64_t seed)
{
    col_err err = {0};
    float *h = malloc(sizeof(float) * (size_t)n), *d = NULL;
    if (!h) {
        fprintf(stderr, "bench_cuda: out of host memory\n");
        exit(1);
    }
    col_fill_uniform(h, n, seed, -1.0f, 1.0f);
    if (col_cuda_alloc(&gpu, sizeof(float) * (size_t)n, (void **)&d, &err) != COL_OK ||
        col_cuda_to_device(&gpu, d, h, sizeof(float) * (size_t)n, &err) != COL_OK)
        die("device buffer", &err);
    free(h);
    return d;
}

/* ---- the GEMM ceiling ---- */

static double gemm_tflops(bool tf32)
{
    col_err err = {0};
    int64_t s[2] = {GEMM_N, GEMM_N};
    col_graph *g = col_graph_new();
    col_node *a = col_input(g, "a", COL_F32, 2, s), *b = col_input(g, "b", COL_F32, 2, s);
    col_node *y = col_matmul(g, a, b);
    col_mark_output(y);
    float *da = device_random((int64_t)GEMM_N * GEMM_N, 1), *db = device_random((int64_t)GEMM_N * GEMM_N, 2);
    col_plan *p = NULL;
    col_cuda_backend_set_tf32(&gpu, tf32);
    if (col_graph_status(g) != COL_OK || col_bind(a, da, &err) != COL_OK || col_bind(b, db, &err) != COL_OK ||
        col_plan_create_on(g, &gpu, &p, &err) != COL_OK || col_plan_run(p, &gpu, &err) != COL_OK)
        die("gemm", &err);
    double ms = kernel_ms(find_op(p, COL_OP_MATMUL), GEMM_ITERS);
    col_cuda_backend_set_tf32(&gpu, false);
    col_plan_free(p);
    col_graph_free(g);
    col_cuda_free(&gpu, da);
    col_cuda_free(&gpu, db);
    return 2.0 * GEMM_N * (double)GEMM_N * GEMM_N / (ms * 1e-3) / 1e12;
}

/* ---- GPT-2 124M training step ---- */

typedef struct {
    int B, T;
    int64_t nparams;
    size_t arena;
    double step_ms, fb_ms, opt_ms, flops;
} gpt_res;

/* COL_ENOMEM (nothing kept) when the batch does not fit */
static col_status gpt2_step(bool tf32, int B, gpt_res *out, col_err *err)
{
    col_lm_config cfg;
    col_status st = col_lm_preset(preset, &cfg, err);
    if (st != COL_OK)
        return st;
    const int T = cfg.max_positions;
    int np = col_lm_param_count(&cfg);
    col_param_spec *specs = calloc((size_t)np, sizeof *specs);
    col_node **params = calloc((size_t)np, sizeof *params);
    int64_t *off = calloc((size_t)np + 1, sizeof *off);
    col_opt_tensor *ts = calloc((size_t)np, sizeof *ts);
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)B * T), *tg = malloc(sizeof(int32_t) * (size_t)B * T);
    float *W = NULL, *G = NULL, *M = NULL, *V = NULL, *host = NULL;
    col_graph *g = col_graph_new();
    col_plan *p = NULL;
    col_lm_graph gg = {.params = params};
    col_lm_build_opts o = {.batch = B, .seq = T, .with_loss = true, .training = true, .dropout_seed = 1};
    col_opt_config oc = col_opt_defaults(COL_OPT_ADAMW);
    double tstep[64], tfb[64], topt[64];
    if (!specs || !params || !off || !ts || !ids || !tg || !g) {
        st = col_err_set(err, COL_ENOMEM, "out of host memory");
        goto done;
    }
    col_lm_param_specs(&cfg, specs);
    int64_t nparams = 0;
    for (int i = 0; i < np; i++) {
        int64_t n = col_param_numel(&specs[i]);
        nparams += n;
        off[i + 1] = off[i] + ((n + 63) & ~(int64_t)63); /* 256-byte aligned tensors */
    }
    size_t bytes = sizeof(float) * (size_t)off[np];
    st = col_cuda_alloc(&gpu, bytes, (void **)&W, err);
    if (st == COL_OK)
        st = col_cuda_alloc(&gpu, bytes, (void **)&G, err);
    if (st == COL_OK)
        st = col_cuda_alloc(&gpu, bytes, (void **)&M, err);
    if (st == COL_OK)
        st = col_cuda_alloc(&gpu, bytes, (void **)&V, err);
    if (st == COL_OK)
        st = col_cuda_memset(&gpu, M, 0, bytes, err);
    if (st == COL_OK)
        st = col_cuda_memset(&gpu, V, 0, bytes, err);
    host = st == COL_OK ? malloc(bytes) : NULL;
    if (st == COL_OK && !host)
        st = col_err_set(err, COL_ENOMEM, "out of host memory");
    for (int i = 0; i < np && st == COL_OK; i++)
        col_lm_init_param(&cfg, &specs[i], i, host + off[i], 1);
    if (st == COL_OK)
        st = col_cuda_to_device(&gpu, W, host, bytes, err);
    /* the graph as lm_trainer.c builds it */
    if (st == COL_OK)
        st = col_lm_build(g, &cfg, &o, &gg, err);
    if (st == COL_OK)
        st = col_graph_backward(g, gg.loss, err);
    for (int i = 0; i < np && st == COL_OK; i++) {
        st = col_bind(params[i], W + off[i], err);
        if (st == COL_OK)
            st = col_bind_grad(params[i], G + off[i], err);
        ts[i] = (col_opt_tensor){W + off[i], G + off[i], M + off[i], V + off[i], col_param_numel(&specs[i]),
                                 specs[i].decay};
    }
    if (st == COL_OK)
        st = col_plan_create_on(g, &gpu, &p, err);
    if (st == COL_OK) {
        col_rng r;
        col_rng_init(&r, 3);
        for (int i = 0; i < B * T; i++)
            ids[i] = (int32_t)col_rng_below(&r, (uint64_t)cfg.vocab_size),
            tg[i] = (int32_t)col_rng_below(&r, (uint64_t)cfg.vocab_size);
        st = col_plan_upload(p, gg.ids, ids, sizeof(int32_t) * (size_t)B * T, err);
        if (st == COL_OK)
            st = col_plan_upload(p, gg.targets, tg, sizeof(int32_t) * (size_t)B * T, err);
    }
    col_cuda_backend_set_tf32(&gpu, tf32);
    for (int k = 0; k <= reps && st == COL_OK; k++) {
        record(0);
        st = col_cuda_memset(&gpu, G, 0, bytes, err);
        if (st == COL_OK)
            st = col_plan_run(p, &gpu, err);
        record(1);
        if (st == COL_OK)
            st = col_cuda_opt_step(&gpu, &oc, 1e-4f, k + 1, ts, np, err);
        record(2);
        if (st == COL_OK && k) {
            tfb[k - 1] = ms_between(0, 1);
            topt[k - 1] = ms_between(1, 2);
            tstep[k - 1] = ms_between(0, 2);
        }
    }
    col_cuda_backend_set_tf32(&gpu, false);
    if (st == COL_OK) {
        out->B = B, out->T = T, out->nparams = nparams, out->arena = col_plan_arena_bytes(p);
        out->step_ms = bench_median(tstep, reps);
        out->fb_ms = bench_median(tfb, reps);
        out->opt_ms = bench_median(topt, reps);
        out->flops = (6.0 * (double)nparams + 6.0 * cfg.n_layer * cfg.hidden * (double)T) * B * T;
    }
done:
    col_plan_free(p);
    col_graph_free(g);
    col_cuda_free(&gpu, W), col_cuda_free(&gpu, G), col_cuda_free(&gpu, M), col_cuda_free(&gpu, V);
    free(host), free(specs), free(params), free(off), free(ts), free(ids), free(tg);
    return st;
}

static void bench_gpt2(const peak_t *pk, double gemm_f32, double gemm_tf32)
{
    printf("\n%s training step (zero grads + forward + backward + fused AdamW), CUDA events, median of %d:\n", preset,
           reps);
    for (int tf32 = 0; tf32 < 2; tf32++) {
        gpt_res r = {0};
        col_err err = {0};
        col_status st = COL_ENOMEM;
        for (int B = 8; B >= 1 && st == COL_ENOMEM; B /= 2) {
            err = (col_err){0};
            st = gpt2_step(tf32, B, &r, &err);
            if (st == COL_ENOMEM)
                printf("  B=%d does not fit: %s\n", B, err.msg);
        }
        if (st != COL_OK)
            die("gpt2 step", &err);
        double s = r.step_ms * 1e-3, tflops = r.flops / s / 1e12;
        double peak = pk ? (tf32 ? pk->tf32 : pk->f32) : 0, gemm = tf32 ? gemm_tf32 : gemm_f32;
        printf("  %-4s B=%d T=%d, N=%lld parameters, arena %.2f GiB: step %.1f ms (forward+backward %.1f, AdamW %.2f), "
               "%.0f tokens/s, %.1f TFLOP/s (6N + 6LCT = %.3g flop/token)\n",
               tf32 ? "TF32" : "f32", r.B, r.T, (long long)r.nparams, (double)r.arena / (1u << 30), r.step_ms, r.fb_ms,
               r.opt_ms, r.B * r.T / s, tflops, r.flops / (r.B * r.T));
        if (pk)
            printf("       MFU %.1f%% of the %s %s dense peak %.1f TFLOP/s; %.1f%% of the measured %s GEMM rate %.1f\n",
                   100 * tflops / peak, pk->label, tf32 ? "TF32" : "FP32", peak, 100 * tflops / gemm,
                   tf32 ? "TF32" : "f32", gemm);
        else
            printf("       (no datasheet peak known for this device) %.1f%% of the measured %s GEMM rate %.1f\n",
                   100 * tflops / gemm, tf32 ? "TF32" : "f32", gemm);
    }
}

/* ---- flash attention ---- */

static void bench_attention(double gemm_f32, double gemm_tf32)
{
    const int D = 64, H = 16;
    printf("\nflash attention f32, causal, D=%d, H=%d, B = %d/T (kernels alone, median of %d):\n", D, H, ATT_ROWS, reps);
    printf("  flops: forward 0.5 * 4 B H T^2 D, backward 2.5x forward\n");
    for (int T = 1024; T <= ATT_TMAX; T *= 2) {
        int B = ATT_ROWS / T;
        col_err err = {0};
        int64_t s[4] = {B, H, T, D};
        int64_t n = (int64_t)B * H * T * D;
        col_graph *g = col_graph_new();
        col_node *q = col_input(g, "q", COL_F32, 4, s), *k = col_input(g, "k", COL_F32, 4, s),
                 *v = col_input(g, "v", COL_F32, 4, s), *r = col_input(g, "r", COL_F32, 4, s);
        if (q && k && v)
            q->flags |= COL_NODE_NEEDS_GRAD, k->flags |= COL_NODE_NEEDS_GRAD, v->flags |= COL_NODE_NEEDS_GRAD;
        col_node *y = col_attention(g, q, k, v, 1, 1.0f / sqrtf((float)D));
        col_node *loss = col_sum(g, col_mul(g, y, r), 15u, 0);
        float *dq = device_random(n, 11), *dk = device_random(n, 12), *dv = device_random(n, 13),
              *dr = device_random(n, 14);
        col_plan *p = NULL;
        if (col_graph_status(g) != COL_OK || col_graph_backward(g, loss, &err) != COL_OK ||
            col_bind(q, dq, &err) != COL_OK || col_bind(k, dk, &err) != COL_OK || col_bind(v, dv, &err) != COL_OK ||
            col_bind(r, dr, &err) != COL_OK || col_plan_create_on(g, &gpu, &p, &err) != COL_OK ||
            col_plan_run(p, &gpu, &err) != COL_OK)
            die("attention", &err);
        double fwd = kernel_ms(find_op(p, COL_OP_ATTENTION), 3), bwd = kernel_ms(find_op(p, COL_OP_ATTENTION_BWD), 3);
        double ff = 0.5 * 4.0 * B * H * (double)T * T * D, fb = 2.5 * ff;
        double tf = ff / (fwd * 1e-3) / 1e12, tb = fb / (bwd * 1e-3) / 1e12, tt = (ff + fb) / ((fwd + bwd) * 1e-3) / 1e12;
        printf("  T=%5d B=%3d: forward %7.2f ms %5.1f TFLOP/s, backward %7.2f ms %5.1f TFLOP/s, both %5.1f TFLOP/s "
               "= %.0f%% of f32 GEMM, %.0f%% of TF32 GEMM\n",
               T, B, fwd, tf, bwd, tb, tt, 100 * tt / gemm_f32, 100 * tt / gemm_tf32);
        col_plan_free(p);
        col_graph_free(g);
        col_cuda_free(&gpu, dq), col_cuda_free(&gpu, dk), col_cuda_free(&gpu, dv), col_cuda_free(&gpu, dr);
    }
}

/* ---- single kernels at GPT-2 sizes ---- */

/* a graph's node of op `op` planned on the device with inputs bound to
 * random device data (ids from hids when given); the caller frees p, g */
static col_node *planned(col_graph *g, col_node *loss, col_op op, col_plan **p, col_node **in, int nin, const int32_t *hids,
                         bool run)
{
    col_err err = {0};
    if (col_graph_status(g) != COL_OK || (loss && col_graph_backward(g, loss, &err) != COL_OK))
        die(col_op_name(op), loss ? &err : col_graph_error(g));
    for (int i = 0; i < nin; i++) {
        int64_t n = col_numel(&in[i]->t);
        void *d = NULL;
        if (in[i]->t.dtype == COL_I32) {
            if (col_cuda_alloc(&gpu, sizeof(int32_t) * (size_t)n, &d, &err) != COL_OK ||
                col_cuda_to_device(&gpu, d, hids, sizeof(int32_t) * (size_t)n, &err) != COL_OK)
                die("ids", &err);
        } else {
            d = device_random(n, 20 + (uint64_t)i);
        }
        if (col_bind(in[i], d, &err) != COL_OK)
            die("bind", &err);
        if (in[i]->flags & COL_NODE_NEEDS_GRAD) {
            float *gr = device_random(n, 40 + (uint64_t)i);
            if (col_bind_grad(in[i], gr, &err) != COL_OK)
                die("bind grad", &err);
        }
    }
    if (col_plan_create_on(g, &gpu, p, &err) != COL_OK || (run && col_plan_run(*p, &gpu, &err) != COL_OK))
        die(col_op_name(op), &err);
    col_node *n = find_op(*p, op);
    if (!n) {
        fprintf(stderr, "bench_cuda: no %s node in the plan\n", col_op_name(op));
        exit(1);
    }
    return n;
}

static void free_bound(col_node **in, int nin)
{
    for (int i = 0; i < nin; i++) {
        col_cuda_free(&gpu, in[i]->bound);
        if (in[i]->flags & COL_NODE_NEEDS_GRAD)
            col_cuda_free(&gpu, in[i]->grad_data);
    }
}

static void bench_embedding_bwd(bool one_id)
{
    const int64_t V = 50257, C = 768, N = 8 * 1024;
    col_err err = {0};
    int32_t *hids = malloc(sizeof(int32_t) * (size_t)N);
    col_rng r;
    col_rng_init(&r, 5);
    for (int64_t i = 0; i < N; i++)
        hids[i] = one_id ? 50256 : (int32_t)col_rng_below(&r, (uint64_t)V);
    col_graph *g = col_graph_new();
    col_node *w = col_param(g, "wte", COL_F32, 2, (int64_t[]){V, C});
    col_node *ids = col_input(g, "ids", COL_I32, 2, (int64_t[]){8, 1024});
    col_node *dy = col_input(g, "r", COL_F32, 3, (int64_t[]){8, 1024, C});
    col_node *y = col_embedding(g, w, ids);
    col_node *in[3] = {w, ids, dy};
    col_plan *p = NULL;
    col_node *n = planned(g, y ? col_sum(g, col_mul(g, y, dy), 7u, 0) : NULL, COL_OP_EMBEDDING_BWD, &p, in, 3, hids, true);
    double ms = kernel_ms(n, 5);
    /* two runs give the same bits */
    size_t bytes = sizeof(float) * (size_t)(V * C);
    float *h1 = malloc(bytes), *h2 = malloc(bytes);
    col_exec ex = {.be = &gpu};
    if (!h1 || !h2 || gpu.kernel[n->op](n, &ex, &err) != COL_OK || col_cuda_to_host(&gpu, h1, n->t.data, bytes, &err) ||
        gpu.kernel[n->op](n, &ex, &err) != COL_OK || col_cuda_to_host(&gpu, h2, n->t.data, bytes, &err))
        die("embedding_bwd", &err);
    bool same = memcmp(h1, h2, bytes) == 0;
    double gb = (double)(N * C + 2 * V * C) * sizeof(float) / 1e9; /* dy read, dw zeroed and written */
    printf("  embedding_bwd V=%lld C=%lld N=%lld, %s: %.3f ms, %.0f GB/s of dy read + dw written; two runs bitwise %s\n",
           (long long)V, (long long)C, (long long)N, one_id ? "one id everywhere" : "uniform ids", ms, gb / (ms * 1e-3),
           same ? "the same" : "DIFFERENT");
    free(h1), free(h2), free(hids);
    free_bound(in, 3);
    col_plan_free(p);
    col_graph_free(g);
}

static void bench_cross_entropy(void)
{
    const int64_t V = 50257, N = 8 * 1024;
    int32_t *hids = malloc(sizeof(int32_t) * (size_t)N);
    col_rng r;
    col_rng_init(&r, 6);
    for (int64_t i = 0; i < N; i++)
        hids[i] = (int32_t)col_rng_below(&r, (uint64_t)V);
    col_graph *g = col_graph_new();
    col_node *x = col_input(g, "logits", COL_F32, 2, (int64_t[]){N, V}), *t = col_input(g, "t", COL_I32, 1, &N);
    col_mark_output(col_cross_entropy(g, x, t, -100)); /* forward only: the loss is what the plan computes */
    col_node *in[2] = {x, t};
    col_plan *p = NULL;
    col_node *n = planned(g, NULL, COL_OP_CROSS_ENTROPY, &p, in, 2, hids, true);
    double ms = kernel_ms(n, 5);
    printf("  cross_entropy [%lld, %lld]: %.3f ms, %.0f GB/s of logits read\n", (long long)N, (long long)V, ms,
           (double)(N * V) * sizeof(float) / 1e9 / (ms * 1e-3));
    free(hids);
    free_bound(in, 2);
    col_plan_free(p);
    col_graph_free(g);
}

static void bench_full_sum(void)
{
    const int64_t n = (int64_t)64 << 20;
    col_graph *g = col_graph_new();
    col_node *x = col_input(g, "x", COL_F32, 1, &n);
    col_mark_output(col_sum(g, x, 1u, 0));
    col_node *in[1] = {x};
    col_plan *p = NULL;
    col_node *s = planned(g, NULL, COL_OP_SUM, &p, in, 1, NULL, true);
    double ms = kernel_ms(s, 5);
    printf("  sum of %lld floats to one: %.3f ms, %.0f GB/s read\n", (long long)n, ms,
           (double)n * sizeof(float) / 1e9 / (ms * 1e-3));
    free_bound(in, 1);
    col_plan_free(p);
    col_graph_free(g);
}

/* host microseconds of one MATMUL call: the first of its shape and the median of later ones */
static void bench_matmul_call(int64_t M, int64_t K, int64_t N)
{
    col_err err = {0};
    col_graph *g = col_graph_new();
    col_node *a = col_input(g, "a", COL_F32, 2, (int64_t[]){M, K}), *b = col_input(g, "b", COL_F32, 2, (int64_t[]){K, N});
    col_mark_output(col_matmul(g, a, b));
    col_node *in[2] = {a, b};
    col_plan *p = NULL;
    uint64_t h0, m0, h1, m1;
    col_node *n = planned(g, NULL, COL_OP_MATMUL, &p, in, 2, NULL, false);
    col_exec ex = {.be = &gpu};
    if (col_cuda_sync(&gpu, &err) != COL_OK)
        die("matmul", &err);
    col_cuda_backend_matmul_cache(&gpu, &h0, &m0);
    double t0 = bench_now();
    if (gpu.kernel[COL_OP_MATMUL](n, &ex, &err) != COL_OK) /* the first call of the shape */
        die("matmul", &err);
    double first = bench_now() - t0;
    enum { CALLS = 200 };
    double t[CALLS];
    for (int i = 0; i < CALLS; i++) {
        t0 = bench_now();
        if (gpu.kernel[COL_OP_MATMUL](n, &ex, &err) != COL_OK)
            die("matmul", &err);
        t[i] = bench_now() - t0;
        if (i % 32 == 31 && col_cuda_sync(&gpu, &err) != COL_OK) /* keep the queue short */
            die("matmul", &err);
    }
    if (col_cuda_sync(&gpu, &err) != COL_OK)
        die("matmul", &err);
    col_cuda_backend_matmul_cache(&gpu, &h1, &m1);
    double gpu_ms = kernel_ms(n, 20);
    printf("  matmul [%lld,%lld] @ [%lld,%lld] host time per call: first %.1f us, later %.1f us (median; "
           "%llu calls found the descriptors cached, %llu built them); GPU %.3f ms\n",
           (long long)M, (long long)K, (long long)K, (long long)N, first * 1e6, bench_median(t, CALLS) * 1e6,
           (unsigned long long)(h1 - h0), (unsigned long long)(m1 - m0), gpu_ms);
    free_bound(in, 2);
    col_plan_free(p);
    col_graph_free(g);
}

static void bench_kernels(void)
{
    printf("\nsingle kernels at GPT-2 124M sizes (CUDA events, median of %d):\n", reps);
    bench_embedding_bwd(false);
    bench_embedding_bwd(true);
    bench_cross_entropy();
    bench_full_sum();
    bench_matmul_call(1, 768, 2304);
    bench_matmul_call(8000, 768, 768); /* not a shape the gpt2 step cached */
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "all";
    if (argc > 2)
        reps = atoi(argv[2]);
    if (argc > 3)
        preset = argv[3];
    if (reps < 1 || reps > 64 ||
        (strcmp(mode, "gemm") && strcmp(mode, "gpt2") && strcmp(mode, "attention") && strcmp(mode, "kernels") &&
         strcmp(mode, "all"))) {
        fprintf(stderr, "usage: bench_cuda [gemm|gpt2|attention|kernels|all] [reps 1..64] [model preset, default gpt2]\n");
        return 2;
    }
    int ndev = 0;
    col_err err = {0};
    if (!col_cuda_device_count(&ndev, &err)) {
        printf("bench_cuda: no CUDA device (%s); nothing to measure\n", err.msg);
        return 0;
    }
    if (col_cuda_backend_init(&gpu, 0, &err) != COL_OK) {
        printf("bench_cuda: no usable CUDA device (%s); nothing to measure\n", err.msg);
        return 0;
    }
    for (int i = 0; i < 3; i++)
        if (col_cuda_event_create(&gpu, &ev[i], &err) != COL_OK)
            die("event", &err);
    const char *name = col_cuda_backend_device_name(&gpu);
    const peak_t *pk = peak_of(name);
    printf("device: %s\n", name);
    if (pk)
        printf("datasheet dense peaks (%s): FP32 %.1f, TF32 %.1f, BF16 %.1f TFLOP/s\n", pk->label, pk->f32, pk->tf32,
               pk->bf16);
    else
        printf("no datasheet peak known for this device: MFU only against the measured GEMM rate\n");

    double g32 = gemm_tflops(false), gtf = gemm_tflops(true);
    printf("GEMM %d^3 (MATMUL node, cuBLASLt), median of %d runs of %d: f32 %.1f TFLOP/s, TF32 %.1f TFLOP/s\n", GEMM_N,
           reps, GEMM_ITERS, g32, gtf);
    if (pk)
        printf("  = %.0f%% of the FP32 peak, %.0f%% of the TF32 peak\n", 100 * g32 / pk->f32, 100 * gtf / pk->tf32);
    if (!strcmp(mode, "gpt2") || !strcmp(mode, "all"))
        bench_gpt2(pk, g32, gtf);
    if (!strcmp(mode, "attention") || !strcmp(mode, "all"))
        bench_attention(g32, gtf);
    if (!strcmp(mode, "kernels") || !strcmp(mode, "all"))
        bench_kernels();
    for (int i = 0; i < 3; i++)
        col_cuda_event_free(ev[i]);
    col_cuda_backend_free(&gpu);
    return 0;
}

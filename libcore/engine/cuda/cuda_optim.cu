/* cuda_optim.cu - fused optimizer steps on the device (col_cuda_opt_step).
 *
 * One kernel launch updates a group of up to CU_OPT_GROUP tensors (the
 * multi-tensor pattern: the group's descriptors travel as a kernel
 * argument, each block takes CU_OPT_CHUNK consecutive elements of one
 * tensor). Each element reads w, g (and m, v) once and writes w (and m, v)
 * once: AdamW moves 28 bytes per parameter, as the host loop does.
 *
 * The formulas are optim.c's, operation for operation: the per-step scalars
 * are computed on the host by the same code (optim_scalars.h), and the element updates
 * use __fmul_rn/__fadd_rn/__fsub_rn/__fdiv_rn/__fsqrt_rn, which nvcc never
 * contracts into fused multiply-adds (optim.c is built with contraction off),
 * so every element rounds as on the CPU.
 */
#include <math.h>

#include "cuda_internal.h"
#include "optim_scalars.h"

#define CU_OPT_GROUP 32
#define CU_OPT_CHUNK 4096
#define CU_OPT_THREADS 256

typedef struct {
    float *w[CU_OPT_GROUP];
    const float *g[CU_OPT_GROUP];
    float *m[CU_OPT_GROUP];
    float *v[CU_OPT_GROUP];
    int64_t n[CU_OPT_GROUP];
    float keep[CU_OPT_GROUP];     /* AdamW: 1 - lr wd (or 1); SGD: wd (or 0) */
    int first_chunk[CU_OPT_GROUP + 1];
    int count;
} cu_opt_group;

typedef struct {
    col_adamw_scalars a; /* AdamW */
    float lr, mu;        /* SGD */
    int mode;            /* SGD: 0 plain, 1 momentum, 2 Nesterov */
} cu_opt_scalars;

/* the group's tensor holding chunk `chunk` (few tensors: a linear search) */
__device__ __forceinline__ int cu_opt_tensor_of(const cu_opt_group &G, int chunk)
{
    int t = 0;
    while (t + 1 < G.count && chunk >= G.first_chunk[t + 1])
        t++;
    return t;
}

/*   w = w - lr * wd * w  (as w * keep)
 *   m = b1 m + (1 - b1) g;  v = b2 v + ((1 - b2) g) g
 *   w = w * keep - step_size * (m / (sqrt(v) / sqrt(1 - b2^t) + eps)) */
__global__ void k_adamw(const cu_opt_group G, const cu_opt_scalars s)
{
    int t = cu_opt_tensor_of(G, blockIdx.x);
    int64_t lo = (int64_t)(blockIdx.x - G.first_chunk[t]) * CU_OPT_CHUNK;
    int64_t hi = lo + CU_OPT_CHUNK < G.n[t] ? lo + CU_OPT_CHUNK : G.n[t];
    float *__restrict__ w = G.w[t], *__restrict__ m = G.m[t], *__restrict__ v = G.v[t];
    const float *__restrict__ g = G.g[t];
    const float keep = G.keep[t];
    for (int64_t j = lo + threadIdx.x; j < hi; j += blockDim.x) {
        float gi = g[j];
        float mi = __fadd_rn(__fmul_rn(s.a.mo.b1, m[j]), __fmul_rn(s.a.mo.omb1, gi));
        float vi = __fadd_rn(__fmul_rn(s.a.mo.b2, v[j]), __fmul_rn(__fmul_rn(s.a.mo.omb2, gi), gi));
        m[j] = mi;
        v[j] = vi;
        float den = __fadd_rn(__fdiv_rn(__fsqrt_rn(vi), s.a.bc2_sqrt), s.a.eps);
        w[j] = __fsub_rn(__fmul_rn(w[j], keep), __fmul_rn(s.a.step_size, __fdiv_rn(mi, den)));
    }
}

/*   d = g + wd w
 *   momentum:  buf = mu buf + d;  d = nesterov ? d + mu buf : buf
 *   w = w - lr d */
__global__ void k_sgd(const cu_opt_group G, const cu_opt_scalars s)
{
    int t = cu_opt_tensor_of(G, blockIdx.x);
    int64_t lo = (int64_t)(blockIdx.x - G.first_chunk[t]) * CU_OPT_CHUNK;
    int64_t hi = lo + CU_OPT_CHUNK < G.n[t] ? lo + CU_OPT_CHUNK : G.n[t];
    float *__restrict__ w = G.w[t], *__restrict__ buf = G.m[t];
    const float *__restrict__ g = G.g[t];
    const float wd = G.keep[t];
    for (int64_t j = lo + threadIdx.x; j < hi; j += blockDim.x) {
        float wj = w[j];
        float d = __fadd_rn(g[j], __fmul_rn(wd, wj));
        if (s.mode == 0) {
            w[j] = __fsub_rn(wj, __fmul_rn(s.lr, d));
        } else {
            float bi = __fadd_rn(__fmul_rn(s.mu, buf[j]), d);
            buf[j] = bi;
            float step = s.mode == 1 ? bi : __fadd_rn(d, __fmul_rn(s.mu, bi));
            w[j] = __fsub_rn(wj, __fmul_rn(s.lr, step));
        }
    }
}

static bool device_accessible(const void *p)
{
    cudaPointerAttributes a;
    cudaError_t e = cudaPointerGetAttributes(&a, p);
    if (e != cudaSuccess) {
        cudaGetLastError();
        return false;
    }
    return a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged || a.type == cudaMemoryTypeHost;
}

/* col_opt_step's checks (kinds with a kernel only), and every buffer on the device */
static col_status check(const col_backend *be, const col_opt_config *c, float lr, int64_t step, const col_opt_tensor *ts,
                        int nt, col_err *err)
{
    if (!be || !be->ctx)
        return col_err_set(err, COL_ESTATE, "col_cuda_opt_step: the CUDA backend is not initialised");
    col_status st = col_opt_validate(c, err);
    if (st != COL_OK)
        return st;
    const char *k = col_opt_kind_name(c->kind);
    if (c->kind != COL_OPT_ADAMW && c->kind != COL_OPT_SGD)
        return col_err_set(err, COL_EUNSUPPORTED, "col_cuda_opt_step: %s has no CUDA kernel yet (adamw and sgd have)", k);
    st = col_opt_check_step("col_cuda_opt_step", c, lr, step, ts, nt, err);
    if (st != COL_OK)
        return st;
    st = cu_status(cudaSetDevice(((const col_cuda_ctx *)be->ctx)->device), err, "col_cuda_opt_step");
    if (st != COL_OK)
        return st;
    int slots = col_opt_state_slots(c->kind, c->momentum);
    for (int i = 0; i < nt; i++) {
        const col_opt_tensor *t = &ts[i];
        if (t->n == 0)
            continue;
        const void *ptr[4] = {t->w, t->g, slots >= 1 ? t->m : t->w, slots >= 2 ? t->v : t->w};
        static const char *what[4] = {"weight", "gradient", "m state", "v state"};
        for (int j = 0; j < 4; j++)
            if (!device_accessible(ptr[j]))
                return col_err_set(err, COL_EINVAL, "col_cuda_opt_step(%s): tensor %d: the %s buffer is not device memory",
                                   k, i, what[j]);
    }
    return COL_OK;
}

extern "C" col_status col_cuda_opt_step(const col_backend *be, const col_opt_config *c, float lr, int64_t step,
                                        col_opt_tensor *ts, int nt, col_err *err)
{
    col_status st = check(be, c, lr, step, ts, nt, err);
    if (st != COL_OK)
        return st;
    const col_cuda_ctx *ctx = (const col_cuda_ctx *)be->ctx;
    /* per-step scalars: optim.c's (optim_scalars.h) */
    cu_opt_scalars s;
    memset(&s, 0, sizeof s);
    bool adamw = c->kind == COL_OPT_ADAMW;
    if (adamw) {
        s.a = col_adamw_scalars_of(c, lr, step);
    } else {
        s.lr = lr, s.mu = c->momentum;
        s.mode = col_sgd_mode(c);
    }
    cu_opt_group G;
    memset(&G, 0, sizeof G);
    int i = 0;
    while (i < nt) {
        G.count = 0;
        int chunks = 0;
        /* a group: up to CU_OPT_GROUP non-empty tensors, fewer than 2^31 chunks */
        for (; i < nt && G.count < CU_OPT_GROUP; i++) {
            const col_opt_tensor *t = &ts[i];
            if (t->n == 0)
                continue;
            int64_t tc = (t->n + CU_OPT_CHUNK - 1) / CU_OPT_CHUNK;
            if (G.count > 0 && (int64_t)chunks + tc > INT32_MAX)
                break;
            if (tc > INT32_MAX)
                return col_err_set(err, COL_EUNSUPPORTED, "col_cuda_opt_step: tensor %d has too many elements (%lld)", i,
                                   (long long)t->n);
            int k = G.count++;
            G.w[k] = t->w, G.g[k] = t->g, G.m[k] = t->m, G.v[k] = t->v, G.n[k] = t->n;
            G.keep[k] = adamw ? col_adamw_keep(c, lr, t->decay) : (t->decay ? c->weight_decay : 0.0f);
            G.first_chunk[k] = chunks;
            chunks += (int)tc;
        }
        if (G.count == 0)
            break;
        G.first_chunk[G.count] = chunks;
        if (adamw)
            CU_LAUNCH(k_adamw, chunks, CU_OPT_THREADS, 0, ctx->stream)(G, s);
        else
            CU_LAUNCH(k_sgd, chunks, CU_OPT_THREADS, 0, ctx->stream)(G, s);
        st = cu_launch(err, adamw ? "col_cuda_opt_step(adamw)" : "col_cuda_opt_step(sgd)");
        if (st != COL_OK)
            return st;
    }
    return COL_OK;
}

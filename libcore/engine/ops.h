/* ops.h - the operator set: enum, parameters and graph builders.
 *
 * Conventions: PyTorch dimension order; builders return NULL (and record the
 * error in the graph) on bad shapes or dtypes. Compute ops take and produce
 * f32 unless stated; casts move between all dtypes. Sources may be strided
 * views unless a builder says it makes them contiguous first.
 */
#ifndef COL_OPS_H
#define COL_OPS_H

#include <stdbool.h>
#include <stdint.h>

#include "tensor.h"

typedef enum {
    COL_OP_LEAF = 0,       /* parameter or input: no kernel */
    COL_OP_VIEW,           /* reshape/permute/transpose/slice/expand: no kernel */
    COL_OP_COPY,           /* strided -> contiguous copy, any dtype */
    COL_OP_CAST,           /* dtype conversion, any -> any */
    COL_OP_FILL,           /* f[0] everywhere */
    COL_OP_ACCUMULATE,     /* src1->grad_data += src0 (src1 a parameter); output has no storage */
    COL_OP_SCATTER_SLICE,  /* zeros of base shape with src0 written into a slice (backward of slice) */

    /* elementwise binary, broadcasting (sources are expanded views) */
    COL_OP_ADD, COL_OP_SUB, COL_OP_MUL, COL_OP_DIV,
    /* elementwise unary */
    COL_OP_SCALE,          /* x * f[0] + f[1] */
    COL_OP_EXP, COL_OP_LOG, COL_OP_TANH, COL_OP_SIGMOID, COL_OP_RELU,
    COL_OP_GELU_ERF, COL_OP_GELU_TANH, COL_OP_SILU,
    COL_OP_SWIGLU,         /* silu(src0) * src1 */
    /* backward helpers of unary ops: (x or y, dy) -> dx */
    COL_OP_TANH_BWD,       /* src0 = y, src1 = dy */
    COL_OP_SIGMOID_BWD,    /* src0 = y, src1 = dy */
    COL_OP_RELU_BWD,       /* src0 = x, src1 = dy */
    COL_OP_GELU_ERF_BWD,   /* src0 = x, src1 = dy */
    COL_OP_GELU_TANH_BWD,  /* src0 = x, src1 = dy */
    COL_OP_SILU_BWD,       /* src0 = x, src1 = dy */
    COL_OP_SWIGLU_BWD,     /* src0 = a, src1 = b, src2 = dy; output packed [da | db] (2*numel) */

    /* reductions over a set of axes: i[0] = axis bitmask, i[1] = keepdim */
    COL_OP_SUM, COL_OP_MEAN, COL_OP_MAX,
    COL_OP_MAX_BWD,        /* src0 = x, src1 = y (keepdim form), src2 = dy (keepdim form); grad to the first max */

    /* normalisation / softmax family, over the last dimension */
    COL_OP_SOFTMAX,        /* i[0] = causal (rows are queries, last dim keys, offset i[1]); src1 optional additive mask */
    COL_OP_SOFTMAX_BWD,    /* src0 = y, src1 = dy */
    COL_OP_LOG_SOFTMAX,
    COL_OP_LOG_SOFTMAX_BWD,/* src0 = y, src1 = dy */
    COL_OP_LAYERNORM,      /* src0 = x, src1 = weight or none, src2 = bias or none; f[0] = eps */
    COL_OP_LAYERNORM_BWD,  /* src0 = x, src1 = weight, src2 = dy; packed [dx | dw | db]; f[0] = eps */
    COL_OP_RMSNORM,        /* src0 = x, src1 = weight; f[0] = eps */
    COL_OP_RMSNORM_BWD,    /* src0 = x, src1 = weight, src2 = dy; packed [dx | dw]; f[0] = eps */

    COL_OP_EMBEDDING,      /* src0 = weight [V,C], src1 = ids (i32/i64) [...]; out [..., C] */
    COL_OP_EMBEDDING_BWD,  /* src0 = ids, src1 = dy; out [V,C] (i[0] = V) */
    COL_OP_ROPE,           /* src0 = x [B,H,T,D], src1 = positions (i32/i64) [T] or [B,T];
                              i[0] = rotary dims, i[1] = inverse (backward); f[0] = theta;
                              LLaMA-3 scaling: f[1] = factor (0 = off), f[2] = low_freq_factor,
                              f[3] = high_freq_factor, f[4] = original max positions */
    COL_OP_ATTENTION,      /* q [B,Hq,T,D], k,v [B,Hkv,S,D]; i[0] = causal; f[0] = scale;
                              extra: logsumexp [B,Hq,T] f32. Over a cache (no gradient): src3 = start.
                              i[1] = 0: start i64 [1], the first start+T keys of k,v [B,Hkv,S,D];
                              i[1] = 1 (rows): k,v [R,Hkv,S,D], start i64 [B], src4 = rows i64 [B] if
                              given (else row b): row b reads cache row rows[b], its first start[b]+T keys */
    COL_OP_ATTENTION_BWD,  /* src0..3 = q,k,v,o(attention node), src4 = do; packed [dq | dk | dv] */
    COL_OP_CROSS_ENTROPY,  /* src0 = logits [N,V], src1 = targets (i32/i64) [N]; i[0] = ignore_index;
                              out: scalar mean over counted rows; extra: per-row logsumexp */
    COL_OP_CROSS_ENTROPY_BWD, /* src0 = logits, src1 = targets, src2 = ce node, src3 = dloss (scalar) */
    COL_OP_DROPOUT,        /* src1 = the graph's run counter; f[0] = p; i[0] = seed, i[1] = stream offset;
                              mask from Philox(seed', offset + logical index), seed' = seed when the
                              counter is 0, else a Philox hash of (seed, counter) */
    COL_OP_CONCAT,         /* i[0] = axis; sources 1..COL_MAX_SRC */
    COL_OP_MATMUL,         /* a [..., M, K] @ b [..., K, N], batch dims broadcast */
    COL_OP_ARANGE,         /* i32 [n]: start + i[0] + k, start = src0 (i64 [1]) if given, else 0;
                              i[1] = 1 (rows): i32 [B,n], row b from start[b], src0 i64 [B] */
    COL_OP_KV_WRITE,       /* src0 = cache leaf [B,H,S,D], src1 = new [B,H,T,D], src2 = start (i64 [1]):
                              cache[:, :, start:start+T] = new; the output is the cache itself.
                              i[0] = 1 (rows): cache [R,H,S,D], start i64 [B], src3 = rows i64 [B] if
                              given (else row b): cache[rows[b], :, start[b]:start[b]+T] = new[b] */
    /* images, NCHW (issue 15): i[0..1] = stride h, w; i[2..3] = top, left zero padding (bottom and right
       follow from the shapes); i[4] = has bias. col_conv2d_geom_of (backend.h) reads all of it */
    COL_OP_CONV2D,         /* src0 = x [B,Cin,H,W], src1 = w [Cout,Cin,kh,kw], src2 = bias [Cout] if i[4];
                              out [B,Cout,Ho,Wo]; scratch: one im2col tile (col_conv2d_tile) */
    COL_OP_CONV2D_BWD_DATA,   /* src0 = dy [B,Cout,Ho,Wo], src1 = w; out dx [B,Cin,H,W] (col2im of w^T dy) */
    COL_OP_CONV2D_BWD_FILTER, /* src0 = x, src1 = dy; out dw [Cout,Cin,kh,kw], summed over the batch */
    COL_OP_UPSAMPLE_NEAREST,     /* src0 = x [B,C,H,W] f32; i[0] = scale s; out [B,C,sH,sW] */
    COL_OP_UPSAMPLE_NEAREST_BWD, /* src0 = dy [B,C,sH,sW]; i[0] = s; out dx [B,C,H,W]: each s x s block's sum */
    COL_OP_EXTERN,         /* the caller's function (node->ext_fn, ext_user; col_extern below), called by the
                              plan runner itself: no backend has a kernel for it. Sources contiguous */
    COL_OP_TOKEN_LOGPROB,  /* src0 = logits [N,V], src1 = targets (i32/i64) [N]; i[0] = ignore_index;
                              out: the targets' shape (N elements), log_softmax(row)[target], 0 where ignored;
                              extra: per-row logsumexp [N] f32 (0 where ignored) */
    COL_OP_TOKEN_LOGPROB_BWD, /* src0 = logits, src1 = targets, src2 = token_logprob node, src3 = d [N];
                              out [N,V]: d[r] (onehot(target) - softmax(row)), 0 rows where ignored */

    COL_OP_COUNT
} col_op;

const char *col_op_name(col_op op);
/* The activations, their *_BWD ops and dropout (ops_unary.c builds them): elementwise
 * over src0's shape, each backend runs them all through one kernel. */
bool col_op_is_elementwise(col_op op);

struct col_graph;
struct col_node;
struct col_backend;
typedef struct col_graph col_graph_t;

/* ---- views (no copy; shared storage) ---- */
struct col_node *col_reshape(struct col_graph *g, struct col_node *x, int ndim, const int64_t *shape);
struct col_node *col_permute(struct col_graph *g, struct col_node *x, const int *perm);
struct col_node *col_transpose(struct col_graph *g, struct col_node *x, int d0, int d1);
/* elements [start, start+len) along axis */
struct col_node *col_slice(struct col_graph *g, struct col_node *x, int axis, int64_t start, int64_t len);
/* broadcast size-1 dims (and new leading dims) to shape */
struct col_node *col_expand(struct col_graph *g, struct col_node *x, int ndim, const int64_t *shape);
/* generic view into x's storage (used for packed multi-output backward ops) */
struct col_node *col_view(struct col_graph *g, struct col_node *x, int64_t offset, int ndim,
                          const int64_t *shape, const int64_t *stride);
/* x itself when contiguous, else a COPY */
struct col_node *col_contiguous(struct col_graph *g, struct col_node *x);

/* ---- data movement ---- */
struct col_node *col_cast(struct col_graph *g, struct col_node *x, col_dtype dt);
struct col_node *col_fill(struct col_graph *g, col_dtype dt, int ndim, const int64_t *shape, float value);
struct col_node *col_concat(struct col_graph *g, int n, struct col_node *const *xs, int axis);
/* splits along axis into n equal parts (views) written to out[] */
int col_split(struct col_graph *g, struct col_node *x, int axis, int n, struct col_node **out);
struct col_node *col_scatter_slice(struct col_graph *g, struct col_node *src, int ndim, const int64_t *shape,
                                   int axis, int64_t start);

/* ---- elementwise ---- */
struct col_node *col_add(struct col_graph *g, struct col_node *a, struct col_node *b);
struct col_node *col_sub(struct col_graph *g, struct col_node *a, struct col_node *b);
struct col_node *col_mul(struct col_graph *g, struct col_node *a, struct col_node *b);
struct col_node *col_div(struct col_graph *g, struct col_node *a, struct col_node *b);
struct col_node *col_scale(struct col_graph *g, struct col_node *x, float mul, float add);
struct col_node *col_exp(struct col_graph *g, struct col_node *x);
struct col_node *col_log(struct col_graph *g, struct col_node *x);
struct col_node *col_tanh(struct col_graph *g, struct col_node *x);
struct col_node *col_sigmoid(struct col_graph *g, struct col_node *x);
struct col_node *col_relu(struct col_graph *g, struct col_node *x);
struct col_node *col_gelu(struct col_graph *g, struct col_node *x);       /* erf form */
struct col_node *col_gelu_tanh(struct col_graph *g, struct col_node *x);  /* tanh approximation */
struct col_node *col_silu(struct col_graph *g, struct col_node *x);
struct col_node *col_swiglu(struct col_graph *g, struct col_node *gate, struct col_node *up);

/* ---- reductions: axes as a bitmask (bit d = dim d) ---- */
struct col_node *col_sum(struct col_graph *g, struct col_node *x, uint32_t axes, int keepdim);
struct col_node *col_mean(struct col_graph *g, struct col_node *x, uint32_t axes, int keepdim);
struct col_node *col_max(struct col_graph *g, struct col_node *x, uint32_t axes, int keepdim);

/* ---- softmax / norms ---- */
/* mask: NULL or additive f32 broadcastable to x (e.g. 0 / -inf padding);
 * causal: key j > query i + offset is masked, where i is dim -2 and j dim -1
 * (offset = S - T, the sizes of dims -1 and -2); a row whose keys are all
 * masked gives zeros, not NaN */
struct col_node *col_softmax(struct col_graph *g, struct col_node *x, struct col_node *mask, int causal);
struct col_node *col_log_softmax(struct col_graph *g, struct col_node *x);
struct col_node *col_layernorm(struct col_graph *g, struct col_node *x, struct col_node *w, struct col_node *b, float eps);
struct col_node *col_rmsnorm(struct col_graph *g, struct col_node *x, struct col_node *w, float eps);

/* ---- transformer pieces ---- */
struct col_node *col_embedding(struct col_graph *g, struct col_node *weight, struct col_node *ids);
typedef struct {
    int rotary_dims;          /* 0 = all of head_dim */
    float theta;              /* base, e.g. 10000 or 500000 */
    float llama3_factor;      /* 0 = no scaling; LLaMA-3.1: 8 */
    float llama3_low_freq_factor;   /* 1 */
    float llama3_high_freq_factor;  /* 4 */
    float llama3_original_max_pos;  /* 8192 */
} col_rope_cfg;
struct col_node *col_rope(struct col_graph *g, struct col_node *x, struct col_node *pos, const col_rope_cfg *cfg);
struct col_node *col_attention(struct col_graph *g, struct col_node *q, struct col_node *k, struct col_node *v,
                               int causal, float scale);
/* Causal attention of T new queries over a key/value cache [B,Hkv,S,D] whose
 * first start+T positions are valid, start read at run time from an i64 [1]
 * node: cost grows with start+T, not with S. Inference only (no gradient). */
struct col_node *col_attention_cached(struct col_graph *g, struct col_node *q, struct col_node *kcache,
                                      struct col_node *vcache, struct col_node *start, float scale);
/* i32 [n] positions: start + offset + k (start an i64 [1] node, or NULL for 0) */
struct col_node *col_arange(struct col_graph *g, struct col_node *start, int64_t n, int64_t offset);
/* Writes x [B,H,T,D] into cache [B,H,S,D] at positions start..start+T-1 (start
 * read at run time; the kernel checks start+T <= S) and returns the cache. */
struct col_node *col_kv_write(struct col_graph *g, struct col_node *cache, struct col_node *x, struct col_node *start);
/* Many sequences at their own positions in one batch (serving). The cache [S,H,L,D] holds S sequences;
 * batch row b uses cache row rows[b] (rows: i64 [B] node read at run time, or NULL for row b, which needs
 * B <= S) at positions start[b].. (start: i64 [B] node). The kernels check 0 <= rows[b] < S and
 * start[b] + T <= L. Inference only (no gradient).
 * col_arange_rows: i32 [B, n] positions start[b] + offset + k.
 * col_kv_write_rows: writes x [B,H,T,D] into cache row rows[b] at start[b]..start[b]+T-1; returns the cache.
 * col_attention_cached_rows: q [B,Hq,T,D]; row b's query t attends causally to the first start[b]+t+1
 *   positions of cache row rows[b] (Hq a multiple of Hkv); out [B,Hq,T,D]. Each row's result equals
 *   col_attention_cached's for that row alone. */
struct col_node *col_arange_rows(struct col_graph *g, struct col_node *start, int64_t n, int64_t offset);
struct col_node *col_kv_write_rows(struct col_graph *g, struct col_node *cache, struct col_node *x,
                                   struct col_node *start, struct col_node *rows);
struct col_node *col_attention_cached_rows(struct col_graph *g, struct col_node *q, struct col_node *kcache,
                                           struct col_node *vcache, struct col_node *start, struct col_node *rows,
                                           float scale);
struct col_node *col_cross_entropy(struct col_graph *g, struct col_node *logits, struct col_node *targets,
                                   int64_t ignore_index);
/* log p(target) per row: logits [..., V] f32, targets (i32/i64) [...] -> f32 [...] (the targets' shape);
 * log_softmax(logits)[target], and 0 where target == ignore_index. Its gradient, for an upstream d [...]:
 * dlogits = d * (onehot(target) - softmax(logits)) per row, 0 rows where ignored. Out-of-range targets
 * (not ignore_index) fail at run time like cross_entropy's. */
struct col_node *col_token_logprob(struct col_graph *g, struct col_node *logits, struct col_node *targets,
                                   int64_t ignore_index);
struct col_node *col_dropout(struct col_graph *g, struct col_node *x, float p, uint64_t seed);
struct col_node *col_matmul(struct col_graph *g, struct col_node *a, struct col_node *b);
/* x [..., in] @ w[out, in]^T (+ bias[out]): Hugging Face nn.Linear layout */
struct col_node *col_linear(struct col_graph *g, struct col_node *x, struct col_node *w, struct col_node *bias);

/* ---- images, NCHW (issue 15; torch.nn.functional semantics) ---- */
typedef struct {
    int stride_h, stride_w;               /* >= 1 */
    int pad_top, pad_bottom, pad_left, pad_right;   /* zero padding, >= 0 */
} col_conv2d_cfg;
/* x [B,Cin,H,W] cross-correlated with w [Cout,Cin,kh,kw] (+ bias [Cout] or NULL):
 * [B,Cout,Ho,Wo], Ho = (H + pad_top + pad_bottom - kh) / stride_h + 1 (F.conv2d).
 * f32 operands (COL_EDTYPE otherwise); one CONV2D node (ops_image.c) */
struct col_node *col_conv2d_ex(struct col_graph *g, struct col_node *x, struct col_node *w, struct col_node *bias,
                               const col_conv2d_cfg *cfg);
/* the same with one stride and the same padding on every side */
struct col_node *col_conv2d(struct col_graph *g, struct col_node *x, struct col_node *w, struct col_node *bias,
                            int stride, int pad);
/* torch.nn.GroupNorm: x [B,C,...] normalised over each group of C/groups channels and the
 * remaining dims (biased variance, eps inside the square root), then * w[c] + b[c] (w, b [C] or NULL).
 * f32; made of reshape, layernorm (no affine), mul and add */
struct col_node *col_group_norm(struct col_graph *g, struct col_node *x, struct col_node *w, struct col_node *b,
                                int groups, float eps);
/* nearest-neighbour upsampling [B,C,H,W] -> [B,C,scale*H,scale*W] (F.interpolate(mode="nearest")):
 * one UPSAMPLE_NEAREST node for f32, views and a copy for other dtypes; scale 1 returns x */
struct col_node *col_upsample_nearest(struct col_graph *g, struct col_node *x, int scale);

/* ---- a caller's computation inside a plan (EXTERN) ----
 * A node whose output is computed by a host function of the caller's, which
 * the plan runner calls in schedule order like any kernel (col_plan_run and
 * col_plan_run_hooked, whatever the backend; no backend table needs an entry):
 * collectives between processes inside a plan (libcore/comm/comm_graph.h),
 * or anything else the engine has no op for. The function gets the node's
 * output and its sources as tensor descriptions (copies: changing them
 * changes nothing in the graph) whose data are the plan's addresses, in the
 * backend's memory (host memory on a backend without a memory table, device
 * memory on one with a table: read and write it there with be->mem, or queue
 * work on the backend's own queue); the sources are contiguous, the output
 * contiguous and of the dtype and shape given here, and the function must
 * write all of it. On a backend with a memory table the kernels before the
 * node may still be queued: be->mem's synchronous copies are ordered after
 * them, and so is work queued on the backend's queue. The function must not
 * keep the addresses past its return (another run may move them). A non-OK
 * return stops the run with that status and the function's message.
 *
 * Liveness and the arena treat the node as any other (its output gets a range
 * of the arena). It has no gradient: backward through it fails (COL_EUNSUPPORTED)
 * (col_extern_grad below makes one that has).
 * A checkpointed segment's extern node is called again when recomputed.
 * fn and user must stay valid as long as plans of the graph run. At most
 * COL_MAX_SRC sources (0 is fine); non-contiguous ones are copied first
 * (col_contiguous). */
typedef col_status (*col_extern_fn)(void *user, const struct col_backend *be, col_tensor *out,
                                    const col_tensor *const *src, int nsrc, col_err *err);
struct col_node *col_extern(struct col_graph *g, col_extern_fn fn, void *user, col_dtype dt, int ndim,
                            const int64_t *shape, int nsrc, struct col_node *const *src);
/* An extern node with a gradient: the same, and while autodiff builds the
 * backward pass it calls bwd(g, node, dy, s, user) once for each source s
 * that needs a gradient, dy the node's gradient (its shape and dtype); bwd
 * returns the gradient of source s (its shape, f32 or the source's dtype)
 * built from graph ops (other extern nodes among them), or NULL: no gradient
 * flows to s (a stop, as for a value treated as a constant). A failing
 * builder inside bwd records its error in g as usual. */
typedef struct col_node *(*col_extern_bwd_fn)(struct col_graph *g, struct col_node *node, struct col_node *dy, int s,
                                              void *user);
struct col_node *col_extern_grad(struct col_graph *g, col_extern_fn fn, col_extern_bwd_fn bwd, void *user,
                                 col_dtype dt, int ndim, const int64_t *shape, int nsrc, struct col_node *const *src);

#endif

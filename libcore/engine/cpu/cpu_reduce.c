/* cpu_reduce.c - CPU kernels for sum / mean / max and max's gradient.
 *
 * The input is seen as [outer..., reduced...] by permuting the reduced axes
 * to the end; each output element reduces its slab in double. */
#include <math.h>
#include <string.h>

#include "cpu_internal.h"

static int64_t offset_at(const col_tensor *t, int64_t flat)
{
    int64_t off = 0;
    for (int d = t->ndim - 1; d >= 0; d--) {
        off += (flat % t->shape[d]) * t->stride[d];
        flat /= t->shape[d];
    }
    return off;
}

static col_status k_reduce(const col_node *n, const col_exec *ex, col_err *err)
{
    (void)err;
    const col_tensor *x = &n->src[0]->t;
    col_tensor kept, red;
    col_split_axes(x, (uint32_t)n->p.i[0], &kept, &red);
    int64_t nout = col_numel(&kept), nred = col_numel(&red);
    const float *xd = x->data;
    float *out = n->t.data;
    col_op op = n->op;
    int64_t inner_stride = red.ndim ? red.stride[red.ndim - 1] : 1;
    int64_t inner = red.ndim ? red.shape[red.ndim - 1] : 1;
    int64_t outer_red = inner ? nred / inner : 0;
#pragma omp parallel for schedule(static) if (nout * nred > COL_PAR_MIN) num_threads(col_cpu_threads(ex))
    for (int64_t o = 0; o < nout; o++) {
        const float *base = xd + offset_at(&kept, o);
        double acc = op == COL_OP_MAX ? -INFINITY : 0.0;
        for (int64_t r = 0; r < outer_red; r++) {
            const float *p = base + (red.ndim > 1 ? offset_at(&red, r * inner) : 0);
            if (op == COL_OP_MAX) {
                for (int64_t c = 0; c < inner; c++)
                    if (p[c * inner_stride] > acc || isnan(p[c * inner_stride]))
                        acc = p[c * inner_stride];
            } else {
                double s = 0.0;
                for (int64_t c = 0; c < inner; c++)
                    s += p[c * inner_stride];
                acc += s;
            }
        }
        if (op == COL_OP_MEAN)
            acc = nred ? acc / (double)nred : NAN;
        out[o] = (float)acc;
    }
    return COL_OK;
}

/* dx = dy at the first position of each slab's maximum, 0 elsewhere */
static col_status k_max_bwd(const col_node *n, const col_exec *ex, col_err *err)
{
    (void)err;
    const col_tensor *x = &n->src[0]->t, *y = &n->src[1]->t, *dy = &n->src[2]->t;
    uint32_t axes = (uint32_t)n->p.i[0];
    col_tensor kept, red, ky, kd, ry, rd;
    col_split_axes(x, axes, &kept, &red);
    col_split_axes(y, axes, &ky, &ry);
    col_split_axes(dy, axes, &kd, &rd);
    col_tensor out = n->t, kout, rout;
    col_split_axes(&out, axes, &kout, &rout);
    int64_t nout = col_numel(&kept), nred = col_numel(&red);
    memset(n->t.data, 0, sizeof(float) * (size_t)col_numel(&n->t));
#pragma omp parallel for schedule(static) if (nout * nred > COL_PAR_MIN) num_threads(col_cpu_threads(ex))
    for (int64_t o = 0; o < nout; o++) {
        const float *xb = (const float *)x->data + offset_at(&kept, o);
        float m = ((const float *)y->data)[offset_at(&ky, o)];
        float g = ((const float *)dy->data)[offset_at(&kd, o)];
        for (int64_t r = 0; r < nred; r++) {
            float v = xb[offset_at(&red, r)];
            if (v == m || (isnan(m) && isnan(v))) {
                ((float *)n->t.data)[offset_at(&kout, o) + offset_at(&rout, r)] = g;
                break;
            }
        }
    }
    return COL_OK;
}

void col_cpu_register_reduce(col_backend *be)
{
    be->kernel[COL_OP_SUM] = k_reduce;
    be->kernel[COL_OP_MEAN] = k_reduce;
    be->kernel[COL_OP_MAX] = k_reduce;
    be->kernel[COL_OP_MAX_BWD] = k_max_bwd;
}

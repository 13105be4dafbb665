/* cuda_check.cu - input checks that never stop the host: bad token ids,
 * targets and cache positions are found by the kernels on the device and
 * reported at the next synchronisation.
 *
 * The backend keeps a ring of device check slots. A checked kernel call
 * takes the next slot (cu_check_begin) and notes on the host what it checks
 * (op, limit, ignore index); its kernels write the first bad position and
 * the value found there into the slot (cu_check_bad, then one thread copies
 * the value: stream order makes the pair deterministic). The kernels
 * themselves never read or write out of bounds on bad input. Every
 * synchronisation (cu_sync_checked: col_cuda_sync, the synchronous copies,
 * the memory table's sync) queues one small copy of the used slots to
 * pinned host memory before it waits, then turns the first bad slot into
 * COL_EINVAL with the CPU kernel's message and queues the slots' reset.
 * When the ring is full, the call that wants a slot synchronises first (and
 * reports what the earlier calls found).
 *
 * Calls may come from several host threads (memtier's transfer thread
 * copies while the main thread queues kernels): a mutex covers a slot's
 * taking and its kernels' queueing, and the read-back. */
#include <string.h>

#include "cuda_internal.h"

col_status cu_check_init(col_cuda_ctx *c, col_err *err)
{
    size_t bytes = sizeof(cu_check_slot) * CU_CHECK_SLOTS;
    col_status st = cu_status(cudaMalloc((void **)&c->chk_dev, bytes), err, "cuda backend: check slots");
    if (st == COL_OK)
        st = cu_status(cudaMallocHost((void **)&c->chk_host, bytes), err, "cuda backend: pinned check slots");
    if (st == COL_OK)
        st = cu_status(cudaMemset(c->chk_dev, 0x7f, bytes), err, "cuda backend: check slots");
    if (st == COL_OK) {
        if (pthread_mutex_init(&c->chk_mu, NULL) != 0)
            return col_err_set(err, COL_EINTERNAL, "cuda backend: mutex of the check slots");
        c->chk_mu_ok = true;
    }
    c->chk_used = 0;
    return st;
}

void cu_check_free(col_cuda_ctx *c)
{
    cudaFree(c->chk_dev);
    cudaFreeHost(c->chk_host);
    c->chk_dev = c->chk_host = NULL;
    if (c->chk_mu_ok)
        pthread_mutex_destroy(&c->chk_mu);
    c->chk_mu_ok = false;
}

/* the message of a slot that found bad input */
static col_status report(const cu_check_info *in, const cu_check_slot *s, col_err *err)
{
    long long pos = s->pos, val = s->val;
    switch (in->kind) {
    case CU_CHECK_IDS:
        return col_err_set(err, COL_EINVAL, "%s: token id %lld at position %lld is outside the vocabulary (0..%lld)",
                           in->op, val, pos, (long long)(in->limit - 1));
    case CU_CHECK_TARGETS:
        return col_err_set(err, COL_EINVAL,
                           "%s: target %lld at row %lld is outside the classes (0..%lld) and is not ignore_index (%lld)",
                           in->op, val, pos, (long long)(in->limit - 1), (long long)in->ign);
    case CU_CHECK_ROWS:
        if (pos % 2 == 0)
            return col_err_set(err, COL_EINVAL, "%s: batch row %lld uses cache row %lld, outside the cache's %lld rows",
                               in->op, pos / 2, val, (long long)in->ign);
        return col_err_set(err, COL_EINVAL, "%s: batch row %lld at position %lld + %lld tokens exceeds the cache of %lld",
                           in->op, pos / 2, val, (long long)in->T, (long long)in->limit);
    case CU_CHECK_KV:
        return col_err_set(err, COL_EINVAL, "%s: position %lld + %lld tokens exceeds the cache of %lld", in->op, val,
                           (long long)in->T, (long long)in->limit);
    default:
        return col_err_set(err, COL_EINVAL, "%s: cache position %lld + %lld new tokens exceeds the cache of %lld", in->op,
                           val, (long long)in->T, (long long)in->limit);
    }
}

/* with chk_mu held: waits for the stream (what the caller queued before
 * included), reads the used slots back, resets them */
static col_status sync_locked(col_cuda_ctx *c, col_err *err, const char *what)
{
    int used = c->chk_used;
    size_t bytes = sizeof(cu_check_slot) * (size_t)used;
    col_status st = COL_OK;
    if (used)
        st = cu_status(cudaMemcpyAsync(c->chk_host, c->chk_dev, bytes, cudaMemcpyDeviceToHost, c->stream), err, what);
    if (st == COL_OK)
        st = cu_status(cudaStreamSynchronize(c->stream), err, what);
    if (!used || st != COL_OK)
        return st;
    c->chk_used = 0;
    for (int i = 0; i < used && st == COL_OK; i++)
        if (c->chk_host[i].pos != CU_CHECK_NONE)
            st = report(&c->chk_info[i], &c->chk_host[i], err);
    /* queued: ordered before any later check on the stream */
    col_err e2 = {};
    col_status s2 = cu_status(cudaMemsetAsync(c->chk_dev, 0x7f, bytes, c->stream), st == COL_OK ? err : &e2, what);
    return st != COL_OK ? st : s2;
}

col_status cu_sync_checked(col_cuda_ctx *c, col_err *err, const char *what)
{
    pthread_mutex_lock(&c->chk_mu);
    col_status st = sync_locked(c, err, what);
    pthread_mutex_unlock(&c->chk_mu);
    return st;
}

col_status cu_check_begin(col_cuda_ctx *c, const cu_check_info *info, cu_check_slot **slot, col_err *err)
{
    *slot = NULL;
    pthread_mutex_lock(&c->chk_mu);
    if (c->chk_used == CU_CHECK_SLOTS) {
        col_status st = sync_locked(c, err, info->op);
        if (st != COL_OK) {
            pthread_mutex_unlock(&c->chk_mu);
            return st;
        }
    }
    c->chk_info[c->chk_used] = *info;
    *slot = c->chk_dev + c->chk_used++;
    return COL_OK;
}

void cu_check_end(col_cuda_ctx *c) { pthread_mutex_unlock(&c->chk_mu); }

/* ---- the per-row cache ops' rows and positions ---- */

__global__ void k_check_rows(cu_check_slot *slot, const int64_t *start, const int64_t *rows, int64_t B, int64_t R,
                             int64_t L, int64_t T)
{
    CU_GRID_LOOP(b, B) {
        int64_t r = rows ? rows[b] : b;
        if (r < 0 || r >= R)
            cu_check_bad(slot, 2 * b);
        else if (start[b] < 0 || start[b] > L - T)
            cu_check_bad(slot, 2 * b + 1);
    }
}

/* after k_check_rows (stream order): the value at the bad position */
__global__ void k_check_rows_value(cu_check_slot *slot, const int64_t *start, const int64_t *rows)
{
    long long pos = slot->pos;
    if (pos != CU_CHECK_NONE)
        slot->val = pos % 2 ? start[pos / 2] : rows ? rows[pos / 2] : pos / 2;
}

col_status cu_check_rows(col_cuda_ctx *c, cu_check_slot *slot, const int64_t *start, const int64_t *rows, int64_t B,
                         int64_t R, int64_t L, int64_t T, col_err *err, const char *what)
{
    if (B <= 0)
        return COL_OK;
    CU_LAUNCH(k_check_rows, cu_blocks(c, B), CU_THREADS, 0, c->stream)(slot, start, rows, B, R, L, T);
    CU_LAUNCH(k_check_rows_value, 1, 1, 0, c->stream)(slot, start, rows);
    return cu_launch(err, what);
}

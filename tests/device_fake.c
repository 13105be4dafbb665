/* device_fake.c - a fake GPU for the apps' tests: the glue of
 * apps/device_gpu.h over tests/fake_device.h (host blocks handed out by a
 * memory table that refuses any copy not between a host buffer and one of
 * its blocks) and the CPU kernels, each run only when its output, sources
 * and scratch are memory of those blocks. Linked in place of
 * apps/device_cuda.c into test builds of the apps (tests/finetune_fakegpu,
 * tests/chat_fakegpu), so their GPU path - the default choice, the compute
 * budget taken from free memory, the device's memory in the progress line
 * and colossal-top, plans, batches, logits and the key/value cache in device
 * memory - runs on any machine and gives the CPU's results bit for bit.
 *
 * It describes itself as a fake ("Fake GPU: CPU kernels on fake device
 * memory"). Its size is COL_FAKE_GPU_MEM bytes (default 768 MiB), the
 * blocks it holds counting as used; COL_FAKE_GPU_COUNT GPUs (default 1; 0:
 * none, as on a machine without a GPU). At exit it says on stderr if a block
 * was not given back or a kernel was handed memory outside the blocks. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>

#include "backend_cpu.h"
#include "device_gpu.h"
#include "fake_device.h"
#include "ops.h"

static col_backend cpu; /* the kernels the fake runs (one fake per process: fake_device.h's state is one too) */
static int off_device;  /* kernels refused: memory outside the blocks */

static size_t env_size(const char *name, size_t dflt)
{
    const char *v = getenv(name);
    char *end;
    unsigned long long x = v && *v ? strtoull(v, &end, 10) : 0;
    return v && *v && !*end ? (size_t)x : dflt;
}

static col_status fake_kernel(const col_node *n, const col_exec *ex, col_err *err)
{
    bool ok = n->t.data && fk_find_block(n->t.data, 1) >= 0 && (!n->scratch_bytes || fk_find_block(ex->scratch, 1) >= 0);
    for (int j = 0; j < n->nsrc && ok; j++)
        ok = n->src[j]->t.data && fk_find_block(n->src[j]->t.data, 1) >= 0;
    if (!ok) {
        off_device++;
        return col_err_set(err, COL_EINVAL, "fake GPU kernel %s (%s): memory outside the device", col_op_name(n->op),
                           n->name);
    }
    return cpu.kernel[n->op](n, ex, err);
}

int app_gpu_count(char *why, size_t n)
{
    int count = (int)env_size("COL_FAKE_GPU_COUNT", 1);
    if (count <= 0)
        snprintf(why, n, "the fake GPU library was told there is none");
    return count > 0 ? count : 0;
}

col_status app_gpu_init(col_backend *be, int index, col_err *err)
{
    (void)fk_mem_nocopy, (void)fk_mem_nosync; /* fake_device.h's other tables: not used here */
    char why[64];
    if (index < 0 || index >= app_gpu_count(why, sizeof why))
        return col_err_set(err, COL_EUNSUPPORTED, "fake GPU %d does not exist", index);
    col_status st = col_cpu_backend_init(&cpu, err);
    if (st != COL_OK)
        return st;
    *be = cpu; /* ctx: the CPU backend's (BLAS, threads) */
    be->name = "fakegpu";
    for (int op = 0; op < COL_OP_COUNT; op++)
        be->kernel[op] = cpu.kernel[op] ? fake_kernel : NULL;
    be->mem = &fk_mem;
    fk_own(be);
    return COL_OK;
}

void app_gpu_free(col_backend *be)
{
    col_cpu_backend_free(&cpu);
    if (fk.live || fk.refused || off_device)
        fprintf(stderr, "fake GPU: %d blocks not given back, %d copies refused, %d kernels off the device (%s)\n",
                fk.live, fk.refused, off_device, fk.first);
    be->ctx = NULL;
}

const char *app_gpu_name(const col_backend *be)
{
    (void)be;
    return "Fake GPU: CPU kernels on fake device memory";
}

col_status app_gpu_mem_info(const col_backend *be, size_t *free_bytes, size_t *total_bytes, col_err *err)
{
    (void)be, (void)err;
    size_t total = env_size("COL_FAKE_GPU_MEM", (size_t)768 << 20), used = 0;
    for (int i = 0; i < FK_MAXBLK; i++)
        if (fk.blk[i])
            used += fk.size[i];
    *total_bytes = total;
    *free_bytes = used < total ? total - used : 0;
    return COL_OK;
}

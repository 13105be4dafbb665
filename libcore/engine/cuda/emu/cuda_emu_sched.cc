/* cuda_emu_sched.cc - how the emulator runs a grid: each block's threads are
 * fibers of one OS thread (ucontext), so __syncthreads is a real barrier and
 * a warp's shuffles meet their partner lanes; blocks run one after another on
 * an OS thread, several OS threads (OpenMP) taking blocks in the normal mode.
 *
 * A fiber runs threads until one has to wait: a thread that ends without
 * waiting hands its fiber to the next thread not yet started, so kernels with
 * no barrier cost one call per thread and no switch. The scheduler walks the
 * block warp by warp (lanes in order): it starts or resumes each thread of a
 * warp until all of the warp wait at __syncthreads or have ended, then takes
 * the next warp. When every thread of the block waits at the same
 * __syncthreads, they are released together (a phase). Anything else, when
 * nothing can run, is an error of the kernel: threads that ended while
 * others wait at a barrier, threads at different barriers, a warp operation
 * whose mask names a lane that ended or waits elsewhere.
 *
 * The check mode runs the grid a second time in another order (blocks
 * backwards, warps backwards and rotated at each phase, lanes backwards) from
 * the same memory, and compares every allocation the arguments point to. */
#include <omp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#include <vector>

#include "cuda_emu_internal.h"

#if defined(__SANITIZE_ADDRESS__)
#define CUEMU_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define CUEMU_ASAN 1
#endif
#endif
#ifdef CUEMU_ASAN
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif

namespace cuemu {
__thread thread_state *cur;
__thread const block_state *cur_block;
} /* namespace cuemu */

alignas(256) thread_local unsigned char cuemu_dyn_smem[cuemu::SMEM_OPTIN_MAX + cuemu::SMEM_CANARY];
/* A kernel's block-scope `extern thread_local T cuemu_dyn_smem[]` (its extern
 * __shared__ array) makes g++ call the variable's TLS init function without
 * first testing that it exists; the buffer needs no initialisation, so its
 * init function is this empty one. */
extern "C" void _ZTH14cuemu_dyn_smem(void);
extern "C" void _ZTH14cuemu_dyn_smem(void) {}

namespace cuemu {
namespace {

/* A fiber's stack. The kernels' frames are small (a few KiB, AddressSanitizer's redzones included),
 * and a sanitizer's report from inside a kernel fits too. Small also because AddressSanitizer clears
 * the shadow of the whole stack at every swapcontext: 512 KiB made the op tests 6 times slower. */
constexpr size_t STACK_BYTES = 64 * 1024;

enum tstate : uint8_t { T_NEW, T_RUN, T_BAR, T_WARP, T_READY, T_DONE };

struct fiber;

struct ethread : thread_state {
    tstate state;
    fiber *f;
    const char *file; /* where it waits */
    int line;
    int kind, arg, width; /* its warp operation */
    unsigned mask;
    uint64_t val, res;
};

struct fiber {
    ucontext_t ctx;
    char *map;
    size_t map_bytes;
    char *stack;
    ethread *t;
    bool fresh; /* needs makecontext (new, or its thread was abandoned) */
    void *fake;
};

/* an OS thread's emulation state: its fibers and the block it runs */
struct worker {
    ucontext_t main_ctx;
    void *main_fake = nullptr;
    const void *main_bottom = nullptr;
    size_t main_size = 0;
    std::vector<fiber *> fibers, idle;
    fiber *running = nullptr;
    ethread th[MAX_THREADS];
    block_state blk;
    const launch_desc *L = nullptr;
    int n = 0, nw = 0;
    bool backwards = false; /* the check mode's second order */
    int epoch = 0;
    int scan_warp = 0, scan_pos = 0;
    bool failed = false;
    char msg[700];

    ~worker()
    {
        for (fiber *f : fibers) {
            munmap(f->map, f->map_bytes);
            delete f;
        }
    }
};

thread_local worker *W;
struct worker_owner {
    ~worker_owner() { delete W; }
};
thread_local worker_owner owner;

worker &me()
{
    if (!W) {
        W = new worker();
        (void)&owner; /* its destructor frees W when the thread ends */
    }
    return *W;
}

void block_fail(worker &w, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void block_fail(worker &w, const char *fmt, ...)
{
    if (w.failed)
        return;
    w.failed = true;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(w.msg, sizeof w.msg, fmt, ap);
    va_end(ap);
}

/* ---- fibers ---- */

inline void asan_start(void **save, const void *bottom, size_t size)
{
#ifdef CUEMU_ASAN
    __sanitizer_start_switch_fiber(save, bottom, size);
#else
    (void)save, (void)bottom, (void)size;
#endif
}
inline void asan_finish(void *save, const void **bottom, size_t *size)
{
#ifdef CUEMU_ASAN
    __sanitizer_finish_switch_fiber(save, bottom, size);
#else
    (void)save, (void)bottom, (void)size;
#endif
}

void fiber_main();

/* the scheduler switches to a fiber (which runs f->t) and back */
void to_fiber(worker &w, fiber *f)
{
    if (f->fresh) {
#ifdef CUEMU_ASAN
        __asan_unpoison_memory_region(f->stack, STACK_BYTES); /* frames of an abandoned thread */
#endif
        getcontext(&f->ctx);
        f->ctx.uc_stack.ss_sp = f->stack;
        f->ctx.uc_stack.ss_size = STACK_BYTES;
        f->ctx.uc_link = nullptr;
        makecontext(&f->ctx, fiber_main, 0);
        f->fresh = false;
    }
    w.running = f;
    asan_start(&w.main_fake, f->stack, STACK_BYTES);
    swapcontext(&w.main_ctx, &f->ctx);
    asan_finish(w.main_fake, nullptr, nullptr);
    w.running = nullptr;
}

/* a fiber gives control back to the scheduler (to wait, or with nothing left to run) */
void to_main(worker &w, fiber *f)
{
    asan_start(&f->fake, w.main_bottom, w.main_size);
    swapcontext(&f->ctx, &w.main_ctx);
    asan_finish(f->fake, &w.main_bottom, &w.main_size);
}

fiber *get_fiber(worker &w)
{
    if (!w.idle.empty()) {
        fiber *f = w.idle.back();
        w.idle.pop_back();
        return f;
    }
    size_t page = (size_t)sysconf(_SC_PAGESIZE), bytes = STACK_BYTES + page;
    void *m = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m == MAP_FAILED)
        return nullptr;
    mprotect(m, page, PROT_NONE); /* a guard page below the stack: an overflow faults at once */
    fiber *f = new fiber();
    f->map = (char *)m;
    f->map_bytes = bytes;
    f->stack = (char *)m + page;
    f->fresh = true;
    w.fibers.push_back(f);
    return f;
}

inline ethread *thread_at(worker &w, int warp, int pos)
{
    int lane = w.backwards ? 31 - pos : pos;
    int t = warp * 32 + lane;
    return t < w.n ? &w.th[t] : nullptr;
}

inline int warp_at(const worker &w, int i)
{
    if (!w.backwards)
        return i;
    return (w.nw - 1 - i + w.epoch) % w.nw; /* backwards, rotated by the phase */
}

/* the next thread of the scan if it has not started (a fiber that finished one goes on with it) */
ethread *next_new(worker &w)
{
    for (int p = w.scan_pos + 1; p < 32; p++) {
        ethread *e = thread_at(w, w.scan_warp, p);
        if (!e)
            continue;
        if (e->state != T_NEW)
            return nullptr;
        w.scan_pos = p;
        return e;
    }
    return nullptr;
}

void run_thread(worker &w, fiber *f, ethread *e)
{
    f->t = e;
    e->f = f;
    e->state = T_RUN;
    cur = e;
    w.L->run(w.L->closure);
    e->state = T_DONE;
    e->f = nullptr;
}

void fiber_main()
{
    worker &w = me();
    asan_finish(nullptr, &w.main_bottom, &w.main_size);
    for (;;) {
        fiber *f = w.running;
        ethread *e = f->t;
        while (e) {
            run_thread(w, f, e);
            e = w.failed ? nullptr : next_new(w);
        }
        f->t = nullptr;
        w.idle.push_back(f);
        to_main(w, f); /* parked; resumed with a new f->t */
    }
}

/* the running thread waits (state set by the caller) until the scheduler resumes it */
void wait_here(worker &w, ethread *e)
{
    fiber *f = e->f;
    to_main(w, f);
    cur = e;
}

const char *state_name(const ethread *e)
{
    switch (e->state) {
    case T_DONE: return "has returned";
    case T_BAR: return "waits at __syncthreads";
    case T_WARP: return "waits in a warp operation";
    default: return "runs";
    }
}

const char *op_name(int kind)
{
    static const char *names[] = {"__shfl_sync",       "__shfl_up_sync",    "__shfl_down_sync",  "__shfl_xor_sync",
                                  "__ballot_sync",     "__all_sync",        "__any_sync",        "__syncwarp",
                                  "__reduce_add_sync", "__reduce_min_sync", "__reduce_max_sync", "__reduce_and_sync",
                                  "__reduce_or_sync",  "__reduce_xor_sync"};
    return kind >= 0 && kind <= W_RXOR ? names[kind] : "warp operation";
}

/* ---- one block ---- */

/* nothing can run: describe why (every case is a bug of the kernel) */
void diagnose(worker &w)
{
    for (int t = 0; t < w.n; t++) {
        ethread *e = &w.th[t];
        if (e->state != T_WARP)
            continue;
        for (int l = 0; l < 32; l++) {
            if (!(e->mask >> l & 1u))
                continue;
            int o = (int)e->warp * 32 + l;
            ethread *p = &w.th[o];
            if (p->state == T_WARP && p->mask == e->mask)
                continue;
            if (p->state == T_WARP)
                block_fail(w, "thread %d is in %s (%s:%d) with mask 0x%08x, but lane %d is in %s (%s:%d) with mask 0x%08x",
                           t, op_name(e->kind), e->file, e->line, e->mask, l, op_name(p->kind), p->file, p->line, p->mask);
            else if (p->state == T_BAR)
                block_fail(w, "thread %d is in %s (%s:%d) with mask 0x%08x, but lane %d waits at __syncthreads (%s:%d)", t,
                           op_name(e->kind), e->file, e->line, e->mask, l, p->file, p->line);
            else
                block_fail(w, "thread %d is in %s (%s:%d) with mask 0x%08x, but lane %d %s", t, op_name(e->kind), e->file,
                           e->line, e->mask, l, state_name(p));
            return;
        }
    }
    block_fail(w, "the block's threads can make no progress");
}

/* the threads left waiting belong to no one: their fibers start afresh next time */
void abandon(worker &w)
{
    for (int t = 0; t < w.n; t++) {
        ethread *e = &w.th[t];
        if (e->f && e->state != T_DONE) {
            e->f->fresh = true;
            e->f->t = nullptr;
            w.idle.push_back(e->f);
            e->f = nullptr;
        }
    }
}

void run_block(worker &w, uint64_t b)
{
    const launch_desc &L = *w.L;
    unsigned bx = L.block.x, by = L.block.y;
    w.blk.dim = L.block;
    w.blk.grid = L.grid;
    w.blk.idx.x = (unsigned)(b % L.grid.x);
    w.blk.idx.y = (unsigned)(b / L.grid.x % L.grid.y);
    w.blk.idx.z = (unsigned)(b / ((uint64_t)L.grid.x * L.grid.y));
    cur_block = &w.blk;
    for (int t = 0; t < w.n; t++) {
        ethread *e = &w.th[t];
        e->tid.x = (unsigned)t % bx;
        e->tid.y = (unsigned)t / bx % by;
        e->tid.z = (unsigned)t / (bx * by);
        e->linear = (unsigned)t;
        e->lane = (unsigned)t & 31u;
        e->warp = (unsigned)t >> 5;
        e->state = T_NEW;
        e->f = nullptr;
    }
    w.epoch = 0;
    for (;;) {
        for (int wi = 0; wi < w.nw && !w.failed; wi++) {
            w.scan_warp = warp_at(w, wi);
            bool progress = true;
            while (progress && !w.failed) {
                progress = false;
                for (w.scan_pos = 0; w.scan_pos < 32 && !w.failed; w.scan_pos++) {
                    ethread *e = thread_at(w, w.scan_warp, w.scan_pos);
                    if (!e || (e->state != T_NEW && e->state != T_READY))
                        continue;
                    progress = true;
                    fiber *f = e->f;
                    if (e->state == T_NEW) {
                        f = get_fiber(w);
                        if (!f) {
                            block_fail(w, "out of memory for the stacks of %d threads", w.n);
                            break;
                        }
                        f->t = e;
                        e->f = f;
                    }
                    e->state = T_RUN;
                    cur = e;
                    to_fiber(w, f);
                }
            }
        }
        if (w.failed)
            break;
        int done = 0, bar = 0, warp = 0;
        const ethread *first_bar = nullptr, *first_done = nullptr;
        for (int t = 0; t < w.n; t++) {
            const ethread *e = &w.th[t];
            done += e->state == T_DONE;
            warp += e->state == T_WARP;
            if (e->state == T_BAR && !bar++)
                first_bar = e;
            if (e->state == T_DONE && !first_done)
                first_done = e;
        }
        if (done == w.n)
            break;
        if (warp) {
            diagnose(w);
            break;
        }
        if (done) {
            block_fail(w, "thread %u has returned while thread %u waits at __syncthreads (%s:%d): every thread of a block "
                          "must reach each __syncthreads",
                       first_done->linear, first_bar->linear, first_bar->file, first_bar->line);
            break;
        }
        for (int t = 0; t < w.n; t++) {
            ethread *e = &w.th[t];
            if (e->line != first_bar->line || strcmp(e->file, first_bar->file) != 0) {
                block_fail(w, "divergent __syncthreads: thread %u waits at %s:%d, thread %u at %s:%d", first_bar->linear,
                           first_bar->file, first_bar->line, e->linear, e->file, e->line);
                break;
            }
            e->state = T_READY;
        }
        if (w.failed)
            break;
        w.epoch++;
    }
    if (w.failed)
        abandon(w);
    cur = nullptr;
}

/* ---- a grid ---- */

struct grid_run {
    const launch_desc *L;
    uint64_t blocks;
    bool backwards, parallel;
    unsigned char smem_fill;
    /* the failure of the lowest block, so the message does not depend on scheduling */
    uint64_t failed_block = UINT64_MAX;
    char msg[800];
};

/* runs block b on this OS thread; false after a failure */
bool grid_block(grid_run &g, uint64_t b)
{
    worker &w = me();
    const launch_desc &L = *g.L;
    w.L = &L;
    w.n = (int)(L.block.x * L.block.y * L.block.z);
    w.nw = (w.n + 31) / 32;
    w.backwards = g.backwards;
    w.failed = false;
    size_t sh = L.shmem;
    memset(cuemu_dyn_smem, g.smem_fill, sh); /* shared memory starts as garbage: NaN bytes (or another pattern) */
    bool canary = !g.parallel;
    if (canary)
        memset(cuemu_dyn_smem + sh, 0xa5, SMEM_CANARY);
#ifdef CUEMU_ASAN
    __asan_poison_memory_region(cuemu_dyn_smem + sh, SMEM_OPTIN_MAX + SMEM_CANARY - sh);
#endif
    run_block(w, b);
#ifdef CUEMU_ASAN
    __asan_unpoison_memory_region(cuemu_dyn_smem + sh, SMEM_OPTIN_MAX + SMEM_CANARY - sh);
#endif
    if (!w.failed && canary)
        for (size_t i = 0; i < SMEM_CANARY; i++)
            if (cuemu_dyn_smem[sh + i] != 0xa5) {
                block_fail(w, "a thread wrote byte %zu of dynamic shared memory, past the %zu bytes the launch gave", sh + i,
                           sh);
                break;
            }
    if (!w.failed)
        return true;
#pragma omp critical(cuemu_grid_fail)
    if (b < g.failed_block) {
        snprintf(g.msg, sizeof g.msg, "%s", w.msg);
#pragma omp atomic write
        g.failed_block = b;
    }
    return false;
}

bool run_grid(grid_run &g)
{
    if (g.parallel && g.blocks > 1 && !omp_in_parallel()) {
        /* after a failure only the blocks before it still run: the lowest failing block is always the one reported */
#pragma omp parallel for schedule(dynamic, 1)
        for (uint64_t b = 0; b < g.blocks; b++) {
            uint64_t first;
#pragma omp atomic read
            first = g.failed_block;
            if (b < first)
                grid_block(g, b);
        }
    } else {
        for (uint64_t i = 0; i < g.blocks; i++)
            if (!grid_block(g, g.backwards ? g.blocks - 1 - i : i))
                break;
    }
    return g.failed_block == UINT64_MAX;
}

} /* namespace */

/* ---- what the kernels call ---- */

void syncthreads(const char *file, int line)
{
    worker &w = me();
    ethread *e = (ethread *)cur;
    e->file = file;
    e->line = line;
    e->state = T_BAR;
    wait_here(w, e);
}

uint64_t warp_op(const char *file, int line, int kind, unsigned mask, uint64_t value, int arg, int width)
{
    worker &w = me();
    ethread *e = (ethread *)cur;
    e->file = file, e->line = line, e->kind = kind, e->mask = mask, e->val = value, e->arg = arg, e->width = width;
    e->state = T_WARP;
    unsigned lane = e->lane;
    if (!(mask >> lane & 1u) || width < 1 || width > 32 || (width & (width - 1))) {
        block_fail(w, "thread %u: %s (%s:%d) with mask 0x%08x and width %d: the mask must name the calling lane, the width "
                      "be a power of two up to 32",
                   e->linear, op_name(kind), file, line, mask, width);
        wait_here(w, e); /* never resumed: the block is abandoned */
    }
    for (int l = 0; l < 32; l++) {
        if (!(mask >> l & 1u))
            continue;
        int o = (int)e->warp * 32 + l;
        if (o >= w.n) {
            block_fail(w, "thread %u: %s (%s:%d) with mask 0x%08x names lane %d, which the block of %d threads does not have",
                       e->linear, op_name(kind), file, line, mask, l, w.n);
            wait_here(w, e);
        }
        const ethread *p = &w.th[o];
        if (p->state != T_WARP || p->mask != mask)
            return wait_here(w, e), e->res; /* not all here yet: the last to come computes every lane's result */
    }
    ethread *base = &w.th[e->warp * 32];
    uint64_t vote = 0;
    uint32_t red = kind == W_RMIN ? (arg ? 0x7fffffffu : 0xffffffffu) : kind == W_RMAX ? (arg ? 0x80000000u : 0u)
                   : kind == W_RAND ? 0xffffffffu : 0u;
    for (int l = 0; l < 32; l++) {
        if (!(mask >> l & 1u))
            continue;
        const ethread *p = &base[l];
        if (p->kind != kind || p->width != width) {
            block_fail(w, "lanes %u and %d of warp %u meet in different warp operations: %s (%s:%d) and %s (%s:%d)", lane, l,
                       e->warp, op_name(kind), file, line, op_name(p->kind), p->file, p->line);
            wait_here(w, e);
        }
        vote |= (uint64_t)(p->val != 0) << l;
        uint32_t v = (uint32_t)p->val;
        switch (kind) {
        case W_RADD: red += v; break;
        case W_RMIN: red = (arg ? (int32_t)v < (int32_t)red : v < red) ? v : red; break;
        case W_RMAX: red = (arg ? (int32_t)v > (int32_t)red : v > red) ? v : red; break;
        case W_RAND: red &= v; break;
        case W_ROR: red |= v; break;
        case W_RXOR: red ^= v; break;
        default: break;
        }
    }
    for (int l = 0; l < 32; l++) {
        if (!(mask >> l & 1u))
            continue;
        ethread *p = &base[l];
        int seg = l & ~(width - 1), src = l;
        switch (kind) {
        case W_SHFL: src = seg + (p->arg & (width - 1)); break;
        case W_UP: src = (l - seg) >= p->arg ? l - p->arg : l; break;
        case W_DOWN: src = (l - seg) + p->arg < width ? l + p->arg : l; break;
        case W_XOR: src = l ^ (p->arg & 31); src = src >= seg + width ? l : src; break;
        default: break;
        }
        if (kind <= W_XOR && !(mask >> src & 1u)) {
            block_fail(w, "lane %d of warp %u reads lane %d in %s (%s:%d), which is not in the mask 0x%08x", l, e->warp, src,
                       op_name(kind), p->file, p->line, mask);
            wait_here(w, e);
        }
        p->res = kind == W_BALLOT ? vote
                 : kind == W_ALL  ? (uint64_t)((vote & mask) == mask)
                 : kind == W_ANY  ? (uint64_t)((vote & mask) != 0)
                 : kind == W_SYNC ? 0
                 : kind >= W_RADD ? red
                                  : base[src].val;
        if (p != e)
            p->state = T_READY;
    }
    e->state = T_RUN;
    return e->res;
}

void syncwarp(const char *file, int line, unsigned mask) { warp_op(file, line, W_SYNC, mask, 0, 0, 32); }

/* ---- launches ---- */

namespace {

/* an allocation the arguments point to, and its contents (check mode) */
struct snap {
    region r;
    std::vector<unsigned char> before, after;
};

void find_regions(const launch_desc &d, std::vector<snap> &out)
{
    const unsigned char *a = (const unsigned char *)d.args;
    for (size_t off = 0; off + sizeof(uintptr_t) <= d.args_bytes; off += sizeof(uintptr_t)) {
        uintptr_t v;
        memcpy(&v, a + off, sizeof v);
        region r;
        if (!v || !find_region((const void *)v, &r))
            continue;
        bool seen = false;
        for (const snap &s : out)
            seen |= s.r.base == r.base;
        if (!seen)
            out.push_back(snap{r, {}, {}});
    }
}

cudaError_t check_config(const launch_desc &d)
{
    const dim3 &b = d.block, &g = d.grid;
    uint64_t threads = (uint64_t)b.x * b.y * b.z;
    if (!b.x || !b.y || !b.z || b.x > 1024 || b.y > 1024 || b.z > 64 || threads > (uint64_t)MAX_THREADS)
        return fail(cudaErrorInvalidConfiguration, "%s (%s:%d): a block of %u x %u x %u threads (at most 1024 in all; x, y up "
                    "to 1024, z up to 64)", d.name, d.file, d.line, b.x, b.y, b.z);
    if (!g.x || !g.y || !g.z || g.x > 2147483647u || g.y > 65535 || g.z > 65535)
        return fail(cudaErrorInvalidConfiguration, "%s (%s:%d): a grid of %u x %u x %u blocks (x up to 2^31-1, y, z up to "
                    "65535, none 0)", d.name, d.file, d.line, g.x, g.y, g.z);
    int lim = func_smem_limit(d.kernel);
    size_t max = lim > 0 ? (size_t)lim : SMEM_STATIC_MAX;
    if (d.shmem > max)
        return fail(cudaErrorInvalidValue, "%s (%s:%d): %zu bytes of dynamic shared memory, the kernel's limit is %zu (%s)",
                    d.name, d.file, d.line, d.shmem, max,
                    lim > 0 ? "cudaFuncAttributeMaxDynamicSharedMemorySize" : "48 KiB without cudaFuncSetAttribute");
    if (!stream_ok(d.stream))
        return fail(cudaErrorInvalidResourceHandle, "%s (%s:%d): the stream is not a live stream", d.name, d.file, d.line);
    for (int i = 0; i < d.nptr; i++) {
        region r;
        if (d.ptr_args[i] && !find_region(d.ptr_args[i], &r))
            return fail(cudaErrorIllegalAddress, "%s (%s:%d): pointer argument %d (%p) is not memory the device can reach "
                        "(cudaMalloc, cudaMallocManaged, pinned or registered host memory)", d.name, d.file, d.line, i + 1,
                        d.ptr_args[i]);
    }
    return cudaSuccess;
}

} /* namespace */

void launch(const launch_desc &d)
{
    if (cur) {
        fail(cudaErrorNotSupported, "%s (%s:%d): a launch from inside a kernel (dynamic parallelism) is not emulated", d.name,
             d.file, d.line);
        return;
    }
    if (check_config(d) != cudaSuccess)
        return;
    grid_run g;
    g.L = &d;
    g.blocks = (uint64_t)d.grid.x * d.grid.y * d.grid.z;
    g.backwards = false;
    g.smem_fill = 0xff;
    g.parallel = !cuemu_check();
    if (g.parallel) {
        if (!run_grid(g))
            fail(cudaErrorLaunchFailure, "%s (%s:%d), block %llu: %s", d.name, d.file, d.line,
                 (unsigned long long)g.failed_block, g.msg);
        return;
    }
    std::vector<snap> snaps;
    find_regions(d, snaps);
    for (snap &s : snaps)
        s.before.assign((unsigned char *)s.r.base, (unsigned char *)s.r.base + s.r.bytes);
    if (!run_grid(g)) {
        fail(cudaErrorLaunchFailure, "%s (%s:%d), block %llu: %s", d.name, d.file, d.line,
             (unsigned long long)g.failed_block, g.msg);
        return;
    }
    for (snap &s : snaps) {
        s.after.assign((unsigned char *)s.r.base, (unsigned char *)s.r.base + s.r.bytes);
        memcpy((void *)s.r.base, s.before.data(), s.r.bytes);
    }
    grid_run g2;
    g2.L = &d;
    g2.blocks = g.blocks;
    g2.backwards = true;
    g2.parallel = false;
    g2.smem_fill = 0x7f;
    if (!run_grid(g2)) {
        fail(cudaErrorLaunchFailure, "%s (%s:%d), block %llu, threads in the check mode's second order: %s", d.name, d.file,
             d.line, (unsigned long long)g2.failed_block, g2.msg);
        return;
    }
    for (const snap &s : snaps) {
        const unsigned char *now = (const unsigned char *)s.r.base;
        for (size_t i = 0; i < s.r.bytes; i++)
            if (now[i] != s.after[i]) {
                fail(cudaErrorLaunchFailure,
                     "%s (%s:%d): the result depends on the order of the threads (a missing __syncthreads or __syncwarp, "
                     "a race, or a read of uninitialised shared memory): byte %zu of the %zu-byte allocation at %p is "
                     "0x%02x in one order and 0x%02x in another",
                     d.name, d.file, d.line, i, s.r.bytes, (void *)s.r.base, s.after[i], now[i]);
                return;
            }
    }
}

} /* namespace cuemu */

/* mb_store.h - where a diffusion model's weights live, and how its graphs run.
 *
 * One store holds the weights of every component of a pipeline (text
 * encoder, UNet, VAE) in memtier chunks (kind MT_PARAM) on the host, within
 * a host budget. A component's graph is bound to them by parameter name
 * (mb_builder.h): the first graph that names a tensor loads it from the
 * checkpoint, later graphs of the same component (another batch, another
 * image size) share it.
 *
 * A graph runs through a mb_exec: a plan of the graph on the store's
 * backend. With a compute budget (required on a GPU, optional on the CPU)
 * the plan runs through a memtier compute tier of that many bytes: weight
 * chunks are copied in just before the ops that read them and dropped after,
 * so a UNet larger than the GPU's memory still runs, with results bitwise
 * those of an unlimited run. The execs of one store share one activation
 * arena (they never run at the same time).
 */
#ifndef COL_MB_STORE_H
#define COL_MB_STORE_H

#include <stddef.h>

#include "backend.h"
#include "checkpoint.h"
#include "mb_builder.h"
#include "mb_source.h"
#include "memtier.h"
#include "plan.h"

typedef struct {
    size_t host_budget;      /* host bytes the weight chunks may take; 0 = unlimited */
    size_t compute_budget;   /* > 0: graphs run through a compute tier of this many bytes; a GPU needs one */
    size_t chunk_bytes;      /* 0 = memtier's default */
} mb_store_config;

typedef struct mb_store mb_store;

/* be runs every graph (the CPU's, or a GPU's: then compute_budget > 0, else COL_EINVAL
 * naming the compute budget). Free the store before the backend. */
col_status mb_store_create(const mb_store_config *cfg, const col_backend *be, mb_store **out, col_err *err);
void mb_store_free(mb_store *s);
const col_backend *mb_store_backend(const mb_store *s);
mt_pool *mb_store_pool(mb_store *s);

/* Binds every parameter of b: a name the store holds (from an earlier graph)
 * gets that memory (its shape must agree), a new one a place in the pool
 * filled from src by name (f32). src may be NULL when every name is held
 * already. The message names the tensor that is missing or has another
 * shape, or the host budget that is too small. */
col_status mb_store_bind(mb_store *s, mb_builder *b, const mb_source *src, col_err *err);
/* Bytes of weights the store holds, and how many tensors. */
size_t mb_store_bytes(const mb_store *s);
int mb_store_count(const mb_store *s);

typedef struct mb_exec mb_exec;
/* A plan computing outputs[0..n) of g, whose parameters are bound to s. */
col_status mb_exec_create(mb_store *s, col_graph *g, col_node *const *outputs, int n, mb_exec **out, col_err *err);
void mb_exec_free(mb_exec *x);
/* Copies host data into an input leaf, or an output's data out (after a run). */
col_status mb_exec_upload(mb_exec *x, col_node *n, const void *src, size_t bytes, col_err *err);
col_status mb_exec_download(mb_exec *x, col_node *n, void *dst, size_t bytes, col_err *err);
col_status mb_exec_run(mb_exec *x, col_err *err);
/* The activation arena and scratch the plan needs (the compute tier adds the weight chunks it holds). */
size_t mb_exec_arena_bytes(const mb_exec *x);

#endif

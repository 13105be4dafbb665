/* mb_builder.h - the parameters of a diffusion component (CLIP text encoder,
 * UNet, VAE), created while its graph is built.
 *
 * A component's build function asks for each weight by its diffusers /
 * transformers name as it needs it (mb_weight); the builder creates the leaf
 * on the graph and remembers the full name, so the list of parameters and
 * the graph come from the same code, in first-use order. Whoever runs the
 * graph binds memory to each leaf by name afterwards (mb_bind_checkpoint for
 * tests and simple runs; the memtier session for the programs).
 *
 * Builders record the first error (a bad shape, no memory) and return NULL
 * from then on, like the graph's op builders; mb_builder_status reports it.
 */
#ifndef COL_MB_BUILDER_H
#define COL_MB_BUILDER_H

#include <stdbool.h>
#include <stdint.h>

#include "checkpoint.h"
#include "graph.h"
#include "status.h"

#define MB_NAME_MAX 192

typedef struct {
    char name[MB_NAME_MAX];      /* e.g. "down_blocks.0.attentions.0.proj_in.weight" */
    int ndim;
    int64_t shape[4];
    col_node *node;              /* the leaf on the builder's graph */
    bool trainable;              /* a col_param leaf (gets a gradient), else a col_input */
    void *owned;                 /* memory mb_bind_checkpoint allocated for it */
} mb_param;

/* LoRA adapters on a component's linear projections, as PEFT's
 * LoraConfig(r=rank, lora_alpha=alpha, target_modules=targets) adds them:
 * mb_linear of a module whose full name is a target or ends with "." and a
 * target (e.g. "to_q" matches "down_blocks.0.attentions.0.transformer_blocks.0.attn1.to_q")
 * computes base(x) + lora_B(lora_A(x)) * (alpha / rank), with lora_A
 * [rank, in] and lora_B [out, rank] trainable parameters named
 * MODULE.lora_A.weight and MODULE.lora_B.weight (PEFT's names without the
 * adapter name), the base weights as the builder's trainable flag says. */
typedef struct {
    int rank;                    /* 0: no adapters */
    float alpha;                 /* the scale is alpha / rank */
    const char *const *targets;  /* NULL-terminated module names */
} mb_lora_spec;

typedef struct {
    col_graph *g;
    bool trainable;              /* leaves are col_param (they get gradients) rather than col_input */
    col_dtype dtype;             /* the weights' dtype on the graph (COL_F32) */
    char prefix[MB_NAME_MAX];    /* prepended to every name (e.g. "text_model." or ""), see mb_push/mb_pop */
    int depth;                   /* scopes pushed */
    int scope_len[16];           /* the prefix's length before each push */
    const mb_lora_spec *lora;    /* NULL: mb_linear adds no adapters */
    mb_param *params;
    int n, cap;
    col_status status;
    col_err err;
} mb_builder;

/* A builder on graph g; free with mb_builder_free (the graph stays the caller's). */
void mb_builder_init(mb_builder *b, col_graph *g, bool trainable, col_dtype dtype);
void mb_builder_free(mb_builder *b);

/* Records an error (the first one wins) and returns NULL. */
col_node *mb_fail(mb_builder *b, col_status st, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* The first error of the builder or of its graph. */
col_status mb_builder_status(const mb_builder *b, col_err *err);

/* Name scopes: mb_push(b, "down_blocks.%d.", i) appends to the prefix, mb_pop
 * removes what the matching push added. */
void mb_push(mb_builder *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void mb_pop(mb_builder *b);

/* The weight prefix+name of the given shape: a new leaf, or the same one when
 * the name was asked for before (its shape must agree). */
col_node *mb_weight(mb_builder *b, int ndim, const int64_t *shape, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* The same with the leaf's kind chosen here rather than by b->trainable
 * (a frozen base beside trainable adapters). */
col_node *mb_weight_kind(mb_builder *b, bool trainable, int ndim, const int64_t *shape, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

/* nn.Linear named prefix+module: x [..., in] @ MODULE.weight [out, in]^T
 * (+ MODULE.bias [out] when bias), with LoRA adapters when b->lora targets
 * the module (see mb_lora_spec). Components build every projection an
 * adapter may target through this. */
col_node *mb_linear(mb_builder *b, col_node *x, int64_t out, int64_t in, bool bias, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));
/* Whether module name (full, e.g. "mid_block.attentions.0.transformer_blocks.0.attn2.to_out.0") is a target of
 * spec. */
bool mb_lora_targets(const mb_lora_spec *spec, const char *module);

/* Index of a parameter by full name, or -1. */
int mb_find(const mb_builder *b, const char *name);

/* Binds every parameter to a fresh host buffer filled from checkpoint c by
 * name (any stored float dtype, converted to f32; the builder's dtype must be
 * COL_F32). The buffers are freed by mb_builder_free. A missing tensor is
 * COL_EFORMAT and a shape that differs COL_ESHAPE, naming the tensor. */
col_status mb_bind_checkpoint(mb_builder *b, const col_ckpt *c, col_err *err);

#endif

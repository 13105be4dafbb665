/* lm_parplan.h - the layout planner (issue 18): a cost model that predicts, for every legal way of splitting a
 * training step over N processes, each process's memory and the step's time, and ranks the layouts.
 *
 * A layout is dp x tp x pp x sp = N processes (tp in one of the modes of lm_par.h: 1D, 2D q x q, 2.5D q x q x d,
 * 3D q x q x q; sp ring or Ulysses), a ZeRO stage 1..3 over the dp processes and M micro-batches per pipeline
 * (pp > 1 only; one interleaving stage). Legal: col_par_layout_check (heads, widths, vocabulary, sequence and rows
 * divisible as the mode needs, checked for one micro-batch's rows), col_pp_check (at most one stage per layer),
 * the rows of a step divisible by dp and a pipeline's rows by M, and what the sessions support: a pipeline stage
 * runs in f32 without a compute tier or the NVMe tier (lm_pipeline.h), and the caller may exclude tp or sp
 * (COL_PLAN_NO_TP / COL_PLAN_NO_SP: a program that cannot run them yet).
 *
 * Notation (per step): B rows of s tokens, h hidden, a heads, h_kv = n_kv_head * head_dim, f the MLP width, L
 * layers, V the vocabulary. e = 4: activations are f32 in every precision (lm_trainer.h); pb = bytes of a
 * parameter and of a gradient (4 in f32, 2 in bf16/f16); ob = optimizer state bytes per parameter (AdamW 8) plus
 * 4 for the f32 master under mixed precision. Per micro-batch of one model-parallel group: b = B / (dp M) rows,
 * the unit U = b s h e bytes.
 *
 * Compute. The matmul parameters are W = L (h (h + 2 h_kv) + h h + k f h) + V h (k = 2 matrices in a GELU MLP,
 * 3 in a gated one; V h: the head's matmul). Training costs 6 flops per matmul parameter and token (forward 2,
 * backward 4) plus attention's 12 L h s per token (QK^T and AV: 2 s h each forward, twice that backward): flops
 * = (6 W + 12 L h s) B s. A pipeline stage recomputes its forward in the backward pass (lm_pipeline.h), and so
 * does --checkpointing: then 8 W + 16 L h s. A process computes the largest stage's layers (ceil(L / pp)) and
 * the head on its share of the tokens, B s / (dp tp sp); t_compute = its flops / rate.flops. Memory-bound work (the optimizer's pass over its parameters and states: read 2 pb +
 * ob, write pb + ob bytes per owned parameter; the elementwise ops: 3 passes over the activations' bytes) takes
 * t_memory = bytes / rate.mem_bw (0 when mem_bw is 0).
 *
 * Communication, bytes each process sends per step (a collective over P processes as the ring algorithms of
 * comm.h count them), and t = bytes / rate.link_bw + messages * rate.link_lat:
 *   DP (ZeRO 1, 2, 3 alike, lm_dp.c): reduce-scatter of the gradients + all-gather of the parameters, 2 (P-1)/P
 *      of the process's parameter bytes (G = its parameters * pb), 2 (P-1) messages per chunk (one chunk per
 *      layer and one for the embeddings); with sp > 1 the weights are shared by the sp processes too, whose
 *      gradients are all-reduced: 2 (sp-1)/sp G more.
 *   TP per layer and micro-batch, in units of U: 1D 4 all-reduces (2 forward, 2 backward), 4 * 2 (t-1)/t;
 *      2D 6 (q-1)/q; 2.5D 3 (q-1)(d+1)/(d q); 3D 6 (q-1)/q^3 (the published volumes); 1D adds one all-reduce of
 *      U for the vocabulary-parallel embedding. Messages: 1D 8 (t-1) per layer, 2D and 2.5D 24 q (SUMMA's
 *      broadcasts), 3D 36 (q-1).
 *   SP per layer and micro-batch: ring 2 (sp-1) passes of a K and a V block (2 b (s/sp) h_kv' e bytes, h_kv'
 *      the key/value width a tp process holds), 2 (sp-1) messages; Ulysses 4 all-to-alls forward and 4 backward
 *      of the local q, k, v and output (b (s/sp) (2 h' + 2 h_kv') e bytes, (sp-1)/sp of it leaving), 8 (sp-1)
 *      messages.
 *   PP: per micro-batch one hidden state forward and one gradient backward across each stage boundary, b s h
 *      e / (sp, and tp for the 2D/2.5D/3D modes whose activations are split) bytes each; an inner stage sends 2 M
 *      of them.
 * The pipeline's bubble: a step takes (M + P - 1) / M times its stage's work (compute, tp and sp traffic), the
 * bubble being the fraction (P - 1) / (M + P - 1) of it.
 *
 * Memory per process (bytes): the parameters it holds, Psi = the largest stage's (its layers, with the
 * embeddings on the first stage and the head on the last, both when tied) / tp, then by ZeRO stage over dp
 * (ZeRO's paper): 1: Psi (2 pb) + Psi ob / dp; 2: Psi pb + Psi (pb + ob) / dp; 3: Psi (2 pb + ob) / dp. These
 * are the model states, held in host memory (host_bytes bounds them: 0 = no bound) and what does not fit there
 * on the NVMe tier when allowed (states first; gradients and parameters there need a compute tier, as
 * lm_trainer.h says), read and written once a step: t_nvme = 2 bytes / rate.nvme_bw. Activations, per layer and
 * token of a micro-batch, in elements: 4 h / (1D: 1, the other modes: tp) replicated around the layer plus
 * (4 h + 2 f) / tp inside the split products plus the attention's scores and probabilities, 2 a s / (tp split)
 * (ring: / sp more: one block at a time), all / sp for the sequence split; with checkpointing h per layer is
 * kept plus one layer's whole. The logits and their gradient add 2 b s V e / tp. One micro-batch's activations
 * are live at a time (a pipeline stage's one arena, lm_pipeline.h, plus the min(P, M) stage inputs of b s h e
 * bytes it keeps for its backward passes). With a compute tier (device_bytes > 0)
 * the activations and the working set (two layers' parameters and gradients) must fit in it, and the
 * parameters and gradients cross host_link_bw once each way a step; without one the activations are host memory
 * outside host_bytes (as col_lm_memory counts them), reported but not bounded.
 *
 * Ignored (said here so the numbers are read for what they are): overlap of communication with computation (the
 * DP exchange overlaps the backward pass in lm_dp.c: predictions are an upper bound there), contention between
 * collectives of different groups for the same links, per-operation overheads (kernel launches, graph
 * scheduling: large for tiny models), the embedding lookups, norms and softmax beyond the memory-bound term,
 * ZeRO 3's gathered parameters held through the step (transient), load imbalance between pipeline stages beyond
 * the largest stage, the interleaved schedule, and rates that change with the matrix shapes each layout gives.
 *
 * Nothing here prints or exits; the ranking is formatted into a caller's buffer. */
#ifndef COL_MODELS_LM_PARPLAN_H
#define COL_MODELS_LM_PARPLAN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "lm.h"
#include "lm_par.h"

/* Measured rates of this machine (a probe). */
typedef struct {
    double flops;        /* flop/s of one process's matmuls at the model's sizes (all processes running) */
    double link_bw;      /* bytes/s one process sends in a collective between the run's processes */
    double link_lat;     /* seconds per message of a collective */
    double mem_bw;       /* bytes/s of one process streaming memory; 0: memory-bound work not counted */
    double nvme_bw;      /* bytes/s of the NVMe tier; 0: 1e9 */
    double host_link_bw; /* bytes/s between host memory and a compute tier; 0: its transfers not counted */
} col_plan_rates;

/* Layouts the caller cannot run (the choice and the ranking leave them out). */
/* NO_MP_PP: no tensor or sequence parallelism inside pipeline stages (a program whose stages hold whole layers) */
enum { COL_PLAN_NO_TP = 1u << 0, COL_PLAN_NO_SP = 1u << 1, COL_PLAN_NO_PP = 1u << 2, COL_PLAN_NO_MP_PP = 1u << 3 };

typedef struct {
    col_lm_config model;
    int batch, seq;        /* rows per optimizer step (the whole run's) and tokens per row */
    int world;             /* N processes */
    size_t device_bytes;   /* each process's compute tier (0: none: the graphs run on host memory) */
    size_t host_bytes;     /* each process's host budget for parameters, gradients and states (0: unbounded) */
    bool nvme;             /* an NVMe tier may hold what host_bytes does not */
    col_dtype precision;   /* COL_F32, COL_BF16 or COL_F16 */
    int opt_state_bytes;   /* optimizer state bytes per parameter (AdamW 8, SGD with momentum 4) */
    bool checkpointing;    /* activation checkpointing (recompute each block in backward) */
    col_plan_rates rates;
    unsigned exclude;      /* COL_PLAN_NO_* */
    int zero;              /* 1..3: only this ZeRO stage; 0: any */
    int micro_batches;     /* > 0: only this many micro-batches (pipelines); 0: a few divisors */
} col_plan_input;

typedef struct {
    int dp, pp, micro_batches, zero; /* zero 0 when dp is 1 (no ZeRO); micro_batches 1 without a pipeline */
    col_par_layout par;              /* tp (mode, q, d) and sp (mode); tp, sp 0 read as 1 */
} col_plan_layout;

/* One layout's prediction. Bytes per process; seconds per step. */
typedef struct {
    col_plan_layout l;
    double params, grads, states;   /* model states held (after ZeRO) */
    double activations;             /* peak activations (one micro-batch's, and a pipeline's stage inputs) */
    double host, nvme, device;      /* where they are: host memory (model states; activations too without a
                                       compute tier), the NVMe tier, the compute tier */
    bool fits;
    char why_not[160];              /* when it does not fit: which budget, in a few words */
    double flops;                   /* this process's flops per step */
    double t_compute, t_memory, t_nvme, t_tier, t_bubble; /* t_bubble: the pipeline's idle time */
    double b_dp, b_tp, b_sp, b_pp;  /* bytes sent per step */
    double m_dp, m_tp, m_sp, m_pp;  /* messages per step */
    double t_dp, t_tp, t_sp, t_pp;
    double t_step;                  /* the sum */
} col_plan_entry;

/* Predicts one layout (its counts must multiply to in->world; par's q and d are filled): COL_EINVAL with the
 * reason when it is not legal for this model and run. */
col_status col_plan_predict(const col_plan_input *in, const col_plan_layout *l, col_plan_entry *out, col_err *err);

/* Every legal layout of in->world processes, predicted and ranked: those that fit first, by predicted step time
 * (ties: less memory first), then those that do not, by memory. *out (free()) gets *n entries; *n may be 0 (no
 * legal layout; not an error). COL_EINVAL for an input out of range (world, batch, seq, rates). */
col_status col_plan_rank(const col_plan_input *in, col_plan_entry **out, int *n, col_err *err);

/* "dp2 tp4(2d) pp1 sp1 zero2 mb1": the layout in one word-list (n bytes, always terminated). */
void col_plan_layout_name(const col_plan_layout *l, char *buf, size_t n);
/* One line: what dominates the entry's step time (compute, a kind of communication, the bubble, memory traffic)
 * and how its memory stands against the budgets. */
void col_plan_explain(const col_plan_input *in, const col_plan_entry *e, char *buf, size_t n);
/* The ranking as text lines (a header, then at most top entries, one per line, those that do not fit marked),
 * into buf (n bytes, truncated at a line boundary when short); returns the bytes written. */
size_t col_plan_format(const col_plan_input *in, const col_plan_entry *e, int count, int top, char *buf, size_t n);

#endif

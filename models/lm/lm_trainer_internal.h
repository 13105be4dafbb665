/* lm_trainer_internal.h - the session struct shared by lm_trainer.c (graphs,
 * steps, decoding) and lm_trainer_tiers.c (where tensors live: the NVMe
 * tier, the compute tier, streaming the optimizer step). Not installed. */
#ifndef COL_MODELS_LM_TRAINER_INTERNAL_H
#define COL_MODELS_LM_TRAINER_INTERNAL_H

#include "lm_par.h"
#include "lm_trainer.h"
#include "memtier.h"
#include "mt_resident.h"
#include "mt_stage.h"
#include "plan.h"

/* kinds of a tensor's memory: parameter, gradient, two optimizer state slots, the f32 master (mixed precision) */
enum { LMT_KINDS = 5, LMT_MASTER = 4 };

/* one graph's compute tier (with a compute budget) and its run count */
typedef struct {
    mt_resident *res;
    long runs;
} lmt_tier;

struct col_lm_trainer {
    col_lm_train_config cfg;
    const col_backend *be;
    int np;             /* base parameters */
    int nt;             /* tensors: base parameters, then 2 per LoRA adapter */
    int train0;         /* first trained tensor: 0, or np with LoRA (the base is frozen) */
    int *lora_of;       /* per base parameter: adapter index or -1 (NULL without LoRA) */
    float lora_scale;
    col_param_spec *specs;
    mt_pool *pool;
    /* host addresses of each tensor's parameter, gradient and states; NULL for
     * those on the NVMe tier except inside a host view (lmt_view_begin) */
    col_opt_tensor *ot;
    mt_ref *ref;        /* per kind k (0 parameter, 1 gradient, 2 and 3 state slots, 4 master) at [k * nt + i];
                           chunk -1: none */
    /* mixed precision (lm_precision.c): the compute dtype; parameters and gradients hold it, and every trained
     * tensor has an f32 master (kind LMT_MASTER, an optimizer state), which ot[i].w then points at */
    col_dtype dt;
    void **w16, **g16;  /* host addresses of each tensor's 16-bit parameter and gradient (NULL on NVMe outside a
                           host view); unused in an f32 session */
    float *conv;        /* the f32 copy of one tensor (conv_n floats: the largest) the step converts gradients into */
    size_t conv_n;
    /* f16: dynamic loss scaling */
    float scale;        /* the loss scale */
    int64_t good;       /* good steps in a row since the scale last changed */
    int64_t skipped;    /* steps skipped so far */
    col_node *seed;     /* the training graph's d loss input: the f16 loss scale (1 otherwise) times a weight */
    int slots;
    unsigned nvme_kinds;/* bit 1 << mt_kind: kinds placed on the NVMe tier */
    mt_stage *stage;    /* host buffers the optimizer step streams NVMe chunks through */
    mt_stage *view;     /* a host view: every NVMe chunk of view_kinds read into host memory */
    unsigned view_kinds;
    /* training graph */
    col_graph *g;
    col_plan *plan;
    lmt_tier tier;      /* its compute tier (compute_budget > 0); the others share its memory */
    col_lm_graph gg;
    /* the training graph planned for its loss and logits only, dropout off (made on first use):
     * evaluation, and sampling when the batch is 1 - the forward pass of the training graph gives
     * bitwise the results of a graph built without dropout */
    col_plan *eplan;
    lmt_tier etier;
    /* forward-only graph, only where the training graph cannot serve: an inference session has
     * none, and sampling runs one row (a [batch, seq] graph would do batch times the work) */
    col_graph *fg;
    col_plan *fplan;
    lmt_tier ftier;
    col_lm_graph fgg;
    int fbatch;
    /* LoRA: the base model's forward-only graph (adapters left out), for a frozen reference without a copy */
    col_graph *bg;
    col_plan *bplan;
    lmt_tier btier;
    col_lm_graph bgg;
    int bbatch;
    double tok_t0, tok_wait0; /* per-token objectives: when the step's first backward pass began (its clock) */
    bool tok_started;
    int64_t step;
    /* decoding: one graph for the prompt, one for single tokens */
    struct dec_graph {
        col_graph *g;
        col_plan *plan;
        lmt_tier tier;
        col_lm_graph lg;
        int seq;
    } dec[2];
    col_dtype *pdt;     /* quantized sessions (cfg.weight_quant): each parameter's dtype; NULL otherwise */
    /* weights read in place (col_lm_trainer_load_mapped): base parameter i's bytes in the checkpoint's read-only
     * mapping, or NULL where it lives in its chunk (NULL ext: none); the session owns that checkpoint (ext_ck) */
    const void **ext;
    col_ckpt *ext_ck;
    struct col_gguf *ext_gguf; /* (or that GGUF file) */
    float *kv;          /* 2 * n_layer caches of [1, n_kv_head, kv_len, head_dim]; on a device backend its memory */
    float *hlog;        /* on a device backend: host copies of the logits handed out (hlog_n floats) */
    size_t hlog_n;
    int kv_len;
    int64_t kv_pos;
    /* data parallelism (lm_dp.c): NULL dp for one process */
    struct col_comm *dp;
    int dpn, dpr, zero;       /* processes, this one's rank, the ZeRO stage */
    int64_t *zoff, *zn;       /* per tensor: the elements [zoff, zoff + zn) of a trained tensor this process updates */
    int ndc;                  /* trained chunk pairs: gradient chunk dgc[j], the parameter chunk dpc[j] with the same layout */
    int *dgc, *dpc;
    bool params_partial;      /* ZeRO 3: the parameters hold only this process's pieces */
    double dp_wait_s;         /* the last step's time blocked on its gradient and parameter exchanges */
    bool dp_last;             /* the training graph's next run is the step's last micro-batch */
    bool dp_reduced;          /* this step's gradients are reduced already (a driver called lmt_dp_reduce_grads) */
    double norm_given;        /* >= 0: the step's global gradient norm, worked out by a driver over more than this
                                 session (a pipeline's stages): the step clips by it instead of its own (the f32
                                 in-memory data parallel step only: what a pipeline's stages run) */
    struct lmt_dp_overlap *ov;/* the overlap's indices and requests (lm_dp.c) */
    float *dbuf;              /* lmt_dp_buffer's memory, dbuf_n floats */
    int64_t dbuf_n;
    uint64_t dp_bytes;        /* bytes this process handed to those exchanges in the last step */
    /* a pipeline stage (cfg.layer_lo/hi): per base tensor, its index in the whole model's specs; NULL for the
     * whole model. Graph arrays hold every parameter of the whole model (a stage's others stay NULL). */
    int *gidx;
    /* tensor and sequence parallelism (lm_trainer_par.c): par NULL without; whole[i] tensor i's whole spec
     * (specs[i] has this rank's block's shape), shard[i] the block; the graphs' rows [prow0, prow0 + prows) and
     * pseq positions of each micro-batch; pbuf a buffer of pbuf_n floats (a whole tensor, a batch's inputs) */
    const col_lm_par *par;
    col_param_spec *whole;
    col_shard *shard;
    int prow0, prows, pseq;
    float *pbuf;
    int64_t pbuf_n;
    int32_t *phist;     /* decoding under par (no key/value cache): the tokens so far, phist_n of at most phist_max */
    int phist_n, phist_max;
};

/* base tensor i's index in the whole model's parameter specs */
static inline int lmt_global(const col_lm_trainer *t, int i) { return t->gidx && i < t->np ? t->gidx[i] : i; }
/* whether the session holds a part of the model only (a pipeline stage) */
static inline bool lmt_partial(const col_lm_trainer *t) { return t->gidx != NULL; }

/* The part of trained tensor i this process updates and keeps optimizer states for: elements [*off, *off + n)
 * (the whole tensor with one process). */
static inline int64_t lmt_span(const col_lm_trainer *t, int i, int64_t *off)
{
    *off = t->zn ? t->zoff[i] : 0;
    return t->zn ? t->zn[i] : t->ot[i].n;
}

/* lm_dp.c - data parallelism. Without a dp communicator every call does nothing and succeeds. */
/* whether this process writes the session's files: process 0 of dp, or the only one */
static inline bool lmt_dp_writer(const col_lm_trainer *t)
{
    return (!t->dp || t->dpr == 0) && (!t->par || (t->par->tp_rank == 0 && t->par->sp_rank == 0));
}
/* A buffer of n floats the session keeps (grown as needed) for whole tensors of which a process holds spans. */
col_status lmt_dp_buffer(col_lm_trainer *t, int64_t n, float **buf, col_err *err);
/* The outcome of a collective call agreed by every process: st when all succeeded, else a failure on each
 * (the failing process keeps its own message; the others' names the first process that failed and what). */
col_status lmt_dp_agree(col_lm_trainer *t, col_status st, const char *what, col_err *err);
/* Checks the configuration and takes the communicator (before lmt_alloc). */
col_status lmt_dp_init(col_lm_trainer *t, col_err *err);
/* The capacity every chunk must be a multiple of (0: any). */
size_t lmt_dp_capacity_multiple(const col_lm_trainer *t);
/* After the gradients are placed: each trained tensor's span and the chunk pairs. */
col_status lmt_dp_layout(col_lm_trainer *t, col_err *err);
void lmt_dp_free(col_lm_trainer *t);
/* The weights of na micro-batches of rows targets ([na * batch, seq]): their counted targets over the counted
 * targets of the same micro-batch on every process (1 each with one process). */
col_status lmt_dp_weights(col_lm_trainer *t, const int32_t *targets, int na, float *w, col_err *err);
/* The sum over processes of a float (rank order), or of a double's bits (gathered, summed in rank order). */
col_status lmt_dp_sum_f(col_lm_trainer *t, float local, float *global, col_err *err);
col_status lmt_dp_sum_d(col_lm_trainer *t, double local, double *global, col_err *err);
/* Before the optimizer: each gradient chunk's pieces summed over the processes, each to its owner (once a step:
 * a driver may call it before lmt_optimize, which then does not again). */
col_status lmt_dp_reduce_grads(col_lm_trainer *t, col_err *err);
/* The sum of squares of this process's spans of the reduced gradients, over the dp group, leaving out tensor
 * `skip` (-1: none): a driver's piece of a global norm. Collective over dp. */
col_status lmt_dp_grad_sumsq(col_lm_trainer *t, int skip, double *sum, col_err *err);
/* After the optimizer: each process's updated pieces to all (1, 2), or the other pieces given back (3). */
col_status lmt_dp_share_params(col_lm_trainer *t, col_err *err);
/* ZeRO 3: the whole parameters again before a graph reads them (nothing when they are whole). */
col_status lmt_dp_need_params(col_lm_trainer *t, col_err *err);
/* Runs the training plan (no compute tier) with the exchanges overlapping it: at ZeRO 3 the parameter chunks
 * gathered just before their first use, and on the step's last micro-batch (last) each gradient chunk's
 * reduction started once the ops adding into it have run (lmt_dp_reduce_grads then waits for them). */
col_status lmt_dp_run(col_lm_trainer *t, col_plan *plan, bool last, col_err *err);
void lmt_dp_overlap_free(col_lm_trainer *t);
/* The f32 in-memory optimizer step over this process's spans (lmt_optimize's f32 path with data parallelism). */
col_status lmt_dp_f32_step(col_lm_trainer *t, int na, float lr, float clip, double *norm, col_err *err);
/* Tensor i's kind-k memory (k >= 2: a state slot or the master) whole on process 0 in buf (n floats): every
 * process sends its span there. Collective; buf is used on process 0 only. */
col_status lmt_dp_gather_state(col_lm_trainer *t, int k, int i, float *buf, col_err *err);

/* lm_trainer_par.c - tensor and sequence parallelism (cfg.par); without it every call does nothing. */
/* Checks the session against the layout and turns specs into this rank's blocks (before lmt_alloc). */
col_status lmt_par_setup(col_lm_trainer *t, col_err *err);
void lmt_par_free(col_lm_trainer *t);
/* tensor i's block of its whole values (whole: col_param_numel(&t->whole[i]) floats) into block */
void lmt_par_block(const col_lm_trainer *t, int i, float *whole, float *block);
/* A micro-batch's [B, seq] ids and targets: this rank's rows and positions (*n tokens) in *li and *lt (the
 * session's buffer); returns 1 / the counted targets of the whole micro-batch (0 when none is counted). */
float lmt_par_inputs(col_lm_trainer *t, const int32_t *ids, const int32_t *targets, int B, int32_t **li,
                     int32_t **lt, int64_t *n);
/* the sum over the model-parallel group (tp, then sp) of a double, in rank order */
col_status lmt_par_sum_d(const col_lm_trainer *t, double local, double *sum, col_err *err);
/* tensor i's weight in a sum over the group that counts each block once: 1 / the ranks holding it */
double lmt_par_weight(const col_lm_trainer *t, int i);
/* whether this process speaks for its model-parallel group (tp and sp rank 0; true without par) */
bool lmt_par_lead(const col_lm_trainer *t);
/* Tensor i whole from every tp rank's block (collective over tp; whole on every rank). */
col_status lmt_par_gather(col_lm_trainer *t, int i, const float *block, float *whole, col_err *err);

/* the backend's memory table: non-NULL when graphs run in device memory */
static inline const col_backend_mem *lmt_dev(const col_lm_trainer *t) { return t->be ? t->be->mem : NULL; }

/* lm_trainer.c: the two halves of a step, for drivers that run the micro-batches themselves (the data and
 * pipeline parallel steps): the clock started before the first micro-batch, then the optimizer part - the
 * gradients accumulated over na micro-batches averaged, clipped, applied, the step counted, info filled
 * (loss as given; the compute and wait times measured from the clock). */
typedef struct {
    double t0, wait0;
} lmt_step_clock;
void lmt_clock_start(const col_lm_trainer *t, lmt_step_clock *clk);
col_status lmt_optimize(col_lm_trainer *t, int na, float loss, const lmt_step_clock *clk, col_lm_step_info *info,
                        col_err *err);

/* lm_trainer_tiers.c */
/* Makes the pool and places every tensor: parameters, then gradients, then
 * states, each kind in first-use order (frozen tensors get no gradient and
 * no state) into t->ref. The kinds on the NVMe tier (t->nvme_kinds) are
 * cfg.nvme_kinds when given, else the optimizer states, then the gradients
 * too, then everything, whichever first fits the host budget. Parameters or
 * gradients on NVMe without a compute tier are refused. */
col_status lmt_alloc(col_lm_trainer *t, col_err *err);
/* The address a graph binds tensor i's kind-k memory to: the host address,
 * or the NVMe chunk's placeholder (only the compute tier reads it). */
void *lmt_bind_addr(const col_lm_trainer *t, int k, int i);
/* Tensor i's weights from the f32 values w (n floats; may be the conversion buffer): into its master when it
 * has one, and rounded into its parameter (mixed precision), else into the parameter; through the stage
 * (its chunks stay there, written back later). */
col_status lmt_set_weights(col_lm_trainer *t, int i, const float *w, col_err *err);
/* Writes the initial parameters (through the stage for NVMe chunks). */
col_status lmt_init_params(col_lm_trainer *t, col_err *err);
/* Runs a planned graph: through its compute tier when there is a compute
 * budget (made on first use, sharing the training tier's memory; reserve =
 * bytes of the budget taken by memory outside the pool, e.g. a KV cache),
 * else in place. */
/* lm_trainer_graphs.c: what the session's graphs share */
/* binds every weight (and with grads its gradient) leaf of gg to the session's memory, before planning */
col_status lmt_bind_params(col_lm_trainer *t, col_lm_graph *gg, bool grads, col_err *err);
/* plan joins the activation arena of the session's other plans (their compute tiers go when it grows) */
col_status lmt_share_memory(col_lm_trainer *t, col_plan *plan, col_err *err);
/* the parameter and adapter arrays a build fills */
bool lmt_graph_arrays(col_lm_trainer *t, col_lm_graph *gg);
void lmt_graph_arrays_free(col_lm_graph *gg);
/* what every graph of the session shares: the LoRA adapters, the weights' dtype */
void lmt_lora_opts(const col_lm_trainer *t, col_lm_build_opts *o);
/* n zeroed floats of key/value cache (host, or the device's memory), and their release */
col_status lmt_kv_alloc(const col_lm_trainer *t, size_t n, float **out, col_err *err);
void lmt_kv_release(const col_lm_trainer *t, float *p);
/* rows [row, row + rows) of a [.., vocab] logits node, in host memory */
col_status lmt_get_logits(col_lm_trainer *t, col_plan *plan, col_node *lg, size_t row, size_t rows,
                          const float **out, col_err *err);
col_status lmt_run(col_lm_trainer *t, col_plan *plan, lmt_tier *tier, size_t reserve, col_err *err);
void lmt_tier_free(lmt_tier *tier);
/* A forward pass of `batch` rows, dropout off: the training graph's evaluation plan when the shapes match, else a
 * forward-only graph; base: a LoRA session's base model (its adapters left out; the model itself without LoRA). */
typedef struct {
    col_plan *plan;
    col_lm_graph *gg;
    lmt_tier *tier;
} lmt_fwd_pass;
col_status lmt_forward_pass(col_lm_trainer *t, int batch, bool base, lmt_fwd_pass *f, col_err *err);
/* ids and targets (n tokens each) into a graph's inputs; targets not when the graph has none (a value model) */
col_status lmt_load_batch(col_plan *plan, col_lm_graph *gg, const int32_t *ids, const int32_t *targets, int64_t n,
                          col_err *err);
/* The optimizer step over the trained tensors when any of their parameter,
 * gradient or state chunks is on NVMe: gradients averaged over na
 * micro-batches, the global norm (clipped to clip when > 0) into *norm, the
 * update, all streamed through the stage. Bitwise the in-memory step. */
col_status lmt_streamed_step(col_lm_trainer *t, int na, float lr, float clip, double *norm, col_err *err);

/* Streaming a kind of tensor memory through the stage (saving, loading:
 * tensor by tensor, chunk by chunk, never all of it in host memory). The
 * stage's limit is lmt_stage_need: the most any user holds at once. */
size_t lmt_stage_need(const col_lm_trainer *t);
/* Whether tensor i has kind-k memory (k: 0 parameter, 1 gradient, 2 and 3 state slots). */
bool lmt_has(const col_lm_trainer *t, int k, int i);
/* Its host address: in place for a host chunk, else its chunk read into a stage buffer (will_write: written
 * back by lmt_stage_end or when evicted). Valid until the stage has read other chunks past its limit. Its
 * elements are lmt_dtype(t, k). */
col_status lmt_get(col_lm_trainer *t, int k, int i, bool will_write, void **p, col_err *err);
/* weights read in place (lm_load.c): whether this session can (an inference session on the host, every parameter
 * in host memory, one process, no LoRA); parameter i's bytes given as data (nbytes) for good (t->ext set). f32
 * tensors not at a multiple of LMT_MAP_ALIGN bytes are copied instead: a file's f32 weights 8 bytes off a cache
 * line (Hugging Face's safetensors files, whose data start 8-aligned) decoded 12-15% slower than a copy (1B
 * LLaMA, AVX-512 rows split across lines); GGUF aligns its tensors. */
enum { LMT_MAP_ALIGN = COL_LM_WEIGHT_ALIGN };
bool lmt_can_map(const col_lm_trainer *t);
/* COL_ESTATE when the session reads weights in place already: another load would leave them half from each file */
col_status lmt_refuse_mapped(const col_lm_trainer *t, col_err *err);
/* A load that may read weights in place: begin refuses as lmt_refuse_mapped and makes t->ext where lmt_can_map;
 * end (after the load, its status st) is true when some were mapped (the session must then own the file), else
 * drops t->ext. */
col_status lmt_map_begin(col_lm_trainer *t, col_err *err);
bool lmt_map_end(col_lm_trainer *t, col_status st, const col_lm_load_report *rep);
void lmt_map_param(col_lm_trainer *t, int i, const void *data, size_t nbytes, col_lm_load_report *rep);
/* the next trained tensor after i whose kind-k memory is in another chunk (nt when none) */
int lmt_next_chunk(const col_lm_trainer *t, int k, int i);
/* Reads ahead the next kind-k chunk after tensor i's, keeping the keep most recently used buffers. */
col_status lmt_read_ahead(col_lm_trainer *t, int k, int i, int keep, col_err *err);
/* Ends a pass: writes back what changed (write_back) and forgets what the stage holds. */
col_status lmt_stage_end(col_lm_trainer *t, bool write_back, col_err *err);

/* lm_precision.c */
/* whether the session computes in a 16-bit dtype (mixed precision) */
static inline bool lmt_mixed(const col_lm_trainer *t) { return t->dt != COL_F32 || t->pdt; }
/* the dtype parameter i is held in (quantized sessions: per parameter) */
static inline col_dtype lmt_param_dtype(const col_lm_trainer *t, int i) { return t->pdt ? t->pdt[i] : t->dt; }
/* whether trained tensor i has an f32 master (mixed precision), whichever process holds its span */
static inline bool lmt_has_master(const col_lm_trainer *t, int i)
{
    return lmt_mixed(t) && i >= t->train0 && !t->cfg.inference;
}
/* the dtype of kind-k memory: the compute dtype for parameters and gradients, f32 for states and masters */
static inline col_dtype lmt_dtype(const col_lm_trainer *t, int k) { return k <= 1 ? t->dt : COL_F32; }
/* Sets up mixed precision after the tensors are placed: the conversion buffer, the loss scale. */
col_status lmt_mixed_init(col_lm_trainer *t, col_err *err);
void lmt_mixed_free(col_lm_trainer *t);
/* The mixed-precision optimizer step over the trained tensors (through the stage, wherever their chunks
 * live): gradients converted to f32, unscaled (f16) and averaged over na micro-batches, their global norm
 * into *norm (clipped to clip when > 0), the masters updated and rounded into the parameters. With f16, a
 * non-finite gradient skips the update (*skipped) and the loss scale follows GradScaler's rule. */
col_status lmt_mixed_step(col_lm_trainer *t, int na, float lr, float clip, double *norm, bool *skipped, col_err *err);

#endif

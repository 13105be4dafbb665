/* lm_trainer.h - one language-model session: parameters, gradients and
 * optimizer states in memtier chunks, a planned forward+backward graph, the
 * optimizer step, evaluation (a second plan of the training graph: its
 * forward pass with dropout off), a one-row forward graph for sampling, and
 * incremental decoding with a key/value cache, all sharing the same
 * parameter memory. */
#ifndef COL_MODELS_LM_TRAINER_H
#define COL_MODELS_LM_TRAINER_H

#include "backend.h"
#include "checkpoint.h"
#include "lm.h"
#include "lora.h"
#include "optim.h"

typedef struct {
    col_lm_config model;
    int batch, seq;
    col_opt_config opt;
    col_lr_sched lr;
    float grad_clip;      /* 0 = no clipping */
    bool checkpoint;      /* activation checkpointing per block */
    uint64_t seed;        /* initialisation and dropout */
    size_t host_budget;   /* memtier host budget in bytes, 0 = unlimited */
    bool decay_all;       /* weight decay on every tensor (torch's AdamW(model.parameters())), not matrices only */
    int grad_accum;       /* micro-batches of [batch, seq] per optimizer step (0 or 1: one) */
    size_t compute_budget;/* > 0: training steps run through a compute tier of this many bytes (memtier
                             mt_resident: parameter and gradient chunks are copied in and out as a
                             placement plan says; results are bitwise those of an unlimited run) */
    size_t chunk_bytes;   /* memtier chunk size; 0 = automatic */
    const char *nvme_dir; /* non-NULL: an NVMe tier, a scratch file in this directory (removed with the
                             session), holding the kinds nvme_kinds says. The optimizer step streams what
                             lives there through a few host buffers, the compute tier reads and writes its
                             chunks directly. Results are bitwise those of an all-host run. */
    unsigned nvme_kinds;  /* COL_LM_PARAMS | COL_LM_GRADS | COL_LM_STATES placed on the NVMe tier; 0 =
                             automatic: the optimizer states, then the gradients and then the parameters as
                             well while host_budget cannot hold the rest. Parameters or gradients there
                             need a compute tier (compute_budget > 0): graphs reach them only through it. */
    uint64_t nvme_max;    /* bytes the NVMe tier may take; 0 = unlimited */
    int nvme_queue_depth; /* the NVMe tier's io_uring queue depth; 0 = its default */
    const struct mt_nvme_faults *nvme_faults; /* tests: fault injection into the NVMe tier */
    bool weights_follow;  /* the caller loads every parameter right after creating the session (col_lm_trainer_load
                             or _load_gguf): the random initialisation is skipped (a model's worth of draws) */
    bool inference;       /* no gradients, optimizer states or training graph: evaluation, next-token
                             logits and decoding only (step/grads then fail) - half the memory or less */
    col_lora_config lora; /* rank > 0: train LoRA adapters only, the base model frozen (lora.h) */
    /* Mixed precision: COL_F32 (the default: everything f32), or COL_BF16 / COL_F16, the dtype the graphs
     * compute with. Then parameter and gradient chunks hold that dtype (half the bytes), the graphs read the
     * 16-bit weights directly (lm.h, col_lm_build_opts.dtype), and a training session keeps an f32 master copy
     * of every trained tensor beside its optimizer states (kind COL_LM_STATES: master + moments are 12 bytes
     * per parameter with AdamW, on the host or the NVMe tier as the states are). The optimizer step converts
     * each gradient to f32, updates the master with the f32 formulas and writes the master rounded (to
     * nearest even) back into the parameter. Saved models are the f32 masters; a loaded model fills the
     * masters and rounds the parameters. f16 gradients use dynamic loss scaling (torch.cuda.amp.GradScaler):
     * the loss's gradient is seeded with the scale, a step whose gradients hold an infinity or a NaN is
     * skipped and halves the scale, loss_scale_window good steps in a row double it. LoRA sessions stay f32. */
    col_dtype compute_dtype;
    /* Quantized weights (inference sessions, f32 compute, the whole model in one process, no LoRA): COL_F32
     * (none), or a block dtype (COL_Q8_0, COL_Q4_0, COL_Q4_K, COL_Q6_K). The matrices col_lm_quant_dtype
     * picks are held in it - a weight loaded as f32 is quantized as it is stored, one already quantized by
     * colossal-quantize to that dtype is copied as it is - and the products read them block by block; norms,
     * biases and learned positions stay f32. */
    col_dtype weight_quant;
    /* Or per parameter (col_lm_param_specs order; NULL = weight_quant for all): the dtype each is held in,
     * COL_F32 or a block dtype, as a GGUF file holds them (col_lm_gguf_param_dtypes). */
    const col_dtype *weight_quant_each;
    float loss_scale;     /* f16: the first loss scale; 0 = 65536 */
    int loss_scale_window;/* f16: good steps before the scale doubles; 0 = 2000 */
    /* Data parallelism with ZeRO (lm_dp.c): dp, when it has more than one process, is the communicator of the
     * processes that each run this session on their share of every step's rows (batch is the share: rows per
     * micro-batch per process). Every process creates the session with the same configuration and calls the
     * same functions in the same order (they are collective over dp); dp's reduction order is set to rank order.
     * The trained tensors' chunks are split into dp-size equal pieces; each process owns one piece per chunk and
     * keeps the optimizer states (and mixed-precision masters) of that piece only. zero: 1 - gradients
     * reduce-scattered (each process receives the sums of its pieces, all its optimizer needs), each process
     * updates its pieces, and the pieces are all-gathered when the weights are next used (the next step's
     * forward pass gathers each chunk just before its first reader; an evaluation, decoding, saving or
     * col_lm_trainer_sync_params gathers them all); 2 - as 1, and the other pieces' gradient memory is given
     * back until the next backward pass; 3 - as 2, and the other pieces' parameter memory is given back until
     * the gather. A step's micro-batch losses are weighted by their share of the step's counted targets across
     * processes, so the processes together compute the step one process computes on all the rows. LAMB and
     * LARS are refused (their trust ratios need whole-tensor norms). NULL = one process. */
    struct col_comm *dp;
    int zero;             /* 1, 2 or 3 (0 = 2) */
    bool dp_serial;       /* benchmarks: the exchanges before and after the training graph instead of during it */
    /* Pipeline parallelism (lm_pipeline.h): a session of the layers [layer_lo, layer_hi) only (0/0: the whole
     * model), a stage of the model holding only the parameters that stage uses (col_lm_stage_params; tensor i
     * is the model's parameter col_lm_trainer_global_index(t, i), initialised as the whole model's). Its
     * training graph starts from the previous stage's hidden states unless layer_lo is 0, and ends at its own
     * hidden states (its backward seeded with their gradient) unless layer_hi is n_layer. Such a session is
     * driven by lm_pipeline.c: col_lm_trainer_step, _grads, _eval and decoding refuse it. f32, no LoRA. */
    int layer_lo, layer_hi;
    /* What the graphs end in (lm.h): the mean cross-entropy (the default), or one value per token for RLHF (see
     * col_lm_trainer_forward_tokens below): the targets' log-probabilities (a policy), or a value model's values
     * (model.value_head: a reward model or a critic). One process, the whole model. */
    col_lm_objective objective;
    /* Tensor and sequence parallelism (lm_par.h): this process's place in the model-parallel group, or NULL.
     * batch and seq stay the group's rows and positions per micro-batch (every process of the group passes the
     * same ids and targets); each holds its blocks of the parameters and computes its rows and positions, and
     * together they compute the step one process computes (dp then splits rows between such groups). Every
     * process of the group creates the session with the same configuration and calls the same functions in the
     * same order. f32 on the CPU backend (the collectives move host memory over MPI), the whole model or a
     * pipeline stage (lm_pipeline.h); no LoRA, NVMe tier or per-token objectives yet. par must outlive the
     * session. */
    const struct col_lm_par *par;
} col_lm_train_config;

/* kinds of tensor memory, for nvme_kinds and host views */
enum { COL_LM_PARAMS = 1u << 0, COL_LM_GRADS = 1u << 1, COL_LM_STATES = 1u << 2 };

typedef struct col_lm_trainer col_lm_trainer;

typedef struct {
    float loss;
    double grad_norm;     /* before clipping */
    float lr;
    int64_t step;         /* steps done, counting this one */
    /* where the step's time went (seconds): forward and backward computing, waiting for the compute
     * tier's transfers (0 without a compute tier), the optimizer step (with its NVMe streaming) */
    double compute_s, wait_s, optim_s;
    /* f16 loss scaling (1 and 0 otherwise): the scale this step's gradients were computed with, whether the
     * step was skipped (its gradients overflowed: the weights and states are unchanged), and the steps
     * skipped so far (optimizer updates = step - skipped) */
    float loss_scale;
    bool skipped;
    int64_t skipped_total;
} col_lm_step_info;

/* be runs every graph. A backend with a memory table (be->mem, a GPU) needs
 * a compute_budget (else COL_EINVAL): parameters, gradients and optimizer
 * states stay in host memory or on NVMe, the graphs are planned in the
 * device's memory (col_plan_create_on) and reach parameters and gradients
 * only through the compute tier, whose arena is device memory; batches go in
 * with col_plan_upload, losses and logits come back into host memory the
 * session owns (the logits pointers below are host memory either way), the
 * key/value cache is device memory, and the optimizer runs on the host
 * copies. Results are bitwise those of the CPU backend when the kernels
 * are. Free the session before the backend. */
col_status col_lm_trainer_create(const col_lm_train_config *cfg, const col_backend *be, col_lm_trainer **out,
                                  col_err *err);
void col_lm_trainer_free(col_lm_trainer *t);

/* One optimizer step on a batch: ids and targets are [grad_accum * batch, seq]
 * token ids (targets -1 are ignored). With gradient accumulation the
 * gradient is the mean over the micro-batches of their mean-loss gradients,
 * and info->loss the mean of their losses. */
col_status col_lm_trainer_step(col_lm_trainer *t, const int32_t *ids, const int32_t *targets,
                                col_lm_step_info *info, col_err *err);
/* Mean loss of a batch without training; if logits is not NULL it receives
 * the [batch, seq, vocab] logits, valid until the next call. */
col_status col_lm_trainer_eval(col_lm_trainer *t, const int32_t *ids, const int32_t *targets, float *loss,
                               const float **logits, col_err *err);
/* Logits [vocab] of the last of n tokens (n <= seq); the sequence is
 * left-aligned in one row of a forward pass (the training graph's when the
 * batch is 1). */
col_status col_lm_trainer_next_logits(col_lm_trainer *t, const int32_t *tokens, int n, const float **logits,
                                       col_err *err);

/* Tensors: indices [0, col_lm_param_count(&cfg.model)) are the base model's
 * parameters in spec order; with LoRA on, the adapters follow, A then B for
 * each adapted weight in spec order (col_lm_trainer_lora_target names the
 * weight). Without LoRA every tensor is trainable; with LoRA only the
 * adapters are: the base tensors have no gradient and no optimizer state
 * (col_lm_trainer_grad / _state return NULL for them). */
int col_lm_trainer_n_params(const col_lm_trainer *t);            /* tensors, adapters included */
/* The index of base tensor i in the whole model's parameter specs (col_lm_param_specs): i itself unless the
 * session is a pipeline stage (cfg.layer_lo/hi); -1 for an adapter or an i out of range. */
int col_lm_trainer_global_index(const col_lm_trainer *t, int i);
int64_t col_lm_trainer_param_count(const col_lm_trainer *t);     /* elements of all tensors */
int64_t col_lm_trainer_trainable_count(const col_lm_trainer *t); /* elements that are trained */
size_t col_lm_trainer_arena_bytes(const col_lm_trainer *t);      /* training activation arena */
/* Parameter tensor i and its data, for tests and export (adapter specs carry
 * PEFT's names, e.g. "base_model.model.transformer.h.0.attn.c_attn.lora_A.weight").
 * The f32 weights: under mixed precision a training session's masters, and
 * NULL in an inference session (which has 16-bit weights only). */
float *col_lm_trainer_param(col_lm_trainer *t, int i, const col_param_spec **spec);
/* The f32 gradient; NULL under mixed precision (see _grad_data). */
float *col_lm_trainer_grad(col_lm_trainer *t, int i);
/* What the graphs read and write: tensor i's weights and its gradient in the
 * compute dtype (*dt, may be NULL): the same memory as _param and _grad in
 * an f32 session, the 16-bit copies under mixed precision. */
void *col_lm_trainer_weights(col_lm_trainer *t, int i, col_dtype *dt);
void *col_lm_trainer_grad_data(col_lm_trainer *t, int i, col_dtype *dt);
/* LoRA: for adapter tensor i, the index of the base weight it adapts; -1 for
 * any other i. */
int col_lm_trainer_lora_target(const col_lm_trainer *t, int i);
/* Base parameter i as the merged model holds it: with an adapter,
 * W + scale B@A (Conv1D: W + scale (B@A)^T) written to scratch (numel floats)
 * and returned; otherwise the parameter itself. The session is not changed. */
const float *col_lm_trainer_merged(col_lm_trainer *t, int i, float *scratch);
/* Runs forward+backward only (no optimizer step), leaving gradients in place. */
col_status col_lm_trainer_grads(col_lm_trainer *t, const int32_t *ids, const int32_t *targets, float *loss,
                                 col_err *err);

/* Data parallelism (cfg.dp): the elements [*off, *off + n) of tensor i this process updates, whose optimizer
 * states (col_lm_trainer_state) and, under mixed precision, master (col_lm_trainer_param) it holds: returns n
 * (the whole tensor, 0 for a frozen one, with one process). Then, collective over dp: makes the parameters
 * whole on every process (between a step and the next use of the weights only each process's own pieces are
 * current; steps, evaluation, decoding and saving do it themselves, so call it before reading the weights
 * directly). Nothing to do with one process. */
int64_t col_lm_trainer_span(const col_lm_trainer *t, int i, int64_t *off);
col_status col_lm_trainer_sync_params(col_lm_trainer *t, col_err *err);
/* The last step's data parallel exchanges (0 with one process): the seconds the step was blocked on them (all
 * of their time when they run after the backward pass, only the waits when they overlap it), and the bytes this
 * process handed to them (a reduce-scatter's whole input, an all-gather's piece). */
void col_lm_trainer_dp_traffic(const col_lm_trainer *t, double *blocked, uint64_t *bytes);

/* Tensor parallelism (cfg.par): base tensor i's whole spec (its spec otherwise), and, collective over the
 * tensor-parallel group, its kind-k memory (0 weights, 1 gradient) gathered whole into whole (numel of the whole
 * spec floats) on every process of the group (a copy without par). */
const col_param_spec *col_lm_trainer_whole_spec(const col_lm_trainer *t, int i);
col_status col_lm_trainer_gather(col_lm_trainer *t, int i, int k, float *whole, col_err *err);

/* Optimizer state slot (0: first moment / momentum, 1: second moment) of
 * parameter i, or NULL when the optimizer has no such slot. */
float *col_lm_trainer_state(col_lm_trainer *t, int i, int slot);
int64_t col_lm_trainer_steps(const col_lm_trainer *t);
void col_lm_trainer_set_steps(col_lm_trainer *t, int64_t steps); /* when resuming */
const col_lm_train_config *col_lm_trainer_config(const col_lm_trainer *t);
/* The memtier pool holding parameters, gradients and optimizer states (for
 * memory reports). */
struct mt_pool;
const struct mt_pool *col_lm_trainer_pool(const col_lm_trainer *t);
/* The training graph's compute tier, NULL without a compute_budget. */
struct mt_resident;
struct mt_resident *col_lm_trainer_compute_tier(const col_lm_trainer *t);

/* With tensors on the NVMe tier, col_lm_trainer_param / _grad / _state (and
 * _weights, _grad_data) give NULL for them except between these two calls,
 * which read every NVMe chunk of the kinds asked for (COL_LM_PARAMS | ...; a
 * master copy is a state) into host memory (as much
 * host memory as those tensors take) and, with write_back, write them all
 * back at the end (after changing them). Views do not nest. Saving and
 * loading open their own. Without an NVMe tier both do nothing. */
col_status col_lm_trainer_host_begin(col_lm_trainer *t, unsigned kinds, col_err *err);
col_status col_lm_trainer_host_end(col_lm_trainer *t, bool write_back, col_err *err);
/* The kinds (COL_LM_*) this session keeps on the NVMe tier. */
unsigned col_lm_trainer_nvme_kinds(const col_lm_trainer *t);

/* What the session holds in host memory at most, term by term (bytes): the
 * budgets, and the fixed overhead beside them for this model, batch and
 * sequence length. A process running the session stays within `bound` plus
 * what it holds itself (code, data, tokenizer). Terms that are device memory
 * (a compute tier on a GPU) are not counted. */
typedef struct {
    size_t host_budget;   /* the host budget (0: none) */
    size_t host;          /* host memory the pool's chunks hold (at most host_budget) */
    size_t compute;       /* the compute tier's budget while it is host memory (no device); its activation arena,
                             chunk copies and any key/value cache are inside it */
    size_t activations;   /* without a compute tier: the activation arena and kernel scratch the session's plans
                             (training, evaluation, sampling) share */
    size_t kv_cache;      /* without a compute tier: the key/value cache decoding made (0 until it does) */
    size_t staging;       /* the stage's limit: host buffers NVMe chunks go through (the optimizer step, the
                             initialisation, saving, loading): the NVMe chunks one trained tensor's parameter,
                             gradient and states take, or a weight's and its adapters' */
    size_t device_staging;/* a compute tier on a device with NVMe chunks: a host buffer of the largest NVMe chunk
                             per compute tier made so far */
    size_t logits;        /* on a device: the host copies of the logits handed out */
    size_t merge;         /* saving a merged LoRA model: one weight's buffer */
    size_t convert;       /* mixed precision: the f32 copy of one tensor the optimizer step converts its gradient
                             into (and loading and saving its 16-bit weights go through) */
    size_t tables;        /* graphs, plans, the pool's and compute tiers' tables, estimated, and a fixed allowance
                             for the threads' stacks and the BLAS library's buffers */
    size_t overhead;      /* the sum of the fixed terms: activations .. tables, convert */
    size_t bound;         /* (host_budget, or host without a budget) + compute + overhead */
} col_lm_memory;
void col_lm_trainer_memory(const col_lm_trainer *t, col_lm_memory *m);

/* Saving and resuming (lm_checkpoint.c). The model goes out in Hugging Face
 * layout (config.json + model.safetensors, loadable by transformers); the
 * optimizer state and step count go to optimizer.safetensors. Each file is
 * written atomically (temp file, fsync, rename). Resuming from both gives
 * bit-for-bit the run that never stopped. */
/* The tensors of the safetensors files a session writes begin on lines of this many bytes (the header padded;
 * col_st_write_aligned), so that an inference session can read them in place (col_lm_trainer_load_mapped). */
enum { COL_LM_WEIGHT_ALIGN = 64 };
col_status col_lm_trainer_save_model(col_lm_trainer *t, const char *dir, col_err *err); /* = _ex(t, dir, 0, err) */
/* With LoRA on, save_model writes the unchanged base model and the adapter
 * beside it in PEFT's layout (adapter_model.safetensors with PEFT's tensor
 * names + adapter_config.json); with COL_SAVE_MERGE_LORA model.safetensors
 * holds the merged weights instead and no adapter files are written (the
 * merge goes to temporary buffers, never into the session's weights).
 * Without LoRA the flag changes nothing. */
enum { COL_SAVE_MERGE_LORA = 1u << 0 };
col_status col_lm_trainer_save_model_ex(col_lm_trainer *t, const char *dir, unsigned flags, col_err *err);
/* The optimizer state of the trainable tensors (the adapters when LoRA is on). */
col_status col_lm_trainer_save_optimizer(col_lm_trainer *t, const char *dir, col_err *err);
col_status col_lm_trainer_load_optimizer(col_lm_trainer *t, const char *dir, col_err *err);
/* Reads dir/adapter_model.safetensors into the adapters after checking that
 * dir/adapter_config.json has this run's rank, alpha and target modules. A
 * missing or corrupt file, a missing tensor or a wrong shape is an error
 * naming the file and the tensor. To resume a LoRA run: col_lm_trainer_load
 * (the base), col_lm_trainer_load_adapter, col_lm_trainer_load_optimizer. */
col_status col_lm_trainer_load_adapter(col_lm_trainer *t, const char *dir, col_err *err);

/* Loading a checkpoint (lm_load.c). col_lm_trainer_load_ex copies every base
 * parameter from a checkpoint, by Hugging Face name (a name is also found
 * without its base-model prefix, "transformer." or "model.", as in older
 * checkpoints). A missing tensor or a shape mismatch is an error naming the
 * tensor. So is a tensor the model does not use (it may be a weight the
 * config leaves out, e.g. an untied lm_head under tie_word_embeddings, or a
 * bias), unless it is one the family's transformers class ignores as well
 * (lm_family.h's unused_ok) or, with tied embeddings, an lm_head.weight that
 * is an exact copy of the input embedding; that error marks
 * COL_SETTING_EXTRA_TENSORS, and COL_LOAD_IGNORE_EXTRA accepts such tensors.
 * Those checks come before any parameter changes. Values that are NaN or
 * infinite are loaded as they are; report (if not NULL) says which
 * parameters hold them. */
enum { COL_LOAD_IGNORE_EXTRA = 1u << 0 };
/* A value model (model.value_head) from a language model's checkpoint: score.weight may be missing (the head then
 * keeps its initialisation, N(0, 0.02) as transformers gives a new one) and the checkpoint's lm_head.weight is
 * left out, as transformers' *ForSequenceClassification.from_pretrained does with a *ForCausalLM checkpoint. */
enum { COL_LOAD_NEW_VALUE_HEAD = 1u << 1 };
enum { COL_LM_LOAD_NAMES = 16, COL_LM_LOAD_NAME_MAX = 128 };
typedef struct {
    int n_nonfinite; /* parameters holding NaN or Inf values after loading */
    struct {
        char name[COL_LM_LOAD_NAME_MAX];
        int64_t count; /* how many of its values */
    } nonfinite[COL_LM_LOAD_NAMES]; /* the first min(n_nonfinite, COL_LM_LOAD_NAMES), in parameter order */
    int n_extra;     /* tensors the model does not use, accepted under COL_LOAD_IGNORE_EXTRA */
    char extra[COL_LM_LOAD_NAMES][COL_LM_LOAD_NAME_MAX]; /* the first ones, in checkpoint order */
    bool new_value_head;  /* COL_LOAD_NEW_VALUE_HEAD: the checkpoint had no score.weight (initialised instead) */
    int n_mapped;         /* col_lm_trainer_load_mapped: parameters read in place from the file's mapping */
    size_t mapped_bytes;  /* and their bytes */
} col_lm_load_report;
col_status col_lm_trainer_load_ex(col_lm_trainer *t, const col_ckpt *ck, unsigned flags, col_lm_load_report *report,
                                  col_err *err);
/* col_lm_trainer_load_ex for an inference session that reads its weights where the checkpoint's file is mapped,
 * as llama.cpp does, instead of copying them: no second copy of the weights in memory, and loading costs about
 * one read of the file. A parameter is read in place when the session runs on the host with every parameter in
 * host memory (no compute tier, no NVMe tier for parameters, one process, no LoRA) and the file stores exactly
 * the bytes the session holds (f32 for an f32 parameter, or colossal-quantize's blocks for that block dtype),
 * suitably aligned; any other is copied as col_lm_trainer_load_ex does. When at least one is read in place,
 * the session takes *ck (sets it to NULL) and closes it when freed; otherwise *ck stays the caller's. On an
 * error the session's weights are incomplete: free it (before closing *ck). report: as col_lm_trainer_load_ex,
 * plus how many parameters (and bytes) were mapped. */
col_status col_lm_trainer_load_mapped(col_lm_trainer *t, col_ckpt **ck, unsigned flags, col_lm_load_report *report,
                                      col_err *err);
/* A GGUF file's weights (llama.cpp's format, lm_load_gguf.c): the file's config must be the session's. Block
 * tensors (Q8_0, Q4_0, Q4_K, Q6_K) go as they are into a session holding that dtype for them (create it
 * with weight_quant_each from col_lm_gguf_param_dtypes), rows un-permuted; the rest is read as f32. */
struct col_gguf;
col_status col_lm_trainer_load_gguf(col_lm_trainer *t, const struct col_gguf *g, col_err *err);
/* The same, reading weights in place where the file is mapped, as col_lm_trainer_load_mapped does: tensors
 * stored as the session holds them (f32, or the same blocks), rows in order (not LLaMA's permuted q/k); the
 * pages of the tensors copied leave the process. The session takes *g (sets it NULL) when it reads any in
 * place. report: n_mapped and mapped_bytes only (may be NULL). */
col_status col_lm_trainer_load_gguf_mapped(col_lm_trainer *t, struct col_gguf **g, col_lm_load_report *report,
                                           col_err *err);
/* For each parameter of c's col_lm_param_specs, the block dtype its GGUF tensor holds when a session can
 * keep it as it is, else COL_F32 (out: col_lm_param_count(c) entries). */
col_status col_lm_gguf_param_dtypes(const struct col_gguf *g, const col_lm_config *c, col_dtype *out,
                                    col_err *err);
/* The engine's block dtype of a ggml type number (COL_F32 for the others). */
col_dtype col_lm_gguf_block_dtype(uint32_t ggml_type);
/* = col_lm_trainer_load_ex(t, ck, 0, NULL, err) */
col_status col_lm_trainer_load(col_lm_trainer *t, const col_ckpt *ck, col_err *err);

/* Per-token objectives (cfg.objective COL_LM_OBJ_TOKEN_LOGPROB or COL_LM_OBJ_VALUES; lm_trainer_tokens.c). The
 * graphs end in out [batch, seq]: log p(target) per token (0 where the target is -1), or a value model's value
 * per token (targets unused, may be NULL). A caller computes its loss from them and that loss's derivative
 * with respect to each, dout, which seeds the backward pass: the gradients are then exactly those of the loss.
 * ids and targets are [batch, seq].
 *   forward_tokens   out without gradients (dropout off); flags COL_LM_FWD_BASE: a LoRA session's base model,
 *                    adapters left out (a frozen reference without a second copy; the model itself without LoRA)
 *   zero_grads       starts a step: gradients to zero
 *   backward_tokens  forward+backward seeded with dout, adding into the gradients (call it once per micro-batch
 *                    with dout the derivative of the whole step's loss); out (may be NULL) receives the pass's
 *                    out, the forward_tokens values when dropout is 0
 *   apply            the optimizer step on the gradients so far (clipping, schedule, loss scaling as a step);
 *                    loss is only reported in info */
enum { COL_LM_FWD_BASE = 1u << 0 };
col_status col_lm_trainer_forward_tokens(col_lm_trainer *t, const int32_t *ids, const int32_t *targets, unsigned flags,
                                         float *out, col_err *err);
void col_lm_trainer_zero_grads(col_lm_trainer *t);
col_status col_lm_trainer_backward_tokens(col_lm_trainer *t, const int32_t *ids, const int32_t *targets,
                                          const float *dout, float *out, col_err *err);
col_status col_lm_trainer_apply(col_lm_trainer *t, float loss, col_lm_step_info *info, col_err *err);

/* Incremental decoding of one sequence with a key/value cache: reset with
 * the longest sequence wanted (<= the model's positions), then feed tokens
 * (the whole prompt once, then one token at a time); *logits points at the
 * vocab logits after the last token fed, valid until the next call. The
 * work per new token grows with the tokens so far, not their square. */
col_status col_lm_trainer_decode_reset(col_lm_trainer *t, int max_len, col_err *err);
col_status col_lm_trainer_decode(col_lm_trainer *t, const int32_t *tokens, int n, const float **logits, col_err *err);
/* Greedy continuation: out receives n_new tokens. */
col_status col_lm_trainer_greedy(col_lm_trainer *t, const int32_t *prompt, int n_prompt, int n_new, int32_t *out,
                                 col_err *err);

/* Batched decoding of many sequences (serving). The session holds `slots` key/value caches of `ctx`
 * positions each (allocated like the single-sequence cache: device memory on a device backend). A slot's
 * sequence is fed with col_lm_batch_prefill (one slot, n tokens at its position) and advanced with
 * col_lm_batch_step, which runs ONE forward pass over k slots' next tokens, each at its own position
 * (per-row start and cache row inside the graph). Row i of the step's logits is numerically the row a
 * single-sequence decode gives for that slot. col_lm_batch_reset starts a slot over at position 0. The
 * batch refuses what the session cannot decode (pipeline stages, tensor/sequence parallelism). */
typedef struct col_lm_batch col_lm_batch;
col_status col_lm_batch_open(col_lm_trainer *t, int slots, int ctx, col_lm_batch **out, col_err *err);
void col_lm_batch_close(col_lm_batch *b);
/* The bytes the caches hold (for the log and --kv-mem). */
size_t col_lm_batch_cache_bytes(const col_lm_config *c, int slots, int ctx);
void col_lm_batch_reset(col_lm_batch *b, int slot);
int col_lm_batch_pos(const col_lm_batch *b, int slot);
/* Copies the first n positions of slot src's cache into slot dst (a shared prompt prefix); dst's
 * position becomes n. */
col_status col_lm_batch_copy_prefix(col_lm_batch *b, int dst, int src, int n, col_err *err);
/* Feeds tokens[0..n) to slot at its position; *logits: [vocab] after the last one (valid until the next call). */
col_status col_lm_batch_prefill(col_lm_batch *b, int slot, const int32_t *tokens, int n, const float **logits,
                                col_err *err);
/* One token for each of k distinct slots: slots[i] is fed tokens[i]; *logits: [k, vocab], row i for slots[i]. */
col_status col_lm_batch_step(col_lm_batch *b, const int *slots, const int32_t *tokens, int k, const float **logits,
                             col_err *err);

#endif

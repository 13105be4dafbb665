/* lora.h - low-rank adaptation (LoRA) as Hugging Face PEFT's LoraLayer
 * (no DoRA, no rsLoRA, lora_dropout 0):
 *
 *     y = base(x) + scale * (x @ A^T) @ B^T,   A [r, in], B [out, r], scale = alpha / r
 *
 * for every adapted projection. GPT-2's Conv1D weights are stored [in, out]
 * but A and B keep the shapes above (PEFT's fan_in_fan_out only concerns the
 * base weight). A starts as kaiming_uniform(a = sqrt(5)), i.e. uniform in
 * +-1/sqrt(in), and B as zeros, so a fresh adapter leaves the model unchanged.
 *
 * Modules are named as PEFT's target_modules: the last component of the
 * module path (GPT-2: c_attn, c_proj, c_fc; OPT: q_proj, k_proj, v_proj,
 * out_proj, fc1, fc2; LLaMA: q_proj, k_proj, v_proj, o_proj, gate_proj,
 * up_proj, down_proj). The graph side is in lm.h (col_lm_build_opts.lora_of).
 */
#ifndef COL_MODELS_LORA_H
#define COL_MODELS_LORA_H

#include "lm.h"

typedef struct {
    int rank;          /* 0 = off */
    float alpha;       /* scale = alpha / rank; 0 means alpha = rank */
    char targets[256]; /* comma-separated module names, "" = the family default */
} col_lora_config;

/* The modules a family can adapt, comma-separated ("c_attn, c_proj, c_fc"),
 * written into buf (room for len bytes, COL_LORA_MODULES_MAX is enough) and
 * returned; and its default targets ("c_attn" for GPT-2, "q_proj,v_proj"
 * otherwise). Both come from the family's table entry (lm_family.h). */
enum { COL_LORA_MODULES_MAX = 160 };
const char *col_lora_valid_modules(col_arch arch, char *buf, size_t len);
const char *col_lora_default_targets(col_arch arch);
/* alpha / rank, with alpha = 0 read as alpha = rank */
float col_lora_scale(const col_lora_config *l);
float col_lora_alpha(const col_lora_config *l);

/* Which base parameters get adapters: lora_of[i] = adapter index (0, 1, ...
 * in spec order) for each adapted weight, -1 otherwise; *n_adapters their
 * count. The targets string is checked (an unknown module is an error
 * listing the valid ones; so is a rank < 0, a rank above min(in, out) of an
 * adapted weight, a negative or non-finite alpha, or targets that match
 * nothing). rank 0 gives no adapters. */
col_status col_lora_plan(const col_lm_config *c, const col_lora_config *l, const col_param_spec *specs, int np,
                         int *lora_of, int *n_adapters, col_err *err);
/* The canonical target list of a plan: the family's module names that are
 * adapted, comma-separated in the family's order (e.g. "q_proj,v_proj"). */
void col_lora_target_list(const col_lm_config *c, const col_lora_config *l, char *buf, size_t len);

/* Specs of adapter j of base weight `w`: A (PEFT name
 * "base_model.model.<module>.lora_A.weight", [r, in]) and B ([out, r]). */
void col_lora_specs(const col_lm_config *c, const col_param_spec *w, int rank, col_param_spec *a, col_param_spec *b);
/* PEFT's init: A uniform in +-1/sqrt(in) drawn from (seed, tensor index),
 * B zeros. */
void col_lora_init(const col_param_spec *s, bool is_a, int index, float *data, uint64_t seed);

/* dst = W + scale * B @ A for a Linear weight [out, in], or, for a Conv1D
 * weight [in, out], W + scale * (B @ A)^T. dst may not alias w. */
void col_lora_merge(const col_lm_config *c, const col_param_spec *w, const float *wdata, const float *a,
                    const float *b, int rank, float scale, float *dst);

/* adapter_config.json text in PEFT's format (malloc'ed, free() it). */
col_status col_lora_config_json(const col_lm_config *c, const col_lora_config *l, char **json, col_err *err);
/* Checks adapter_config.json text against the run's settings: peft_type LORA,
 * r, lora_alpha and the set of target_modules must match. name is used in
 * messages. */
col_status col_lora_check_config_json(const char *json, size_t len, const char *name, const col_lm_config *c,
                                      const col_lora_config *l, col_err *err);
/* Reads the LoRA settings of an adapter_config.json (PEFT) for a model of
 * config c: rank, alpha and target modules, each checked as above. */
col_status col_lora_read_config_json(const char *json, size_t len, const char *name, const col_lm_config *c,
                                     col_lora_config *out, col_err *err);

#endif

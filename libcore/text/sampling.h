/* sampling.h - picking the next token from a row of logits.
 *
 * The processing follows transformers' generate(do_sample=True):
 *   1. repetition penalty (RepetitionPenaltyLogitsProcessor): every distinct
 *      token of the context gets logit < 0 ? logit * penalty : logit / penalty
 *   2. temperature: logits / T (T == 0: greedy argmax, ties to the lowest id;
 *      steps 3-5 are skipped, the penalty still applies)
 *   3. top-k (TopKLogitsWarper): keep the tokens whose logit is >= the k-th
 *      largest (ties with the k-th are kept)
 *   4. top-p (TopPLogitsWarper): of what is left, keep the smallest set of
 *      highest-probability tokens whose cumulative probability >= top_p
 *      (always at least one)
 *   5. draw from the softmax of the kept tokens by inverting their CDF at
 *      u = col_rand_uniform(seed, step) (the kept tokens in the order of
 *      decreasing logit, ties by id, when top-k or top-p is on; in id order
 *      otherwise): a seed and a step number give the same token on any
 *      machine and thread count.
 * Probabilities are computed as exp((l - max) / T) in double, so tiny
 * temperatures do not overflow. A call allocates nothing: the sampler holds
 * its V-entry scratch buffers, made once by col_sampler_init. */
#ifndef COL_SAMPLING_H
#define COL_SAMPLING_H

#include <stdint.h>

#include "status.h"

typedef struct {
    float temperature;        /* >= 0; 0 = greedy */
    int top_k;                /* >= 0; 0 = off */
    float top_p;              /* in (0, 1]; 1 = off */
    float repetition_penalty; /* > 0; 1 = off */
    uint64_t seed;
} col_sample_opts;

/* temperature 1, top_k 0, top_p 1, repetition_penalty 1, seed 0 */
col_sample_opts col_sample_defaults(void);

typedef struct {
    int vocab;
    int32_t *idx; /* [V] token ids (candidates; context marks during the penalty) */
    float *val;   /* [V] penalised logits */
} col_sampler;

col_status col_sampler_init(col_sampler *s, int vocab, col_err *err);
void col_sampler_free(col_sampler *s);
/* Checks the settings; the message names the setting, its value and the valid range. */
col_status col_sample_check(const col_sample_opts *o, col_err *err);

/* logits: [vocab] f32; context: the ncontext token ids seen so far (prompt and
 * generated; each must be in [0, vocab)); step: the draw's counter (e.g. the
 * position of the token). NaN or +inf logits, or no finite logit, are errors.
 * Writes the token id to *token. */
col_status col_sample(col_sampler *s, const float *logits, const int32_t *context, int64_t ncontext,
                      const col_sample_opts *o, uint64_t step, int32_t *token, col_err *err);

#endif

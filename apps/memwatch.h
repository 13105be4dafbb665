/* memwatch.h - the process's peak resident memory, phase by phase (loading
 * the session, training steps, evaluation and sampling, saving), against the
 * bound the budgets promise: what the process held before the session
 * (code, libraries, tokenizer, data) + the session's own bound
 * (col_lm_trainer_memory: host budget + compute tier + fixed overhead).
 *
 * Each phase starts the kernel's peak (VmHWM) over (procmem.h), so each
 * phase's figure is its own; where that is not allowed every figure is the
 * peak since the process started. */
#ifndef COL_APPS_MEMWATCH_H
#define COL_APPS_MEMWATCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "lm_trainer.h"

typedef enum { MW_SETUP, MW_LOAD, MW_TRAIN, MW_EVAL, MW_SAVE, MW_NPHASES } mw_phase;

typedef struct {
    mw_phase cur;
    bool resets;                /* VmHWM could be started over at each phase */
    size_t base;                /* resident when the session was about to be made */
    size_t peak[MW_NPHASES];    /* the most resident during each phase (0: the phase did not happen) */
    size_t runtime;             /* an allowance for a GPU runtime's host memory (0 on the CPU): mw_set_runtime */
    size_t others;              /* the bounds of the run's other sessions (RLHF: reference, reward model, critic) */
} memwatch;

void mw_start(memwatch *w);                   /* the setup phase begins */
/* On a GPU the runtime and its BLAS library map code and make buffers in host
 * memory as kernels are first used, after the base was taken: bytes of that
 * are allowed beside the bound (reported as "gpu runtime"). */
enum { MW_GPU_RUNTIME_ALLOWANCE = 256 << 20 }; /* gpt2-bytes on an H100 grew by about 150 MiB */
void mw_set_runtime(memwatch *w, size_t bytes);
/* A run of several sessions: the others' bounds (col_lm_memory.bound of each), added to the bound. */
void mw_add_session(memwatch *w, const col_lm_trainer *t);
/* The current phase ends and p begins; entering MW_LOAD records the base. */
void mw_enter(memwatch *w, mw_phase p);
/* Ends the current phase; writes the peaks and the bound, as one JSON object
 * {"memory":{...}} (json) or one line of text: "peak_rss", the most resident
 * in the phases with the session (load .. save), against "bound". */
void mw_report(memwatch *w, const col_lm_trainer *t, bool json, FILE *out);

#endif

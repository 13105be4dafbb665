/* bench_decode.h - bench_lm generate (bench_decode.c): single-stream prompt and decode speed of a model in a
 * weight format against the memory bandwidth measured in the same run, and the bandwidth loops. */
#ifndef COL_BENCH_DECODE_H
#define COL_BENCH_DECODE_H

#include <stddef.h>

#include "backend.h"

/* read + write bandwidth of a parallel copy of n floats, in GB/s (bytes moved both ways) */
double bench_copy_rate(size_t n);
/* read-only bandwidth of a parallel pass summing n floats' bits, in GB/s */
double bench_read_rate(size_t n);

/* bench_lm generate: model is a preset name or a Hugging Face model directory (a colossal-quantize output
 * loads as it is), format "f32" or a col_lm_quant_parse name (NULL: f32, or what the directory holds);
 * reps runs of a prompt and the decoded tokens after one warm-up. Prints one line; returns 0, or 1 after
 * printing why it could not run. */
int bench_generate(col_backend *be, const char *model, const char *format, int reps);

#endif

/* diffuse.h - colossal-diffuse's pieces: the options (diffuse_opts.c) and the
 * run (diffuse.c). */
#ifndef COL_APPS_DIFFUSE_H
#define COL_APPS_DIFFUSE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "device.h"
#include "memopts.h"

#define DIFFUSE_PROG "colossal-diffuse"
enum { DF_MAX_LORA = 8 };

typedef struct {
    const char *model, *prompt, *negative, *out;
    int steps;            /* 0 = the default (30; 4 for lcm) */
    float cfg;            /* guidance scale; < 0 = the default (7.5; 1.5 for lcm) */
    uint64_t seed;
    bool has_seed;        /* else a seed from the system, printed and written into the PNG */
    int width, height;    /* 0 = the model's own size (the UNet's sample_size x 8) */
    int batch;
    char scheduler[32];   /* "" = the one scheduler_config.json names */
    const char *init;     /* img2img / inpainting source image */
    float strength;       /* how much of init is replaced: 0 < s <= 1 */
    const char *mask;     /* inpainting: white = repaint */
    const char *tokenizer;/* a tokenizer folder in place of the model's */
    const char *lora[DF_MAX_LORA];
    float lora_weight[DF_MAX_LORA];
    int nlora;
    bool philox;          /* --rng philox: our own counter-based generator, else torch's CPU generator */
    bool quiet, force;
    app_device_choice device;
    mem_opts mem;
} diffuse_opts;

/* Parses the command line. Returns 0 (run), 1 (--help: printed to stdout),
 * or 2 with one line in msg (n bytes) saying what is wrong. */
int diffuse_parse(int argc, char **argv, diffuse_opts *o, char *msg, size_t n);
void diffuse_usage(FILE *f);
/* The scheduler names --scheduler takes, NULL-terminated. */
extern const char *const diffuse_schedulers[];

#endif

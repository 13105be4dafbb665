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
    /* --train MODEL IMAGES_DIR --out DIR (apps/diffuse_train*.c); steps, batch, seed and lora are shared */
    bool train, resume, flip, out_given;
    const char *images, *instance_prompt, *class_dir, *class_prompt;
    int lora_rank, resolution, grad_accum, save_every, warmup;
    float lr, prior_weight, max_grad_norm; /* lr, max_grad_norm < 0: the default */
    const char *train_only;                /* the first training option given (refused without --train) */
} diffuse_opts;

/* Parses the command line. Returns 0 (run), 1 (--help or --version: printed to stdout),
 * or 2 with one line in msg (n bytes) saying what is wrong. */
int diffuse_parse(int argc, char **argv, diffuse_opts *o, char *msg, size_t n);
void diffuse_usage(FILE *f);
/* The option parsers' pieces (diffuse_opts.c), shared with diffuse_train_opts.c (besides cliopt.h's cli_bad and
 * cli_to_ll): a finite number in [lo, hi]. */
bool diffuse_to_num(const char *s, double lo, double hi, float *v);
/* The scheduler names --scheduler takes, NULL-terminated. */
extern const char *const diffuse_schedulers[];

/* ---- diffuse_train_opts.c: the --train options ---- */
enum { DF_TRAIN_NOPTS = 13 };
/* their names without "--", the first three taking no value */
extern const char *const diffuse_train_opt_names[DF_TRAIN_NOPTS];
extern const char diffuse_train_help[];
void diffuse_train_defaults(diffuse_opts *o);
/* option k of diffuse_train_opt_names with its value (NULL for the first three): 0, or 2 with msg */
int diffuse_train_opt(diffuse_opts *o, int k, const char *arg, char *msg, size_t n);
/* With --train: the positional MODEL IMAGES_DIR from argv[optind..] and the checks across options: 0 or 2 */
int diffuse_train_finish(int argc, char **argv, int optind, diffuse_opts *o, char *msg, size_t n);
/* ---- diffuse_train.c: the run (exit code) ---- */
int diffuse_train(diffuse_opts *o);

#endif

/* fold.h - colossal-fold's pieces: the options (fold_opts.c), the outputs
 * (fold_out.c) and the run (fold.c). */
#ifndef COL_APPS_FOLD_H
#define COL_APPS_FOLD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "device.h"
#include "memopts.h"

#define FOLD_PROG "colossal-fold"

typedef struct {
    const char *params;      /* a parameter file, or a directory of params_model_*.npz */
    const char *fasta;
    const char *out;         /* NULL: NAME.pdb per record in the current directory */
    const char *msa;         /* an a3m for the (single) record; NULL: single-sequence mode */
    int recycles;            /* AlphaFold's num_recycle (default 3) */
    int64_t chunk;           /* rows per chunk; 0 = none; -1 = automatic (the default) */
    bool cif;                /* mmCIF instead of PDB */
    bool json, quiet, force;
    int max_msa_clusters;    /* 512 */
    int max_extra_msa;       /* -1: the model's own (AlphaFold: 5120, 1024 for model_5) */
    app_device_choice device;
    mem_opts mem;
} fold_opts;

void fold_usage(FILE *f);
/* 0: run; 1: --help was printed; 2: a usage error (msg says why). */
int fold_parse(int argc, char **argv, fold_opts *o, char *msg, size_t n);

#endif

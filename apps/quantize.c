/* colossal-quantize - a language model with quantized weights.
 *
 *   colossal-quantize MODEL OUT --type int8|q4|q8_0|q4_0|q4_K|q6_K
 *
 * MODEL is anything colossal-chat opens (a Hugging Face directory or hub id in the cache, a colossal
 * output). OUT becomes a model directory colossal-chat and colossal-serve load directly: config.json, the
 * tokenizer files, and model.safetensors whose projections and embeddings hold the blocks of the chosen
 * format as byte tensors tagged in the file's metadata (models/lm/lm_quant.h); norms, biases and learned
 * positions stay f32. The weights go through the same quantizing load the programs' --quant option uses,
 * so a quantized directory and --quant give the same numbers. OUT is replaced whole, atomically; files of
 * the user's in it are kept (libcore/formats/outdir.h). Errors: one line on stderr, exit 1; usage errors
 * exit 2. */
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "apperr.h"
#include "units.h"
#include "backend_cpu.h"
#include "checkpoint.h"
#include "cliopt.h"
#include "hf_config.h"
#include "lm_quant.h"
#include "lm_source.h"
#include "lm_trainer.h"
#include "outdir.h"
#include "procsetup.h"
#include "textio.h"

#define PROG "colossal-quantize"

static void usage(FILE *f)
{
    fprintf(f, "usage: " PROG " MODEL OUT --type TYPE [--tokenizer PATH]\n"
               "Writes MODEL with quantized weights into the directory OUT, which colossal-chat and\n"
               "colossal-serve load as they load any model.\n"
               "  --type TYPE       int8 (= q8_0: blocks of 32 int8 values and an f16 scale, 8.5 bits per weight)\n"
               "                    q4 (= q4_0: blocks of 32 4-bit values and an f16 scale, 4.5 bits per weight)\n"
               "                    q4_K, q6_K (llama.cpp's 256-value super-blocks, 4.5 and 6.6 bits per weight)\n"
               "  --tokenizer PATH  the tokenizer to copy when MODEL has none\n"
               "The projections, token embeddings and an untied head are quantized (a matrix whose inner\n"
               "dimension is not a multiple of the block stays f32); norms, biases and positions stay f32.\n"
               "  --help            print this help and exit; --version: print the version and exit\n"
               "Files of yours in OUT are kept; colossal's own files there are replaced.\n"
               "%s", cli_exit_help);
}

static int usage_error(const char *fmt, const char *arg)
{
    fprintf(stderr, PROG ": ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, " (see --help)\n");
    return 2;
}

static int fail(const col_err *err)
{
    fprintf(stderr, PROG ": %s\n", err->msg[0] ? err->msg : "failed");
    return 1;
}

/* model.safetensors of the session's weights (quantized ones as tagged bytes), config.json, the tokenizer */
static col_status write_model(col_lm_trainer *t, const col_lm_source *src, const char *dir, size_t *bytes,
                              int *nquant, col_err *err)
{
    const col_lm_config *c = &col_lm_trainer_config(t)->model;
    int np = col_lm_param_count(c);
    col_param_spec *specs = calloc((size_t)np, sizeof *specs);
    col_st_out *out = calloc((size_t)np, sizeof *out);
    const char **meta = calloc(2 * (size_t)np + 3, sizeof *meta);
    char (*tags)[64] = calloc((size_t)np, sizeof *tags);
    col_status st = specs && out && meta && tags ? COL_OK : col_err_set(err, COL_ENOMEM, "out of memory");
    int nm = 0;
    *bytes = 0;
    *nquant = 0;
    if (st == COL_OK) {
        col_lm_param_specs(c, specs);
        meta[nm++] = "format";
        meta[nm++] = "pt";
    }
    for (int i = 0; i < np && st == COL_OK; i++) {
        col_dtype dt;
        const void *w = col_lm_trainer_weights(t, i, &dt);
        if (!w) {
            st = col_err_set(err, COL_EINTERNAL, "the weights of '%s' are not in host memory", specs[i].name);
            break;
        }
        out[i].name = specs[i].name;
        out[i].data = w;
        if (col_dtype_is_quant(dt)) {
            int64_t shape[2];
            col_lm_leaf_shape(&specs[i], dt, shape);
            out[i].u8 = true;
            out[i].ndim = 2;
            out[i].shape[0] = shape[0];
            out[i].shape[1] = (int64_t)col_dtype_row_bytes(dt, shape[1]);
            col_lm_quant_tag(dt, shape, tags[i], sizeof tags[i]);
            meta[nm++] = specs[i].name;
            meta[nm++] = tags[i];
            *bytes += (size_t)(out[i].shape[0] * out[i].shape[1]);
            ++*nquant;
        } else {
            out[i].ndim = specs[i].ndim;
            memcpy(out[i].shape, specs[i].shape, sizeof specs[i].shape);
            *bytes += sizeof(float) * (size_t)col_param_numel(&specs[i]);
        }
    }
    char path[4200];
    if (st == COL_OK) {
        snprintf(path, sizeof path, "%s/model.safetensors", dir);
        st = col_st_write_aligned(path, out, np, meta, COL_LM_WEIGHT_ALIGN, err);
    }
    char *json = NULL;
    if (st == COL_OK && (st = col_hf_config_json(c, &json, err)) == COL_OK) {
        snprintf(path, sizeof path, "%s/config.json", dir);
        st = col_write_file_atomic(path, json, strlen(json), err);
    }
    free(json);
    if (st == COL_OK && src->tok_dir[0])
        st = col_lm_source_copy_tokenizer(src, dir, err);
    free(specs);
    free(out);
    free(meta);
    free(tags);
    return st;
}

int main(int argc, char **argv)
{
    col_proc_setup(argv);
    const char *pos[2] = {NULL, NULL}, *type = NULL, *tokenizer = NULL;
    int npos = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            usage(stdout);
            return 0;
        } else if (strcmp(a, "--version") == 0) {
            cli_print_version(PROG);
            return 0;
        } else if (strcmp(a, "--type") == 0 || strcmp(a, "--tokenizer") == 0) {
            if (i + 1 >= argc)
                return usage_error("%s needs a value", a);
            *(strcmp(a, "--type") == 0 ? &type : &tokenizer) = argv[++i];
        } else if (a[0] == '-' && a[1]) {
            static const struct option known[] = {{"type", required_argument, 0, 0}, {"tokenizer", required_argument, 0, 0},
                                                   {"help", no_argument, 0, 0}, {"version", no_argument, 0, 0}, {0, 0, 0, 0}};
            char msg[512];
            return usage_error("%s", cli_unknown_option(a, known, msg, sizeof msg));
        } else if (npos < 2) {
            pos[npos++] = a;
        } else {
            return usage_error("unexpected argument '%s'", a);
        }
    }
    if (npos < 2)
        return usage_error("%s", npos ? "no OUT directory given" : "no MODEL and OUT given");
    col_dtype q;
    if (!type)
        return usage_error("%s", "--type is required: one of " COL_LM_QUANT_NAMES);
    if (!col_lm_quant_parse(type, &q))
        return usage_error("--type '%s' is not one of " COL_LM_QUANT_NAMES, type);

    col_err err = {0};
    col_lm_source src;
    if (col_lm_source_open(pos[0], tokenizer, false, &src, &err) != COL_OK)
        return fail(&err);
    if (!src.weights) {
        fprintf(stderr, PROG ": %s is a built-in architecture without weights: nothing to quantize\n", pos[0]);
        col_lm_source_close(&src);
        return 1;
    }
    if (src.has_adapter) {
        fprintf(stderr, PROG ": %s holds a LoRA adapter beside its base weights; save the model with the adapter "
                        "merged (colossal-finetune --merge-lora) and quantize that\n", src.dir);
        col_lm_source_close(&src);
        return 1;
    }
    col_lm_train_config tc;
    memset(&tc, 0, sizeof tc);
    tc.model = src.config;
    tc.batch = 1;
    tc.seq = 1;
    tc.opt = col_opt_defaults(COL_OPT_SGD);
    tc.inference = true;
    tc.weights_follow = true;
    tc.weight_quant = q;
    col_backend be;
    col_lm_trainer *t = NULL;
    col_outdir *od = NULL;
    col_lm_load_report rep = {0};
    int rc = 1;
    if (col_cpu_backend_init(&be, &err) != COL_OK) {
        rc = fail(&err);
        col_lm_source_close(&src);
        return rc;
    }
    const char *stage = NULL;
    size_t bytes = 0;
    int nquant = 0;
    if (col_lm_trainer_create(&tc, &be, &t, &err) != COL_OK ||
        col_lm_trainer_load_ex(t, src.weights, 0, &rep, &err) != COL_OK) {
        rc = fail(&err);
        goto done;
    }
    app_load_warnings(stderr, PROG, &rep);
    if (col_outdir_open(pos[1], 0, &od, &err) != COL_OK || col_outdir_begin(od, &stage, &err) != COL_OK ||
        write_model(t, &src, stage, &bytes, &nquant, &err) != COL_OK || col_outdir_commit(od, &err) != COL_OK) {
        rc = fail(&err);
        goto done;
    }
    char size[COL_BYTES_STR];
    fprintf(stderr, PROG ": wrote %s: %d of %d weight tensors as %s, %s\n", col_outdir_path(od), nquant,
            col_lm_param_count(&src.config), col_dtype_name(q), col_fmt_bytes(size, sizeof size, (uint64_t)bytes));
    rc = 0;
done:
    col_outdir_close(od);
    col_lm_trainer_free(t);
    col_cpu_backend_free(&be);
    col_lm_source_close(&src);
    return rc;
}

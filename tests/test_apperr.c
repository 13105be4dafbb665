/* test_apperr.c - the apps' line for a library error (apps/apperr.c): the
 * library's message, then the options of the settings it marks, as a
 * program's mapping names them; the memory options' mapping
 * (apps/memopts.c) names only options that exist; and real library errors
 * (memtier, the NVMe store, an output directory) come out naming the option
 * that fixes them. */
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "apperr.h"
#include "memopts.h"
#include "memtier.h"
#include "nvme.h"
#include "outdir.h"
#include "testlib.h"

/* a program's mapping, as colossal-finetune's: its own options, then the memory ones */
static const char *flag_of(col_setting s)
{
    switch (s) {
    case COL_SETTING_TOKENIZER: return "tokenizer";
    case COL_SETTING_OUTPUT_DIR: return "out";
    default: return mem_opt_of(s);
    }
}

/* maps two settings to one option */
static const char *same_flag(col_setting s) { return s == COL_SETTING_TOKENIZER ? NULL : "model"; }

static bool ends_with(const char *s, const char *end)
{
    size_t n = strlen(s), m = strlen(end);
    return n >= m && strcmp(s + n - m, end) == 0;
}

static void test_mem_mapping(void)
{
    bool ok = true;
    int mapped = 0;
    for (int s = COL_SETTING_NONE; s < COL_NSETTINGS; s++) {
        const char *f = mem_opt_of((col_setting)s);
        if (!f)
            continue;
        mapped++;
        bool known = false;
        for (int i = 0; mem_opt_names[i]; i++)
            known |= strcmp(mem_opt_names[i], f) == 0;
        ok &= known;
    }
    TL_OK(ok && mapped == 6, "every setting of the memory options maps to one of them (%d mapped)", mapped);
    TL_OK(strcmp(mem_opt_of(COL_SETTING_COMPUTE_BUDGET), "gpu-mem") == 0 &&
              strcmp(mem_opt_of(COL_SETTING_HOST_BUDGET), "cpu-mem") == 0 &&
              strcmp(mem_opt_of(COL_SETTING_NVME_DIR), "nvme-dir") == 0 &&
              strcmp(mem_opt_of(COL_SETTING_NVME_MAX), "nvme-max") == 0 && !mem_opt_of(COL_SETTING_TOKENIZER) &&
              !mem_opt_of(COL_SETTING_NONE),
          "compute tier budget -> --gpu-mem, host budget -> --cpu-mem, NVMe directory and limit -> --nvme-dir/--nvme-max");
}

static void test_line(void)
{
    char line[APP_ERR_LINE_MAX];
    col_err e = {0};
    col_err_set(&e, COL_EIO, "a plain failure");
    TL_OK(strcmp(app_err_line(&e, flag_of, line, sizeof line), "a plain failure") == 0,
          "no setting marked: the message as it is");
    col_err_set_on(&e, COL_SETTING_COMPUTE_BUDGET, COL_ENOMEM, "the compute tier is too small");
    TL_OK(strcmp(app_err_line(&e, flag_of, line, sizeof line), "the compute tier is too small (--gpu-mem)") == 0,
          "one setting: %s", line);
    col_err_add_setting(&e, COL_SETTING_HOST_BUDGET);
    TL_OK(strcmp(app_err_line(&e, flag_of, line, sizeof line), "the compute tier is too small (--cpu-mem, --gpu-mem)") ==
              0,
          "two settings, in col_setting order: %s", line);
    col_err_set_on(&e, COL_SETTING_CHAT_TEMPLATE, COL_EINVAL, "no such template");
    TL_OK(strcmp(app_err_line(&e, flag_of, line, sizeof line), "no such template") == 0,
          "a setting the program has no option for adds nothing");
    col_err_set_on(&e, COL_SETTING_OUTPUT_DIR, COL_EIO, "x");
    col_err_add_setting(&e, COL_SETTING_NVME_DIR);
    col_err_add_setting(&e, COL_SETTING_TOKENIZER);
    TL_OK(strcmp(app_err_line(&e, same_flag, line, sizeof line), "x (--model)") == 0,
          "an option named for two settings appears once: %s", line);
    char small[12];
    col_err_set_on(&e, COL_SETTING_NVME_DIR, COL_EIO, "0123456789");
    TL_OK(strcmp(app_err_line(&e, flag_of, small, sizeof small), "0123456789 ") == 0, "a short buffer cuts the line");
    TL_OK(strcmp(app_err_line(&e, NULL, line, sizeof line), "0123456789") == 0, "no mapping: the message");
}

/* library errors as the apps print them */
static void test_library_errors(void)
{
    char dir[] = "/tmp/colossal-apperr-XXXXXX", path[256], line[APP_ERR_LINE_MAX];
    if (!mkdtemp(dir)) {
        TL_OK(false, "mkdtemp");
        return;
    }
    col_err e = {0};
    /* an NVMe directory that is a file */
    snprintf(path, sizeof path, "%s/file", dir);
    FILE *f = fopen(path, "w");
    if (f)
        fclose(f);
    mt_nvme *nv = NULL;
    mt_nvme_config nc = {.dir = path, .slot_bytes = 4096};
    TL_OK(mt_nvme_open(&nc, &nv, &e) == COL_EIO && !strstr(e.msg, "--") &&
              ends_with(app_err_line(&e, flag_of, line, sizeof line), "is not a directory; choose another NVMe "
                                                                       "directory (--nvme-dir)"),
          "an NVMe directory that is a file: %s", line);
    /* a host budget too small */
    mt_pool *pool = NULL;
    mt_ref r;
    mt_create(&(mt_config){.chunk_bytes = 1 << 20, .host_budget = 1 << 20}, &pool, &e);
    TL_OK(mt_alloc(pool, MT_PARAM, 3 << 20, &r, &e) == COL_ENOMEM && !strstr(e.msg, "--") &&
              ends_with(app_err_line(&e, flag_of, line, sizeof line), "needs at least 3.0 MiB (--cpu-mem)"),
          "a host budget too small: %s", line);
    mt_destroy(pool);
    /* an output directory under a file */
    snprintf(path, sizeof path, "%s/file/out", dir);
    col_outdir *od = NULL;
    TL_OK(col_outdir_open(path, 0, &od, &e) == COL_EIO && !od && !strstr(e.msg, "--") &&
              ends_with(app_err_line(&e, flag_of, line, sizeof line), "choose another output directory (--out)"),
          "an unusable output directory: %s", line);
    col_outdir_close(od);
    snprintf(path, sizeof path, "%s/file", dir);
    unlink(path);
    rmdir(dir);
}

/* the warnings of a checkpoint load as the apps print them (app_load_warnings) */
static void test_load_warnings(void)
{
    col_lm_load_report r = {0};
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    app_load_warnings(f, "colossal-finetune", &r);
    app_load_warnings(f, "colossal-finetune", NULL);
    fflush(f);
    TL_OK(len == 0, "a clean load prints nothing");
    r.n_nonfinite = COL_LM_LOAD_NAMES + 2;
    for (int i = 0; i < COL_LM_LOAD_NAMES; i++) {
        snprintf(r.nonfinite[i].name, sizeof r.nonfinite[i].name, "t%d", i);
        r.nonfinite[i].count = i + 1;
    }
    r.n_extra = 4;
    for (int i = 0; i < 3; i++)
        snprintf(r.extra[i], sizeof r.extra[i], "x%d", i);
    app_load_warnings(f, "colossal-finetune", &r);
    fclose(f);
    int lines = 0;
    for (size_t i = 0; i < len; i++)
        lines += text[i] == '\n';
    TL_OK(text && strstr(text, "colossal-finetune: warning: tensor 't0' holds 1 NaN/Inf value\n") &&
              strstr(text, "colossal-finetune: warning: tensor 't2' holds 3 NaN/Inf values\n") &&
              strstr(text, "colossal-finetune: warning: 2 more tensors hold NaN/Inf values\n") &&
              strstr(text, "colossal-finetune: warning: ignored 4 checkpoint tensors the model does not use: 'x0', "
                           "'x1', 'x2', ...\n") &&
              lines == COL_LM_LOAD_NAMES + 2,
          "one warning line per tensor holding NaN/Inf (%d lines), one for the rest, one for the unused ones", lines);
    free(text);
}

int main(void)
{
    test_mem_mapping();
    test_line();
    test_library_errors();
    test_load_warnings();
    return tl_done();
}

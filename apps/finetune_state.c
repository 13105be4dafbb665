/* finetune_state.c - trainer_state.json: how far a run got and the options
 * that define it, so --resume continues it bit for bit; and whether --out
 * may take a run. */
#include <dirent.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cjson/cJSON.h>

#include "finetune.h"
#include "textio.h"

#define STATE_FORMAT "colossal-finetune run state 1"

/* 64-bit values as decimal strings: JSON numbers are doubles */
static cJSON *u64(uint64_t v)
{
    char buf[32];
    snprintf(buf, sizeof buf, "%" PRIu64, v);
    return cJSON_CreateString(buf);
}

col_status ft_state_write(const char *dir, const ft_opts *o, const ft_state *s, cJSON *log_history, col_err *err)
{
    cJSON *root = cJSON_CreateObject(), *b = cJSON_CreateObject(), *args = cJSON_CreateArray();
    cJSON_AddStringToObject(root, "format", STATE_FORMAT);
    cJSON_AddItemToObject(root, "step", u64((uint64_t)s->step));
    cJSON_AddStringToObject(root, "model", o->model);
    cJSON_AddStringToObject(root, "data", o->data);
    cJSON_AddItemToObject(root, "data_tokens", u64(s->data_tokens));
    cJSON_AddItemToObject(root, "data_hash", u64(s->data_hash));
    cJSON_AddItemToObject(b, "mode", u64(s->batches.mode));
    cJSON_AddItemToObject(b, "seed", u64(s->batches.seed));
    cJSON_AddItemToObject(b, "counter", u64(s->batches.counter));
    cJSON_AddItemToObject(b, "pos", u64(s->batches.pos));
    cJSON_AddItemToObject(b, "step", u64(s->batches.step));
    cJSON_AddItemToObject(root, "batches", b);
    bool precision = false;
    for (int i = 0; i < o->nargs; i++) {
        if (ft_runtime_option(o->arg_name[i]))
            continue;
        cJSON *pair = cJSON_CreateArray();
        cJSON_AddItemToArray(pair, cJSON_CreateString(o->arg_name[i]));
        cJSON_AddItemToArray(pair, cJSON_CreateString(o->arg_value[i]));
        cJSON_AddItemToArray(args, pair);
        precision |= strcmp(o->arg_name[i], "precision") == 0;
    }
    if (!precision) { /* the default precision is written too: a resumed run keeps it whatever the default then */
        cJSON *pair = cJSON_CreateArray();
        cJSON_AddItemToArray(pair, cJSON_CreateString("precision"));
        cJSON_AddItemToArray(pair, cJSON_CreateString(ft_precision_name(o->precision)));
        cJSON_AddItemToArray(args, pair);
    }
    cJSON_AddItemToObject(root, "options", args);
    /* what transformers' TrainerState names these (its log_history: train_log.h) */
    cJSON_AddNumberToObject(root, "global_step", (double)s->step);
    cJSON_AddNumberToObject(root, "max_steps", o->steps);
    cJSON_AddNumberToObject(root, "logging_steps", ft_log_every(o));
    cJSON_AddItemToObject(root, "log_history", log_history ? log_history : cJSON_CreateArray());
    char *text = cJSON_Print(root);
    cJSON_Delete(root);
    if (!text)
        return col_err_set(err, COL_ENOMEM, "run state: out of memory");
    char path[4200];
    snprintf(path, sizeof path, "%s/trainer_state.json", dir);
    col_status st = col_write_file_atomic(path, text, strlen(text), err);
    free(text);
    return st;
}

static bool get_u64(const cJSON *o, const char *key, uint64_t *out)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!cJSON_IsString(v) || !v->valuestring[0] || v->valuestring[0] == '-')
        return false;
    char *end;
    unsigned long long x = strtoull(v->valuestring, &end, 10);
    if (*end)
        return false;
    *out = x;
    return true;
}

static bool get_str(const cJSON *o, const char *key, char *dst, size_t n)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!cJSON_IsString(v) || strlen(v->valuestring) >= n)
        return false;
    snprintf(dst, n, "%s", v->valuestring);
    return true;
}

col_status ft_state_read(const char *dir, ft_opts *o, ft_state *s, col_err *err)
{
    char path[4200], *text = NULL;
    size_t len = 0;
    snprintf(path, sizeof path, "%s/trainer_state.json", dir);
    col_status st = col_read_file(path, (size_t)64 << 20, &text, &len, err); /* log_history: 100 B a step */
    if (st != COL_OK)
        return col_err_set(err, st, "%s: %s (is it a colossal-finetune output directory?)", dir, err->msg);
    st = ft_state_parse(text, len, path, o, s, err);
    free(text);
    return st;
}

col_status ft_state_parse(const char *text, size_t len, const char *path, ft_opts *o, ft_state *s, col_err *err)
{
    col_status st = COL_OK;
    cJSON *root = cJSON_ParseWithLength(text, len);
    const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(root, "format");
    const cJSON *b = cJSON_GetObjectItemCaseSensitive(root, "batches");
    const cJSON *args = cJSON_GetObjectItemCaseSensitive(root, "options");
    uint64_t step = 0, mode = 0;
    memset(s, 0, sizeof *s);
    if (!root)
        st = col_err_set(err, COL_EFORMAT, "%s is not valid JSON: the run state is damaged", path);
    else if (!cJSON_IsString(fmt) || strcmp(fmt->valuestring, STATE_FORMAT) != 0)
        st = col_err_set(err, COL_EFORMAT, "%s is not a colossal-finetune run state (format \"%s\" expected)", path,
                         STATE_FORMAT);
    else if (!get_u64(root, "step", &step) || !get_str(root, "model", o->model, sizeof o->model) ||
             !get_str(root, "data", o->data, sizeof o->data) || !get_u64(root, "data_tokens", &s->data_tokens) ||
             !get_u64(root, "data_hash", &s->data_hash) || !cJSON_IsObject(b) || !get_u64(b, "mode", &mode) ||
             mode > 1 || !get_u64(b, "seed", &s->batches.seed) || !get_u64(b, "counter", &s->batches.counter) ||
             !get_u64(b, "pos", &s->batches.pos) || !get_u64(b, "step", &s->batches.step) || !cJSON_IsArray(args) ||
             step > (uint64_t)INT64_MAX)
        st = col_err_set(err, COL_EFORMAT, "%s: a field is missing or has the wrong type: the run state is damaged",
                         path);
    s->step = (int64_t)step;
    s->batches.mode = (uint32_t)mode;
    const cJSON *pair;
    char msg[512];
    const cJSON *list = st == COL_OK ? args : (const cJSON *)NULL;
    cJSON_ArrayForEach(pair, list)
    {
        const cJSON *k = cJSON_GetArrayItem(pair, 0), *v = cJSON_GetArrayItem(pair, 1);
        if (!cJSON_IsString(k) || !cJSON_IsString(v) || cJSON_GetArraySize(pair) != 2) {
            st = col_err_set(err, COL_EFORMAT, "%s: an option entry is not a [name, value] pair", path);
            break;
        }
        if (!ft_set(o, k->valuestring, v->valuestring, msg, sizeof msg)) {
            st = col_err_set(err, COL_EFORMAT, "%s: saved option: %s", path, msg);
            break;
        }
        if (!ft_remember(o, k->valuestring, v->valuestring)) {
            st = col_err_set(err, COL_ENOMEM, "%s: too many saved options", path);
            break;
        }
    }
    cJSON_Delete(root);
    return st;
}

/* up to three of the entries of path (none: "") */
static void some_entries(const char *path, char *out, size_t n)
{
    DIR *d = opendir(path);
    struct dirent *e;
    int count = 0;
    size_t at = 0;
    out[0] = '\0';
    while (d && (e = readdir(d))) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        if (count < 3 && at < n)
            at += (size_t)snprintf(out + at, n - at, "%s%s", count ? ", " : "", e->d_name);
        count++;
    }
    if (count > 3 && at < n)
        snprintf(out + at, n - at, " and %d more", count - 3);
    if (d)
        closedir(d);
}

/* whether dir holds the logs of a run (train_log.h) and nothing else */
static bool only_logs(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    bool only = d != NULL;
    int logs = 0;
    while (only && (e = readdir(d))) {
        bool log = !strcmp(e->d_name, "metrics.jsonl") || !strcmp(e->d_name, "runs");
        logs += log;
        only = log || !strcmp(e->d_name, ".") || !strcmp(e->d_name, "..");
    }
    if (d)
        closedir(d);
    return only && logs > 0;
}

/* The embedded default replaces its earlier output unless that one trained further than this run would. */
static bool default_may_replace(const ft_opts *o, col_err *err)
{
    ft_opts *saved = calloc(1, sizeof *saved);
    ft_state s;
    col_err e = {0};
    if (!saved)
        return col_err_set(err, COL_ENOMEM, "out of memory"), false;
    ft_defaults(saved);
    bool read = ft_state_read(o->out, saved, &s, &e) == COL_OK;
    bool other = read && strcmp(saved->model, o->model) != 0;
    ft_free(saved);
    free(saved);
    if (other)
        return col_err_set(err, COL_EIO, "%s holds a run of another model, not the embedded default's: continue it "
                           "with --resume %s, replace it with --overwrite, or choose another --out", o->out, o->out),
               false;
    if (!read)
        return col_err_set(err, COL_EIO, "%s holds a run whose state cannot be read (%s): replace it with --overwrite, "
                           "or choose another --out", o->out, e.msg), false;
    if (s.step > o->steps)
        return col_err_set(err, COL_EIO, "%s holds a run trained further (%lld steps) than this one would (%d): "
                           "continue it with --resume %s, replace it with --overwrite, or choose another --out",
                           o->out, (long long)s.step, o->steps, o->out), false;
    return true;
}

/* The output directory must be ours to replace: absent, empty, or an earlier
 * colossal-finetune output (then only with --resume or --overwrite, or for the
 * embedded default one that trained no further than it would; the user's own
 * files in it are kept, outdir.h). */
bool ft_check_out(const ft_opts *o, col_err *err)
{
    char path[4200], some[1024];
    struct stat sb;
    if (stat(o->out, &sb) != 0)
        return true;
    snprintf(path, sizeof path, "%s/trainer_state.json", o->out);
    if (only_logs(o->out)) /* the logs of a run stopped before its first save: nothing to keep */
        return true;
    if (stat(path, &sb) == 0) {
        if (!o->resume[0] && !o->overwrite && o->embedded)
            return default_may_replace(o, err);
        if (!o->resume[0] && !o->overwrite)
            return col_err_set(err, COL_EIO, "%s holds a run already: continue it with --resume %s, replace it "
                               "with --overwrite, or choose another --out", o->out, o->out), false;
        return true;
    }
    some_entries(o->out, some, sizeof some);
    if (some[0])
        return col_err_set(err, COL_EIO, "--out %s is not empty and is not a colossal-finetune output (it holds %s): "
                           "choose another directory", o->out, some), false;
    return true;
}

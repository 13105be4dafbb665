/* dm_json.h - reading the config.json files of diffusion components
 * (transformers' text encoder config, diffusers' model configs).
 *
 * Each getter leaves *v unchanged when the key is absent or null (the
 * caller's default), and otherwise checks type and range: a bad value is
 * COL_EFORMAT naming the file (what) and the key.
 */
#ifndef COL_DM_JSON_H
#define COL_DM_JSON_H

#include <stdbool.h>
#include <stddef.h>

#include "status.h"

struct cJSON;

/* The config file: path itself when it names a file, else path/config.json;
 * parsed into *root (free with dm_json_free). file (size n) receives the
 * path read, for messages. A missing file is COL_EIO, one that is not a
 * JSON object COL_EFORMAT. */
col_status dm_json_load(const char *path, char *file, size_t n, struct cJSON **root, col_err *err);
/* Parses a config held in memory (name for messages). */
col_status dm_json_parse(const char *json, size_t len, const char *name, struct cJSON **root, col_err *err);
void dm_json_free(struct cJSON *root);

col_status dm_json_int(const struct cJSON *o, const char *key, int lo, int hi, int *v, const char *what, col_err *err);
col_status dm_json_float(const struct cJSON *o, const char *key, double lo, double hi, float *v, const char *what,
                         col_err *err);
col_status dm_json_bool(const struct cJSON *o, const char *key, bool *v, const char *what, col_err *err);
/* A string value: *v points into the tree (NULL when absent or null). */
col_status dm_json_string(const struct cJSON *o, const char *key, const char **v, const char *what, col_err *err);
/* A list of at most max integers in lo..hi: *n receives the count (unchanged when absent). */
col_status dm_json_int_list(const struct cJSON *o, const char *key, int lo, int hi, int max, int *v, int *n,
                            const char *what, col_err *err);
/* A list of at most max strings: pointers into the tree. */
col_status dm_json_string_list(const struct cJSON *o, const char *key, int max, const char **v, int *n,
                               const char *what, col_err *err);

#endif

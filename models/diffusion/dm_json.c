/* dm_json.c - reading diffusion components' config.json. */
#include "dm_json.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "textio.h"

col_status dm_json_parse(const char *json, size_t len, const char *name, cJSON **root, col_err *err)
{
    *root = cJSON_ParseWithLength(json, len);
    if (!*root || !cJSON_IsObject(*root)) {
        cJSON_Delete(*root);
        *root = NULL;
        return col_err_set(err, COL_EFORMAT, "%s is not a JSON object", name);
    }
    return COL_OK;
}

col_status dm_json_load(const char *path, char *file, size_t n, cJSON **root, col_err *err)
{
    *root = NULL;
    struct stat sb;
    int k = stat(path, &sb) == 0 && S_ISDIR(sb.st_mode) ? snprintf(file, n, "%s/config.json", path)
                                                        : snprintf(file, n, "%s", path);
    if (k < 0 || (size_t)k >= n)
        return col_err_set(err, COL_EINVAL, "config path too long: %s", path);
    char *text;
    size_t len;
    col_status st = col_read_file(file, (size_t)1 << 20, &text, &len, err);
    if (st != COL_OK)
        return st;
    st = dm_json_parse(text, len, file, root, err);
    free(text);
    return st;
}

void dm_json_free(cJSON *root)
{
    cJSON_Delete(root);
}

col_status dm_json_int(const cJSON *o, const char *key, int lo, int hi, int *v, const char *what, col_err *err)
{
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!x || cJSON_IsNull(x))
        return COL_OK;
    if (!cJSON_IsNumber(x) || x->valuedouble != floor(x->valuedouble) || x->valuedouble < lo || x->valuedouble > hi)
        return col_err_set(err, COL_EFORMAT, "%s: \"%s\" must be an integer in %d..%d", what, key, lo, hi);
    *v = (int)x->valuedouble;
    return COL_OK;
}

col_status dm_json_float(const cJSON *o, const char *key, double lo, double hi, float *v, const char *what,
                         col_err *err)
{
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!x || cJSON_IsNull(x))
        return COL_OK;
    if (!cJSON_IsNumber(x) || !(x->valuedouble >= lo && x->valuedouble <= hi))
        return col_err_set(err, COL_EFORMAT, "%s: \"%s\" must be a number in [%g, %g]", what, key, lo, hi);
    *v = (float)x->valuedouble;
    return COL_OK;
}

col_status dm_json_bool(const cJSON *o, const char *key, bool *v, const char *what, col_err *err)
{
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!x || cJSON_IsNull(x))
        return COL_OK;
    if (!cJSON_IsBool(x))
        return col_err_set(err, COL_EFORMAT, "%s: \"%s\" must be true or false", what, key);
    *v = cJSON_IsTrue(x);
    return COL_OK;
}

col_status dm_json_string(const cJSON *o, const char *key, const char **v, const char *what, col_err *err)
{
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, key);
    *v = NULL;
    if (!x || cJSON_IsNull(x))
        return COL_OK;
    if (!cJSON_IsString(x))
        return col_err_set(err, COL_EFORMAT, "%s: \"%s\" must be a string", what, key);
    *v = x->valuestring;
    return COL_OK;
}

col_status dm_json_int_list(const cJSON *o, const char *key, int lo, int hi, int max, int *v, int *n,
                            const char *what, col_err *err)
{
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!x || cJSON_IsNull(x))
        return COL_OK;
    int cnt = cJSON_IsArray(x) ? cJSON_GetArraySize(x) : -1;
    if (cnt < 1 || cnt > max)
        return col_err_set(err, COL_EFORMAT, "%s: \"%s\" must be a list of 1 to %d integers", what, key, max);
    int i = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, x)
    {
        if (!cJSON_IsNumber(e) || e->valuedouble != floor(e->valuedouble) || e->valuedouble < lo || e->valuedouble > hi)
            return col_err_set(err, COL_EFORMAT, "%s: \"%s\"[%d] must be an integer in %d..%d", what, key, i, lo, hi);
        v[i++] = (int)e->valuedouble;
    }
    *n = cnt;
    return COL_OK;
}

col_status dm_json_string_list(const cJSON *o, const char *key, int max, const char **v, int *n, const char *what,
                               col_err *err)
{
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!x || cJSON_IsNull(x))
        return COL_OK;
    int cnt = cJSON_IsArray(x) ? cJSON_GetArraySize(x) : -1;
    if (cnt < 1 || cnt > max)
        return col_err_set(err, COL_EFORMAT, "%s: \"%s\" must be a list of 1 to %d strings", what, key, max);
    int i = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, x)
    {
        if (!cJSON_IsString(e))
            return col_err_set(err, COL_EFORMAT, "%s: \"%s\"[%d] must be a string", what, key, i);
        v[i++] = e->valuestring;
    }
    *n = cnt;
    return COL_OK;
}

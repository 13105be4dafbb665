/* hf_cache.c - model names: a directory, or a hub id found in the Hugging Face cache. */
#include "hf_cache.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static bool is_dir(const char *p)
{
    struct stat sb;
    return stat(p, &sb) == 0 && S_ISDIR(sb.st_mode);
}

col_status col_hf_resolve(const char *model, char *dir, size_t n, col_err *err)
{
    if (is_dir(model)) {
        snprintf(dir, n, "%s", model);
        return COL_OK;
    }
    const char *slash = strchr(model, '/');
    bool hub_id = slash && slash != model && slash[1] && !strchr(slash + 1, '/') && model[0] != '.';
    if (!hub_id)
        return col_err_set(err, COL_EIO, "model '%s' is neither a directory nor a hub id like facebook/opt-125m", model);
    char hub[2048];
    const char *e;
    if ((e = getenv("HF_HUB_CACHE")) && *e)
        snprintf(hub, sizeof hub, "%s", e);
    else if ((e = getenv("HF_HOME")) && *e)
        snprintf(hub, sizeof hub, "%s/hub", e);
    else if ((e = getenv("HOME")) && *e)
        snprintf(hub, sizeof hub, "%s/.cache/huggingface/hub", e);
    else
        snprintf(hub, sizeof hub, ".cache/huggingface/hub");
    char repo[2600];
    snprintf(repo, sizeof repo, "%s/models--%.*s--%s", hub, (int)(slash - model), model, slash + 1);
    char ref[256] = "", path[2900];
    snprintf(path, sizeof path, "%s/refs/main", repo);
    FILE *f = fopen(path, "r");
    if (f) {
        if (!fgets(ref, sizeof ref, f))
            ref[0] = '\0';
        fclose(f);
        ref[strcspn(ref, "\r\n")] = '\0';
    }
    if (!ref[0]) { /* no refs/main: accept a single snapshot */
        snprintf(path, sizeof path, "%s/snapshots", repo);
        DIR *d = opendir(path);
        int count = 0;
        for (struct dirent *de; d && (de = readdir(d));)
            if (de->d_name[0] != '.') {
                count++;
                snprintf(ref, sizeof ref, "%s", de->d_name);
            }
        if (d)
            closedir(d);
        if (count != 1)
            ref[0] = '\0';
    }
    if (ref[0] && !strchr(ref, '/')) {
        snprintf(path, sizeof path, "%s/snapshots/%s", repo, ref);
        if (is_dir(path)) {
            snprintf(dir, n, "%s", path);
            return COL_OK;
        }
    }
    return col_err_set(err, COL_EIO,
                       "model %s is not in the Hugging Face cache (looked in %s); download it first, e.g. with "
                       "`huggingface-cli download %s` (colossal never downloads)",
                       model, repo, model);
}

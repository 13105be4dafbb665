/* memopts.c - see memopts.h. */
#include "memopts.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *const mem_opt_names[] = {"cpu-mem",  "gpu-mem",    "chunk-size",       "nvme-dir",
                                     "nvme-max", "nvme-kinds", "nvme-queue-depth", NULL};

const char mem_opts_help[] =
    "  --cpu-mem SIZE         host memory budget for parameters, gradients and optimizer states (e.g. 8G)\n"
    "  --gpu-mem SIZE         compute-tier budget: parameter and gradient chunks are copied in and out\n"
    "                         around each op, fetched ahead as a plan says (on the CPU the compute tier is\n"
    "                         host memory and optional; on a GPU it is the GPU's memory, by default its free\n"
    "                         memory less a reserve); results are bitwise the same at any budget. A budget\n"
    "                         too small is refused with the smallest that works\n"
    "  --chunk-size SIZE      memtier chunk size (default: the size that wastes least)\n"
    "  --nvme-dir DIR         an NVMe tier: a scratch file in DIR (removed at exit) holding the optimizer\n"
    "                         states, and also gradients and parameters when --cpu-mem cannot hold them\n"
    "  --nvme-kinds LIST      what lives there instead: states,grads,params (any of them) or all;\n"
    "                         gradients or parameters there need --gpu-mem\n"
    "  --nvme-max SIZE        most bytes the NVMe tier may take; --nvme-queue-depth N (default 16)\n";

bool mem_parse_size(const char *v, size_t *out)
{
    char *end;
    errno = 0;
    double x = strtod(v, &end);
    double mult = 1;
    if (*end == 'K' || *end == 'k') mult = 1024, end++;
    else if (*end == 'M' || *end == 'm') mult = 1024.0 * 1024, end++;
    else if (*end == 'G' || *end == 'g') mult = 1024.0 * 1024 * 1024, end++;
    else if (*end == 'T' || *end == 't') mult = 1024.0 * 1024 * 1024 * 1024, end++;
    if (*end == 'i' && mult > 1)
        end++;
    if (*end == 'B' || *end == 'b')
        end++;
    if (v == end || *end || errno || !(x > 0) || x * mult > 1e18)
        return false;
    *out = (size_t)(x * mult);
    return true;
}

/* "states,grads,params" or "all" -> COL_LM_* bits */
static bool parse_kinds(const char *v, unsigned *out)
{
    if (!strcmp(v, "all")) {
        *out = COL_LM_PARAMS | COL_LM_GRADS | COL_LM_STATES;
        return true;
    }
    unsigned k = 0;
    const char *p = v;
    while (*p) {
        size_t len = strcspn(p, ",");
        if (len == 6 && !strncmp(p, "states", 6)) k |= COL_LM_STATES;
        else if (len == 5 && !strncmp(p, "grads", 5)) k |= COL_LM_GRADS;
        else if (len == 6 && !strncmp(p, "params", 6)) k |= COL_LM_PARAMS;
        else return false;
        p += len;
        if (*p == ',' && *++p == '\0')
            return false;
    }
    *out = k;
    return k != 0;
}

#define BAD(...) (snprintf(msg, n, __VA_ARGS__), 0)

int mem_opt_set(mem_opts *m, const char *name, const char *v, char *msg, size_t n)
{
    if (!strcmp(name, "cpu-mem"))
        return mem_parse_size(v, &m->cpu_mem) || BAD("--cpu-mem must be a size like 8G or 512M (got '%s')", v);
    if (!strcmp(name, "gpu-mem"))
        return mem_parse_size(v, &m->gpu_mem) || BAD("--gpu-mem must be a size like 8G or 512M (got '%s')", v);
    if (!strcmp(name, "chunk-size"))
        return (mem_parse_size(v, &m->chunk_size) && m->chunk_size >= 4096) ||
               BAD("--chunk-size must be a size of at least 4K (got '%s')", v);
    if (!strcmp(name, "nvme-dir")) {
        if (!*v || strlen(v) >= sizeof m->nvme_dir)
            return BAD("--nvme-dir: give a directory");
        snprintf(m->nvme_dir, sizeof m->nvme_dir, "%s", v);
        return 1;
    }
    if (!strcmp(name, "nvme-max"))
        return mem_parse_size(v, &m->nvme_max) || BAD("--nvme-max must be a size like 64G (got '%s')", v);
    if (!strcmp(name, "nvme-kinds"))
        return parse_kinds(v, &m->nvme_kinds) ||
               BAD("--nvme-kinds must be a list of states, grads, params, or all (got '%s')", v);
    if (!strcmp(name, "nvme-queue-depth")) {
        char *end;
        errno = 0;
        long q = strtol(v, &end, 10);
        if (!*v || *end || errno || q < 1 || q > 1024)
            return BAD("--nvme-queue-depth must be an integer in 1..1024 (got '%s')", v);
        m->nvme_queue_depth = (int)q;
        return 1;
    }
    return -1;
}

const char *mem_opt_of(col_setting s)
{
    switch (s) {
    case COL_SETTING_HOST_BUDGET: return "cpu-mem";
    case COL_SETTING_COMPUTE_BUDGET: return "gpu-mem";
    case COL_SETTING_CHUNK_SIZE: return "chunk-size";
    case COL_SETTING_NVME_DIR: return "nvme-dir";
    case COL_SETTING_NVME_MAX: return "nvme-max";
    case COL_SETTING_NVME_KINDS: return "nvme-kinds";
    default: return NULL;
    }
}

void mem_opts_apply(const mem_opts *m, col_lm_train_config *tc)
{
    tc->host_budget = m->cpu_mem;
    tc->compute_budget = m->gpu_mem;
    tc->chunk_bytes = m->chunk_size;
    tc->nvme_dir = m->nvme_dir[0] ? m->nvme_dir : NULL;
    tc->nvme_max = m->nvme_max;
    tc->nvme_kinds = m->nvme_kinds;
    tc->nvme_queue_depth = m->nvme_queue_depth;
}

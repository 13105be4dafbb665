/* device.c - the --device option: parsing and the default compute budget
 * (device.h). No backend here: device_open.c makes them. */
#include "device.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char app_device_help[] =
    "  --device DEV           where the graphs run: cpu, or a GPU: cuda (the first), cuda:N (default: cuda\n"
    "                         when this build has the CUDA backend and a usable GPU is present, else cpu).\n"
    "                         On a GPU, parameters, gradients and optimizer states stay in host memory or\n"
    "                         on NVMe and reach the GPU through the compute tier: without --gpu-mem its\n"
    "                         budget is the GPU's free memory less 512 MiB + 1/32 of its total\n";

bool app_device_parse(const char *v, app_device_choice *c, char *msg, size_t n)
{
    if (!strcmp(v, "cpu")) {
        *c = (app_device_choice){APP_DEVICE_CPU, 0, "cpu"};
        return true;
    }
    if (!strcmp(v, "cuda")) {
        *c = (app_device_choice){APP_DEVICE_GPU, 0, "cuda"};
        return true;
    }
    if (!strncmp(v, "cuda:", 5) && v[5] >= '0' && v[5] <= '9') {
        char *end;
        errno = 0;
        long i = strtol(v + 5, &end, 10);
        if (!*end && !errno && i >= 0 && i <= 1023) {
            *c = (app_device_choice){APP_DEVICE_GPU, (int)i, ""};
            snprintf(c->text, sizeof c->text, "cuda:%d", (int)i);
            return true;
        }
    }
    snprintf(msg, n, "--device must be cpu, cuda or cuda:N with N a GPU number such as 0 (got '%s')", v);
    return false;
}

size_t app_device_reserve(size_t total_bytes) { return ((size_t)512 << 20) + total_bytes / 32; }

size_t app_device_budget_rule(size_t free_bytes, size_t total_bytes)
{
    size_t keep = app_device_reserve(total_bytes);
    if (free_bytes < keep + APP_DEVICE_MIN_BUDGET)
        return 0;
    size_t mib = (size_t)1 << 20;
    return (free_bytes - keep) / mib * mib;
}


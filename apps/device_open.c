/* device_open.c - the backend of a --device choice (device.h): the CPU
 * backend, or a GPU's through device_gpu.h. */
#include <stdio.h>
#include <string.h>

#include "backend_cpu.h"
#include "device.h"
#include "device_gpu.h"
#include "units.h"

static int open_cpu(app_device *d, col_err *err)
{
    if (col_cpu_backend_init(&d->be, err) != COL_OK) {
        memset(d, 0, sizeof *d);
        return 1;
    }
    d->ready = true;
    snprintf(d->name, sizeof d->name, "cpu");
    snprintf(d->label, sizeof d->label, "cpu");
    snprintf(d->desc, sizeof d->desc, "cpu: %d threads, OpenBLAS %s", col_cpu_backend_threads(&d->be),
             col_cpu_backend_blas_core(&d->be));
    return 0;
}

static col_status open_gpu(app_device *d, int index, col_err *err)
{
    col_status st = app_gpu_init(&d->be, index, err);
    if (st != COL_OK) {
        memset(d, 0, sizeof *d);
        return st;
    }
    d->ready = d->gpu = true;
    d->index = index;
    snprintf(d->name, sizeof d->name, "cuda:%d", index);
    size_t fr, total;
    char tot[32] = "";
    if (app_device_memory(d, &fr, &total)) {
        col_fmt_bytes(tot + 2, sizeof tot - 2, total);
        tot[0] = ',', tot[1] = ' ';
    }
    snprintf(d->label, sizeof d->label, "%s: %.300s", d->name, app_gpu_name(&d->be));
    snprintf(d->desc, sizeof d->desc, "%s%s", d->label, tot);
    return COL_OK;
}

int app_device_open(const app_device_choice *c, app_device *d, col_err *err)
{
    memset(d, 0, sizeof *d);
    char why[COL_ERR_MSG_MAX];
    if (c->kind == APP_DEVICE_CPU)
        return open_cpu(d, err);
    int n = app_gpu_count(why, sizeof why);
    if (c->kind == APP_DEVICE_AUTO) {
        char note[sizeof d->note] = "";
        col_err e = {0};
        if (n > 0) {
            int g = c->local > 0 ? c->local % n : 0;
            if (open_gpu(d, g, &e) == COL_OK)
                return 0;
            snprintf(note, sizeof note, "cuda:%d cannot be used (%.300s): running on the CPU", g, e.msg);
        }
        int rc = open_cpu(d, err);
        if (rc == 0)
            snprintf(d->note, sizeof d->note, "%s", note);
        return rc;
    }
    if (n <= 0) {
        col_err_set(err, COL_EUNSUPPORTED, "--device %s: no usable GPU: %.300s; use --device cpu", c->text, why);
        return 2;
    }
    if (c->index >= n) {
        char have[32];
        if (n > 1)
            snprintf(have, sizeof have, "cuda:0 to cuda:%d", n - 1);
        else
            snprintf(have, sizeof have, "cuda:0");
        col_err_set(err, COL_EUNSUPPORTED, "--device %s: there is no GPU %d (this machine has %d: %s); use --device "
                    "cuda:0 or --device cpu", c->text, c->index, n, have);
        return 2;
    }
    int index = c->local > 0 && strcmp(c->text, "cuda") == 0 ? c->local % n : c->index; /* (no number given) */
    col_status st = open_gpu(d, index, err);
    if (st == COL_OK)
        return 0;
    if (st == COL_EUNSUPPORTED) {
        char msg[COL_ERR_MSG_MAX];
        snprintf(msg, sizeof msg, "%s", err->msg);
        col_err_set(err, st, "--device %s cannot be used: %.380s; use --device cpu", c->text, msg);
        return 2;
    }
    col_err_prefix(err, "--device %s", c->text);
    return 1;
}

void app_device_close(app_device *d)
{
    if (d->ready) {
        if (d->gpu)
            app_gpu_free(&d->be);
        else
            col_cpu_backend_free(&d->be);
    }
    memset(d, 0, sizeof *d);
}

bool app_device_memory(const app_device *d, size_t *free_bytes, size_t *total_bytes)
{
    *free_bytes = *total_bytes = 0;
    col_err e = {0};
    return d->ready && d->gpu && app_gpu_mem_info(&d->be, free_bytes, total_bytes, &e) == COL_OK;
}

int app_device_default_budget(const app_device *d, size_t *budget, char *line, size_t n, col_err *err)
{
    line[0] = '\0';
    if (!d->gpu || *budget)
        return 0;
    size_t fr, total;
    if (!app_device_memory(d, &fr, &total)) {
        col_err_set(err, COL_EIO, "%s: cannot read how much memory is free: give the compute tier's size with "
                    "--gpu-mem", d->name);
        return 1;
    }
    char f[32], k[32], b[32];
    col_fmt_bytes(f, sizeof f, fr);
    col_fmt_bytes(k, sizeof k, app_device_reserve(total));
    size_t want = app_device_budget_rule(fr, total);
    if (!want) {
        col_err_set(err, COL_ENOMEM, "%s has %s free, too little beside the %s kept back for the device's own use: "
                    "free the GPU, or give the compute tier's size with --gpu-mem", d->name, f, k);
        return 1;
    }
    *budget = want;
    col_fmt_bytes(b, sizeof b, want);
    snprintf(line, n, "compute tier %s: the %s free on %s less %s kept back (--gpu-mem sets it)", b, f, d->name, k);
    return 0;
}

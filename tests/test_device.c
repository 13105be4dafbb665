/* test_device.c - the apps' --device option (apps/device.h): the values the
 * parser takes and refuses, the default compute budget against the rule
 * computed here by hand, the CPU backend it makes (a kernel run on it), and
 * the GPU paths of this build's glue: without a usable GPU the automatic
 * choice is the CPU and an explicit cuda / cuda:N is exit code 2 with one
 * line naming --device and what to do; with one (a machine with a GPU) the
 * automatic choice is cuda:0 with its memory read and a budget taken from
 * it, and a GPU number past the last is exit code 2. */
#include <stdint.h>
#include <string.h>

#include "device.h"
#include "device_gpu.h"
#include "graph.h"
#include "ops.h"
#include "plan.h"
#include "testlib.h"

#define MiB ((size_t)1 << 20)
#define GiB ((size_t)1 << 30)

static void test_parse(void)
{
    static const struct {
        const char *v;
        app_device_kind kind;
        int index;
    } good[] = {{"cpu", APP_DEVICE_CPU, 0}, {"cuda", APP_DEVICE_GPU, 0}, {"cuda:0", APP_DEVICE_GPU, 0},
                {"cuda:3", APP_DEVICE_GPU, 3}, {"cuda:17", APP_DEVICE_GPU, 17}, {"cuda:1023", APP_DEVICE_GPU, 1023}};
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        app_device_choice c = {APP_DEVICE_AUTO, -1, ""};
        char msg[256] = "";
        bool ok = app_device_parse(good[i].v, &c, msg, sizeof msg);
        TL_OK(ok && c.kind == good[i].kind && c.index == good[i].index && !strcmp(c.text, good[i].v),
              "--device %s: kind %d, GPU %d, text '%s'", good[i].v, (int)c.kind, c.index, c.text);
    }
    static const char *const bad[] = {"gpu", "cuda:x", "cuda:-1", "cuda:", "", "CUDA", "cuda:1x", "cuda:1024",
                                      "cuda: 1", "cuda:+1", "cpu:0", "cuda0", "cuda:99999999999999999999", "auto"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        app_device_choice c = {APP_DEVICE_AUTO, 0, ""};
        char msg[256] = "", want[64];
        bool ok = app_device_parse(bad[i], &c, msg, sizeof msg);
        snprintf(want, sizeof want, "(got '%s')", bad[i]);
        TL_OK(!ok && !strncmp(msg, "--device must be cpu, cuda or cuda:N", 36) && strstr(msg, want) &&
                  c.kind == APP_DEVICE_AUTO,
              "--device '%s' is refused: %s", bad[i], msg);
    }
}

static void test_budget_rule(void)
{
    /* the rule by hand: free - (512 MiB + total / 32), whole MiB, nothing below 64 MiB */
    size_t total = 80 * GiB, fr = 78 * GiB + 400 * MiB + 12345;
    size_t keep = 512 * MiB + 80 * GiB / 32; /* 3 GiB */
    TL_OK(app_device_reserve(total) == keep && keep == 3 * GiB, "an 80 GiB GPU keeps 3 GiB back");
    TL_OK(app_device_budget_rule(fr, total) == 75 * GiB + 400 * MiB, "78.4 GiB free: a budget of 75.4 GiB (%zu)",
          app_device_budget_rule(fr, total));
    TL_OK(app_device_budget_rule(fr, total) % MiB == 0, "the budget is whole MiB");
    size_t small = 8 * GiB; /* 768 MiB kept back */
    TL_OK(app_device_budget_rule(768 * MiB + 64 * MiB, small) == 64 * MiB, "exactly 64 MiB above the reserve: 64 MiB");
    TL_OK(app_device_budget_rule(768 * MiB + 64 * MiB - 1, small) == 0, "a byte less: no budget (0)");
    TL_OK(app_device_budget_rule(100 * MiB, small) == 0 && app_device_budget_rule(0, 0) == 0,
          "less free than the reserve: 0, no underflow");
}

/* y = x + x on the backend: proves it computes (on the CPU: host memory) */
static bool cpu_runs(const col_backend *be)
{
    col_graph *g = col_graph_new();
    col_node *x = col_input(g, "x", COL_F32, 1, (int64_t[]){4});
    col_node *y = col_add(g, x, x);
    col_mark_output(y);
    float xs[4] = {1, 2, 3, 4};
    col_err err = {0};
    col_plan *p = NULL;
    bool ok = col_graph_status(g) == COL_OK && col_bind(x, xs, &err) == COL_OK &&
              col_plan_create(g, &p, &err) == COL_OK && col_plan_run(p, be, &err) == COL_OK;
    const float *ys = ok ? col_data(y) : NULL;
    ok = ok && ys[0] == 2 && ys[1] == 4 && ys[2] == 6 && ys[3] == 8;
    col_plan_free(p);
    col_graph_free(g);
    return ok;
}

static void test_cpu(void)
{
    app_device d;
    col_err err = {0};
    app_device_choice c;
    char msg[128];
    app_device_parse("cpu", &c, msg, sizeof msg);
    int rc = app_device_open(&c, &d, &err);
    TL_OK(rc == 0 && d.ready && !d.gpu && d.be.mem == NULL && !strcmp(d.name, "cpu") && !d.note[0],
          "--device cpu: the CPU backend (%s)", err.msg);
    char want[64];
    snprintf(want, sizeof want, "cpu: %d threads, OpenBLAS ", col_cpu_backend_threads(&d.be));
    TL_OK(!strncmp(d.desc, want, strlen(want)) && strlen(d.desc) > strlen(want), "described as '%s'", d.desc);
    TL_OK(cpu_runs(&d.be), "a graph runs on it: 2x of 1 2 3 4");
    size_t fr = 1, total = 1;
    TL_OK(!app_device_memory(&d, &fr, &total) && fr == 0 && total == 0, "the CPU has no device memory to report");
    size_t budget = 0;
    char line[256] = "x";
    TL_OK(app_device_default_budget(&d, &budget, line, sizeof line, &err) == 0 && budget == 0 && !line[0],
          "no compute budget is chosen on the CPU (the compute tier stays optional there)");
    app_device_close(&d);
    TL_OK(!d.ready, "closed");
}

static void test_gpu_paths(void)
{
    char why[COL_ERR_MSG_MAX] = "";
    int n = app_gpu_count(why, sizeof why);
    app_device d;
    col_err err = {0};
    app_device_choice aut = {APP_DEVICE_AUTO, 0, ""}, cuda, far;
    char msg[128];
    app_device_parse("cuda", &cuda, msg, sizeof msg);
    app_device_parse("cuda:1023", &far, msg, sizeof msg);
    if (n == 0) {
        TL_OK(why[0] != '\0', "no GPU here: %s", why);
        int rc = app_device_open(&aut, &d, &err);
        TL_OK(rc == 0 && !d.gpu && !strcmp(d.name, "cpu") && !d.note[0],
              "without a GPU the default is the CPU (%s)", d.desc);
        app_device_close(&d);
        memset(&err, 0, sizeof err);
        rc = app_device_open(&cuda, &d, &err);
        TL_OK(rc == 2 && !d.ready && !strncmp(err.msg, "--device cuda: no usable GPU: ", 30) &&
                  strstr(err.msg, why) && strstr(err.msg, "; use --device cpu") && !strchr(err.msg, '\n'),
              "--device cuda without a GPU: exit code 2, one line: %s", err.msg);
    } else {
        TL_OK(n > 0, "%d GPU(s) here", n);
        int rc = app_device_open(&aut, &d, &err);
        TL_OK(rc == 0 && d.gpu && !strcmp(d.name, "cuda:0") && d.be.mem && !strncmp(d.desc, "cuda:0: ", 8) &&
                  strstr(d.desc, " GiB"),
              "with a GPU the default is cuda:0: %s", rc == 0 ? d.desc : err.msg);
        size_t fr = 0, total = 0;
        bool read = rc == 0 && app_device_memory(&d, &fr, &total);
        TL_OK(read && total > 0 && fr <= total, "its memory: %zu of %zu bytes free", fr, total);
        size_t budget = 0;
        char line[256] = "";
        int brc = rc == 0 ? app_device_default_budget(&d, &budget, line, sizeof line, &err) : -1;
        size_t rule = app_device_budget_rule(fr, total);
        TL_OK(brc == 0 && budget > 0 && budget <= fr && budget + 64 * MiB >= (rule > 64 * MiB ? rule - 64 * MiB : 0) &&
                  strstr(line, "compute tier "),
              "a default budget from it: %s", brc == 0 ? line : err.msg);
        size_t given = 123 * MiB;
        TL_OK(rc == 0 && app_device_default_budget(&d, &given, line, sizeof line, &err) == 0 && given == 123 * MiB &&
                  !line[0],
              "a budget given is kept");
        app_device_close(&d);
    }
    memset(&err, 0, sizeof err);
    int rc = app_device_open(&far, &d, &err);
    TL_OK(rc == 2 && !d.ready && !strncmp(err.msg, "--device cuda:1023: ", 20) && strstr(err.msg, "--device cpu") &&
              !strchr(err.msg, '\n'),
          "--device cuda:1023: exit code 2, one line: %s", err.msg);
}

int main(void)
{
    test_parse();
    test_budget_rule();
    test_cpu();
    test_gpu_paths();
    return tl_done();
}

/* memwatch.c - see memwatch.h. */
#include "memwatch.h"
#include "units.h"

#include "procmem.h"

#include <string.h>

static const char *const phase_names[MW_NPHASES] = {"setup", "load", "train", "eval", "save"};

/* the current phase's peak so far into its slot */
static void close_phase(memwatch *w)
{
    col_procmem m;
    if (col_procmem_read(&m) && m.peak > w->peak[w->cur])
        w->peak[w->cur] = m.peak;
}

void mw_start(memwatch *w)
{
    *w = (memwatch){.cur = MW_SETUP};
    w->resets = col_procmem_reset_peak();
}

void mw_set_runtime(memwatch *w, size_t bytes) { w->runtime = bytes; }

void mw_add_session(memwatch *w, const col_lm_trainer *t)
{
    col_lm_memory m;
    col_lm_trainer_memory(t, &m);
    w->others += m.bound;
}

void mw_enter(memwatch *w, mw_phase p)
{
    close_phase(w);
    if (w->resets)
        w->resets = col_procmem_reset_peak();
    if (p == MW_LOAD) {
        col_procmem m;
        if (col_procmem_read(&m))
            w->base = m.rss;
    }
    w->cur = p;
}

static size_t session_peak(const memwatch *w)
{
    size_t most = 0;
    for (int p = MW_LOAD; p < MW_NPHASES; p++)
        most = w->peak[p] > most ? w->peak[p] : most;
    return most;
}

void mw_report(memwatch *w, const col_lm_trainer *t, bool json, FILE *out)
{
    close_phase(w);
    col_lm_memory m;
    col_lm_trainer_memory(t, &m);
    size_t peak = session_peak(w), bound = w->base + m.bound + w->runtime + w->others;
    if (json) {
        fprintf(out, "{\"memory\":{\"peak_rss\":%zu,\"bound\":%zu,\"within\":%s,\"process_base\":%zu,"
                "\"host_budget\":%zu,\"host\":%zu,\"compute\":%zu,\"overhead\":%zu,\"activations\":%zu,"
                "\"staging\":%zu,\"tables\":%zu,\"phase_peaks_reset\":%s,",
                peak, bound, peak <= bound ? "true" : "false", w->base, m.host_budget, m.host, m.compute, m.overhead,
                m.activations, m.staging, m.tables, w->resets ? "true" : "false");
        if (w->runtime) /* (the field is there on a GPU only: the CPU's report is as it was) */
            fprintf(out, "\"gpu_runtime\":%zu,", w->runtime);
        if (w->others) /* (RLHF runs only) */
            fprintf(out, "\"other_models\":%zu,", w->others);
        fprintf(out, "\"phases\":{");
        bool first = true;
        for (int p = 0; p < MW_NPHASES; p++) {
            if (!w->peak[p])
                continue;
            fprintf(out, "%s\"%s\":%zu", first ? "" : ",", phase_names[p], w->peak[p]);
            first = false;
        }
        fprintf(out, "}}}\n");
        fflush(out);
        return;
    }
    char a[32], b[32], c[32], d[32], e[32], f[32], g[48] = "", o[48] = "";
    col_fmt_bytes(a, sizeof a, peak);
    col_fmt_bytes(b, sizeof b, bound);
    col_fmt_bytes(c, sizeof c, m.host_budget ? m.host_budget : m.host);
    col_fmt_bytes(d, sizeof d, m.compute);
    col_fmt_bytes(e, sizeof e, m.overhead);
    col_fmt_bytes(f, sizeof f, w->base);
    if (w->runtime) {
        col_fmt_bytes(g + 15, sizeof g - 15, w->runtime);
        memcpy(g, " + gpu runtime ", 15);
    }
    if (w->others) {
        col_fmt_bytes(o + 16, sizeof o - 16, w->others);
        memcpy(o, " + other models ", 16);
    }
    fprintf(out, "memory: peak resident %s %s the bound %s (host %s + compute tier %s + overhead %s%s%s + before the "
            "session %s);", a, peak <= bound ? "within" : "OVER", b, c, d, e, g, o, f);
    for (int p = 0; p < MW_NPHASES; p++) {
        if (!w->peak[p])
            continue;
        col_fmt_bytes(a, sizeof a, w->peak[p]);
        fprintf(out, " %s %s", phase_names[p], a);
    }
    fprintf(out, "\n");
    fflush(out);
}

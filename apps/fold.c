/* colossal-fold - protein structures from sequences with an AlphaFold2 model.
 *
 *   colossal-fold params_model_3_ptm.npz protein.fasta -o protein.pdb --msa protein.a3m
 *
 * Errors: one line on stderr, exit 1 (usage errors, and a GPU asked for and
 * not usable: exit 2). Output files are written whole or not at all, and an
 * existing file is replaced only with --force. */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "apperr.h"
#include "units.h"
#ifdef COL_WITH_COMM
#include "comm.h"
#endif
#include "fold_dap.h"
#include "fold.h"
#include "fold_features.h"
#include "fold_input.h"
#include "fold_json.h"
#include "fold_model.h"
#include "fold_pdb.h"
#include "procsetup.h"
#include "statpub.h"
#include "textio.h"
#include "timer.h"

static int fail(const col_err *e)
{
    char line[1024];
    fprintf(stderr, FOLD_PROG ": %s\n", app_err_line(e, mem_opt_of, line, sizeof line));
    return 1;
}

static int fail_msg(const char *fmt, const char *a, const char *b)
{
    fprintf(stderr, FOLD_PROG ": ");
    fprintf(stderr, fmt, a, b);
    fprintf(stderr, "\n");
    return 1;
}

/* ---- which parameter files ---- */

typedef struct {
    char **paths;
    int n;
} path_list;

static void paths_free(path_list *l)
{
    for (int i = 0; i < l->n; i++) free(l->paths[i]);
    free(l->paths);
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* PARAMS itself, or the params_model_*.npz files of a directory (sorted) */
static int list_params(const char *params, path_list *l)
{
    memset(l, 0, sizeof *l);
    struct stat st;
    if (stat(params, &st) != 0) return fail_msg("%s: %s", params, strerror(errno));
    if (!S_ISDIR(st.st_mode)) {
        l->paths = malloc(sizeof *l->paths);
        if (!l->paths || !(l->paths[0] = strdup(params))) return fail_msg("out of memory%s%s", "", "");
        l->n = 1;
        return 0;
    }
    DIR *d = opendir(params);
    if (!d) return fail_msg("%s: %s", params, strerror(errno));
    struct dirent *e;
    int cap = 0;
    while ((e = readdir(d))) {
        size_t len = strlen(e->d_name);
        if (strncmp(e->d_name, "params_model_", 13) != 0 || len < 5 || strcmp(e->d_name + len - 4, ".npz") != 0)
            continue;
        if (strstr(e->d_name, "multimer")) continue;
        if (l->n == cap) {
            cap = cap ? 2 * cap : 8;
            char **p = realloc(l->paths, (size_t)cap * sizeof *p);
            if (!p) break;
            l->paths = p;
        }
        size_t n = strlen(params) + len + 2;
        if (!(l->paths[l->n] = malloc(n))) break;
        snprintf(l->paths[l->n++], n, "%s/%s", params, e->d_name);
    }
    closedir(d);
    if (l->n == 0)
        return fail_msg("%s holds no params_model_*.npz files: give a parameter file or the directory of "
                        "AlphaFold's parameters%s", params, "");
    qsort(l->paths, (size_t)l->n, sizeof *l->paths, cmp_str);
    return 0;
}

/* "model_3_ptm" from ".../params_model_3_ptm.npz", else the file name without its extension */
static void model_name(const char *path, char *out, size_t n)
{
    const char *b = strrchr(path, '/');
    b = b ? b + 1 : path;
    if (strncmp(b, "params_", 7) == 0) b += 7;
    const char *dot = strrchr(b, '.');
    int len = dot ? (int)(dot - b) : (int)strlen(b);
    snprintf(out, n, "%.*s", len, b);
}

/* ---- output names ---- */

/* a record name fit for a file name: [A-Za-z0-9._-], others '_'; "protein_K" when empty */
static void safe_name(const char *name, int k, char *out, size_t n)
{
    size_t j = 0;
    for (const char *s = name; *s && j + 1 < n && j < 100; s++) {
        char c = *s;
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
                  c == '_' || c == '-';
        out[j++] = ok ? c : '_';
    }
    out[j] = '\0';
    if (j == 0 || strcmp(out, ".") == 0 || strcmp(out, "..") == 0) snprintf(out, n, "protein_%d", k + 1);
}

/* the structure file of record k (several records or models: DIR/NAME[_MODEL].EXT) */
static void out_path(const fold_opts *o, const char *name, int nrec, const char *model, int nmodels, char *out,
                     size_t n)
{
    const char *ext = o->cif ? ".cif" : ".pdb";
    if (o->out && nrec == 1 && nmodels == 1) {
        snprintf(out, n, "%s", o->out);
        return;
    }
    const char *dir = o->out ? o->out : ".";
    if (nmodels > 1) snprintf(out, n, "%s/%s_%s%s", dir, name, model, ext);
    else snprintf(out, n, "%s/%s%s", dir, name, ext);
}

/* the scores file beside a structure file (ColabFold's layout: pLDDT, PAE, its maximum, pTM): BASE_scores.json */
static void pae_path(const char *structure, char *out, size_t n)
{
    const char *dot = strrchr(structure, '.'), *slash = strrchr(structure, '/');
    if (!dot || (slash && dot < slash)) dot = structure + strlen(structure);
    snprintf(out, n, "%.*s_scores.json", (int)(dot - structure), structure);
}

static int check_out(const char *path, bool force)
{
    if (force || access(path, F_OK) != 0) return 0;
    return fail_msg("%s exists: choose another --out, or --force to replace it%s", path, "");
}

/* ---- text outputs ---- */

static void put_num(col_strbuf *b, double v, int decimals)
{
    char t[64];
    snprintf(t, sizeof t, "%.*f", decimals, v);
    col_strbuf_puts(b, t);
}

static void json_string(col_strbuf *b, const char *s)
{
    col_strbuf_puts(b, "\"");
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        char t[8];
        if (c == '"' || c == '\\') { t[0] = '\\'; t[1] = (char)c; t[2] = 0; }
        else if (c < 0x20) snprintf(t, sizeof t, "\\u%04x", c);
        else { t[0] = (char)c; t[1] = 0; }
        col_strbuf_puts(b, t);
    }
    col_strbuf_puts(b, "\"");
}

/* one line of --json: the record, its model and file, pLDDT per residue, pTM, timings */
static void summary_json(const char *name, const char *model, const char *path, const fold_result *r, int64_t chunk,
                         int passes, double features_s, col_strbuf *b)
{
    col_strbuf_puts(b, "{\"name\": ");
    json_string(b, name);
    col_strbuf_puts(b, ", \"model\": ");
    json_string(b, model);
    col_strbuf_puts(b, ", \"out\": ");
    json_string(b, path);
    char t[160];
    snprintf(t, sizeof t, ", \"length\": %lld, \"passes\": %d, \"chunk_size\": %lld, \"mean_plddt\": %.2f",
             (long long)r->n_res, passes, (long long)chunk, r->mean_plddt);
    col_strbuf_puts(b, t);
    col_strbuf_puts(b, ", \"plddt\": [");
    for (int64_t i = 0; i < r->n_res; i++) {
        if (i) col_strbuf_puts(b, ", ");
        put_num(b, r->plddt[i], 2);
    }
    col_strbuf_puts(b, "]");
    if (r->ptm >= 0) {
        snprintf(t, sizeof t, ", \"ptm\": %.4f, \"max_pae\": %.2f", r->ptm, r->max_pae);
        col_strbuf_puts(b, t);
    }
    snprintf(t, sizeof t, ", \"seconds\": {\"features\": %.3f, \"build\": %.3f, \"model\": %.3f}, \"arena_bytes\": %zu}\n",
             features_s, r->seconds_build, r->seconds_run, r->arena_bytes);
    col_strbuf_puts(b, t);
}

/* ---- the run ---- */

typedef struct {
    bool show;
    const char *name;
} progress;

static col_status on_pass(void *user, int pass, int passes, double seconds, col_err *err)
{
    (void)err;
    progress *pg = user;
    if (pg->show) fprintf(stderr, FOLD_PROG ": %s: pass %d/%d in %.1f s\n", pg->name, pass + 1, passes, seconds);
    return COL_OK;
}

/* the activation budget for --chunk-size auto: on a GPU what the device has free beyond the weights' compute
 * tier; on the CPU half the memory available now */
static size_t activation_budget(const app_device *dev, size_t compute_budget)
{
    if (dev->gpu) {
        size_t free_b = 0, total_b = 0;
        if (!app_device_memory(dev, &free_b, &total_b)) return 0;
        size_t reserve = compute_budget + ((size_t)512 << 20);
        return free_b > reserve ? free_b - reserve : (size_t)64 << 20;
    }
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f) return 0;
    char line[256];
    unsigned long long kb = 0;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1) break;
    fclose(f);
    return (size_t)(kb * 1024ULL / 2);
}

static int fold_record(const fold_opts *o, fold_model *m, const char *model, int nmodels, const fold_sequence *seq,
                       int k, int nrec, const app_device *dev, size_t compute_budget, bool writer)
{
    col_err err = {0};
    char name[128], path[4300], ppath[4400];
    safe_name(seq->name ? seq->name : "", k, name, sizeof name);
    out_path(o, name, nrec, model, nmodels, path, sizeof path);
    const fold_config *cfg = fold_model_config(m);
    pae_path(path, ppath, sizeof ppath);
    int rc = check_out(path, o->force);
    if (rc == 0 && cfg->ptm) rc = check_out(ppath, o->force);
    if (rc) return rc;

    double t0 = col_seconds();
    fold_msa msa = {0};
    col_status st = o->msa ? fold_a3m_read(o->msa, seq->residues, &msa, &err) : fold_msa_single(seq, &msa, &err);
    fold_feature_config fc;
    fold_feature_config_default(&fc);
    fc.max_msa_clusters = o->max_msa_clusters;
    fc.max_extra_msa = o->max_extra_msa >= 0 ? o->max_extra_msa : strstr(model, "model_5") ? 1024 : 5120;
    fold_features f = {0};
    if (st == COL_OK) st = fold_features_make(seq, &msa, &fc, &f, &err);
    fold_msa_free(&msa);
    if (st != COL_OK) return fail(&err);
    double features_s = col_seconds() - t0;

    int64_t chunk = o->chunk;
    if (chunk < 0) {
        st = fold_model_auto_chunk(m, f.n_res, f.n_clust, f.n_extra, activation_budget(dev, compute_budget), &chunk,
                                   &err);
        if (st != COL_OK) {
            fold_features_free(&f);
            return fail(&err);
        }
    }
    if (!o->quiet) {
        char ck[32];
        if (chunk) snprintf(ck, sizeof ck, "%lld rows", (long long)chunk);
        else snprintf(ck, sizeof ck, "all rows");
        fprintf(stderr, FOLD_PROG ": %s: %lld residues, %lld MSA rows + %lld extra, %s, chunks of %s, on %s\n", name,
                (long long)f.n_res, (long long)f.n_clust, (long long)f.n_extra, model, ck, dev->desc);
    }
    fold_inputs in = {.n_res = f.n_res, .n_seq = f.n_clust, .n_extra = f.n_extra, .aatype = f.aatype,
                      .residue_index = f.residue_index, .target_feat = f.target_feat, .msa_feat = f.msa_feat,
                      .extra_msa = f.extra_msa, .extra_has_deletion = f.extra_has_deletion,
                      .extra_deletion_value = f.extra_deletion_value};
    progress pg = {!o->quiet, name};
    fold_run_config run = {.recycles = o->recycles, .chunk = chunk, .progress = on_pass, .progress_user = &pg};
    fold_result r;
    st = fold_model_predict(m, &in, &run, &r, &err);
    if (st != COL_OK) {
        fold_features_free(&f);
        return fail(&err);
    }
    int32_t *resnum = malloc((size_t)f.n_res * sizeof *resnum);
    col_strbuf b = {0};
    if (!resnum) st = col_err_set(&err, COL_ENOMEM, "out of memory");
    if (st == COL_OK && writer) {
        for (int64_t i = 0; i < f.n_res; i++) resnum[i] = f.residue_index[i] + 1;
        fold_protein p = {.n_res = f.n_res, .aatype = f.aatype, .residue_index = resnum, .atom_positions = r.atom37,
                          .atom_mask = r.atom37_mask, .plddt = r.plddt};
        st = o->cif ? fold_mmcif_write(&p, name, false, &b, &err) : fold_pdb_write(&p, &b, &err);
    }
    if (st == COL_OK && b.oom) st = col_err_set(&err, COL_ENOMEM, "out of memory");
    if (st == COL_OK && writer) st = col_write_file_atomic(path, b.p, b.len, &err);
    free(b.p);
    memset(&b, 0, sizeof b);
    if (st == COL_OK && r.pae && writer) {
        st = fold_json_scores(r.plddt, r.pae, r.n_res, r.ptm, &b, &err);
        if (st == COL_OK) st = col_write_file_atomic(ppath, b.p, b.len, &err);
        free(b.p);
        memset(&b, 0, sizeof b);
    }
    if (st == COL_OK && writer) {
        if (o->json) {
            summary_json(name, model, path, &r, chunk, o->recycles + 1, features_s, &b);
            if (!b.oom) fwrite(b.p, 1, b.len, stdout);
            free(b.p);
        } else {
            printf("%s", path);
            printf("\tmean pLDDT %.2f", r.mean_plddt);
            if (r.ptm >= 0) printf("\tpTM %.4f", r.ptm);
            printf("\n");
        }
        char arena[COL_BYTES_STR];
        if (!o->quiet)
            fprintf(stderr, FOLD_PROG ": %s: %.1f s (features %.2f s, plan %.2f s, %d passes %.1f s), arena %s\n",
                    name, col_seconds() - t0, features_s, r.seconds_build, o->recycles + 1, r.seconds_run,
                    col_fmt_bytes(arena, sizeof arena, (uint64_t)r.arena_bytes));
    }
    free(resnum);
    fold_result_free(&r);
    fold_features_free(&f);
    return st == COL_OK ? 0 : fail(&err);
}

static int run(fold_opts *o)
{
    col_err err = {0};
    fold_fasta fasta = {0};
    if (fold_fasta_read(o->fasta, &fasta, &err) != COL_OK) return fail(&err);
    int rc = 0;
    path_list params = {0};
    app_device dev = {0};
    app_stats *stats = NULL; /* for colossal-top */
#ifdef COL_WITH_COMM
    col_comm *world = NULL;
#endif
    if (o->msa && fasta.n > 1) {
        rc = fail_msg("--msa %s: %s holds several sequences; give one sequence with its MSA", o->msa, o->fasta);
        goto done;
    }
    if ((rc = list_params(o->params, &params)) != 0) goto done;
    if ((o->out && (fasta.n > 1 || params.n > 1))) {
        struct stat st;
        if (stat(o->out, &st) != 0) {
            if (mkdir(o->out, 0777) != 0 && errno != EEXIST) {
                rc = fail_msg("--out %s: cannot create the directory: %s", o->out, strerror(errno));
                goto done;
            }
        } else if (!S_ISDIR(st.st_mode)) {
            rc = fail_msg("--out %s: several structures are written, so --out must be a directory%s", o->out, "");
            goto done;
        }
    }
    /* under mpirun / srun: the processes share each structure's work (FastFold's DAP); process 0 writes */
    bool writer = true;
    fold_dap dap = {0};
    bool use_dap = false;
#ifdef COL_WITH_COMM
    if (col_proc_launched()) {
        if (col_comm_init_mpi(&world, &err) != COL_OK || fold_dap_init(&dap, world, &err) != COL_OK) {
            rc = fail(&err);
            goto done;
        }
        use_dap = dap.size > 1;
        o->device.local = col_comm_local_rank(world);   /* one GPU per process on a host */
        writer = dap.rank == 0;
        if (!writer) {
            o->quiet = true;
            o->json = false;
        }
    }
#endif
    if ((rc = app_device_open(&o->device, &dev, &err)) != 0) {
        fprintf(stderr, FOLD_PROG ": %s\n", err.msg);
        goto done;
    }
    mb_store_config mem = {.host_budget = o->mem.cpu_mem, .compute_budget = o->mem.gpu_mem};
    if (dev.gpu && !mem.compute_budget) {
        size_t free_b = 0, total_b = 0;
        if (app_device_memory(&dev, &free_b, &total_b)) mem.compute_budget = app_device_budget_rule(free_b, total_b) / 4;
    }
    int ran = 0;
    for (int pi = 0; pi < params.n && rc == 0; pi++) {
        char model[128];
        model_name(params.paths[pi], model, sizeof model);
        fold_model *m = NULL;
        if (fold_model_open(params.paths[pi], &dev.be, &mem, &m, &err) != COL_OK) {
            if (params.n > 1 && strstr(err.msg, "templates")) { /* model_1/2 in a directory: skip them */
                if (!o->quiet) fprintf(stderr, FOLD_PROG ": skipping %s: %s\n", model, err.msg);
                continue;
            }
            rc = fail(&err);
            break;
        }
        if (!stats) stats = app_stats_start(FOLD_PROG, model);
        app_stats_update(stats, mb_store_pool(fold_model_store(m)), NULL, 0, &dev, mem.host_budget, mem.compute_budget);
        if (use_dap) fold_model_set_dap(m, &dap);
        for (int k = 0; k < fasta.n && rc == 0; k++)
            rc = fold_record(o, m, model, params.n, &fasta.seqs[k], k, fasta.n, &dev, mem.compute_budget, writer);
        fold_model_free(m);
        ran++;
    }
    if (rc == 0 && ran == 0) rc = fail_msg("%s: no AlphaFold2 monomer model without templates to run%s", o->params, "");
done:
    app_stats_end(stats);
    app_device_close(&dev);
#ifdef COL_WITH_COMM
    col_comm_free(world);
#endif
    paths_free(&params);
    fold_fasta_free(&fasta);
    return rc;
}

int main(int argc, char **argv)
{
    col_proc_setup(argv);
    fold_opts o;
    char msg[512];
    int r = fold_parse(argc, argv, &o, msg, sizeof msg);
    if (r == 1) return 0;
    if (r == 2) {
        fprintf(stderr, FOLD_PROG ": %s (see --help)\n", msg);
        return 2;
    }
    return run(&o);
}

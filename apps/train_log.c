/* train_log.c - metrics.jsonl, TensorBoard events and loss.png of a training run (train_log.h) */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "loss_plot.h"
#include "textio.h"
#include "train_log.h"

#define METRICS "metrics.jsonl"
#define RUNS "runs"
#define TB_PREFIX "events.out.tfevents."
enum { METRICS_MAX = 1 << 30 };

static col_status sys_fail(const char *dir, const char *name, col_err *err)
{
    int e = errno ? errno : EIO;
    return col_err_set(err, e == ENOMEM ? COL_ENOMEM : COL_EIO, "%s/%s: %s%s", dir, name, strerror(e),
                       e == ELOOP ? " (a symbolic link: colossal does not write through links)" : "");
}

/* the history's point at step (appended when it is after the last; NULL when out of memory) */
static train_log_point *point_at(train_log *l, int64_t step)
{
    if (l->n && l->pts[l->n - 1].step == step)
        return &l->pts[l->n - 1];
    for (size_t i = l->n; i-- > 0 && l->pts[i].step >= step;)
        if (l->pts[i].step == step)
            return &l->pts[i];
    if (l->n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 1024;
        train_log_point *p = realloc(l->pts, cap * sizeof *p);
        if (!p)
            return NULL;
        l->pts = p, l->cap = cap;
    }
    train_log_point *p = &l->pts[l->n++];
    *p = (train_log_point){.step = step, .loss = NAN, .lr = NAN, .grad_norm = NAN, .eval_loss = NAN};
    return p;
}

static double num(const cJSON *o, const char *k)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsNumber(v) ? v->valuedouble : NAN;
}

/* the whole of OUT/metrics.jsonl (absent: none), never through a link */
static col_status read_metrics(int dirfd, const char *out, char **text, size_t *len, col_err *err)
{
    *text = NULL, *len = 0;
    int fd = openat(dirfd, METRICS, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return errno == ENOENT ? COL_OK : sys_fail(out, METRICS, err);
    struct stat sb;
    col_status st = COL_OK;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode) || sb.st_size > METRICS_MAX)
        st = col_err_set(err, COL_EFORMAT, "%s/%s is not a file of at most 1 GiB", out, METRICS);
    else if (!(*text = malloc((size_t)sb.st_size + 1)))
        st = col_err_set(err, COL_ENOMEM, "%s/%s: out of memory", out, METRICS);
    while (st == COL_OK && *len < (size_t)sb.st_size) {
        ssize_t k = read(fd, *text + *len, (size_t)sb.st_size - *len);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            break;
        *len += (size_t)k;
    }
    close(fd);
    if (st != COL_OK)
        free(*text), *text = NULL;
    return st;
}

/* resume: the lines of steps up to resume_step into the history and back into the file (rewritten whole);
 * lines that are not objects with a step (a line torn by a crash) are dropped */
static col_status keep_metrics(train_log *l, int dirfd, int64_t resume_step, col_err *err)
{
    char *text, path[4200];
    size_t len;
    col_status st = read_metrics(dirfd, l->out, &text, &len, err);
    if (st != COL_OK || !text)
        return st;
    col_strbuf kept = {0};
    for (char *line = text, *end; st == COL_OK && line < text + len; line = end + 1) {
        end = memchr(line, '\n', (size_t)(text + len - line));
        if (!end)
            end = text + len;
        cJSON *j = cJSON_ParseWithLength(line, (size_t)(end - line));
        double step = num(j, "step");
        if (cJSON_IsObject(j) && step >= 1 && step <= (double)resume_step && step == floor(step)) {
            train_log_point *p = point_at(l, (int64_t)step);
            if (!p)
                st = col_err_set(err, COL_ENOMEM, "%s/%s: out of memory", l->out, METRICS);
            else if (isfinite(num(j, "eval_loss")))
                p->eval_loss = num(j, "eval_loss");
            else
                p->loss = num(j, "loss"), p->lr = num(j, "lr"), p->grad_norm = num(j, "grad_norm");
            col_strbuf_put(&kept, line, (size_t)(end - line));
            col_strbuf_put(&kept, "\n", 1);
        }
        cJSON_Delete(j);
    }
    free(text);
    snprintf(path, sizeof path, "%s/%s", l->out, METRICS);
    if (st == COL_OK && kept.oom)
        st = col_err_set(err, COL_ENOMEM, "%s: out of memory", path);
    if (st == COL_OK)
        st = col_write_file_atomic(path, kept.p ? kept.p : "", kept.len, err);
    free(kept.p);
    return st;
}

/* a fresh run in an earlier run's OUT (--overwrite): that run's event files go */
static void clear_events(int runs)
{
    int fd = dup(runs);
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    struct dirent *e;
    struct stat sb;
    while (d && (e = readdir(d)))
        if (strncmp(e->d_name, TB_PREFIX, strlen(TB_PREFIX)) == 0 &&
            fstatat(runs, e->d_name, &sb, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(sb.st_mode))
            unlinkat(runs, e->d_name, 0);
    if (d)
        closedir(d);
    else if (fd >= 0)
        close(fd);
}

static col_status open_tb(train_log *l, int dirfd, bool resume, int64_t first_step, col_err *err)
{
    char shown[4200];
    snprintf(shown, sizeof shown, "%s/%s", l->out, RUNS);
    if (mkdirat(dirfd, RUNS, 0777) != 0 && errno != EEXIST)
        return sys_fail(l->out, RUNS, err);
    int runs = openat(dirfd, RUNS, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (runs < 0)
        return sys_fail(l->out, RUNS, err);
    if (!resume)
        clear_events(runs);
    col_status st = tb_writer_open(runs, shown, first_step, &l->tb, err);
    close(runs);
    return st;
}

col_status train_log_open(train_log *l, const char *out, bool resume, int64_t resume_step, bool tensorboard,
                          double epochs_per_step, col_err *err)
{
    memset(l, 0, sizeof *l);
    snprintf(l->out, sizeof l->out, "%s", out);
    l->epochs_per_step = epochs_per_step;
    if (mkdir(out, 0777) != 0 && errno != EEXIST)
        return col_err_set(err, COL_EIO, "%s: %s", out, strerror(errno));
    /* OUT itself was checked by col_outdir_open: not a link; nothing below it is followed either */
    int dirfd = open(out, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (dirfd < 0)
        return col_err_set(err, COL_EIO, "%s: %s", out, strerror(errno));
    col_status st = resume ? keep_metrics(l, dirfd, resume_step, err) : COL_OK;
    int fd = -1;
    if (st == COL_OK) {
        fd = openat(dirfd, METRICS, O_WRONLY | O_APPEND | O_CREAT | O_NOFOLLOW | O_CLOEXEC | (resume ? 0 : O_TRUNC),
                    0644);
        if (fd < 0 || !(l->metrics = fdopen(fd, "a")))
            st = sys_fail(out, METRICS, err);
    }
    if (st != COL_OK && fd >= 0 && !l->metrics)
        close(fd);
    if (st == COL_OK && tensorboard)
        st = open_tb(l, dirfd, resume, resume_step + 1, err);
    close(dirfd);
    if (st != COL_OK) {
        col_err ignored;
        train_log_close(l, &ignored);
    }
    return st;
}

static col_status put_line(train_log *l, cJSON *j, col_err *err)
{
    char *s = j ? cJSON_PrintUnformatted(j) : NULL;
    cJSON_Delete(j);
    if (!s)
        return col_err_set(err, COL_ENOMEM, "%s/%s: out of memory", l->out, METRICS);
    errno = 0;
    bool ok = fputs(s, l->metrics) >= 0 && fputc('\n', l->metrics) != EOF && fflush(l->metrics) == 0;
    free(s);
    return ok ? COL_OK : sys_fail(l->out, METRICS, err);
}

/* a figure as JSON: the fewest digits that give back its float (the trainer's losses and rates are floats:
 * "0.001", not "0.0010000000474974513"), null when not finite (JSON has no NaN) */
static void add_num(cJSON *j, const char *k, double v)
{
    char t[32];
    for (int digits = 6; digits <= 9; digits++) {
        snprintf(t, sizeof t, "%.*g", digits, (double)(float)v);
        if ((float)strtod(t, NULL) == (float)v)
            break;
    }
    cJSON_AddItemToObject(j, k, isfinite(v) ? cJSON_CreateNumber(strtod(t, NULL)) : cJSON_CreateNull());
}

/* bytes: an integer, written as one whatever its size (cJSON's numbers are doubles) */
static void add_bytes(cJSON *j, const char *k, uint64_t v)
{
    char t[32];
    snprintf(t, sizeof t, "%llu", (unsigned long long)v);
    cJSON_AddItemToObject(j, k, cJSON_CreateRaw(t));
}

col_status train_log_step_done(train_log *l, const train_log_step *s, col_err *err)
{
    train_log_point *p = point_at(l, s->step);
    if (!p)
        return col_err_set(err, COL_ENOMEM, "training history: out of memory");
    p->loss = s->loss, p->lr = s->lr, p->grad_norm = s->grad_norm;
    cJSON *j = cJSON_CreateObject();
    cJSON_AddNumberToObject(j, "step", (double)s->step);
    if (isfinite(l->epochs_per_step)) /* (not known: left out) */
        add_num(j, "epoch", (double)s->step * l->epochs_per_step);
    add_num(j, "loss", s->loss);
    add_num(j, "lr", s->lr);
    add_num(j, "grad_norm", s->grad_norm);
    if (isfinite(s->tokens_per_s))
        add_num(j, "tokens_per_s", s->tokens_per_s);
    add_num(j, "elapsed_s", s->elapsed_s);
    if (!s->no_mem) {
        add_bytes(j, "mem_compute", s->mem_compute);
        add_bytes(j, "mem_host", s->mem_host);
        add_bytes(j, "mem_nvme", s->mem_nvme);
    }
    col_status st = put_line(l, j, err);
    if (st == COL_OK && l->tb) {
        static const char *const tags[] = {"train/loss", "train/learning_rate", "train/grad_norm",
                                           "train/tokens_per_s"};
        const double v[] = {s->loss, s->lr, s->grad_norm, s->tokens_per_s};
        for (int i = 0; i < 4 && st == COL_OK; i++)
            st = tb_writer_scalar(l->tb, s->step, tags[i], (float)v[i], err);
        if (st == COL_OK)
            st = tb_writer_flush(l->tb, err);
    }
    return st;
}

col_status train_log_eval(train_log *l, int64_t step, double eval_loss, col_err *err)
{
    train_log_point *p = point_at(l, step);
    if (!p)
        return col_err_set(err, COL_ENOMEM, "training history: out of memory");
    p->eval_loss = eval_loss;
    cJSON *j = cJSON_CreateObject();
    cJSON_AddNumberToObject(j, "step", (double)step);
    if (isfinite(l->epochs_per_step))
        add_num(j, "epoch", (double)step * l->epochs_per_step);
    add_num(j, "eval_loss", eval_loss);
    col_status st = put_line(l, j, err);
    if (st == COL_OK && l->tb && (st = tb_writer_scalar(l->tb, step, "eval/loss", (float)eval_loss, err)) == COL_OK)
        st = tb_writer_flush(l->tb, err);
    return st;
}

cJSON *train_log_history(const train_log *l, int logging_steps)
{
    cJSON *a = cJSON_CreateArray();
    double sum = 0;
    int count = 0;
    for (size_t i = 0; a && i < l->n; i++) {
        const train_log_point *p = &l->pts[i];
        double epoch = (double)p->step * l->epochs_per_step;
        if (isfinite(p->loss))
            sum += p->loss, count++;
        if (count > 0 && logging_steps > 0 && p->step % logging_steps == 0) { /* transformers' logging step */
            cJSON *e = cJSON_CreateObject();
            add_num(e, "epoch", epoch);
            add_num(e, "grad_norm", p->grad_norm);
            add_num(e, "learning_rate", p->lr);
            add_num(e, "loss", sum / count);
            cJSON_AddNumberToObject(e, "step", (double)p->step);
            cJSON_AddItemToArray(a, e);
            sum = 0, count = 0;
        }
        if (isfinite(p->eval_loss)) {
            cJSON *e = cJSON_CreateObject();
            add_num(e, "epoch", epoch);
            add_num(e, "eval_loss", p->eval_loss);
            cJSON_AddNumberToObject(e, "step", (double)p->step);
            cJSON_AddItemToArray(a, e);
        }
    }
    return a;
}

/* x rounded to d decimals, as Python's round() gives it for transformers' speed metrics */
static double round_to(double x, int d)
{
    double k = pow(10, d);
    return round(x * k) / k;
}

cJSON *train_log_summary(const train_log *l, const train_log_end *e)
{
    double sum = 0;
    for (size_t i = 0; i < l->n; i++)
        if (l->pts[i].step > e->start_step && l->pts[i].step <= e->step && isfinite(l->pts[i].loss))
            sum += l->pts[i].loss;
    double steps = (double)e->step, rt = e->runtime_s > 0 ? e->runtime_s : 1e-9;
    cJSON *j = cJSON_CreateObject();
    if (!j)
        return NULL;
    if (isfinite(l->epochs_per_step))
        add_num(j, "epoch", steps * l->epochs_per_step);
    cJSON_AddNumberToObject(j, "step", steps);
    cJSON_AddNumberToObject(j, "total_flos", e->flos_per_step * steps);
    add_num(j, "train_loss", sum / (steps > 0.001 ? steps : 0.001));
    cJSON_AddNumberToObject(j, "train_runtime", round_to(e->runtime_s, 4));
    cJSON_AddNumberToObject(j, "train_samples_per_second", round_to(e->samples_per_step * steps / rt, 3));
    cJSON_AddNumberToObject(j, "train_steps_per_second", round_to(steps / rt, 3));
    return j;
}

col_status train_log_plot(const train_log *l, const char *path, col_err *err)
{
    double *v = malloc(4 * (l->n ? l->n : 1) * sizeof *v);
    if (!v)
        return col_err_set(err, COL_ENOMEM, "%s: out of memory", path);
    loss_series tr = {v, v + l->n, 0}, ev = {v + 2 * l->n, v + 3 * l->n, 0};
    for (size_t i = 0; i < l->n; i++) {
        const train_log_point *p = &l->pts[i];
        if (isfinite(p->loss))
            v[tr.n] = (double)p->step, v[l->n + tr.n++] = p->loss;
        if (isfinite(p->eval_loss))
            v[2 * l->n + ev.n] = (double)p->step, v[3 * l->n + ev.n++] = p->eval_loss;
    }
    col_status st = loss_plot_write(path, &tr, &ev, LOSS_PLOT_WIDTH, LOSS_PLOT_HEIGHT, err);
    free(v);
    return st;
}

col_status train_log_close(train_log *l, col_err *err)
{
    col_status st = COL_OK;
    if (l->metrics && fclose(l->metrics) != 0)
        st = sys_fail(l->out, METRICS, err);
    col_status t = tb_writer_close(l->tb, err);
    free(l->pts);
    memset(l, 0, sizeof *l);
    return st != COL_OK ? st : t;
}

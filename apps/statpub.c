/* statpub.c - the statistics of a program running a model, for colossal-top (statpub.h). */
#include "statpub.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct app_stats {
    mt_stats_pub *pub;
    mt_stats_data *d;    /* the last figures (under mu) */
    pthread_mutex_t mu;
    pthread_cond_t wake; /* app_stats_end: stop now */
    pthread_t thread;
    bool stop;
};

void app_stats_compute(mt_stats_data *d, const app_device *dev, mt_resident *ct)
{
    size_t dfree, dtotal;
    if (dev && app_device_memory(dev, &dfree, &dtotal)) { /* the compute tier is the GPU's memory */
        mt_stats_set_device(d, dev->label);
        d->device_used = dtotal - dfree;
        d->device_total = dtotal;
    }
    if (ct) { /* chunk copies on the compute tier: its peak beside the activations, and the bytes moved */
        mt_resident_stats rs;
        mt_resident_get_stats(ct, &rs);
        d->tier_used[MT_TIER_GPU] = rs.peak;
        d->tier_budget[MT_TIER_GPU] = rs.budget;
        d->link_bytes[MT_LINK_H2C] = rs.bytes[MT_LINK_H2C];
        d->link_bytes[MT_LINK_C2H] = rs.bytes[MT_LINK_C2H];
    }
}

/* every second, the last figures again (only their time changes) until app_stats_end */
static void *republish(void *arg)
{
    app_stats *s = arg;
    pthread_mutex_lock(&s->mu);
    while (!s->stop) {
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_sec += 1;
        int rc = 0;
        while (!s->stop && rc != ETIMEDOUT)
            rc = pthread_cond_timedwait(&s->wake, &s->mu, &until);
        if (!s->stop)
            mt_stats_publish(s->pub, s->d);
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

app_stats *app_stats_start(const char *program, const char *run)
{
    app_stats *s = calloc(1, sizeof *s);
    mt_stats_data *d = calloc(1, sizeof *d);
    col_err err = {0};
    if (!s || !d || mt_stats_create(program, &s->pub, &err) != COL_OK) {
        free(s), free(d);
        return NULL;
    }
    s->d = d;
    if (run) { /* a path's last component: "models/gpt2/" -> "gpt2" (found in the whole path, then cut to fit) */
        size_t n = strlen(run), b;
        while (n > 1 && run[n - 1] == '/')
            n--;
        for (b = n; b > 0 && run[b - 1] != '/'; b--)
            ;
        if (b == n) /* "/" */
            b = 0;
        char name[MT_STATS_NAME_MAX];
        snprintf(name, sizeof name, "%.*s", (int)(n - b), run + b);
        mt_stats_set_run(d, name);
    }
    mt_stats_publish(s->pub, d);
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->wake, NULL);
    /* the thread takes no signals: Ctrl-C and SIGTERM go to the program's own threads, interrupting their waits */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int rc = pthread_create(&s->thread, NULL, republish, s);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0) {
        pthread_cond_destroy(&s->wake), pthread_mutex_destroy(&s->mu);
        mt_stats_destroy(s->pub), free(d), free(s);
        return NULL;
    }
    return s;
}

void app_stats_update(app_stats *s, const mt_pool *pool, mt_resident *ct, size_t arena, const app_device *dev,
                      size_t host_budget, size_t compute_budget)
{
    if (!s)
        return;
    mt_stats_data *d = malloc(sizeof *d);
    if (!d)
        return;
    pthread_mutex_lock(&s->mu);
    *d = *s->d; /* the run name and anything set before */
    pthread_mutex_unlock(&s->mu);
    if (pool)
        mt_stats_fill_from_pool(d, pool);
    d->tier_budget[MT_TIER_HOST] = host_budget;
    d->tier_budget[MT_TIER_GPU] = compute_budget;
    d->tier_used[MT_TIER_GPU] = arena;
    app_stats_compute(d, dev, ct);
    pthread_mutex_lock(&s->mu);
    *s->d = *d;
    mt_stats_publish(s->pub, s->d);
    pthread_mutex_unlock(&s->mu);
    free(d);
}

void app_stats_step(app_stats *s, int64_t step, int64_t total, double loss, double seconds)
{
    if (!s)
        return;
    pthread_mutex_lock(&s->mu);
    s->d->step = step;
    s->d->total_steps = total;
    mt_stats_push_loss(s->d, loss);
    mt_stats_add_step_times(s->d, seconds, 0, 0);
    mt_stats_publish(s->pub, s->d);
    pthread_mutex_unlock(&s->mu);
}

void app_stats_end(app_stats *s)
{
    if (!s)
        return;
    pthread_mutex_lock(&s->mu);
    s->stop = true;
    pthread_cond_signal(&s->wake);
    pthread_mutex_unlock(&s->mu);
    pthread_join(s->thread, NULL);
    pthread_cond_destroy(&s->wake);
    pthread_mutex_destroy(&s->mu);
    mt_stats_destroy(s->pub);
    free(s->d);
    free(s);
}

/* stats_comm.c - a rank of a parallel run in the published statistics. */
#include "stats_comm.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

col_status app_stats_join_run(mt_stats_data *d, col_comm *world, col_err *err)
{
    /* a whole number of i64 words: broadcast copies bytes whatever the dtype */
    int64_t words[MT_STATS_NAME_MAX / 8];
    char *id = (char *)words;
    memset(words, 0, sizeof words);
    if (col_comm_rank(world) == 0) {
        char host[33] = "";
        if (gethostname(host, sizeof host - 1) != 0 || !host[0])
            snprintf(host, sizeof host, "host");
        host[sizeof host - 1] = 0;
        snprintf(id, sizeof words, "%s-%d-%lld", host, (int)getpid(), (long long)time(NULL));
    }
    col_status st = col_comm_broadcast(world, words, sizeof words / 8, COL_I64, 0, err);
    if (st != COL_OK)
        return st;
    id[sizeof words - 1] = 0;
    if (d)
        mt_stats_set_rank(d, id, col_comm_rank(world), col_comm_size(world));
    return COL_OK;
}

void app_stats_set_comm(mt_stats_data *d, const col_comm *const *comms, int n)
{
    if (!d)
        return;
    col_comm_stats sum = {0};
    for (int i = 0; i < n; i++) {
        if (!comms[i])
            continue;
        col_comm_stats s;
        col_comm_get_stats(comms[i], &s);
        col_comm_stats_add(&sum, &s);
    }
    mt_stats_set_comm(d, sum.bytes_sent, sum.bytes_recv, sum.wait_s, sum.ops);
}

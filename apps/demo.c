/* colossal-demo - trains a small GPT (2 blocks, byte-level) from scratch on
 * the bundled corpus and prints the falling loss and a sample.
 *
 * It exercises the whole stack: the model graph, autodiff, the planned
 * activation arena, memtier-owned parameters, AdamW with warmup + cosine
 * decay, and evaluation on held-out text. */
#include <getopt.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "backend.h"
#include "hf_config.h"
#include "lm_trainer.h"
#include "rng.h"
#include "textio.h"

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void usage(FILE *f)
{
    fprintf(f,
            "usage: colossal-demo [--steps N] [--data FILE] [--seed N] [--batch B] [--seq T] [--lr LR]\n"
            "Trains a 2-block byte-level GPT on FILE (default: the bundled King James Bible)\n"
            "and prints training and validation loss, then a sample.\n");
}

static const char *default_corpus(void)
{
    static const char *const candidates[] = {COL_ASSET_DIR "/kjv.txt.gz", COL_SRC_ASSET_DIR "/corpus/kjv.txt.gz"};
    for (size_t i = 0; i < sizeof candidates / sizeof candidates[0]; i++)
        if (access(candidates[i], R_OK) == 0)
            return candidates[i];
    return candidates[0];
}

static long parse_long(const char *s, const char *opt, long lo, long hi)
{
    char *end;
    long v = strtol(s, &end, 10);
    if (*s == '\0' || *end != '\0' || v < lo || v > hi) {
        fprintf(stderr, "colossal-demo: %s must be an integer in %ld..%ld (got '%s')\n", opt, lo, hi, s);
        exit(2);
    }
    return v;
}

/* random training windows: ids = text[o..o+T), targets = text[o+1..o+T] */
static void fill_batch(const unsigned char *text, size_t lo, size_t hi, int B, int T, col_rng *r, int32_t *ids,
                       int32_t *tg)
{
    for (int b = 0; b < B; b++) {
        size_t o = lo + (size_t)col_rng_below(r, hi - lo - (size_t)T - 1);
        for (int t = 0; t < T; t++) {
            ids[b * T + t] = text[o + (size_t)t];
            tg[b * T + t] = text[o + (size_t)t + 1];
        }
    }
}

int main(int argc, char **argv)
{
    int steps = 600, B = 16, T = 128;
    long seed = 1337;
    double lr = 2e-3;
    const char *data = NULL;
    static const struct option opts[] = {{"steps", required_argument, 0, 's'}, {"data", required_argument, 0, 'd'},
                                         {"seed", required_argument, 0, 'r'},  {"batch", required_argument, 0, 'b'},
                                         {"seq", required_argument, 0, 't'},   {"lr", required_argument, 0, 'l'},
                                         {"help", no_argument, 0, 'h'},        {0, 0, 0, 0}};
    int c;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 's': steps = (int)parse_long(optarg, "--steps", 1, 1000000); break;
        case 'd': data = optarg; break;
        case 'r': seed = parse_long(optarg, "--seed", 0, 0x7fffffffL); break;
        case 'b': B = (int)parse_long(optarg, "--batch", 1, 4096); break;
        case 't': T = (int)parse_long(optarg, "--seq", 2, 1024); break;
        case 'l': {
            char *end;
            lr = strtod(optarg, &end);
            if (*end || !(lr > 0 && lr < 1)) {
                fprintf(stderr, "colossal-demo: --lr must be a number in (0, 1) (got '%s')\n", optarg);
                return 2;
            }
            break;
        }
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "colossal-demo: unexpected argument '%s'\n", argv[optind]);
        usage(stderr);
        return 2;
    }
    if (!data)
        data = default_corpus();

    col_err err = {0};
    char *text;
    size_t len;
    if (col_read_file(data, (size_t)1 << 31, &text, &len, &err) != COL_OK) {
        fprintf(stderr, "colossal-demo: %s\n", err.msg);
        return 1;
    }
    size_t split = len - len / 20; /* last 5% held out: at least one window of T+1 bytes and a spare */
    if (len < (size_t)20 * (size_t)(T + 2)) {
        fprintf(stderr, "colossal-demo: %s is too short (%zu bytes): it needs at least %d bytes for --seq %d\n", data,
                len, 20 * (T + 2), T);
        free(text);
        return 1;
    }

    col_backend be;
    if (col_cpu_backend_init(&be, &err) != COL_OK) {
        fprintf(stderr, "colossal-demo: %s\n", err.msg);
        free(text);
        return 1;
    }
    col_lm_train_config cfg = {
        .model = col_gpt2_config(256, T, 192, 2, 6),
        .batch = B, .seq = T,
        .opt = col_opt_defaults(COL_OPT_ADAMW),
        .lr = {.kind = COL_LR_COSINE, .lr_max = (float)lr, .lr_min = (float)lr / 10, .warmup_steps = steps / 20,
               .total_steps = steps},
        .grad_clip = 1.0f, .seed = (uint64_t)seed,
    };
    cfg.opt.weight_decay = 0.1f;
    cfg.opt.beta2 = 0.95f;
    col_lm_trainer *tr;
    if (col_lm_trainer_create(&cfg, &be, &tr, &err) != COL_OK) {
        fprintf(stderr, "colossal-demo: %s\n", err.msg);
        col_cpu_backend_free(&be);
        free(text);
        return 1;
    }
    printf("colossal-demo: GPT with %d blocks, width %d, %d heads, %.2fM parameters; byte-level, context %d\n",
           cfg.model.n_layer, cfg.model.hidden, cfg.model.n_head, (double)col_lm_trainer_param_count(tr) / 1e6, T);
    printf("data: %s (%.1f MB, last 5%% held out); batch %d x %d tokens; AdamW lr %g, warmup + cosine\n", data,
           (double)len / 1e6, B, T, lr);
    printf("cpu: %d threads, OpenBLAS kernels %s; activation arena %.1f MB\n", omp_get_max_threads(),
           col_cpu_backend_blas_core(&be), (double)col_lm_trainer_arena_bytes(tr) / 1e6);
    fflush(stdout);

    const unsigned char *u = (const unsigned char *)text;
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)(B * T)), *tg = malloc(sizeof(int32_t) * (size_t)(B * T));
    col_rng data_rng, val_rng;
    col_rng_init(&data_rng, (uint64_t)seed + 1);
    int rc = 0, every = steps >= 100 ? steps / 20 : 1, last_printed = 0;
    double t0 = now(), tlast = t0, smooth = 0;
    for (int s = 0; s < steps && rc == 0; s++) {
        fill_batch(u, 0, split, B, T, &data_rng, ids, tg);
        col_lm_step_info info;
        if (col_lm_trainer_step(tr, ids, tg, &info, &err) != COL_OK) {
            fprintf(stderr, "colossal-demo: %s\n", err.msg);
            rc = 1;
            break;
        }
        smooth = s == 0 ? info.loss : 0.9 * smooth + 0.1 * info.loss;
        if ((s + 1) % every == 0 || s == 0 || s + 1 == steps) {
            /* validation: the same 4 held-out batches every time */
            double vl = 0;
            col_rng_init(&val_rng, 99);
            for (int k = 0; k < 4 && rc == 0; k++) {
                float l;
                fill_batch(u, split, len, B, T, &val_rng, ids, tg);
                if (col_lm_trainer_eval(tr, ids, tg, &l, NULL, &err) != COL_OK) {
                    fprintf(stderr, "colossal-demo: %s\n", err.msg);
                    rc = 1;
                }
                vl += l / 4;
            }
            double t = now();
            int done = s + 1 - last_printed;
            last_printed = s + 1;
            printf("step %5d/%d  loss %.4f  val %.4f  lr %.2e  %6.1f ms/step  %7.0f tok/s\n", s + 1, steps, smooth,
                   vl, info.lr, 1000 * (t - tlast) / done, (double)done * B * T / (t - tlast));
            fflush(stdout);
            tlast = now();
        }
    }
    if (rc == 0) {
        /* a sample: temperature 0.8 from a fixed prompt */
        const char *prompt = "And God said";
        int32_t ctx[1024];
        int n = (int)strlen(prompt);
        for (int i = 0; i < n; i++)
            ctx[i] = (unsigned char)prompt[i];
        printf("sample: %s", prompt);
        col_rng sr;
        col_rng_init(&sr, (uint64_t)seed + 2);
        for (int k = 0; k < 240 && rc == 0; k++) {
            int start = n > T ? n - T : 0;
            const float *lg;
            if (col_lm_trainer_next_logits(tr, ctx + start, n - start, &lg, &err) != COL_OK) {
                fprintf(stderr, "\ncolossal-demo: %s\n", err.msg);
                rc = 1;
                break;
            }
            double mx = lg[0], z = 0, p[256];
            for (int v = 1; v < 256; v++)
                mx = fmax(mx, lg[v]);
            for (int v = 0; v < 256; v++)
                z += p[v] = exp((lg[v] - mx) / 0.8);
            double x = col_rng_uniform(&sr) * z;
            int pick = 255;
            for (int v = 0; v < 256; v++)
                if ((x -= p[v]) <= 0) {
                    pick = v;
                    break;
                }
            putchar(pick);
            if (n == 1024) {
                memmove(ctx, ctx + 1, sizeof(int32_t) * 1023);
                n--;
            }
            ctx[n++] = pick;
        }
        printf("\n%.1f s in all\n", now() - t0);
    }
    free(ids);
    free(tg);
    col_lm_trainer_free(tr);
    col_cpu_backend_free(&be);
    free(text);
    return rc;
}

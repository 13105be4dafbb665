/* bench_tokenize - encoding (and decoding) speed of the bundled tokenizers on
 * the bundled King James Bible (4.3 MB), one thread, against two ceilings
 * measured in the same run over the same text: memchr counting newlines and
 * memcpy of the whole text.
 *
 *   ./bench/bench_tokenize [REPS [NAME]]   (default 3 reps, each figure the
 *                                          median; NAME: only gpt2, llama2 or llama3)
 *
 * Encoding is one col_tok_encode call on the whole text, without BOS, so the
 * time covers pre-tokenization, BPE and the per-call word cache. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "textio.h"
#include "tokenizer.h"
#include "bench_util.h"

static const char *asset(const char *rel, char *buf, size_t size)
{
    snprintf(buf, size, "%s/%s", COL_ASSET_DIR, rel);
    if (access(buf, R_OK) == 0)
        return buf;
    snprintf(buf, size, "%s/%s", COL_SRC_ASSET_DIR, rel);
    return buf;
}

int main(int argc, char **argv)
{
    int reps = argc > 1 ? atoi(argv[1]) : 3;
    const char *only = argc > 2 ? argv[2] : NULL;
    if (reps < 1 || reps > 100 || argc > 3) {
        fprintf(stderr, "usage: bench_tokenize [REPS 1..100 [gpt2|llama2|llama3]]\n");
        return 2;
    }
    char path[4096];
    char *text;
    size_t len;
    col_err err = {0};
    if (col_read_file(asset("corpus/kjv.txt.gz", path, sizeof path), 0, &text, &len, &err) != COL_OK) {
        fprintf(stderr, "bench_tokenize: %s\n", err.msg);
        return 1;
    }
    double mb = (double)len / 1e6, t[100];

    /* ceilings over the same bytes */
    volatile size_t sink = 0;
    for (int r = 0; r < reps; r++) {
        double t0 = bench_now();
        size_t lines = 0;
        for (const char *p = text, *end = text + len; (p = memchr(p, '\n', (size_t)(end - p))) != NULL; p++)
            lines++;
        t[r] = bench_now() - t0;
        sink += lines;
    }
    double memchr_rate = mb / bench_median(t, reps);
    char *copy = malloc(len);
    for (int r = 0; r < reps && copy; r++) {
        double t0 = bench_now();
        memcpy(copy, text, len);
        t[r] = bench_now() - t0;
        sink += (unsigned char)copy[r];
    }
    double memcpy_rate = mb / bench_median(t, reps);
    free(copy);

    printf("corpus: %.2f MB; ceilings: memchr('\\n') %.0f MB/s, memcpy %.0f MB/s (medians of %d)\n\n", mb,
           memchr_rate, memcpy_rate, reps);
    printf("| tokenizer | load ms |    tokens | bytes/token | encode MB/s | / memchr | decode MB/s |\n");
    printf("|-----------|--------:|----------:|------------:|------------:|---------:|------------:|\n");
    static const char *const names[] = {"gpt2", "llama2", "llama3"};
    for (int k = 0; k < 3; k++) {
        if (only && strcmp(only, names[k]) != 0)
            continue;
        char rel[64];
        snprintf(rel, sizeof rel, "tokenizers/%s", names[k]);
        col_tokenizer *tok;
        double t0 = bench_now();
        if (col_tok_load(asset(rel, path, sizeof path), &tok, &err) != COL_OK) {
            fprintf(stderr, "bench_tokenize: %s\n", err.msg);
            free(text);
            return 1;
        }
        double load_ms = 1e3 * (bench_now() - t0);
        int32_t *ids = NULL;
        size_t n = 0;
        for (int r = 0; r < reps; r++) {
            free(ids);
            t0 = bench_now();
            if (col_tok_encode(tok, text, len, false, &ids, &n, &err) != COL_OK) {
                fprintf(stderr, "bench_tokenize: %s: %s\n", names[k], err.msg);
                return 1;
            }
            t[r] = bench_now() - t0;
        }
        double enc = mb / bench_median(t, reps);
        for (int r = 0; r < reps; r++) {
            char *back;
            size_t blen;
            t0 = bench_now();
            if (col_tok_decode(tok, ids, n, false, &back, &blen, &err) != COL_OK) {
                fprintf(stderr, "bench_tokenize: %s: %s\n", names[k], err.msg);
                return 1;
            }
            t[r] = bench_now() - t0;
            if (blen != len || memcmp(back, text, len) != 0) {
                fprintf(stderr, "bench_tokenize: %s: decode(encode(corpus)) differs from the corpus\n", names[k]);
                return 1;
            }
            free(back);
        }
        double dec = mb / bench_median(t, reps);
        printf("| %-9s | %7.0f | %9zu | %11.2f | %11.1f | %8.4f | %11.0f |\n", names[k], load_ms, n,
               (double)len / (double)n, enc, enc / memchr_rate, dec);
        free(ids);
        col_tok_free(tok);
    }
    free(text);
    return sink == 0; /* keeps the ceiling loops */
}

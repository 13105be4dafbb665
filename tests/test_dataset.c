/* test_dataset.c - training data: text, llm.c token files (mapped, or in
 * memory when compressed) and .jsonl chat data (plain and compressed), their
 * errors, the chat loss mask, and the sequential / shuffled / validation
 * batches; a large mapped file costs no memory of its size. */
#include <archive.h>
#include <archive_entry.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dataset.h"
#include "rng.h"
#include "archive_testutil.h"
#include "testlib.h"
#include "tokenizer.h"

#ifndef FIXTURES
#define FIXTURES "tests/fixtures/dataset"
#endif

static char dir[] = "/tmp/col_dataset_XXXXXX";

static char *path_of(const char *name)
{
    static char buf[4][256];
    static int k;
    k = (k + 1) & 3;
    snprintf(buf[k], sizeof buf[k], "%s/%s", dir, name);
    return buf[k];
}

static void write_plain(const char *path, const void *data, size_t len)
{
    FILE *f = fopen(path, "wb");
    fwrite(data, 1, len, f);
    fclose(f);
}

static void write_gz(const char *path, const void *data, size_t len)
{
    if (write_compressed(path, data, len, archive_write_add_filter_gzip) != 0)
        TL_NOTE("cannot write %s", path);
}

/* An llm.c token file image: header then tokens (uint16 or uint32 LE). */
static unsigned char *llmc_image(uint32_t magic, uint32_t version, uint32_t count, const uint32_t *tok, size_t ntok,
                                 size_t *len)
{
    size_t ts = magic == 20240520 ? 2 : 4;
    *len = 1024 + ntok * ts;
    unsigned char *b = calloc(1, *len);
    uint32_t h[3] = {magic, version, count};
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 4; j++)
            b[4 * i + j] = (unsigned char)(h[i] >> (8 * j));
    for (size_t i = 0; i < ntok; i++)
        for (size_t j = 0; j < ts; j++)
            b[1024 + i * ts + j] = (unsigned char)(tok[i] >> (8 * j));
    return b;
}

static col_status load(const char *path, const col_tokenizer *tok, int32_t vocab, double val, col_dataset **ds,
                       col_err *err)
{
    col_dataset_opts o = {.tok = tok, .vocab_size = vocab, .val_percent = val};
    return col_dataset_load(path, &o, ds, err);
}

/* loading path must fail with a message holding both needles */
static void expect_fail(const char *what, const char *path, const col_tokenizer *tok, int32_t vocab,
                        const char *needle1, const char *needle2)
{
    col_dataset *ds = NULL;
    col_err err = {0};
    col_status st = load(path, tok, vocab, 0, &ds, &err);
    TL_OK(st != COL_OK && !ds && strstr(err.msg, needle1) && (!needle2 || strstr(err.msg, needle2)), "%s: %s", what,
          err.msg);
    col_dataset_free(ds);
}

static bool same_ids(const int32_t *a, const int32_t *b, size_t n)
{
    return n == 0 || memcmp(a, b, n * sizeof *a) == 0;
}

static void test_text(const col_tokenizer *tok)
{
    const char *text = "Hello world, this is plain text.\nIt has <|endoftext|> in it, as text.\n";
    int32_t *ref;
    size_t nref;
    col_err err = {0};
    col_tok_encode_ex(tok, text, strlen(text), 0, &ref, &nref, &err);
    bool has_eot = false;
    for (size_t i = 0; i < nref; i++)
        has_eot |= ref[i] == 50256;
    TL_OK(nref > 10 && !has_eot, "text reference: %zu tokens, <|endoftext|> not a special token", nref);
    const char *names[] = {"t.txt", "t.txt.gz"};
    for (int k = 0; k < 2; k++) {
        if (k == 0)
            write_plain(path_of(names[k]), text, strlen(text));
        else
            write_gz(path_of(names[k]), text, strlen(text));
        col_dataset *ds = NULL;
        col_status st = load(path_of(names[k]), tok, 0, 0, &ds, &err);
        TL_OK(st == COL_OK && col_dataset_n_tokens(ds) == nref && same_ids(col_dataset_tokens(ds), ref, nref) &&
                  !col_dataset_mask(ds) && col_dataset_n_train(ds) == nref,
              "text %s: tokens equal col_tok_encode_ex with no special tokens (%s)", names[k], err.msg);
        col_dataset_free(ds);
    }
    free(ref);
    // text without a tokenizer
    expect_fail("text without a tokenizer", path_of("t.txt"), NULL, 0, "t.txt", "tokenizer");
}

static void test_llmc(void)
{
    uint32_t tok[300];
    col_rng r;
    col_rng_init(&r, 11);
    for (int i = 0; i < 300; i++)
        tok[i] = (uint32_t)col_rng_below(&r, 50257);
    tok[7] = 65535;
    struct {
        const char *name;
        uint32_t magic, version;
        bool gz;
        int32_t vocab;
    } ok[] = {
        {"a.bin", 20240520, 1, false, 0},
        {"b.bin", 20240801, 7, false, 0},
        {"c.dat", 20240801, 2, false, 0}, // detected by the magic, not the name
        {"d.bin.gz", 20240520, 1, true, 65536},
        {"e.txt.xz", 20240801, 7, true, 0}, // (gzip content; the name lies twice)
    };
    for (size_t k = 0; k < sizeof ok / sizeof ok[0]; k++) {
        size_t len;
        unsigned char *img = llmc_image(ok[k].magic, ok[k].version, 300, tok, 300, &len);
        if (ok[k].gz)
            write_gz(path_of(ok[k].name), img, len);
        else
            write_plain(path_of(ok[k].name), img, len);
        free(img);
        col_dataset *ds = NULL;
        col_err err = {0};
        col_status st = load(path_of(ok[k].name), NULL, ok[k].vocab, 0, &ds, &err);
        bool same = st == COL_OK && col_dataset_n_tokens(ds) == 300;
        for (int i = 0; same && i < 300; i++)
            same = col_dataset_token_at(ds, (size_t)i) == (int32_t)tok[i];
        // uncompressed files are mapped: no array
        same = same && !col_dataset_tokens(ds) == !ok[k].gz;
        TL_OK(same && !col_dataset_mask(ds), "llm.c %s (magic %u, version %u): 300 tokens read back, %s (%s)",
              ok[k].name, ok[k].magic, ok[k].version, ok[k].gz ? "in memory" : "mapped", err.msg);
        col_dataset_free(ds);
    }

    size_t len;
    unsigned char *img = llmc_image(20240521, 1, 300, tok, 300, &len);
    write_plain(path_of("badmagic.bin"), img, len);
    free(img);
    expect_fail("llm.c bad magic", path_of("badmagic.bin"), NULL, 0, "badmagic.bin", "magic");

    img = llmc_image(20240520, 3, 300, tok, 300, &len);
    write_plain(path_of("badver.bin"), img, len);
    free(img);
    expect_fail("llm.c bad version", path_of("badver.bin"), NULL, 0, "badver.bin", "version 3");

    img = llmc_image(20240520, 1, 299, tok, 300, &len); // one token more than the header says
    write_plain(path_of("count.bin"), img, len);
    free(img);
    expect_fail("llm.c count mismatch", path_of("count.bin"), NULL, 0, "count.bin", "299");

    img = llmc_image(20240801, 7, 300, tok, 300, &len);
    write_plain(path_of("trunc.bin"), img, len - 5); // cut inside the last token
    write_plain(path_of("trunchead.bin"), img, 600); // cut inside the header
    free(img);
    expect_fail("llm.c truncated tokens", path_of("trunc.bin"), NULL, 0, "trunc.bin", "truncated");
    expect_fail("llm.c truncated header", path_of("trunchead.bin"), NULL, 0, "trunchead.bin", "truncated");

    img = llmc_image(20240520, 1, 300, tok, 300, &len);
    write_plain(path_of("vocab.bin"), img, len);
    free(img);
    expect_fail("llm.c token >= vocab", path_of("vocab.bin"), NULL, 50257, "vocab.bin", "token 7 is 65535");

    img = llmc_image(20240801, 7, 300, tok, 300, &len);
    img[8] = 0x40, img[9] = 0x42, img[10] = 0x0f; // the header claims a million tokens
    write_plain(path_of("lies.bin"), img, len);
    free(img);
    expect_fail("llm.c header claiming more tokens than the file holds", path_of("lies.bin"), NULL, 0, "lies.bin",
                "truncated");
    write_plain(path_of("short.bin"), "\x88\xd8\x34\x01", 4); // the v1 magic alone
    expect_fail("llm.c magic alone", path_of("short.bin"), NULL, 0, "short.bin", "truncated");
    img = llmc_image(20240520, 1, 0, tok, 0, &len);
    write_plain(path_of("empty.bin"), img, len);
    free(img);
    expect_fail("llm.c no tokens", path_of("empty.bin"), NULL, 0, "empty.bin", "no tokens");
}

/* the run state's FNV-1a over the tokens, as apps/finetune computed it before col_dataset_hash */
static uint64_t fnv_ref(uint64_t h, uint32_t v)
{
    for (int b = 0; b < 4; b++) {
        h ^= (v >> (8 * b)) & 0xff;
        h *= 0x100000001b3ull;
    }
    return h;
}

static bool same_batches(const col_dataset *a, const col_dataset *b, col_batch_mode mode, int B, int T, int nb)
{
    col_batch_state sa = col_batch_state_init(mode, 5), sb = col_batch_state_init(mode, 5);
    size_t bt = (size_t)B * T;
    int32_t *x = malloc(4 * 4 * bt);
    col_err err = {0};
    bool ok = x != NULL;
    for (int k = 0; ok && k < nb; k++)
        ok = col_dataset_next_batch(a, &sa, B, T, x, x + bt, &err) == COL_OK &&
             col_dataset_next_batch(b, &sb, B, T, x + 2 * bt, x + 3 * bt, &err) == COL_OK &&
             !memcmp(x, x + 2 * bt, 8 * bt) && !memcmp(&sa, &sb, sizeof sa);
    int64_t nv = col_dataset_n_val_batches(a, B, T);
    ok = ok && nv > 0 && nv == col_dataset_n_val_batches(b, B, T);
    for (int64_t k = 0; ok && k < nv; k++)
        ok = col_dataset_val_batch(a, k, B, T, x, x + bt, &err) == COL_OK &&
             col_dataset_val_batch(b, k, B, T, x + 2 * bt, x + 3 * bt, &err) == COL_OK &&
             !memcmp(x, x + 2 * bt, 8 * bt);
    free(x);
    return ok;
}

/* A mapped file gives what the in-memory path (the same image gzipped) gives. */
static void test_mapped(void)
{
    enum { N = 5000 };
    uint32_t *tok = malloc(sizeof(uint32_t) * N);
    col_rng r;
    col_rng_init(&r, 21);
    uint64_t h = 0xcbf29ce484222325ull;
    for (int i = 0; i < N; i++)
        h = fnv_ref(h, tok[i] = (uint32_t)col_rng_below(&r, 50257));
    for (int v = 1; v <= 2; v++) {
        size_t len;
        unsigned char *img = llmc_image(v == 1 ? 20240520 : 20240801, v == 1 ? 1 : 2, N, tok, N, &len);
        write_plain(path_of("m.bin"), img, len);
        write_gz(path_of("m.bin.gz"), img, len);
        col_dataset *a = NULL, *b = NULL;
        col_err err = {0};
        col_dataset_opts o = {.vocab_size = 50257, .val_percent = 10, .max_bytes = 1};
        col_status st = col_dataset_load(path_of("m.bin"), &o, &a, &err); // max_bytes 1: not counted when mapped
        o.max_bytes = 0;
        if (st == COL_OK)
            st = col_dataset_load(path_of("m.bin.gz"), &o, &b, &err);
        bool ok = st == COL_OK && !col_dataset_tokens(a) && col_dataset_tokens(b) &&
                  col_dataset_n_tokens(a) == N && col_dataset_n_tokens(b) == N &&
                  col_dataset_n_train(a) == col_dataset_n_train(b);
        TL_OK(ok && col_dataset_hash(a) == h && col_dataset_hash(b) == h,
              "v%d: mapped and in-memory load alike, hash %016llx unchanged (%s)", v, (unsigned long long)h, err.msg);
        TL_OK(ok && same_batches(a, b, COL_BATCH_SEQUENTIAL, 3, 17, 200) &&
                  same_batches(a, b, COL_BATCH_SHUFFLED, 2, 33, 50),
              "v%d: mapped sequential, shuffled and validation batches equal the in-memory ones", v);
        // rewritten in place after the load: refused at the batch, not passed on
        FILE *f = fopen(path_of("m.bin"), "r+b");
        fseek(f, 1024, SEEK_SET);
        fwrite("\xff\xff\xff\xff", 1, 4, f);
        fclose(f);
        col_batch_state bs = col_batch_state_init(COL_BATCH_SEQUENTIAL, 0);
        int32_t in[8], tg[8];
        st = col_dataset_next_batch(a, &bs, 1, 8, in, tg, &err);
        TL_OK(st != COL_OK && strstr(err.msg, "changed since it was loaded"),
              "v%d: a file rewritten after the load: %s", v, err.msg);
        col_dataset_free(a);
        col_dataset_free(b);
        free(img);
        expect_fail("llm.c token past the vocabulary, mapped", path_of("m.bin"), NULL, 50257, "m.bin",
                    v == 1 ? "token 0 is 65535" : "token 0 is 4294967295");
    }
    free(tok);
}

static long vm_rss_kb(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long kb = -1;
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "VmRSS:", 6))
            kb = atol(line + 6);
    if (f)
        fclose(f);
    return kb;
}

/* A 200 MB token file loads without its size in memory. */
static void test_mapped_rss(void)
{
    enum { NTOK = 100 << 20, CHUNK = 1 << 20 };
    char path[] = "/tmp/col_dataset_big_XXXXXX.bin";
    int fd = mkstemps(path, 4);
    FILE *f = fd >= 0 ? fdopen(fd, "wb") : NULL;
    if (!f) {
        TL_OK(false, "cannot create %s", path);
        return;
    }
    unsigned char head[1024] = {0};
    uint32_t h3[3] = {20240520, 1, NTOK};
    for (int j = 0; j < 12; j++)
        head[j] = (unsigned char)(h3[j / 4] >> (8 * (j % 4)));
    bool wrote = fwrite(head, 1, sizeof head, f) == sizeof head;
    uint16_t *buf = malloc(sizeof(uint16_t) * CHUNK);
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; wrote && i < NTOK; i += CHUNK) {
        for (size_t j = 0; j < CHUNK; j++)
            h = fnv_ref(h, buf[j] = (uint16_t)((i + j) * 7919 % 50257)); // little-endian hosts only
        wrote = fwrite(buf, sizeof *buf, CHUNK, f) == CHUNK;
    }
    free(buf);
    wrote = fclose(f) == 0 && wrote;
    long before = vm_rss_kb();
    col_dataset *ds = NULL;
    col_err err = {0};
    col_dataset_opts o = {.vocab_size = 50257, .val_percent = 1};
    col_status st = wrote ? col_dataset_load(path, &o, &ds, &err) : COL_EIO;
    bool ok = st == COL_OK && col_dataset_n_tokens(ds) == NTOK && col_dataset_hash(ds) == h;
    long loaded = vm_rss_kb();
    int32_t in[8 * 1024], tg[8 * 1024];
    col_batch_state bs = col_batch_state_init(COL_BATCH_SHUFFLED, 9), sq = col_batch_state_init(0, 0);
    for (int k = 0; ok && k < 20; k++)
        ok = col_dataset_val_batch(ds, k, 8, 1024, in, tg, &err) == COL_OK &&
             col_dataset_next_batch(ds, &bs, 8, 1024, in, tg, &err) == COL_OK &&
             col_dataset_next_batch(ds, &sq, 8, 1024, in, tg, &err) == COL_OK &&
             in[5] == (int32_t)((sq.pos - 8 * 1024 + 5) * 7919 % 50257);
    long after = vm_rss_kb();
    TL_OK(ok && before > 0 && after - before < 200 * 1024 / 8,
          "a 200 MB token file: VmRSS %ld kB before the load, %ld kB after it, %ld kB after 60 batches (%s)", before,
          loaded, after, err.msg);
    col_dataset_free(ds);
    unlink(path);
}

static void write_str(const char *name, const char *s) { write_plain(path_of(name), s, strlen(s)); }

static void test_chat_errors(const col_tokenizer *tok)
{
    const char *good = "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}, "
                       "{\"role\": \"assistant\", \"content\": \"hello\"}]}\n";
    char buf[1024];
    snprintf(buf, sizeof buf, "%s\n%s{\"messages\": [oops\n", good, good);
    write_str("e1.jsonl", buf);
    expect_fail("jsonl not JSON", path_of("e1.jsonl"), tok, 0, "e1.jsonl:4:", "JSON");
    snprintf(buf, sizeof buf, "%s{\"msgs\": []}\n", good);
    write_str("e2.jsonl", buf);
    expect_fail("jsonl no messages array", path_of("e2.jsonl"), tok, 0, "e2.jsonl:2:", "messages");
    snprintf(buf, sizeof buf, "%s%s{\"messages\": [{\"role\": \"tool\", \"content\": \"x\"}]}\n", good, good);
    write_str("e3.jsonl", buf);
    expect_fail("jsonl unknown role", path_of("e3.jsonl"), tok, 0, "e3.jsonl:3:", "\"tool\"");
    snprintf(buf, sizeof buf, "{\"messages\": [{\"role\": \"user\", \"content\": 5}]}\n");
    write_str("e4.jsonl", buf);
    expect_fail("jsonl non-string content", path_of("e4.jsonl"), tok, 0, "e4.jsonl:1:", "not a string");
    write_str("e5.jsonl", "[1, 2]\n");
    expect_fail("jsonl not an object", path_of("e5.jsonl"), tok, 0, "e5.jsonl:1:", "messages");
    write_str("e6.jsonl", "");
    expect_fail("jsonl empty file", path_of("e6.jsonl"), tok, 0, "e6.jsonl", "no conversations");
    write_str("e7.jsonl", "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}]}\n");
    expect_fail("jsonl no assistant turn", path_of("e7.jsonl"), tok, 0, "e7.jsonl", "no usable conversation");
    write_str("e8.jsonl", "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}]} x\n");
    expect_fail("jsonl trailing garbage", path_of("e8.jsonl"), tok, 0, "e8.jsonl:1:", "JSON");
}

/* Decodes ids[a..b) into a new string. */
static char *decode(const col_tokenizer *tok, const int32_t *ids, size_t a, size_t b)
{
    char *s = NULL;
    size_t len;
    col_err err = {0};
    if (col_tok_decode(tok, ids + a, b - a, false, &s, &len, &err) != COL_OK)
        return strdup("(decode failed)");
    return s;
}

/* Checks ds's token runs with mask 1 decode to want[0..nwant) in order and
 * the whole stream decodes to full. */
static void check_mask(const char *what, const col_tokenizer *tok, const col_dataset *ds, const char *const *want,
                       int nwant, const char *full)
{
    const int32_t *ids = col_dataset_tokens(ds);
    const uint8_t *m = col_dataset_mask(ds);
    size_t n = col_dataset_n_tokens(ds);
    int runs = 0;
    bool ok = m != NULL;
    for (size_t i = 0; ok && i < n;) {
        if (!m[i]) {
            i++;
            continue;
        }
        size_t j = i;
        while (j < n && m[j])
            j++;
        char *s = decode(tok, ids, i, j);
        ok = runs < nwant && strcmp(s, want[runs]) == 0;
        if (!ok)
            TL_NOTE("%s: trained run %d decodes to \"%s\"", what, runs, s);
        free(s);
        runs++;
        i = j;
    }
    TL_OK(ok && runs == nwant, "%s: the trained tokens are exactly the %d assistant contents + <|im_end|>", what,
          nwant);
    char *all = decode(tok, ids, 0, n);
    TL_OK(strcmp(all, full) == 0, "%s: the whole stream decodes to the ChatML rendering", what);
    free(all);
}

static void test_chat(const col_tokenizer *tok)
{
    // a 2-turn conversation (user / assistant twice, after a system message)
    const char *line = "{\"messages\": [{\"role\": \"system\", \"content\": \"Be brief.\"}, "
                       "{\"role\": \"user\", \"content\": \"Name a colour.\"}, "
                       "{\"role\": \"assistant\", \"content\": \"Blue, like the sea.\"}, "
                       "{\"role\": \"user\", \"content\": \"Another?\"}, "
                       "{\"role\": \"assistant\", \"content\": \"Green \\\"leaf\\\"\\nend\"}]}\n";
    write_str("c.jsonl", line);
    col_dataset *ds = NULL;
    col_err err = {0};
    col_status st = load(path_of("c.jsonl"), tok, 0, 0, &ds, &err);
    TL_OK(st == COL_OK && col_dataset_n_conversations(ds) == 1, "chat: one conversation loaded (%s)", err.msg);
    if (st == COL_OK) {
        const char *want[] = {"Blue, like the sea.<|im_end|>", "Green \"leaf\"\nend<|im_end|>"};
        check_mask("chat 2 turns", tok, ds, want, 2,
                   "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nName a colour.<|im_end|>\n"
                   "<|im_start|>assistant\nBlue, like the sea.<|im_end|>\n<|im_start|>user\nAnother?<|im_end|>\n"
                   "<|im_start|>assistant\nGreen \"leaf\"\nend<|im_end|>\n");
        // batches: a target is -1 exactly where its token is masked
        const int32_t *ids = col_dataset_tokens(ds);
        const uint8_t *m = col_dataset_mask(ds);
        size_t n = col_dataset_n_tokens(ds);
        int T = 8, B = (int)((n - 1) / 8);
        int32_t *in = malloc(sizeof(int32_t) * B * T), *tg = malloc(sizeof(int32_t) * B * T);
        col_batch_state bs = col_batch_state_init(COL_BATCH_SEQUENTIAL, 0);
        st = col_dataset_next_batch(ds, &bs, B, T, in, tg, &err);
        bool ok = st == COL_OK;
        for (int i = 0; ok && i < B * T; i++)
            ok = in[i] == ids[i] && tg[i] == (m[i + 1] ? ids[i + 1] : -1);
        TL_OK(ok, "chat batch: masked targets are -1, others the next token (%s)", err.msg);
        free(in);
        free(tg);
    }
    col_dataset_free(ds);

    // the committed gzip fixture: two conversations, the second with 2 turns
    ds = NULL;
    st = load(FIXTURES "/chat.jsonl.gz", tok, 0, 50, &ds, &err);
    TL_OK(st == COL_OK && col_dataset_n_conversations(ds) == 2 && col_dataset_n_val_conversations(ds) == 1,
          "chat fixture chat.jsonl.gz: 2 conversations, 1 held out at 50%% (%s)", err.msg);
    if (st == COL_OK) {
        const char *want[] = {"Paris.<|im_end|>", "4<|im_end|>", "12, caf\xc3\xa9 \"quoted\"\nnewline<|im_end|>"};
        const char *c1 = "<|im_start|>system\nYou are terse.<|im_end|>\n<|im_start|>user\nCapital of France?<|im_end|>\n"
                         "<|im_start|>assistant\nParis.<|im_end|>\n";
        const char *c2 = "<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n4<|im_end|>\n"
                         "<|im_start|>user\nTimes 3?<|im_end|>\n"
                         "<|im_start|>assistant\n12, caf\xc3\xa9 \"quoted\"\nnewline<|im_end|>\n";
        char full[1024];
        snprintf(full, sizeof full, "%s%s", c1, c2);
        check_mask("chat fixture", tok, ds, want, 3, full);
        // the split falls between the conversations: train = c1, validation = c2
        char *tr = decode(tok, col_dataset_tokens(ds), 0, col_dataset_n_train(ds));
        char *va = decode(tok, col_dataset_tokens(ds), col_dataset_n_train(ds), col_dataset_n_tokens(ds));
        TL_OK(strcmp(tr, c1) == 0 && strcmp(va, c2) == 0, "chat split: the last conversation is held out whole");
        free(tr);
        free(va);
    }
    col_dataset_free(ds);
}

/* A custom template through the callback: "[role] content" per message,
 * <|endoftext|> (by id) after the last one; trains the assistant content and
 * the final id. Fails on a message whose content is "FAIL". */
static col_status tiny_render(void *user, const col_chat_msg *m, col_chat_out *out, col_err *err)
{
    int *calls = user;
    (*calls)++;
    if (!strcmp(m->content, "FAIL"))
        return col_err_set(err, COL_EINVAL, "refused message %d", m->index);
    char head[32];
    int hl = snprintf(head, sizeof head, "[%s] ", col_chat_role_name(m->role));
    col_status st = col_chat_emit_text(out, head, (size_t)hl, false, err);
    if (st == COL_OK)
        st = col_chat_emit_content(out, m->content, m->content_len, m->role == COL_ROLE_ASSISTANT, err);
    if (st == COL_OK && m->index == m->n_messages - 1)
        st = col_chat_emit_id(out, 50256, true, err);
    return st;
}

static void test_custom_template(const col_tokenizer *tok)
{
    write_str("t.jsonl", "{\"messages\": [{\"role\": \"user\", \"content\": \"a <|endoftext|> b\"}, "
                         "{\"role\": \"assistant\", \"content\": \"yes\"}]}\n"
                         "{\"messages\": [{\"role\": \"user\", \"content\": \"FAIL\"}]}\n");
    int calls = 0;
    col_chat_template tmpl = {"tiny", tiny_render, &calls};
    col_dataset_opts o = {.tok = tok, .tmpl = &tmpl};
    col_dataset *ds = NULL;
    col_err err = {0};
    col_status st = col_dataset_load(path_of("t.jsonl"), &o, &ds, &err);
    TL_OK(st != COL_OK && strstr(err.msg, "t.jsonl:2:") && strstr(err.msg, "tiny") &&
              strstr(err.msg, "refused message 0") && calls == 3,
          "custom template: its error names file, line and template: %s", err.msg);
    write_str("t.jsonl", "{\"messages\": [{\"role\": \"user\", \"content\": \"a <|endoftext|> b\"}, "
                         "{\"role\": \"assistant\", \"content\": \"yes\"}]}\n");
    st = col_dataset_load(path_of("t.jsonl"), &o, &ds, &err);
    TL_OK(st == COL_OK, "custom template: loads (%s)", err.msg);
    if (st == COL_OK) {
        const char *want[] = {"yes<|endoftext|>"};
        size_t n = col_dataset_n_tokens(ds);
        int eot = 0;
        for (size_t i = 0; i < n; i++)
            eot += col_dataset_tokens(ds)[i] == 50256;
        TL_OK(eot == 1 && col_dataset_tokens(ds)[n - 1] == 50256,
              "custom template: <|endoftext|> in content stays text; the emitted id is the only 50256");
        const char *full = "[user] a <|endoftext|> b[assistant] yes<|endoftext|>";
        check_mask("custom template", tok, ds, want, 1, full);
    }
    col_dataset_free(ds);
}

/* Sequential batches against llm.c's definition, written out here: batch k
 * starts at (k mod nb) * B*T where nb = (n-1) / (B*T) batches fit. */
static void test_sequential(void)
{
    col_rng r;
    col_rng_init(&r, 3);
    int n = 1000;
    int32_t *tok = malloc(sizeof(int32_t) * n);
    uint8_t *mask = malloc(n);
    for (int i = 0; i < n; i++) {
        tok[i] = (int32_t)col_rng_below(&r, 50000);
        mask[i] = col_rng_below(&r, 3) != 0;
    }
    for (int masked = 0; masked < 2; masked++) {
        col_dataset *ds = NULL;
        col_err err = {0};
        col_dataset_from_tokens(tok, masked ? mask : NULL, (size_t)n, 0, &ds, &err);
        int shapes[3][2] = {{3, 7}, {4, 64}, {1, 999}};
        for (int s = 0; s < 3; s++) {
            int B = shapes[s][0], T = shapes[s][1];
            int32_t *in = malloc(sizeof(int32_t) * B * T), *tg = malloc(sizeof(int32_t) * B * T);
            col_batch_state st = col_batch_state_init(COL_BATCH_SEQUENTIAL, 0);
            int nb = (n - 1) / (B * T);
            bool ok = true;
            for (int k = 0; ok && k < 3 * nb + 2; k++) {
                ok = col_dataset_next_batch(ds, &st, B, T, in, tg, &err) == COL_OK;
                int start = (k % nb) * B * T;
                for (int i = 0; ok && i < B * T; i++) {
                    int32_t want_tg = (!masked || mask[start + i + 1]) ? tok[start + i + 1] : -1;
                    ok = in[i] == tok[start + i] && tg[i] == want_tg;
                }
            }
            TL_OK(ok && st.step == (uint64_t)(3 * nb + 2), "sequential B=%d T=%d%s: %d batches equal llm.c's", B, T,
                  masked ? " masked" : "", 3 * nb + 2);
            free(in);
            free(tg);
        }
        col_dataset_free(ds);
    }
    free(tok);
    free(mask);
}

static void test_shuffled_and_split(void)
{
    int n = 1000;
    int32_t *tok = malloc(sizeof(int32_t) * n);
    for (int i = 0; i < n; i++)
        tok[i] = i; // a token is its own position
    col_dataset *ds = NULL;
    col_err err = {0};
    col_dataset_from_tokens(tok, NULL, (size_t)n, 10, &ds, &err);
    size_t ntr = col_dataset_n_train(ds);
    TL_OK(ntr == 900, "split: 10%% of 1000 tokens held out (n_train %zu)", ntr);
    int B = 4, T = 16;
    int32_t in[4 * 16], tg[4 * 16], in2[4 * 16], tg2[4 * 16];

    // windows are contiguous, inside [0, n_train), and cover the range
    col_batch_state a = col_batch_state_init(COL_BATCH_SHUFFLED, 42);
    bool ok = true;
    int32_t lo = n, hi = 0;
    for (int k = 0; ok && k < 200; k++) {
        ok = col_dataset_next_batch(ds, &a, B, T, in, tg, &err) == COL_OK;
        for (int b = 0; ok && b < B; b++) {
            int32_t s0 = in[b * T];
            for (int t = 0; ok && t < T; t++)
                ok = in[b * T + t] == s0 + t && tg[b * T + t] == s0 + t + 1 && tg[b * T + t] < (int32_t)ntr;
            lo = s0 < lo ? s0 : lo;
            hi = s0 > hi ? s0 : hi;
        }
    }
    TL_OK(ok && lo < 20 && hi > (int32_t)ntr - T - 20 && hi <= (int32_t)ntr - T - 1,
          "shuffled: 800 windows of T+1 contiguous training tokens, starts in [%d, %d] of [0, %zu]", lo, hi,
          ntr - T - 1);

    // determinism, and save / restore of the state
    col_batch_state s1 = col_batch_state_init(COL_BATCH_SHUFFLED, 7), s2 = col_batch_state_init(COL_BATCH_SHUFFLED, 7);
    ok = true;
    for (int k = 0; k < 5; k++) {
        col_dataset_next_batch(ds, &s1, B, T, in, tg, &err);
        col_dataset_next_batch(ds, &s2, B, T, in2, tg2, &err);
        ok &= !memcmp(in, in2, sizeof in) && !memcmp(tg, tg2, sizeof tg);
    }
    TL_OK(ok, "shuffled: the same seed gives the same batches");
    unsigned char saved[sizeof(col_batch_state)];
    memcpy(saved, &s1, sizeof saved);
    int32_t after[5][4 * 16];
    for (int k = 0; k < 5; k++)
        col_dataset_next_batch(ds, &s1, B, T, after[k], tg, &err);
    col_batch_state restored;
    memcpy(&restored, saved, sizeof restored);
    ok = restored.step == 5;
    for (int k = 0; k < 5; k++) {
        col_dataset_next_batch(ds, &restored, B, T, in, tg, &err);
        ok &= !memcmp(in, after[k], sizeof in);
    }
    TL_OK(ok && !memcmp(&restored, &s1, sizeof s1), "shuffled: a saved state resumes bit for bit");
    col_batch_state s3 = col_batch_state_init(COL_BATCH_SHUFFLED, 8);
    col_dataset_next_batch(ds, &s3, B, T, in2, tg2, &err);
    col_batch_state s4 = col_batch_state_init(COL_BATCH_SHUFFLED, 7);
    col_dataset_next_batch(ds, &s4, B, T, in, tg, &err);
    TL_OK(memcmp(in, in2, sizeof in) != 0, "shuffled: another seed gives other batches");

    // sequential training batches stay below n_train too
    col_batch_state sq = col_batch_state_init(COL_BATCH_SEQUENTIAL, 0);
    ok = true;
    for (int k = 0; ok && k < 50; k++) {
        ok = col_dataset_next_batch(ds, &sq, B, T, in, tg, &err) == COL_OK;
        for (int i = 0; ok && i < B * T; i++)
            ok = in[i] < (int32_t)ntr && tg[i] < (int32_t)ntr;
    }
    TL_OK(ok, "split: 50 sequential training batches never touch the validation tokens");

    // validation batches: consecutive windows of the last 100 tokens, repeatable
    int64_t nv = col_dataset_n_val_batches(ds, 2, 16);
    TL_OK(nv == 3, "validation: 100 tokens give (100-1)/32 = 3 batches of [2, 16] (got %lld)", (long long)nv);
    ok = true;
    for (int64_t k = 0; ok && k < nv; k++) {
        ok = col_dataset_val_batch(ds, k, 2, 16, in, tg, &err) == COL_OK &&
             col_dataset_val_batch(ds, k, 2, 16, in2, tg2, &err) == COL_OK;
        for (int i = 0; ok && i < 32; i++)
            ok = in[i] == 900 + 32 * (int)k + i && tg[i] == in[i] + 1 && in2[i] == in[i] && tg2[i] == tg[i];
    }
    TL_OK(ok, "validation: batch k holds tokens 900 + 32k + [0, 33), the same each call");
    col_status st = col_dataset_val_batch(ds, 3, 2, 16, in, tg, &err);
    TL_OK(st != COL_OK && strstr(err.msg, "validation batch 3"), "validation: batch 3 of 3 refused: %s", err.msg);
    col_dataset_free(ds);
    free(tok);
}

static void test_too_short(void)
{
    int32_t tok[10] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
    col_dataset *ds = NULL;
    col_err err = {0};
    col_dataset_from_tokens(tok, NULL, 10, 0, &ds, &err);
    int32_t in[64], tg[64];
    col_batch_state st = col_batch_state_init(COL_BATCH_SEQUENTIAL, 0);
    col_status s = col_dataset_next_batch(ds, &st, 2, 5, in, tg, &err);
    TL_OK(s != COL_OK && strstr(err.msg, "10 training tokens") && strstr(err.msg, "11"),
          "too short sequential: %s", err.msg);
    s = col_dataset_next_batch(ds, &st, 3, 3, in, tg, &err);
    TL_OK(s == COL_OK && in[0] == 1 && tg[8] == 10, "exactly B*T+1 = 10 tokens is enough");
    st = col_batch_state_init(COL_BATCH_SHUFFLED, 1);
    s = col_dataset_next_batch(ds, &st, 1, 10, in, tg, &err);
    TL_OK(s != COL_OK && strstr(err.msg, "10 training tokens") && strstr(err.msg, "11"), "too short shuffled: %s",
          err.msg);
    s = col_dataset_next_batch(ds, &st, 7, 9, in, tg, &err);
    TL_OK(s == COL_OK && in[0] == 1 && tg[8] == 10 && in[54] == 1 && tg[62] == 10,
          "shuffled T+1 = 10 of 10 tokens: every row is the one window");
    s = col_dataset_val_batch(ds, 0, 1, 4, in, tg, &err);
    TL_OK(s != COL_OK && strstr(err.msg, "0 validation tokens") && strstr(err.msg, "5"),
          "too short validation: %s", err.msg);
    col_dataset_free(ds);
    ds = NULL;
    s = col_dataset_from_tokens(tok, NULL, 10, 100, &ds, &err);
    TL_OK(s != COL_OK && !ds && strstr(err.msg, "100"), "validation 100%% refused: %s", err.msg);
}

int main(void)
{
    tl_mkdtemp(dir);
    col_tokenizer *tok = NULL;
    col_err err = {0};
    if (col_tok_load(COL_SRC_ASSET_DIR "/tokenizers/gpt2", &tok, &err) != COL_OK) {
        printf("Bail out! gpt2 tokenizer: %s\n", err.msg);
        return 1;
    }
    test_text(tok);
    test_llmc();
    test_mapped();
    test_mapped_rss();
    test_chat_errors(tok);
    test_chat(tok);
    test_custom_template(tok);
    test_sequential();
    test_shuffled_and_split();
    test_too_short();
    col_tok_free(tok);
    if (!tl_remove_tree(dir))
        TL_NOTE("could not remove %s", dir);
    return tl_done();
}

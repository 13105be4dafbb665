/* colossal-tokenize - text -> token ids and back.
 *
 *   colossal-tokenize MODEL < text          prints [id, id, ...]
 *   colossal-tokenize --decode MODEL < ids   prints the text
 *   colossal-tokenize --chat MODEL < conv    prints the ids of the conversation as MODEL's chat template
 *                                            renders it (what colossal-chat feeds the model)
 *
 * MODEL: a directory with tokenizer.json or vocab.json + merges.txt, a
 * tokenizer.json / vocab.json path, a hub id (org/name) in the Hugging Face
 * cache, or one of the bundled tokenizers gpt2, llama2, llama3, bytes, clip. Errors: one line on stderr, exit 1; usage errors exit 2. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "cliopt.h"
#include "chat_template.h"
#include "hf_config.h"
#include "lm_source.h"
#include "textio.h"
#include "tokenizer.h"

static void usage(FILE *f)
{
    fprintf(f, "usage: colossal-tokenize [--decode] [--no-special] [--split-special] [--skip-special]\n"
               "                         [--chat [--generation-prompt]] MODEL\n"
               "Reads text on stdin and prints its token ids as a JSON array; with --decode, reads a JSON\n"
               "array of ids and prints the text. MODEL is a directory with tokenizer.json or vocab.json +\n"
               "merges.txt, a tokenizer.json or vocab.json file, a hub id (org/name) already in the Hugging Face\n"
               "cache, or a bundled tokenizer: gpt2, llama2, llama3, bytes, clip.\n"
               "  --no-special     add no BOS/EOS around the ids\n"
               "  --split-special  encode special tokens written in the text (\"<|eot_id|>\") as plain text\n"
               "  --skip-special   with --decode, leave special tokens out of the text\n"
               "  --chat           stdin is a conversation, a JSON list of {\"role\", \"content\"} (system, user,\n"
               "                   assistant) or {\"messages\": [...]}: prints the ids of the text MODEL's chat\n"
               "                   template (tokenizer_config.json) renders, tokenized as colossal-chat does\n"
               "                   (special tokens parsed, no BOS added: the template writes it)\n"
               "  --generation-prompt  with --chat: end with the assistant's header (add_generation_prompt)\n"
               "  --help           print this help and exit; --version: print the version and exit\n"
               "%s", cli_exit_help);
}

static char *read_stdin(size_t *len)
{
    size_t cap = 1 << 16, n = 0;
    char *p = malloc(cap);
    while (p) {
        if (n + 1 >= cap) {
            char *q = realloc(p, cap *= 2);
            if (!q) {
                free(p);
                return NULL;
            }
            p = q;
        }
        size_t k = fread(p + n, 1, cap - n - 1, stdin);
        n += k;
        if (k == 0)
            break;
    }
    if (!p || ferror(stdin)) {
        free(p);
        return NULL;
    }
    p[n] = '\0';
    *len = n;
    return p;
}

static int fail(const char *msg)
{
    fprintf(stderr, "colossal-tokenize: %s\n", msg);
    return 1;
}

static int encode(const col_tokenizer *t, const char *text, size_t len, unsigned flags)
{
    int32_t *ids;
    size_t n;
    col_err err = {0};
    if (col_tok_encode_ex(t, text, len, flags, &ids, &n, &err) != COL_OK)
        return fail(err.msg);
    putchar('[');
    for (size_t i = 0; i < n; i++)
        printf(i ? ", %d" : "%d", ids[i]);
    printf("]\n");
    free(ids);
    return 0;
}

static int decode(const col_tokenizer *t, const char *text, size_t len, bool skip_special)
{
    cJSON *root = cJSON_ParseWithLength(text, len), *x;
    if (!cJSON_IsArray(root)) {
        cJSON_Delete(root);
        return fail("--decode: stdin is not a JSON array of token ids");
    }
    int n = cJSON_GetArraySize(root), i = 0;
    int32_t *ids = malloc(((size_t)n + 1) * sizeof *ids);
    if (!ids) {
        cJSON_Delete(root);
        return fail("out of memory");
    }
    cJSON_ArrayForEach(x, root) {
        double d = cJSON_IsNumber(x) ? x->valuedouble : 0.5;
        if (!(d >= -2147483648.0 && d <= 2147483647.0) || (double)(int64_t)d != d) {
            char msg[128];
            snprintf(msg, sizeof msg, "--decode: element %d of the array is not an integer id", i);
            free(ids);
            cJSON_Delete(root);
            return fail(msg);
        }
        ids[i++] = (int32_t)d;
    }
    cJSON_Delete(root);
    char *out;
    size_t olen;
    col_err err = {0};
    col_status st = col_tok_decode(t, ids, (size_t)n, skip_special, &out, &olen, &err);
    free(ids);
    if (st != COL_OK)
        return fail(err.msg);
    fwrite(out, 1, olen, stdout);
    free(out);
    return 0;
}

/* --chat: the conversation on stdin rendered with the chat template of tokenizer_config.json in dir */
static int chat(const col_tokenizer *t, const char *dir, const char *text, size_t len, bool gen)
{
    char path[4200], *cfg = NULL, msg[COL_ERR_MSG_MAX + 64];
    size_t clen = 0;
    col_err err = {0};
    col_chat_family fam;
    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
    if (access(path, F_OK) != 0) {
        snprintf(msg, sizeof msg, "--chat: %.400s has no tokenizer_config.json, so no chat_template", dir);
        return fail(msg);
    }
    if (col_read_file(path, (size_t)64 << 20, &cfg, &clen, &err) != COL_OK)
        return fail(err.msg);
    col_status st = col_chat_detect(cfg, clen, &fam, &err);
    free(cfg);
    if (st != COL_OK) {
        snprintf(msg, sizeof msg, "--chat: %s", err.msg);
        return fail(msg);
    }
    cJSON *root = cJSON_ParseWithLength(text, len);
    const cJSON *list = cJSON_IsObject(root) ? cJSON_GetObjectItemCaseSensitive(root, "messages") : root, *m;
    int n = cJSON_IsArray(list) ? cJSON_GetArraySize(list) : -1, i = 0;
    col_chat_message *msgs = n >= 0 ? calloc((size_t)n + 1, sizeof *msgs) : NULL;
    if (!msgs) {
        cJSON_Delete(root);
        return fail(n < 0 ? "--chat: stdin is not a JSON list of messages (or {\"messages\": [...]})" : "out of memory");
    }
    cJSON_ArrayForEach(m, list) {
        const cJSON *r = cJSON_GetObjectItemCaseSensitive(m, "role"), *c = cJSON_GetObjectItemCaseSensitive(m, "content");
        int k = 0;
        while (col_chat_role_name((col_chat_role)k) && !(cJSON_IsString(r) && !strcmp(r->valuestring,
                                                                                  col_chat_role_name((col_chat_role)k))))
            k++;
        if (!col_chat_role_name((col_chat_role)k) || !cJSON_IsString(c)) {
            snprintf(msg, sizeof msg, "--chat: message %d needs a \"role\" (system, user or assistant) and a string "
                     "\"content\"", i);
            free(msgs);
            cJSON_Delete(root);
            return fail(msg);
        }
        msgs[i++] = (col_chat_message){(col_chat_role)k, c->valuestring};
    }
    char *out = NULL;
    size_t olen = 0;
    st = col_chat_render(fam, msgs, n, gen, &out, &olen, NULL, &err);
    free(msgs);
    cJSON_Delete(root);
    int rc = st == COL_OK ? encode(t, out, olen, COL_TOK_PARSE_SPECIAL) : fail(err.msg);
    free(out);
    return rc;
}

int main(int argc, char **argv)
{
    bool dec = false, skip = false, conv = false, gen = false;
    unsigned flags = COL_TOK_ADD_SPECIAL | COL_TOK_PARSE_SPECIAL;
    const char *model = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--decode") == 0)
            dec = true;
        else if (strcmp(a, "--no-special") == 0)
            flags &= ~(unsigned)COL_TOK_ADD_SPECIAL;
        else if (strcmp(a, "--split-special") == 0)
            flags &= ~(unsigned)COL_TOK_PARSE_SPECIAL;
        else if (strcmp(a, "--skip-special") == 0)
            skip = true;
        else if (strcmp(a, "--chat") == 0)
            conv = true;
        else if (strcmp(a, "--generation-prompt") == 0)
            gen = true;
        else if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            usage(stdout);
            return 0;
        } else if (strcmp(a, "--version") == 0) {
            cli_print_version("colossal-tokenize");
            return 0;
        } else if (a[0] == '-' && a[1] != '\0') {
            static const struct option known[] = {
                {"decode", no_argument, 0, 0}, {"no-special", no_argument, 0, 0}, {"split-special", no_argument, 0, 0},
                {"skip-special", no_argument, 0, 0}, {"help", no_argument, 0, 0}, {"version", no_argument, 0, 0},
                {0, 0, 0, 0}};
            char msg[512];
            fprintf(stderr, "colossal-tokenize: %s\n", cli_unknown_option(a, known, msg, sizeof msg));
            usage(stderr);
            return 2;
        } else if (model) {
            fprintf(stderr, "colossal-tokenize: unexpected argument '%s'\n", a);
            usage(stderr);
            return 2;
        } else
            model = a;
    }
    if ((gen && !conv) || (conv && dec)) {
        fprintf(stderr, "colossal-tokenize: %s\n", conv ? "--chat and --decode exclude each other"
                                                          : "--generation-prompt goes with --chat");
        usage(stderr);
        return 2;
    }
    if (!model) {
        fprintf(stderr, "colossal-tokenize: no MODEL given\n");
        usage(stderr);
        return 2;
    }
    char buf[4096];
    const char *path = model;
    col_err err = {0};
    if (access(model, F_OK) != 0) {
        if (col_bundled_tokenizer(model, buf, sizeof buf))
            path = buf;
        else if (strchr(model, '/') && model[0] != '/' && model[0] != '.') {
            /* a hub id: the model's directory in the Hugging Face cache */
            if (col_hf_resolve(model, buf, sizeof buf, &err) != COL_OK)
                return fail(err.msg);
            path = buf;
        } else {
            char names[256], msg[4400];
            snprintf(msg, sizeof msg, "%s not found: give a tokenizer directory or file, a hub id, or a bundled "
                     "tokenizer (%s)", model, col_bundled_tokenizer_names(names, sizeof names));
            return fail(msg);
        }
    }
    col_tokenizer *t;
    if (col_tok_load(path, &t, &err) != COL_OK)
        return fail(err.msg);
    size_t len;
    char *text = read_stdin(&len);
    if (!text) {
        col_tok_free(t);
        return fail("cannot read stdin");
    }
    int rc;
    if (conv) {
        char dir[4096];
        snprintf(dir, sizeof dir, "%s", path);
        struct stat sb;
        char *slash = strrchr(dir, '/');
        if (stat(path, &sb) == 0 && !S_ISDIR(sb.st_mode)) /* a tokenizer.json file: its directory */
            snprintf(slash ? slash : dir, sizeof dir - (size_t)(slash ? slash - dir : 0), "%s", slash ? "" : ".");
        rc = chat(t, dir, text, len, gen);
    } else {
        rc = dec ? decode(t, text, len, skip) : encode(t, text, len, flags);
    }
    free(text);
    col_tok_free(t);
    if (rc == 0 && (fflush(stdout) != 0 || ferror(stdout)))
        return fail("cannot write to stdout");
    return rc;
}

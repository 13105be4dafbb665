/* test_chat_template.c - chat prompt rendering against transformers' renders
 * of the published Jinja templates (tests/fixtures/chat, written by
 * tools/refgen/make_chat_fixtures.py), assistant byte ranges, detection
 * from tokenizer_config.json contents, and the Jinja text colossal-finetune
 * writes: read back, it renders to the same ids as the family named
 * (tools/refgen/check_chat_roundtrip.py compares that text with transformers'
 * apply_chat_template). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "chat_template.h"
#include "lm_source.h"
#include "testlib.h"
#include "textio.h"

#ifndef FIXTURES
#define FIXTURES "tests/fixtures/chat"
#endif

static char *slurp(const char *name, size_t *len)
{
    char path[512], *p = NULL;
    col_err err = {0};
    snprintf(path, sizeof path, "%s/%s", FIXTURES, name);
    return col_read_file(path, 0, &p, len, &err) == COL_OK ? p : NULL;
}

#include "chat_convs.h"

static const struct {
    const char *name;
    const col_chat_message *m;
    int n;
    bool gen;
} cases[] = {
    {"conv3", conv3, 6, true}, {"conv3_nogen", conv3, 6, false}, {"nosys", nosys, 2, false}, {"ws", ws, 4, true}};

static void test_fixtures(void)
{
    for (int f = 0; f < 4; f++) {
        const char *fam = col_chat_info((col_chat_family)f)->name;
        for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
            char name[64];
            snprintf(name, sizeof name, "%s_%s.txt", fam, cases[c].name);
            size_t elen = 0;
            char *want = slurp(name, &elen);
            if (!want) {
                TL_OK(false, "fixture %s missing", name);
                continue;
            }
            char *got = NULL;
            size_t len = 0;
            col_err err = {0};
            col_status st = col_chat_render((col_chat_family)f, cases[c].m, cases[c].n, cases[c].gen, &got, &len,
                                            NULL, &err);
            bool same = st == COL_OK && len == elen && memcmp(got, want, len) == 0 && strlen(got) == len;
            TL_OK(same, "%s %s renders as transformers does (%zu bytes)%s%s", fam, cases[c].name, elen,
                  st ? ": " : "", st ? err.msg : "");
            if (!same && got)
                TL_NOTE("got:\n%s\n# want:\n%s", got, want);
            free(got);
            free(want);
        }
    }
}

/* The written-out published formats, independent of the fixtures. */
static void test_literal(void)
{
    const char *want[4] = {
        "<s>[INST] <<SYS>>\nSYS\n<</SYS>>\n\nU1 [/INST] A1 </s><s>[INST] U2 [/INST]",
        "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nSYS<|eot_id|>"
        "<|start_header_id|>user<|end_header_id|>\n\nU1<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"
        "A1<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nU2<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\n",
        "<|im_start|>system\nSYS<|im_end|>\n<|im_start|>user\nU1<|im_end|>\n<|im_start|>assistant\nA1<|im_end|>\n"
        "<|im_start|>user\nU2<|im_end|>\n<|im_start|>assistant\n",
        "system: SYS\nuser: U1\nassistant: A1\nuser: U2\nassistant: ",
    };
    const col_chat_message m[] = {{S, "SYS"}, {U, "U1"}, {A, "A1"}, {U, "U2"}};
    for (int f = 0; f < 4; f++) {
        char *got = NULL;
        size_t len = 0;
        col_err err = {0};
        col_status st = col_chat_render((col_chat_family)f, m, 4, true, &got, &len, NULL, &err);
        TL_OK(st == COL_OK && strcmp(got, want[f]) == 0, "%s published format", col_chat_info((col_chat_family)f)->name);
        free(got);
    }
}

static void test_spans(void)
{
    /* train range of each assistant message of conv3: content as rendered + end-of-turn marker */
    const char *want[4][2] = {
        {"4. </s>", "\"Paris\" \xe2\x80\x94 <b>Paris</b>. </s>"},
        {"4.<|eot_id|>", "\"Paris\" \xe2\x80\x94 <b>Paris</b>.<|eot_id|>"},
        {"4.<|im_end|>", "\"Paris\" \xe2\x80\x94 <b>Paris</b>.<|im_end|>"},
        {"4.\n", "\"Paris\" \xe2\x80\x94 <b>Paris</b>.\n"},
    };
    for (int f = 0; f < 4; f++) {
        const char *fam = col_chat_info((col_chat_family)f)->name;
        col_chat_span sp[6];
        char *got = NULL, *plain = NULL;
        size_t len = 0, plen = 0;
        col_err err = {0};
        col_status st = col_chat_render((col_chat_family)f, conv3, 6, true, &got, &len, sp, &err);
        col_chat_render((col_chat_family)f, conv3, 6, true, &plain, &plen, NULL, &err);
        TL_OK(st == COL_OK && plen == len && memcmp(got, plain, len) == 0, "%s: spans do not change the text", fam);
        int ai = 0;
        bool ok = true, ordered = true;
        size_t prev = 0;
        for (int i = 0; i < 6; i++) {
            ordered &= sp[i].begin <= sp[i].end && sp[i].end <= len && sp[i].begin >= prev;
            if (sp[i].end > sp[i].begin)
                prev = sp[i].end;
            if (conv3[i].role == A) {
                size_t n = sp[i].train_end - sp[i].train_begin;
                ok &= sp[i].train_begin >= sp[i].begin && sp[i].train_end <= sp[i].end &&
                      n == strlen(want[f][ai]) && memcmp(got + sp[i].train_begin, want[f][ai], n) == 0;
                ai++;
            } else {
                ok &= sp[i].train_begin == sp[i].train_end;
            }
        }
        TL_OK(ok, "%s: assistant byte ranges hold content + end-of-turn, others are empty", fam);
        TL_OK(ordered, "%s: message ranges are in order and inside the text", fam);
        /* the user message text lies inside its own range */
        const char *u2 = strstr(got, "And the capital");
        TL_OK(u2 && (size_t)(u2 - got) >= sp[3].begin && (size_t)(u2 - got) < sp[3].end, "%s: user range", fam);
        if (f == COL_CHAT_LLAMA2)
            TL_OK(sp[0].begin == sp[0].end && strstr(got + sp[1].begin, "<<SYS>>") == got + sp[1].begin + 10,
                  "llama2: the system prompt is folded into the first user turn");
        free(got);
        free(plain);
    }
}

static void test_render_errors(void)
{
    char *out = NULL;
    size_t len = 0;
    col_err err = {0};
    const col_chat_message two_users[] = {{U, "a"}, {U, "b"}};
    col_status st = col_chat_render(COL_CHAT_LLAMA2, two_users, 2, true, &out, &len, NULL, &err);
    TL_OK(st == COL_EINVAL && !out && strstr(err.msg, "llama2") && strstr(err.msg, "alternate"),
          "llama2 rejects non-alternating roles: %s", err.msg);
    const col_chat_message late_sys[] = {{U, "a"}, {S, "b"}};
    st = col_chat_render(COL_CHAT_LLAMA2, late_sys, 2, true, &out, &len, NULL, &err);
    TL_OK(st == COL_EINVAL && strstr(err.msg, "system"), "llama2 rejects a system message after the first: %s",
          err.msg);
    st = col_chat_render(COL_CHAT_CHATML, late_sys, 2, false, &out, &len, NULL, &err);
    TL_OK(st == COL_OK && strcmp(out, "<|im_start|>user\na<|im_end|>\n<|im_start|>system\nb<|im_end|>\n") == 0,
          "chatml takes any role order, as its template does");
    free(out);
    const col_chat_message bad_role[] = {{(col_chat_role)7, "x"}};
    st = col_chat_render(COL_CHAT_CHATML, bad_role, 1, false, &out, &len, NULL, &err);
    TL_OK(st == COL_EINVAL && strstr(err.msg, "role 7"), "bad role: %s", err.msg);
    const col_chat_message null_content[] = {{U, NULL}};
    st = col_chat_render(COL_CHAT_PLAIN, null_content, 1, false, &out, &len, NULL, &err);
    TL_OK(st == COL_EINVAL && strstr(err.msg, "no content"), "NULL content: %s", err.msg);
    st = col_chat_render((col_chat_family)9, conv3, 6, false, &out, &len, NULL, &err);
    TL_OK(st == COL_EINVAL && strstr(err.msg, "chatml"), "unknown family names the options: %s", err.msg);
    st = col_chat_render(COL_CHAT_LLAMA3, NULL, 0, true, &out, &len, NULL, &err);
    TL_OK(st == COL_OK && strcmp(out, "<|start_header_id|>assistant<|end_header_id|>\n\n") == 0,
          "llama3 empty conversation: only the generation prompt (as the template)");
    free(out);
    /* an all-whitespace user turn after a system prompt: llama2 strips into the <<SYS>> block */
    const col_chat_message blank[] = {{S, "s"}, {U, " \n "}};
    st = col_chat_render(COL_CHAT_LLAMA2, blank, 2, true, &out, &len, NULL, &err);
    TL_OK(st == COL_OK && strcmp(out, "<s>[INST] <<SYS>>\ns\n<</SYS>> [/INST]") == 0,
          "llama2 strips system block + user text as one string");
    free(out);
}

static void test_family_info(void)
{
    TL_OK(strcmp(col_chat_info(COL_CHAT_LLAMA2)->eot, "</s>") == 0 &&
              strcmp(col_chat_info(COL_CHAT_LLAMA3)->eot, "<|eot_id|>") == 0 &&
              strcmp(col_chat_info(COL_CHAT_CHATML)->eot, "<|im_end|>") == 0,
          "end-of-turn texts");
    TL_OK(strcmp(col_chat_info(COL_CHAT_LLAMA3)->stop[0], "<|eot_id|>") == 0 &&
              strcmp(col_chat_info(COL_CHAT_CHATML)->stop[0], "<|im_end|>") == 0 &&
              strcmp(col_chat_info(COL_CHAT_LLAMA2)->stop[0], "</s>") == 0 && !col_chat_info(COL_CHAT_LLAMA2)->stop[1],
          "stop strings");
    TL_OK(!col_chat_info((col_chat_family)4), "no info for an unknown family");
    col_chat_family f;
    col_err err = {0};
    bool ok = true;
    for (int i = 0; i < 4; i++)
        ok &= col_chat_family_parse(col_chat_info((col_chat_family)i)->name, &f, &err) == COL_OK && (int)f == i;
    TL_OK(ok, "family names parse");
    TL_OK(col_chat_family_parse("vicuna", &f, &err) == COL_EINVAL && strstr(err.msg, "llama2, llama3, chatml") &&
              err.settings == 1u << COL_SETTING_CHAT_TEMPLATE,
          "unknown family name (the chat template marked): %s", err.msg);
}

static void detect_file(const char *file, col_chat_family want)
{
    size_t len = 0;
    char *j = slurp(file, &len);
    col_chat_family f = (col_chat_family)-1;
    col_err err = {0};
    col_status st = j ? col_chat_detect(j, len, &f, &err) : COL_EIO;
    TL_OK(st == COL_OK && f == want, "detect %s -> %s %s", file, col_chat_info(want)->name, err.msg);
    free(j);
}

/* a template colossal cannot render marks the chat template setting (choosing a built-in
 * family is the way out); a malformed file does not */
static void detect_bad(const char *json, col_status want, const char *needle, const char *what)
{
    col_chat_family f = COL_CHAT_PLAIN;
    col_err err = {0};
    col_status st = col_chat_detect(json, strlen(json), &f, &err);
    bool marked = want != COL_EFORMAT;
    TL_OK(st == want && strstr(err.msg, needle) && col_err_has_setting(&err, COL_SETTING_CHAT_TEMPLATE) == marked,
          "%s%s: %s", what, marked ? " (the chat template marked)" : "", err.msg);
}

static void test_detect(void)
{
    detect_file("config_llama2.json", COL_CHAT_LLAMA2);
    detect_file("config_llama3.json", COL_CHAT_LLAMA3);
    detect_file("config_chatml.json", COL_CHAT_CHATML);
    detect_file("config_list.json", COL_CHAT_CHATML);

    /* a Qwen2-style ChatML template with a default system prompt, abbreviated */
    col_chat_family f;
    col_err err = {0};
    const char *qwen = "{\"chat_template\": \"{% for message in messages %}{{'<|im_start|>' + message['role'] "
                       "+ '\\\\n'}}{% endfor %}\"}";
    TL_OK(col_chat_detect(qwen, strlen(qwen), &f, &err) == COL_OK && f == COL_CHAT_CHATML,
          "detect ChatML from a JSON-escaped template %s", err.msg);

    detect_bad("{\"chat_template\": \"{{ bos_token }}{% for m in messages %}[INST] {{ m['content'] }} [/INST]"
               "{% endfor %}\"}", COL_EUNSUPPORTED, "Mistral", "Mistral-style [INST] is not llama2");
    detect_bad("{\"chat_template\": \"<|start_header_id|>system<|end_header_id|>Cutting Knowledge Date: "
               "December 2023\"}", COL_EUNSUPPORTED, "Llama-3.1", "Llama-3.1 template is named, not misrendered");
    detect_bad("{\"chat_template\": \"{% for m in messages %}### {{ m.role }}: {{ m.content }}{% endfor %}\"}",
               COL_EUNSUPPORTED, "does not run Jinja", "unknown template names the options and says no Jinja");
    detect_bad("{\"bos_token\": \"<s>\"}", COL_EINVAL, "no chat_template", "absent chat_template");
    detect_bad("{\"chat_template\": null}", COL_EINVAL, "no chat_template", "null chat_template");
    detect_bad("{\"chat_template\": 42}", COL_EFORMAT, "string or a list", "numeric chat_template");
    detect_bad("{\"chat_template\": [{\"name\": \"tool_use\", \"template\": \"<|im_start|>\"}]}", COL_EINVAL,
               "tool_use", "list without default names what it has");
    detect_bad("{\"chat_template\": [{\"name\": \"default\", \"template\": 3}]}", COL_EFORMAT, "{\"name\"",
               "list entry with a non-string template");
    detect_bad("{\"chat_template\": [\"<|im_start|>\"]}", COL_EFORMAT, "list entries", "list of strings");
    detect_bad("[\"<|im_start|>\"]", COL_EFORMAT, "not an object", "top level array");
    detect_bad("{\"chat_template\": \"<|im_start|>", COL_EFORMAT, "not valid JSON", "truncated JSON");
    detect_bad("", COL_EFORMAT, "not valid JSON", "empty text");
    detect_bad("{\"chat_template\": \"\\ud800<|im_start|>\"}", COL_EFORMAT, "JSON", "lone surrogate escape is an error");
    /* length limits the parse: the valid prefix is cut inside the string */
    const char *j = "{\"chat_template\": \"<|im_start|>\"}";
    TL_OK(col_chat_detect(j, 20, &f, &err) == COL_EFORMAT, "parse stops at len");
    TL_OK(col_chat_detect(NULL, 0, &f, &err) == COL_EINVAL, "NULL text");
}

/* ids of conversation c rendered with family f, tokenized as colossal-chat does */
static int32_t *render_ids(const col_tokenizer *t, col_chat_family f, int c, size_t *n)
{
    char *text = NULL;
    size_t len = 0;
    int32_t *ids = NULL;
    col_err err = {0};
    *n = 0;
    if (col_chat_render(f, cases[c].m, cases[c].n, cases[c].gen, &text, &len, NULL, &err) == COL_OK)
        col_tok_encode_ex(t, text, len, COL_TOK_PARSE_SPECIAL, &ids, n, &err);
    free(text);
    return ids;
}

/* the family a tokenizer_config.json in dir names, or -1 */
static int detect_dir(const char *dir, char **json)
{
    char path[600];
    size_t len = 0;
    col_err err = {0};
    col_chat_family f;
    *json = NULL;
    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
    if (col_read_file(path, 0, json, &len, &err) != COL_OK)
        return -1;
    return col_chat_detect(*json, len, &f, &err) == COL_OK ? (int)f : -1;
}

static void test_written(void)
{
    char buf[4096], dir[] = "/tmp/test_chat_template_XXXXXX";
    col_lm_source src;
    col_err err = {0};
    memset(&src, 0, sizeof src);
    const char *tp = col_bundled_tokenizer("llama3", buf, sizeof buf);
    if (!tp || col_tok_load(tp, &src.tok, &err) != COL_OK) {
        tl_skip_check("the written templates", "the bundled llama3 tokenizer cannot be read");
        return;
    }
    tl_mkdtemp(dir);
    for (int f = 0; f < 4; f++) {
        /* a directory without tokenizer_config.json: a new one, the tokenizer's bos/eos named */
        char path[600], *json = NULL;
        snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
        remove(path);
        col_status st = col_lm_source_write_chat_template(&src, dir, (col_chat_family)f, &err);
        int got = st == COL_OK ? detect_dir(dir, &json) : -1;
        cJSON *root = json ? cJSON_Parse(json) : NULL;
        const cJSON *ct = cJSON_GetObjectItemCaseSensitive(root, "chat_template");
        const cJSON *bos = cJSON_GetObjectItemCaseSensitive(root, "bos_token");
        TL_OK(got == f && cJSON_IsString(ct) && strcmp(ct->valuestring, col_chat_jinja((col_chat_family)f)) == 0 &&
                  cJSON_IsString(bos) && strcmp(bos->valuestring, "<|begin_of_text|>") == 0,
              "%s: the written tokenizer_config.json names the Jinja text, read back as %s (bos_token %s) %s",
              col_chat_info((col_chat_family)f)->name, got >= 0 ? col_chat_info((col_chat_family)got)->name : "none",
              cJSON_IsString(bos) ? bos->valuestring : "none", err.msg);
        cJSON_Delete(root);
        free(json);
        /* the text read back renders to the ids of the family named */
        for (int c = 0; got >= 0 && c < (int)(sizeof cases / sizeof cases[0]); c++) {
            if (f == COL_CHAT_LLAMA2 && cases[c].m[0].role != COL_ROLE_SYSTEM && cases[c].m[0].role != COL_ROLE_USER)
                continue;
            size_t na, nb;
            int32_t *a = render_ids(src.tok, (col_chat_family)f, c, &na);
            int32_t *b = render_ids(src.tok, (col_chat_family)got, c, &nb);
            TL_OK(a && b && na == nb && na > 0 && memcmp(a, b, na * sizeof *a) == 0,
                  "%s %s: the template read back gives the same %zu ids", col_chat_info((col_chat_family)f)->name,
                  cases[c].name, na);
            free(a);
            free(b);
        }
    }
    /* generation_config.json: what Meta-Llama-3-8B-Instruct's has, bos 128000 and eos [128001, 128009] (its
     * <|end_of_text|> and <|eot_id|>), for the llama3 template; ChatML's <|im_end|> is no llama3 token */
    static const struct {
        col_chat_family f;
        int n;
        int eos[2];
    } gen[] = {{COL_CHAT_LLAMA3, 2, {128001, 128009}}, {COL_CHAT_CHATML, 1, {128001}}, {COL_CHAT_PLAIN, 1, {128001}}};
    for (int g = 0; g < 3; g++) {
        char gp[600], *gj = NULL;
        size_t gl = 0;
        snprintf(gp, sizeof gp, "%s/generation_config.json", dir);
        remove(gp);
        bool ok = col_lm_source_write_chat_template(&src, dir, gen[g].f, &err) == COL_OK &&
                  col_read_file(gp, 0, &gj, &gl, &err) == COL_OK;
        cJSON *root = gj ? cJSON_ParseWithLength(gj, gl) : NULL;
        const cJSON *eos = cJSON_GetObjectItemCaseSensitive(root, "eos_token_id");
        const cJSON *bos = cJSON_GetObjectItemCaseSensitive(root, "bos_token_id");
        ok = ok && cJSON_IsArray(eos) && cJSON_GetArraySize(eos) == gen[g].n && cJSON_IsNumber(bos) &&
             bos->valueint == 128000;
        for (int k = 0; ok && k < gen[g].n; k++)
            ok = cJSON_GetArrayItem(eos, k)->valueint == gen[g].eos[k];
        char *flat = root ? cJSON_PrintUnformatted(root) : NULL;
        TL_OK(ok, "%s: generation_config.json ends generate() at %s: %s", col_chat_info(gen[g].f)->name,
              gen[g].n == 2 ? "<|end_of_text|> and <|eot_id|>" : "<|end_of_text|>", flat ? flat : err.msg);
        free(flat);
        cJSON_Delete(root);
        free(gj);
    }
    /* an existing file keeps its other entries and its special tokens; its template is replaced */
    char path[600], *json = NULL;
    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
    const char *old = "{\"model_max_length\": 77, \"eos_token\": {\"content\": \"</s>\"}, \"chat_template\": \"x\"}";
    col_write_file_atomic(path, old, strlen(old), &err);
    int got = col_lm_source_write_chat_template(&src, dir, COL_CHAT_PLAIN, &err) == COL_OK ? detect_dir(dir, &json) : -1;
    cJSON *root = json ? cJSON_Parse(json) : NULL;
    const cJSON *eos = cJSON_GetObjectItemCaseSensitive(root, "eos_token");
    TL_OK(got == COL_CHAT_PLAIN && cJSON_GetObjectItemCaseSensitive(root, "model_max_length") && cJSON_IsObject(eos),
          "an existing tokenizer_config.json: template replaced (plain read back), the rest kept");
    cJSON_Delete(root);
    free(json);
    /* not JSON: an error naming the file */
    col_write_file_atomic(path, "[1,", 3, &err);
    TL_OK(col_lm_source_write_chat_template(&src, dir, COL_CHAT_CHATML, &err) == COL_EFORMAT &&
              strstr(err.msg, "tokenizer_config.json"), "a tokenizer_config.json that is not an object: %s", err.msg);
    /* plain has no markers: only its exact text is plain */
    char *t = strdup(col_chat_jinja(COL_CHAT_PLAIN));
    col_chat_family f;
    t[strlen(t) / 2] ^= 1;
    TL_OK(col_chat_detect_template(t, &f, &err) == COL_EUNSUPPORTED, "plain's text changed by one bit is not plain");
    free(t);
    TL_OK(col_chat_jinja((col_chat_family)4) == NULL, "no Jinja text for an unknown family");
    tl_remove_tree(dir);
    col_tok_free(src.tok);
}

int main(void)
{
    test_fixtures();
    test_literal();
    test_spans();
    test_render_errors();
    test_family_info();
    test_detect();
    test_written();
    return tl_done();
}

/* chat_template.c - built-in chat prompt formats and their detection from
 * tokenizer_config.json (see chat_template.h for the formats). */
#include "chat_template.h"

#include "textio.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

static const char *const stop_llama2[] = {"</s>", NULL};
static const char *const stop_llama3[] = {"<|eot_id|>", "<|end_of_text|>", NULL};
static const char *const stop_chatml[] = {"<|im_end|>", NULL};
static const char *const stop_plain[] = {"\nuser:", "\nsystem:", NULL};

static const col_chat_family_info families[] = {
    [COL_CHAT_LLAMA2] = {"llama2", "</s>", stop_llama2},
    [COL_CHAT_LLAMA3] = {"llama3", "<|eot_id|>", stop_llama3},
    [COL_CHAT_CHATML] = {"chatml", "<|im_end|>", stop_chatml},
    [COL_CHAT_PLAIN] = {"plain", "\n", stop_plain},
};
#define NFAMILIES ((int)(sizeof families / sizeof families[0]))

/* Jinja equivalents of the renders below (whitespace control on every tag, so that transformers' trim_blocks /
 * lstrip_blocks change nothing); '\n' is a Jinja string escape. */
static const char *const jinja[] = {
    [COL_CHAT_LLAMA2] =
        "{%- if messages and messages[0]['role'] == 'system' -%}"
        "{%- set loop_messages = messages[1:] -%}{%- set system_message = messages[0]['content'] -%}"
        "{%- else -%}{%- set loop_messages = messages -%}{%- set system_message = none -%}{%- endif -%}"
        "{%- for message in loop_messages -%}"
        "{%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) or message['role'] not in ['user', "
        "'assistant'] -%}"
        "{{- raise_exception('Conversation roles must be [system] then alternate user/assistant/user/...') -}}"
        "{%- endif -%}"
        "{%- if loop.index0 == 0 and system_message is not none -%}"
        "{%- set content = '<<SYS>>\\n' + system_message + '\\n<</SYS>>\\n\\n' + message['content'] -%}"
        "{%- else -%}{%- set content = message['content'] -%}{%- endif -%}"
        "{%- if message['role'] == 'user' -%}{{- '<s>[INST] ' + content | trim + ' [/INST]' -}}"
        "{%- else -%}{{- ' ' + content | trim + ' </s>' -}}{%- endif -%}"
        "{%- endfor -%}",
    [COL_CHAT_LLAMA3] =
        "{%- for message in messages -%}"
        "{%- if loop.first -%}{{- '<|begin_of_text|>' -}}{%- endif -%}"
        "{{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' + message['content'] | trim + "
        "'<|eot_id|>' -}}"
        "{%- endfor -%}"
        "{%- if add_generation_prompt -%}{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' -}}{%- endif -%}",
    [COL_CHAT_CHATML] =
        "{%- for message in messages -%}"
        "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' -}}"
        "{%- endfor -%}"
        "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}",
    [COL_CHAT_PLAIN] =
        "{%- for message in messages -%}"
        "{{- message['role'] + ': ' + message['content'] + '\\n' -}}"
        "{%- endfor -%}"
        "{%- if add_generation_prompt -%}{{- 'assistant: ' -}}{%- endif -%}",
};

const char *col_chat_jinja(col_chat_family f)
{
    return (int)f >= 0 && (int)f < NFAMILIES ? jinja[f] : NULL;
}
#define FAMILY_OPTIONS "llama2, llama3, chatml or plain"

const col_chat_family_info *col_chat_info(col_chat_family f)
{
    if ((int)f < 0 || (int)f >= NFAMILIES)
        return NULL;
    return &families[f];
}

col_status col_chat_family_parse(const char *name, col_chat_family *out, col_err *err)
{
    for (int i = 0; name && i < NFAMILIES; i++)
        if (strcmp(name, families[i].name) == 0) {
            *out = (col_chat_family)i;
            return COL_OK;
        }
    return col_err_set_on(err, COL_SETTING_CHAT_TEMPLATE, COL_EINVAL,
                          "chat template '%s' is not built in: use " FAMILY_OPTIONS, name ? name : "(null)");
}

/* ---- whitespace as Python's str.strip() sees it (UTF-8) ---- */

/* Length of the whitespace character at s[i] (i < n), or 0. */
static size_t ws_at(const unsigned char *s, size_t i, size_t n)
{
    unsigned char c = s[i];
    if ((c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x20))
        return 1;
    if (c == 0xc2 && i + 1 < n && (s[i + 1] == 0x85 || s[i + 1] == 0xa0))
        return 2; /* U+0085, U+00A0 */
    if (i + 2 < n && c >= 0xe1 && c <= 0xe3) {
        unsigned b = s[i + 1], d = s[i + 2];
        if (c == 0xe1 && b == 0x9a && d == 0x80)
            return 3; /* U+1680 */
        if (c == 0xe2 && b == 0x80 && (d <= 0x8a || d == 0xa8 || d == 0xa9 || d == 0xaf) && d >= 0x80)
            return 3; /* U+2000..200A, U+2028, U+2029, U+202F */
        if (c == 0xe2 && b == 0x81 && d == 0x9f)
            return 3; /* U+205F */
        if (c == 0xe3 && b == 0x80 && d == 0x80)
            return 3; /* U+3000 */
    }
    return 0;
}

/* ---- output buffer: col_strbuf (textio.h) ---- */


/* Strips whitespace from both ends of b->p[from..len). */
static void strip_tail(col_strbuf *b, size_t from)
{
    if (b->oom)
        return;
    const unsigned char *s = (const unsigned char *)b->p;
    size_t lead = from, w;
    while (lead < b->len && (w = ws_at(s, lead, b->len)) > 0)
        lead += w;
    memmove(b->p + from, b->p + lead, b->len - lead);
    b->len -= lead - from;
    for (;;) {
        size_t k = 0;
        for (size_t t = 1; t <= 3 && !k; t++)
            if (b->len >= from + t && ws_at(s, b->len - t, b->len) == t)
                k = t;
        if (!k)
            break;
        b->len -= k;
    }
    b->p[b->len] = '\0';
}

static void put_stripped(col_strbuf *b, const char *s)
{
    size_t from = b->len;
    col_strbuf_puts(b, s);
    strip_tail(b, from);
}

/* ---- families ---- */

static col_status render_llama2(col_strbuf *b, const col_chat_message *m, int n, col_chat_span *sp, col_err *err)
{
    int i0 = 0;
    const char *sys = NULL;
    if (n > 0 && m[0].role == COL_ROLE_SYSTEM) {
        sys = m[0].content;
        i0 = 1;
    }
    for (int i = i0; i < n; i++) {
        col_chat_role want = (i - i0) % 2 == 0 ? COL_ROLE_USER : COL_ROLE_ASSISTANT;
        if (m[i].role != want)
            return col_err_set(err, COL_EINVAL,
                               "chat template llama2: message %d has role %s but roles must be [system] then "
                               "alternate user/assistant/user/...", i, col_chat_role_name(m[i].role));
        col_chat_span s = {b->len, 0, 0, 0};
        if (want == COL_ROLE_USER) {
            col_strbuf_puts(b, "<s>[INST] ");
            size_t from = b->len;
            if (i == i0 && sys) {
                col_strbuf_puts(b, "<<SYS>>\n");
                col_strbuf_puts(b, sys);
                col_strbuf_puts(b, "\n<</SYS>>\n\n");
            }
            col_strbuf_puts(b, m[i].content);
            strip_tail(b, from); /* the template strips system block + user text as one string */
            col_strbuf_puts(b, " [/INST]");
        } else {
            col_strbuf_puts(b, " ");
            s.train_begin = b->len;
            put_stripped(b, m[i].content);
            col_strbuf_puts(b, " </s>");
            s.train_end = b->len;
        }
        s.end = b->len;
        if (sp)
            sp[i] = s;
    }
    return COL_OK;
}

static void render_llama3(col_strbuf *b, const col_chat_message *m, int n, bool gen, col_chat_span *sp)
{
    for (int i = 0; i < n; i++) {
        if (i == 0)
            col_strbuf_puts(b, "<|begin_of_text|>");
        col_chat_span s = {b->len, 0, 0, 0};
        col_strbuf_puts(b, "<|start_header_id|>");
        col_strbuf_puts(b, col_chat_role_name(m[i].role));
        col_strbuf_puts(b, "<|end_header_id|>\n\n");
        s.train_begin = b->len;
        put_stripped(b, m[i].content);
        col_strbuf_puts(b, "<|eot_id|>");
        s.end = b->len;
        s.train_end = m[i].role == COL_ROLE_ASSISTANT ? b->len : s.train_begin;
        if (sp)
            sp[i] = s;
    }
    if (gen)
        col_strbuf_puts(b, "<|start_header_id|>assistant<|end_header_id|>\n\n");
}

/* chatml and plain: "{pre}{role}{mid}{content}{eot}{post}" */
static void render_simple(col_strbuf *b, const col_chat_message *m, int n, bool gen, col_chat_span *sp, const char *pre,
                          const char *mid, const char *eot, const char *post, const char *gen_prompt)
{
    for (int i = 0; i < n; i++) {
        col_chat_span s = {b->len, 0, 0, 0};
        col_strbuf_puts(b, pre);
        col_strbuf_puts(b, col_chat_role_name(m[i].role));
        col_strbuf_puts(b, mid);
        s.train_begin = b->len;
        col_strbuf_puts(b, m[i].content);
        col_strbuf_puts(b, eot);
        s.train_end = m[i].role == COL_ROLE_ASSISTANT ? b->len : s.train_begin;
        col_strbuf_puts(b, post);
        s.end = b->len;
        if (sp)
            sp[i] = s;
    }
    if (gen)
        col_strbuf_puts(b, gen_prompt);
}

col_status col_chat_render(col_chat_family f, const col_chat_message *msgs, int n, bool add_generation_prompt,
                           char **out, size_t *len, col_chat_span *spans, col_err *err)
{
    *out = NULL;
    *len = 0;
    if (!col_chat_info(f))
        return col_err_set(err, COL_EINVAL, "chat template: unknown family %d (use " FAMILY_OPTIONS ")", (int)f);
    if (n < 0 || (n > 0 && !msgs))
        return col_err_set(err, COL_EINVAL, "chat template %s: %d messages", families[f].name, n);
    for (int i = 0; i < n; i++) {
        if (!col_chat_role_name(msgs[i].role))
            return col_err_set(err, COL_EINVAL, "chat template %s: message %d has role %d (valid: system, user, "
                               "assistant)", families[f].name, i, (int)msgs[i].role);
        if (!msgs[i].content)
            return col_err_set(err, COL_EINVAL, "chat template %s: message %d has no content", families[f].name, i);
        if (spans)
            spans[i] = (col_chat_span){0, 0, 0, 0};
    }
    col_strbuf b = {0};
    col_strbuf_puts(&b, ""); /* an empty conversation still gives an empty string */
    col_status st = COL_OK;
    switch (f) {
    case COL_CHAT_LLAMA2: st = render_llama2(&b, msgs, n, spans, err); break;
    case COL_CHAT_LLAMA3: render_llama3(&b, msgs, n, add_generation_prompt, spans); break;
    case COL_CHAT_CHATML:
        render_simple(&b, msgs, n, add_generation_prompt, spans, "<|im_start|>", "\n", "<|im_end|>", "\n",
                      "<|im_start|>assistant\n");
        break;
    case COL_CHAT_PLAIN: render_simple(&b, msgs, n, add_generation_prompt, spans, "", ": ", "\n", "", "assistant: "); break;
    }
    if (st == COL_OK && b.oom)
        st = col_err_set(err, COL_ENOMEM, "chat template %s: out of memory rendering %d messages", families[f].name, n);
    if (st != COL_OK) {
        free(b.p);
        if (spans)
            memset(spans, 0, (size_t)n * sizeof *spans);
        return st;
    }
    *out = b.p;
    *len = b.len;
    return COL_OK;
}

/* ---- detection ---- */

#define NO_JINJA "colossal does not run Jinja templates; choose one of the built-in formats: " FAMILY_OPTIONS

col_status col_chat_detect_template(const char *t, col_chat_family *out, col_err *err)
{
    if (!t)
        return col_err_set_on(err, COL_SETTING_CHAT_TEMPLATE, COL_EINVAL, "chat template: none given; " NO_JINJA);
    for (int i = 0; i < NFAMILIES; i++)
        if (strcmp(t, jinja[i]) == 0) {
            *out = (col_chat_family)i;
            return COL_OK;
        }
    if (strstr(t, "<|start_header_id|>")) {
        if (strstr(t, "Cutting Knowledge Date"))
            return col_err_set_on(err, COL_SETTING_CHAT_TEMPLATE, COL_EUNSUPPORTED,
                                  "chat template: a Llama-3.1-style template (it adds a 'Cutting Knowledge Date' "
                                  "system header) is not built in; " NO_JINJA " (llama3 omits that header)");
        *out = COL_CHAT_LLAMA3;
        return COL_OK;
    }
    if (strstr(t, "<|im_start|>")) {
        *out = COL_CHAT_CHATML;
        return COL_OK;
    }
    if (strstr(t, "[INST]")) {
        if (strstr(t, "<<SYS>>")) {
            *out = COL_CHAT_LLAMA2;
            return COL_OK;
        }
        return col_err_set_on(err, COL_SETTING_CHAT_TEMPLATE, COL_EUNSUPPORTED,
                              "chat template: an [INST] template without <<SYS>> (Mistral style) is not the llama2 "
                              "format; " NO_JINJA);
    }
    return col_err_set_on(err, COL_SETTING_CHAT_TEMPLATE, COL_EUNSUPPORTED,
                          "chat template: no known markers (<|start_header_id|>, <|im_start|>, [INST] with <<SYS>>) in "
                          "the template; " NO_JINJA);
}

col_status col_chat_detect(const char *json, size_t len, col_chat_family *out, col_err *err)
{
    if (!json)
        return col_err_set(err, COL_EINVAL, "tokenizer_config.json: no text");
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(json, len, &end, false);
    if (!root)
        return col_err_set(err, COL_EFORMAT, "tokenizer_config.json: not valid JSON (near byte %zu of %zu)",
                           end && end >= json ? (size_t)(end - json) : (size_t)0, len);
    col_status st;
    const cJSON *ct = cJSON_IsObject(root) ? cJSON_GetObjectItemCaseSensitive(root, "chat_template") : NULL;
    if (!cJSON_IsObject(root)) {
        st = col_err_set(err, COL_EFORMAT, "tokenizer_config.json: the top level is not an object");
    } else if (!ct || cJSON_IsNull(ct)) {
        st = col_err_set_on(err, COL_SETTING_CHAT_TEMPLATE, COL_EINVAL,
                            "tokenizer_config.json has no chat_template; " NO_JINJA);
    } else if (cJSON_IsString(ct)) {
        st = col_chat_detect_template(ct->valuestring, out, err);
    } else if (cJSON_IsArray(ct)) {
        const char *tmpl = NULL;
        char names[200] = "";
        size_t nl = 0;
        st = COL_OK;
        const cJSON *it;
        cJSON_ArrayForEach(it, ct) {
            const cJSON *nm = cJSON_GetObjectItemCaseSensitive(it, "name");
            const cJSON *tp = cJSON_GetObjectItemCaseSensitive(it, "template");
            if (!cJSON_IsObject(it) || !cJSON_IsString(nm) || !cJSON_IsString(tp)) {
                st = col_err_set(err, COL_EFORMAT, "tokenizer_config.json: chat_template list entries must be "
                                 "{\"name\": string, \"template\": string}");
                break;
            }
            if (strcmp(nm->valuestring, "default") == 0)
                tmpl = tp->valuestring;
            if (nl < sizeof names - 1)
                nl += (size_t)snprintf(names + nl, sizeof names - nl, "%s%.40s", nl ? ", " : "", nm->valuestring);
        }
        if (st == COL_OK && !tmpl)
            st = col_err_set_on(err, COL_SETTING_CHAT_TEMPLATE, COL_EINVAL, "tokenizer_config.json: chat_template "
                                "list has no \"default\" entry (it has: %s); " NO_JINJA, nl ? names : "nothing");
        else if (st == COL_OK)
            st = col_chat_detect_template(tmpl, out, err);
    } else {
        st = col_err_set(err, COL_EFORMAT, "tokenizer_config.json: chat_template must be a string or a list of "
                         "{name, template}");
    }
    cJSON_Delete(root);
    return st;
}

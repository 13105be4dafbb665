/* test_serve_api.c - colossal-serve's OpenAI objects without the network
 * (apps/serve_api.h): requests read into the scheduler's parameters (the
 * prompt ids against the chat template rendered and encoded directly, and
 * against the template length transformers gave, tests/fixtures/chat_model/
 * refs.sh), defaults, every refusal with its status, param and code, the
 * response objects parsed back, JSON string escaping, the key compare. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "serve_api.h"
#include "testlib.h"
#include "textio.h"

#ifndef FIXTURES
#define FIXTURES "tests/fixtures/chat_model"
#endif

/* VALUE of NAME='VALUE' in refs.sh, as an integer; -1 if absent */
static int ref_int(const char *name)
{
    char *txt = NULL;
    size_t len = 0;
    col_err err = {0};
    if (col_read_file(FIXTURES "/refs.sh", 0, &txt, &len, &err) != COL_OK)
        return -1;
    char key[64];
    snprintf(key, sizeof key, "\n%s='", name);
    const char *p = strstr(txt, key);
    int v = p ? atoi(p + strlen(key)) : -1;
    free(txt);
    return v;
}

static col_tokenizer *g_tok;
static serve_api_model g_m;

static bool parse(serve_api_kind kind, const char *body, serve_api_request *r, serve_api_error *e)
{
    return serve_api_parse(&g_m, kind, body, strlen(body), 4242, r, e);
}

static void test_chat_prompt(void)
{
    serve_api_request r;
    serve_api_error e;
    bool ok = parse(SERVE_API_CHAT, "{\"model\":\"tiny\",\"messages\":[{\"role\":\"developer\",\"content\":\"Be brief.\"},"
                    "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"hel\"},{\"type\":\"text\","
                    "\"text\":\"lo\"}]}]}", &r, &e);
    TL_OK(ok, "a chat request with a developer message and text parts is read (%s)", ok ? "" : e.message);
    if (!ok)
        return;
    /* the same conversation rendered and encoded here: system, then the parts joined by a newline */
    col_chat_message msgs[] = {{COL_ROLE_SYSTEM, "Be brief."}, {COL_ROLE_USER, "hel\nlo"}};
    char *text;
    size_t len, n;
    int32_t *ids;
    col_err err = {0};
    col_chat_render(COL_CHAT_CHATML, msgs, 2, true, &text, &len, NULL, &err);
    col_tok_encode_ex(g_tok, text, len, COL_TOK_PARSE_SPECIAL, &ids, &n, &err);
    TL_OK(r.n_prompt == (int)n && memcmp(r.prompt, ids, n * sizeof *ids) == 0,
          "the prompt is the ChatML render encoded with special tokens parsed (%d ids)", r.n_prompt);
    free(text);
    free(ids);
    TL_OK(r.max_tokens == g_m.ctx - r.n_prompt && r.n == 1 && !r.stream && r.so.temperature == 1 &&
              r.so.top_p == 1 && r.so.top_k == 0 && r.so.seed == 4242,
          "defaults: max_tokens what the context leaves (%d), n 1, temperature 1, top_p 1, the seed given", r.max_tokens);
    TL_OK(r.nstops == 1 && strcmp(r.stops[0], "<|im_end|>") == 0, "the family's stop string is added");
    serve_api_request_free(&r);

    int chat1_len = ref_int("chat1_len"), sys_len = ref_int("sys_len");
    ok = parse(SERVE_API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"hello\"}]}", &r, &e);
    TL_OK(ok && r.n_prompt == chat1_len, "[user hello]: %d prompt ids, transformers' template gave %d", r.n_prompt,
          chat1_len);
    serve_api_request_free(&r);
    ok = parse(SERVE_API_CHAT, "{\"messages\":[{\"role\":\"system\",\"content\":\"Be brief.\"},{\"role\":\"user\","
               "\"content\":\"hello\"}]}", &r, &e);
    TL_OK(ok && r.n_prompt == sys_len, "[system, user]: %d prompt ids, transformers' %d", r.n_prompt, sys_len);
    serve_api_request_free(&r);
}

static void test_completion_fields(void)
{
    serve_api_request r;
    serve_api_error e;
    bool ok = parse(SERVE_API_COMPLETION, "{\"prompt\":\"The cat\",\"max_tokens\":9,\"temperature\":0.5,\"top_p\":0.25,"
                    "\"top_k\":7,\"seed\":99,\"n\":3,\"stop\":[\"a\",\"b\",\"a\"],\"stream\":true,"
                    "\"stream_options\":{\"include_usage\":true},\"repetition_penalty\":1.5,\"user\":\"x\"}", &r, &e);
    TL_OK(ok && r.max_tokens == 9 && r.so.temperature == 0.5f && r.so.top_p == 0.25f && r.so.top_k == 7 &&
              r.so.seed == 99 && r.n == 3 && r.stream && r.include_usage && r.so.repetition_penalty == 1.5f,
          "every field read (%s)", ok ? "" : e.message);
    TL_OK(ok && r.nstops == 2 && strcmp(r.stops[0], "a") == 0 && strcmp(r.stops[1], "b") == 0,
          "stop strings, each once; no family's for a completion");
    size_t n;
    int32_t *ids;
    col_err err = {0};
    col_tok_encode_ex(g_tok, "The cat", 7, COL_TOK_ADD_SPECIAL | COL_TOK_PARSE_SPECIAL, &ids, &n, &err);
    TL_OK(ok && r.n_prompt == (int)n && memcmp(r.prompt, ids, n * sizeof *ids) == 0, "the prompt encoded as "
          "colossal-chat encodes raw text");
    free(ids);
    serve_params p;
    if (ok) {
        serve_api_params(&r, &p);
        TL_OK(p.prompt == r.prompt && p.n_prompt == r.n_prompt && p.max_tokens == 9 && p.n == 3 && p.nstops == 2 &&
                  p.so.seed == 99 && !p.strip_leading_space, "the scheduler's parameters");
    }
    serve_api_request_free(&r);
    ok = parse(SERVE_API_COMPLETION, "{\"prompt\":[[5,6,7]],\"top_k\":-1,\"logprobs\":null,\"echo\":false,"
               "\"frequency_penalty\":0,\"logit_bias\":{},\"best_of\":1}", &r, &e);
    TL_OK(ok && r.n_prompt == 3 && r.prompt[2] == 7 && r.so.top_k == 0 &&
              r.max_tokens == SERVE_API_COMPLETION_MAX_TOKENS, "[[ids]], top_k -1 = off, harmless fields, "
          "max_tokens 16 by default (%s)", ok ? "" : e.message);
    serve_api_request_free(&r);
    /* the family's stops come on top of the request's 4 */
    ok = parse(SERVE_API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"stop\":[\"a\",\"b\",\"c\","
               "\"<|im_end|>\"]}", &r, &e);
    TL_OK(ok && r.nstops == 4, "a request's stop equal to the family's is kept once");
    serve_api_request_free(&r);
    ok = parse(SERVE_API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"stop\":[\"a\",\"b\",\"c\",\"d\"]}",
               &r, &e);
    TL_OK(ok && r.nstops == 5 && strcmp(r.stops[4], "<|im_end|>") == 0,
          "four stops of the request's own and the family's end of turn: all five kept (%s)", ok ? "" : e.message);
    if (ok)
        serve_api_request_free(&r);
}

static void test_refusals(void)
{
    static const struct {
        serve_api_kind kind;
        const char *body, *param, *code;
        int status;
    } cases[] = {
        {SERVE_API_COMPLETION, "", "", "invalid_json", 400},
        {SERVE_API_COMPLETION, "{\"prompt\":\"x\"", "", "invalid_json", 400},
        {SERVE_API_COMPLETION, "{\"prompt\":\"x\"} {}", "", "invalid_json", 400},
        {SERVE_API_COMPLETION, "null", "", "invalid_type", 400},
        {SERVE_API_COMPLETION, "{\"prompt\":\"x\",\"model\":7}", "model", "invalid_type", 400},
        {SERVE_API_COMPLETION, "{\"prompt\":\"x\",\"model\":\"other\"}", "model", "model_not_found", 404},
        {SERVE_API_COMPLETION, "{\"prompt\":\"x\",\"temperature\":-0.1}", "temperature", "invalid_value", 400},
        {SERVE_API_COMPLETION, "{\"prompt\":\"x\",\"temperature\":true}", "temperature", "invalid_type", 400},
        {SERVE_API_COMPLETION, "{\"prompt\":\"x\",\"top_p\":-1}", "top_p", "invalid_value", 400},
        {SERVE_API_COMPLETION, "{\"prompt\":\"x\",\"top_k\":-2}", "top_k", "invalid_value", 400},
        {SERVE_API_COMPLETION, "{\"prompt\":\"x\",\"seed\":0.5}", "seed", "invalid_type", 400},
        {SERVE_API_COMPLETION, "{\"prompt\":\"x\",\"repetition_penalty\":0}", "repetition_penalty", "invalid_value",
         400},
        {SERVE_API_COMPLETION, "{\"prompt\":\"x\",\"n\":4}", "n", "invalid_value", 400},
        {SERVE_API_COMPLETION, "{\"prompt\":\"x\",\"max_tokens\":-3}", "max_tokens", "invalid_value", 400},
        {SERVE_API_COMPLETION, "{\"prompt\":\"x\",\"stop\":[\"a\",2]}", "stop[1]", "invalid_type", 400},
        {SERVE_API_COMPLETION, "{\"prompt\":\"x\",\"stop\":\"\"}", "stop", "invalid_value", 400},
        {SERVE_API_COMPLETION, "{\"prompt\":\"x\",\"stream\":true,\"stream_options\":[]}", "stream_options",
         "invalid_type", 400},
        {SERVE_API_COMPLETION, "{\"prompt\":\"x\",\"presence_penalty\":1}", "presence_penalty",
         "unsupported_parameter", 400},
        {SERVE_API_COMPLETION, "{\"prompt\":\"x\",\"echo\":true}", "echo", "unsupported_parameter", 400},
        {SERVE_API_COMPLETION, "{\"prompt\":\"x\",\"suffix\":\"y\"}", "suffix", "unsupported_parameter", 400},
        {SERVE_API_COMPLETION, "{\"prompt\":\"x\",\"logit_bias\":{\"5\":1}}", "logit_bias", "unsupported_parameter",
         400},
        {SERVE_API_COMPLETION, "{\"prompt\":[\"a\",\"b\"]}", "prompt", "unsupported_value", 400},
        {SERVE_API_COMPLETION, "{\"prompt\":[1,-1]}", "prompt[1]", "invalid_value", 400},
        {SERVE_API_COMPLETION, "{\"prompt\":[1,\"a\"]}", "prompt[1]", "invalid_type", 400},
        {SERVE_API_COMPLETION, "{\"prompt\":[]}", "prompt", "invalid_value", 400},
        {SERVE_API_COMPLETION, "{\"prompt\":\"\"}", "prompt", "invalid_value", 400},
        {SERVE_API_CHAT, "{\"messages\":{}}", "messages", "invalid_type", 400},
        {SERVE_API_CHAT, "{\"messages\":[3]}", "messages[0]", "invalid_type", 400},
        {SERVE_API_CHAT, "{\"messages\":[{\"content\":\"x\"}]}", "messages[0].role", "missing_required_parameter",
         400},
        {SERVE_API_CHAT, "{\"messages\":[{\"role\":\"tool\",\"content\":\"x\"}]}", "messages[0].role",
         "invalid_value", 400},
        {SERVE_API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":7}]}", "messages[0].content", "invalid_type",
         400},
        {SERVE_API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":null}]}", "messages[0].content",
         "invalid_type", 400},
        {SERVE_API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":1}]}]}",
         "messages[0].content[0].text", "invalid_type", 400},
        {SERVE_API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"response_format\":{\"type\":"
         "\"json_object\"}}", "response_format", "unsupported_value", 400},
        {SERVE_API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tool_choice\":\"auto\"}",
         "tool_choice", "unsupported_parameter", 400},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        serve_api_request r;
        serve_api_error e;
        memset(&e, 0, sizeof e);
        bool ok = parse(cases[i].kind, cases[i].body, &r, &e);
        bool right = !ok && e.status == cases[i].status && strcmp(e.param, cases[i].param) == 0 && e.code &&
                     strcmp(e.code, cases[i].code) == 0 && e.message[0] && r.prompt == NULL;
        TL_OK(right, "%s: %d, param '%s', code %s (%s)", cases[i].body, e.status, e.param, e.code ? e.code : "null",
              e.message);
        if (ok)
            serve_api_request_free(&r);
    }
    /* a prompt past the context */
    char body[600] = "{\"prompt\":\"";
    for (int i = 0; i < 300; i++)
        strcat(body, "a");
    strcat(body, "\"}");
    serve_api_request r;
    serve_api_error e;
    bool ok = parse(SERVE_API_COMPLETION, body, &r, &e);
    TL_OK(!ok && e.status == 400 && e.code && strcmp(e.code, "context_length_exceeded") == 0,
          "300 bytes in a context of %d: context_length_exceeded (%s)", g_m.ctx, e.message);
    /* the error object as JSON */
    char *j = serve_api_error_json(&e);
    cJSON *o = j ? cJSON_Parse(j) : NULL, *err = cJSON_GetObjectItem(o, "error");
    TL_OK(err && cJSON_IsString(cJSON_GetObjectItem(err, "message")) &&
              strcmp(cJSON_GetObjectItem(err, "type")->valuestring, "invalid_request_error") == 0 &&
              strcmp(cJSON_GetObjectItem(err, "param")->valuestring, "prompt") == 0 &&
              strcmp(cJSON_GetObjectItem(err, "code")->valuestring, "context_length_exceeded") == 0,
          "the error object: message, type, param, code");
    cJSON_Delete(o);
    free(j);
    serve_api_set_error(&e, 503, "server_error", NULL, NULL, "busy");
    j = serve_api_error_json(&e);
    TL_OK(j && strstr(j, "\"param\":null") && strstr(j, "\"code\":null"), "null param and code: %s", j);
    free(j);
}

static void test_responses(void)
{
    serve_api_head h, h2;
    serve_api_head_init(&h, SERVE_API_CHAT, "tiny", 1700000000, 1);
    serve_api_head_init(&h2, SERVE_API_COMPLETION, "tiny", 1700000000, 2);
    TL_OK(strncmp(h.id, "chatcmpl-", 9) == 0 && strlen(h.id) == 33 && strncmp(h2.id, "cmpl-", 5) == 0 &&
              strcmp(h.id + 9, h2.id + 5) != 0, "ids: chatcmpl-/cmpl- and 24 letters (%s, %s)", h.id, h2.id);
    char *texts[2] = {"Hi \"you\"\n", "caf\xc3\xa9"};
    size_t lens[2] = {9, 5};
    serve_finish fin[2] = {SERVE_FINISH_STOP, SERVE_FINISH_LENGTH};
    char *j = serve_api_response_json(&h, 2, texts, lens, fin, 10, 7);
    cJSON *o = j ? cJSON_Parse(j) : NULL, *ch = cJSON_GetObjectItem(o, "choices"),
          *u = cJSON_GetObjectItem(o, "usage");
    cJSON *c1 = cJSON_GetArrayItem(ch, 1), *m1 = cJSON_GetObjectItem(c1, "message");
    TL_OK(o && strcmp(cJSON_GetObjectItem(o, "object")->valuestring, "chat.completion") == 0 &&
              cJSON_GetObjectItem(o, "created")->valuedouble == 1700000000 &&
              strcmp(cJSON_GetObjectItem(o, "model")->valuestring, "tiny") == 0 && cJSON_GetArraySize(ch) == 2 &&
              strcmp(cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetArrayItem(ch, 0), "message"), "content")
                         ->valuestring, "Hi \"you\"\n") == 0 &&
              strcmp(cJSON_GetObjectItem(m1, "content")->valuestring, "caf\xc3\xa9") == 0 &&
              strcmp(cJSON_GetObjectItem(m1, "role")->valuestring, "assistant") == 0 &&
              cJSON_GetObjectItem(c1, "index")->valueint == 1 &&
              strcmp(cJSON_GetObjectItem(c1, "finish_reason")->valuestring, "length") == 0 &&
              cJSON_GetObjectItem(u, "prompt_tokens")->valueint == 10 &&
              cJSON_GetObjectItem(u, "completion_tokens")->valueint == 7 &&
              cJSON_GetObjectItem(u, "total_tokens")->valueint == 17,
          "chat.completion: choices with message role/content and finish_reason, usage with the total");
    cJSON_Delete(o);
    free(j);
    j = serve_api_chunk_json(&h, 0, true, "", 0, SERVE_FINISH_NONE, true);
    TL_OK(j && strstr(j, "\"object\":\"chat.completion.chunk\"") &&
              strstr(j, "\"delta\":{\"role\":\"assistant\",\"content\":\"\"}") &&
              strstr(j, "\"finish_reason\":null") && strstr(j, "\"usage\":null"),
          "a choice's first chunk: the role and empty content; usage null when asked: %s", j);
    free(j);
    j = serve_api_chunk_json(&h, 1, false, "ab", 2, SERVE_FINISH_NONE, false);
    TL_OK(j && strstr(j, "\"index\":1,\"delta\":{\"content\":\"ab\"}") && !strstr(j, "usage"), "a content chunk: %s", j);
    free(j);
    j = serve_api_chunk_json(&h, 1, false, "", 0, SERVE_FINISH_STOP, false);
    TL_OK(j && strstr(j, "\"delta\":{}") && strstr(j, "\"finish_reason\":\"stop\""), "the last chunk: %s", j);
    free(j);
    j = serve_api_chunk_json(&h2, 0, false, "x", 1, SERVE_FINISH_LENGTH, false);
    TL_OK(j && strstr(j, "\"object\":\"text_completion\"") && strstr(j, "\"text\":\"x\"") &&
              strstr(j, "\"finish_reason\":\"length\""), "a completion chunk: %s", j);
    free(j);
    j = serve_api_usage_chunk_json(&h, 3, 4);
    TL_OK(j && strstr(j, "\"choices\":[]") && strstr(j, "\"total_tokens\":7"), "the usage chunk: %s", j);
    free(j);
    j = serve_api_models_json(&g_m, 5);
    TL_OK(j && strcmp(j, "{\"object\":\"list\",\"data\":[{\"id\":\"tiny\",\"object\":\"model\",\"created\":5,"
                         "\"owned_by\":\"colossal\"}]}") == 0, "the model list: %s", j);
    free(j);
}

static void test_strings(void)
{
    static const struct {
        const char *in;
        size_t len;
        const char *want;
    } cases[] = {
        {"plain", 5, "\"plain\""},
        {"q\"b\\", 4, "\"q\\\"b\\\\\""},
        {"a\0b\n\t\x1f", 6, "\"a\\u0000b\\n\\t\\u001f\""},
        {"\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80", 9, "\"\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\""},
        {"\x9b" "x\xc3", 3, "\"\xef\xbf\xbdx\xef\xbf\xbd\""},         /* a lone continuation, a cut sequence */
        {"\xed\xa0\x80", 3, "\"\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\""}, /* a surrogate */
        {"\xc0\xaf", 2, "\"\xef\xbf\xbd\xef\xbf\xbd\""},               /* overlong */
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char *s = serve_api_json_string(cases[i].in, cases[i].len);
        TL_OK(s && strcmp(s, cases[i].want) == 0, "JSON string %zu: %s", i, s ? s : "(null)");
        cJSON *o = s ? cJSON_Parse(s) : NULL;
        TL_OK(cJSON_IsString(o), "... parses back");
        cJSON_Delete(o);
        free(s);
    }
    TL_OK(serve_api_key_equal("k3y", "k3y", 3) && !serve_api_key_equal("k3y", "k3z", 3) &&
              !serve_api_key_equal("k3y", "k3", 2) && !serve_api_key_equal("k3y", "k3yy", 4) &&
              !serve_api_key_equal("k3y", "", 0) && !serve_api_key_equal("k3y", "k3y\0", 4),
          "the key compare: equal only for the same bytes and length");
}

int main(void)
{
    col_err err = {0};
    if (col_tok_load(FIXTURES "/chatml", &g_tok, &err) != COL_OK) {
        printf("Bail out! %s\n", err.msg);
        return 1;
    }
    g_m = (serve_api_model){.tok = g_tok, .vocab = 257, .ctx = 256, .max_n = 3, .model_name = "tiny",
                            .has_chat = true, .family = COL_CHAT_CHATML};
    test_chat_prompt();
    test_completion_fields();
    test_refusals();
    test_responses();
    test_strings();
    col_tok_free(g_tok);
    return tl_done();
}

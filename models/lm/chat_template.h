/* chat_template.h - the prompt text of a chat conversation for the built-in
 * template families, and which family a tokenizer_config.json asks for.
 *
 * colossal does not run Jinja: a model's chat_template is only recognised as
 * one of the families below (by its distinctive markers), and the family is
 * rendered by C code that reproduces the published template byte for byte
 * (checked in tests/test_chat_template.c against transformers' renders).
 *
 *   llama2  "<s>[INST] <<SYS>>\n{system}\n<</SYS>>\n\n{user} [/INST] {assistant} </s><s>[INST] {user} [/INST]"
 *           contents are stripped of surrounding whitespace like the template's
 *           content.strip(); roles must be [system] user assistant user ...;
 *           the template has no generation prompt (the text already ends in
 *           " [/INST]"), so add_generation_prompt changes nothing
 *   llama3  "<|begin_of_text|>" then per message
 *           "<|start_header_id|>{role}<|end_header_id|>\n\n{content|trim}<|eot_id|>";
 *           generation prompt "<|start_header_id|>assistant<|end_header_id|>\n\n"
 *   chatml  "<|im_start|>{role}\n{content}<|im_end|>\n"; generation prompt "<|im_start|>assistant\n"
 *   plain   "{role}: {content}\n"; generation prompt "assistant: "
 *
 * BOS/EOS appear as text ("<s>", "<|begin_of_text|>"): tokenize the prompt
 * with special tokens parsed and without adding another BOS. */
#ifndef COL_MODELS_CHAT_TEMPLATE_H
#define COL_MODELS_CHAT_TEMPLATE_H

#include <stdbool.h>
#include <stddef.h>

#include "chat.h"
#include "status.h"

typedef enum { COL_CHAT_LLAMA2, COL_CHAT_LLAMA3, COL_CHAT_CHATML, COL_CHAT_PLAIN } col_chat_family;

typedef struct {
    col_chat_role role;
    const char *content; /* UTF-8, NUL-terminated */
} col_chat_message;

/* Where message i landed in the rendered text (byte offsets, end exclusive). */
typedef struct {
    size_t begin, end;             /* all bytes rendered for this message, framing included; for a
                                      llama2 system message (folded into the first user turn) begin == end */
    size_t train_begin, train_end; /* assistant messages: the content as rendered plus its end-of-turn
                                      marker (" </s>", "<|eot_id|>", "<|im_end|>", "\n") - the bytes a
                                      supervised fine-tuning loss is taken on; empty for other roles */
} col_chat_span;

typedef struct {
    const char *name;        /* "llama2", "llama3", "chatml", "plain" */
    const char *eot;         /* end-of-turn marker text: "</s>", "<|eot_id|>", "<|im_end|>", "\n" */
    const char *const *stop; /* NULL-terminated stop strings for generation */
} col_chat_family_info;

const col_chat_family_info *col_chat_info(col_chat_family f);
/* "llama2" | "llama3" | "chatml" | "plain" -> family; error naming the options
 * otherwise (COL_SETTING_CHAT_TEMPLATE marked). */
col_status col_chat_family_parse(const char *name, col_chat_family *out, col_err *err);

/* Renders msgs[0..n) into a malloc'ed NUL-terminated string *out (length
 * *len; free() it). spans: NULL, or n entries filled per message. */
col_status col_chat_render(col_chat_family f, const col_chat_message *msgs, int n, bool add_generation_prompt,
                           char **out, size_t *len, col_chat_span *spans, col_err *err);

/* Recognises the family of the "chat_template" field of tokenizer_config.json
 * text (untrusted; len bytes). The field may be a string or a list of
 * {"name", "template"} (the one named "default" is used). An absent field or
 * a template of no built-in family is an error that names the options and
 * marks COL_SETTING_CHAT_TEMPLATE. */
col_status col_chat_detect(const char *json, size_t len, col_chat_family *out, col_err *err);
/* The same on a template string itself. A template equal to col_chat_jinja's
 * text of a family is that family (plain has no marker of its own). */
col_status col_chat_detect_template(const char *tmpl, col_chat_family *out, col_err *err);

/* The Jinja text of family f as a tokenizer_config.json "chat_template" holds
 * it (what colossal-finetune writes beside a model trained on chat data):
 * transformers' apply_chat_template renders it to the same text as
 * col_chat_render (tools/refgen/check_chat_roundtrip.py checks that). The
 * markers are literal text, not bos_token/eos_token, so the render does not
 * depend on the tokenizer's special tokens. NULL for an unknown family. */
const char *col_chat_jinja(col_chat_family f);

#endif

/* chat_sft.h - supervised fine-tuning data in the built-in chat formats:
 * col_chat_template callbacks (dataset.h) for the families of
 * chat_template.h, so that col_dataset_load() of .jsonl chat data gives the
 * tokens of the conversation as col_chat_render() writes it (no generation
 * prompt), tokenized with special tokens parsed and no extra BOS, and trains
 * the tokens of the assistant turns' train spans (content + end-of-turn).
 *
 * Usage:
 *     col_chat_sft *sft;
 *     col_chat_sft_new(family, &sft, &err);
 *     opts.tmpl = col_chat_sft_tmpl(sft);
 *     col_dataset_load(path, &opts, &ds, &err);
 *     col_chat_sft_free(sft);
 *
 * Why an object and not a static template: the callback sees one message at
 * a time, and llama2 needs the conversation before it - the system message
 * is folded into the first user turn, and the roles must follow
 * [system] user assistant user ... (a violation fails with the message
 * index; col_dataset_load adds file:line). The object keeps that
 * per-conversation state, so one object serves one col_dataset_load at a
 * time (use one per thread).
 *
 * Message contents go through col_chat_emit_content: "<|eot_id|>",
 * "<|im_end|>", "</s>" and the like written inside a message stay plain text.
 * Only the template's own markup can give special tokens. (So a conversation
 * whose text contains such markers tokenizes differently from the rendered
 * text parsed with special tokens - on purpose.)
 *
 * How each message is cut into pieces (each tokenized on its own; [T]: trained
 * for an assistant message), and how that compares with tokenizing the
 * rendered text whole (tests/test_chat_sft.c checks each claim with the
 * bundled tokenizers):
 *   llama2  "<s>" | "[INST] {system block}{user} [/INST]"  and
 *           "{answer} "[T] | "</s>"[T]
 *           Built for Llama 2's SentencePiece tokenizer, whose normalizer puts
 *           a "▁" in front of every stretch of text between special tokens:
 *           the piece "{answer} " gets back the space that follows "[/INST]"
 *           that way, and no Llama 2 token holds a "▁" after another
 *           character, so nothing merges across the cut: same tokens as the
 *           whole text. (A tokenizer without that normalizer would lose the
 *           space: llama2 is for Llama 2 tokenizers.)
 *   llama3  "<|begin_of_text|>" (first message) |
 *           "<|start_header_id|>{role}<|end_header_id|>\n\n" | "{content}"[T] |
 *           "<|eot_id|>"[T]. The content is trimmed, so the "\n\n" before it
 *           is always a pre-token of its own: same tokens as the whole text.
 *   chatml  "<|im_start|>{role}\n" | "{content}"[T] | "<|im_end|>"[T] | "\n",
 *           the pieces of col_chat_template_chatml() (same tokens and mask).
 *           With a tokenizer that has <|im_start|> and <|im_end|> as special
 *           tokens and a Llama-3/Qwen style pre-tokenizer: same tokens as the
 *           whole text unless a content begins with whitespace holding a
 *           newline (whole, "\n" + "\nHi" would join the newlines).
 *           With one that lacks them (GPT-2) the markers are plain text, as
 *           with col_chat_template_chatml(): the tokens are those of the
 *           rendered text cut at each content's start and end (whole, GPT-2
 *           would join e.g. "." + "<|"); they decode to the rendered text.
 *   plain   "{role}:" | " {content}\n"[T] (no special tokens). Same tokens as
 *           the whole text with the Llama 3 tokenizer; with GPT-2 the same as
 *           the text tokenized message by message, which differs from the
 *           whole text only after a content that ends in a newline and is
 *           followed by another message (whole, GPT-2 splits "\n\n" before
 *           "user:" into two tokens; the piece gives one).
 *
 * Mask, in terms of the text: a token is trained when its last byte lies
 * inside an assistant message's train span (chat_template.h) or, for llama2
 * and plain, is the space between the header and the answer. That space
 * cannot be cut off: the tokenizers join it to the answer's first word
 * ("▁Paris", " Paris"), and where they do not (" " before a digit) it is
 * trained all the same, so the rule is the same for every answer. (llama2's
 * generation prompt ends at "[/INST]": the model does produce that space.)
 * Tokens never straddle the end of a span. */
#ifndef COL_MODELS_CHAT_SFT_H
#define COL_MODELS_CHAT_SFT_H

#include "chat_template.h"
#include "dataset.h"
#include "status.h"

typedef struct col_chat_sft col_chat_sft;

/* A template object for family f (error for a value outside the enum). */
col_status col_chat_sft_new(col_chat_family f, col_chat_sft **out, col_err *err);
/* The template to put in col_dataset_opts.tmpl; valid until col_chat_sft_free. */
const col_chat_template *col_chat_sft_tmpl(col_chat_sft *s);
void col_chat_sft_free(col_chat_sft *s);

#endif

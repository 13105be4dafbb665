/* chat_sft.c - the built-in chat formats as col_chat_template callbacks (see
 * chat_sft.h for the pieces and why they are cut where they are).
 *
 * Each message is rendered by col_chat_render() itself (with the system
 * message in front for llama2's first user turn) and the pieces are cut out
 * of that text, so whitespace stripping and layout cannot drift from the text
 * renderer. */
#include "chat_sft.h"

#include <stdlib.h>
#include <string.h>

struct col_chat_sft {
    col_chat_template tmpl; /* tmpl.user == this object */
    col_chat_family family;
    /* the conversation so far (reset at each message 0) */
    int next;         /* index of the message expected next */
    bool has_system;  /* llama2: message 0 is a system message */
    char *sys;        /* llama2: its content, NUL-terminated */
    size_t sys_cap;
};

/* text[a..b) as markup (special tokens matched) or as message content. */
static col_status piece(col_chat_out *out, const char *text, size_t a, size_t b, bool content, bool train,
                        col_err *err)
{
    if (b <= a)
        return COL_OK;
    return content ? col_chat_emit_content(out, text + a, b - a, train, err)
                   : col_chat_emit_text(out, text + a, b - a, train, err);
}

static col_status keep_system(col_chat_sft *s, const col_chat_msg *m, col_err *err)
{
    if (m->content_len + 1 > s->sys_cap) {
        char *p = realloc(s->sys, m->content_len + 1);
        if (!p)
            return col_err_set(err, COL_ENOMEM, "out of memory for a %zu-byte system message", m->content_len);
        s->sys = p;
        s->sys_cap = m->content_len + 1;
    }
    memcpy(s->sys, m->content, m->content_len);
    s->sys[m->content_len] = '\0';
    return COL_OK;
}

/* llama2: the user turn "<s>[INST] ... [/INST]" or the answer " {a} </s>". */
static col_status llama2_msg(col_chat_sft *s, const col_chat_msg *m, col_chat_out *out, col_err *err)
{
    if (m->index == 0) {
        s->has_system = m->role == COL_ROLE_SYSTEM;
        if (s->has_system)
            return keep_system(s, m, err); /* rendered with the first user turn */
    }
    int i0 = s->has_system ? 1 : 0;
    col_chat_role want = (m->index - i0) % 2 == 0 ? COL_ROLE_USER : COL_ROLE_ASSISTANT;
    if (m->role != want)
        return col_err_set(err, COL_EINVAL, "message %d has role %s but roles must be [system] then alternate "
                           "user/assistant/user/...", m->index, col_chat_role_name(m->role));
    col_chat_message two[2];
    int n = 0;
    if (m->role == COL_ROLE_USER && m->index == i0 && s->has_system)
        two[n++] = (col_chat_message){COL_ROLE_SYSTEM, s->sys};
    else if (m->role == COL_ROLE_ASSISTANT)
        two[n++] = (col_chat_message){COL_ROLE_USER, ""};
    two[n++] = (col_chat_message){m->role, m->content};
    char *text = NULL;
    size_t len = 0;
    col_chat_span sp[2];
    col_status st = col_chat_render(COL_CHAT_LLAMA2, two, n, false, &text, &len, sp, err);
    if (st != COL_OK)
        return st;
    if (m->role == COL_ROLE_USER) {
        /* "<s>" then the rest as one piece: SentencePiece's "▁" prefix of
         * "[INST]" comes from its normalizer, as in the whole text */
        st = piece(out, text, 0, 3, false, false, err);
        if (st == COL_OK)
            st = piece(out, text, 3, len, true, false, err);
    } else {
        /* text[tb..te) is "{answer} </s>"; the normalizer restores the
         * space in front of the answer */
        size_t tb = sp[n - 1].train_begin, te = sp[n - 1].train_end;
        st = piece(out, text, tb, te - 4, true, true, err);
        if (st == COL_OK)
            st = piece(out, text, te - 4, te, false, true, err);
    }
    free(text);
    return st;
}

/* llama3, chatml, plain: the message alone, cut at its content. */
static col_status simple_msg(col_chat_sft *s, const col_chat_msg *m, col_chat_out *out, col_err *err)
{
    col_chat_message one = {m->role, m->content};
    char *text = NULL;
    size_t len = 0;
    col_chat_span sp;
    col_status st = col_chat_render(s->family, &one, 1, false, &text, &len, &sp, err);
    if (st != COL_OK)
        return st;
    bool train = m->role == COL_ROLE_ASSISTANT;
    size_t cb = sp.train_begin; /* where the content starts */
    switch (s->family) {
    case COL_CHAT_LLAMA3: {
        /* "<|begin_of_text|>" | header | content | "<|eot_id|>" */
        size_t hb = sp.begin, ce = sp.end - strlen("<|eot_id|>");
        if (m->index == 0)
            st = piece(out, text, 0, hb, false, false, err);
        if (st == COL_OK)
            st = piece(out, text, hb, cb, false, false, err);
        if (st == COL_OK)
            st = piece(out, text, cb, ce, true, train, err);
        if (st == COL_OK)
            st = piece(out, text, ce, sp.end, false, train, err);
        break;
    }
    case COL_CHAT_CHATML: {
        /* "<|im_start|>{role}\n" | content | "<|im_end|>" | "\n" */
        size_t ee = len - 1, ce = ee - strlen("<|im_end|>");
        st = piece(out, text, 0, cb, false, false, err);
        if (st == COL_OK)
            st = piece(out, text, cb, ce, true, train, err);
        if (st == COL_OK)
            st = piece(out, text, ce, ee, false, train, err);
        if (st == COL_OK)
            st = piece(out, text, ee, len, false, false, err);
        break;
    }
    default: {
        /* "{role}:" | " {content}\n": byte-level pre-tokenizers put the
         * space with the word after it */
        st = piece(out, text, 0, cb - 1, true, false, err);
        if (st == COL_OK)
            st = piece(out, text, cb - 1, len, true, train, err);
        break;
    }
    }
    free(text);
    return st;
}

static col_status sft_render(void *user, const col_chat_msg *m, col_chat_out *out, col_err *err)
{
    col_chat_sft *s = user;
    if (!m || !m->content || m->index < 0 || m->index >= m->n_messages)
        return col_err_set(err, COL_EINVAL, "bad message (index %d of %d)", m ? m->index : -1,
                           m ? m->n_messages : 0);
    if (m->index != 0 && m->index != s->next)
        return col_err_set(err, COL_EINVAL, "message %d came after message %d: the messages of a conversation "
                           "must come in order (is one template object used by two loads at once?)", m->index,
                           s->next - 1);
    s->next = m->index + 1;
    if (s->family == COL_CHAT_LLAMA2)
        return llama2_msg(s, m, out, err);
    return simple_msg(s, m, out, err);
}

col_status col_chat_sft_new(col_chat_family f, col_chat_sft **out, col_err *err)
{
    *out = NULL;
    const col_chat_family_info *info = col_chat_info(f);
    if (!info)
        return col_err_set(err, COL_EINVAL, "chat template: unknown family %d (use llama2, llama3, chatml or plain)",
                           (int)f);
    col_chat_sft *s = calloc(1, sizeof *s);
    if (!s)
        return col_err_set(err, COL_ENOMEM, "chat template %s: out of memory", info->name);
    s->family = f;
    s->tmpl = (col_chat_template){info->name, sft_render, s};
    *out = s;
    return COL_OK;
}

const col_chat_template *col_chat_sft_tmpl(col_chat_sft *s) { return s ? &s->tmpl : NULL; }

void col_chat_sft_free(col_chat_sft *s)
{
    if (!s)
        return;
    free(s->sys);
    free(s);
}

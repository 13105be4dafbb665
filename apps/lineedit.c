/* lineedit.c - a small line editor (see lineedit.h). */
#define _POSIX_C_SOURCE 200809L
#include "lineedit.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <unistd.h>

struct le_editor {
    char *buf;          /* the line, NUL-terminated */
    size_t len, cap, pos;
    char **hist;        /* oldest first */
    int nhist, hist_max;
    int browse;         /* history entry shown: nhist = the line being typed */
    char *scratch;      /* the line being typed, kept while browsing the history */
    char *hist_path;
    int cursor_row;     /* le_readline: the screen row of the cursor, counted from the prompt's row */
};

/* ---- keys ---- */

static int utf8_need(unsigned char b)
{
    if (b >= 0xC2 && b <= 0xDF)
        return 2;
    if (b >= 0xE0 && b <= 0xEF)
        return 3;
    if (b >= 0xF0 && b <= 0xF4)
        return 4;
    return 1; /* ASCII, or an invalid lead byte taken alone */
}

/* the key of a complete escape sequence seq[0..n) (seq[0] == ESC) */
static le_key escape_key(const unsigned char *s, int n)
{
    if (n == 2) { /* alt + key */
        if (s[1] == 'b')
            return LE_KEY_WORD_LEFT;
        if (s[1] == 'f')
            return LE_KEY_WORD_RIGHT;
        if (s[1] == 127 || s[1] == 8)
            return LE_KEY_KILL_WORD;
        return LE_KEY_NONE;
    }
    unsigned char fin = s[n - 1];
    if (s[1] == 'O') {
        switch (fin) {
        case 'A': return LE_KEY_UP;
        case 'B': return LE_KEY_DOWN;
        case 'C': return LE_KEY_RIGHT;
        case 'D': return LE_KEY_LEFT;
        case 'H': return LE_KEY_HOME;
        case 'F': return LE_KEY_END;
        default: return LE_KEY_NONE;
        }
    }
    /* CSI: ESC [ params final; a modifier (";5" ctrl, ";3" alt) makes arrows move by words */
    bool mod = memchr(s + 2, ';', (size_t)(n - 3)) != NULL;
    switch (fin) {
    case 'A': return LE_KEY_UP;
    case 'B': return LE_KEY_DOWN;
    case 'C': return mod ? LE_KEY_WORD_RIGHT : LE_KEY_RIGHT;
    case 'D': return mod ? LE_KEY_WORD_LEFT : LE_KEY_LEFT;
    case 'H': return LE_KEY_HOME;
    case 'F': return LE_KEY_END;
    case '~': {
        int v = atoi((const char *)s + 2);
        if (v == 1 || v == 7)
            return LE_KEY_HOME;
        if (v == 4 || v == 8)
            return LE_KEY_END;
        if (v == 3)
            return LE_KEY_DELETE;
        return LE_KEY_NONE;
    }
    default: return LE_KEY_NONE;
    }
}

le_key le_parse_byte(le_parser *p, unsigned char b, char text[8], size_t *len)
{
    *len = 0;
    if (p->n > 0 && p->seq[0] == 0x1b) {
        if (p->n >= (int)sizeof p->seq - 1) { /* an overlong sequence: drop it */
            p->n = 0;
            return LE_KEY_NONE;
        }
        p->seq[p->n++] = b;
        if (p->n == 2) {
            if (b == '[' || b == 'O')
                return LE_KEY_NONE;
            p->n = 0;
            return escape_key(p->seq, 2);
        }
        if (p->seq[1] == 'O' || (b >= 0x40 && b <= 0x7e)) { /* ESC O x, or the CSI final byte */
            le_key k = escape_key(p->seq, p->n);
            p->n = 0;
            return k;
        }
        return LE_KEY_NONE;
    }
    if (p->n > 0) { /* inside a UTF-8 character */
        if ((b & 0xC0) != 0x80) { /* not a continuation byte: give up on the character, take b anew */
            p->n = 0;
            return le_parse_byte(p, b, text, len);
        }
        p->seq[p->n++] = b;
        if (p->n < p->need)
            return LE_KEY_NONE;
        memcpy(text, p->seq, (size_t)p->n);
        *len = (size_t)p->n;
        p->n = 0;
        return LE_KEY_TEXT;
    }
    switch (b) {
    case 0x1b: p->seq[0] = b; p->n = 1; return LE_KEY_NONE;
    case 1: return LE_KEY_HOME;
    case 2: return LE_KEY_LEFT;
    case 3: return LE_KEY_CTRL_C;
    case 4: return LE_KEY_CTRL_D;
    case 5: return LE_KEY_END;
    case 6: return LE_KEY_RIGHT;
    case 8: case 127: return LE_KEY_BACKSPACE;
    case 11: return LE_KEY_KILL_END;
    case 12: return LE_KEY_CLEAR;
    case 10: case 13: return LE_KEY_ENTER;
    case 14: return LE_KEY_DOWN;
    case 16: return LE_KEY_UP;
    case 21: return LE_KEY_KILL_START;
    case 23: return LE_KEY_KILL_WORD;
    case 9: text[0] = ' '; *len = 1; return LE_KEY_TEXT; /* a tab has no fixed width: a space */
    default: break;
    }
    if (b < 0x20)
        return LE_KEY_NONE;
    int need = utf8_need(b);
    if (need == 1) {
        text[0] = (char)b;
        *len = 1;
        return LE_KEY_TEXT;
    }
    p->seq[0] = b;
    p->n = 1;
    p->need = need;
    return LE_KEY_NONE;
}

/* ---- the line ---- */

le_editor *le_new(int history_max)
{
    le_editor *e = calloc(1, sizeof *e);
    if (!e)
        return NULL;
    e->cap = 256;
    e->buf = calloc(e->cap, 1);
    e->hist_max = history_max > 0 ? history_max : 1;
    e->hist = calloc((size_t)e->hist_max, sizeof *e->hist);
    if (!e->buf || !e->hist) {
        le_free(e);
        return NULL;
    }
    return e;
}

void le_free(le_editor *e)
{
    if (!e)
        return;
    for (int i = 0; i < e->nhist; i++)
        free(e->hist[i]);
    free(e->hist);
    free(e->buf);
    free(e->scratch);
    free(e->hist_path);
    free(e);
}

static bool set_line(le_editor *e, const char *s)
{
    size_t n = strlen(s);
    if (n + 1 > e->cap) {
        char *b = realloc(e->buf, n + 1);
        if (!b)
            return false;
        e->buf = b;
        e->cap = n + 1;
    }
    memcpy(e->buf, s, n + 1);
    e->len = e->pos = n;
    return true;
}

void le_begin(le_editor *e)
{
    e->len = e->pos = 0;
    e->buf[0] = '\0';
    e->browse = e->nhist;
    free(e->scratch);
    e->scratch = NULL;
}

const char *le_line(const le_editor *e, size_t *cursor)
{
    if (cursor)
        *cursor = e->pos;
    return e->buf;
}

static bool is_cont(const le_editor *e, size_t i) { return i < e->len && ((unsigned char)e->buf[i] & 0xC0) == 0x80; }

static size_t prev_char(const le_editor *e, size_t i)
{
    if (i == 0)
        return 0;
    size_t j = i - 1;
    while (j > 0 && is_cont(e, j) && i - j < 4)
        j--;
    return j;
}

static size_t next_char(const le_editor *e, size_t i)
{
    if (i >= e->len)
        return e->len;
    size_t j = i + 1;
    while (j < e->len && is_cont(e, j) && j - i < 4)
        j++;
    return j;
}

static bool word_byte(char c) { return c != ' '; }

static void delete_range(le_editor *e, size_t a, size_t b)
{
    memmove(e->buf + a, e->buf + b, e->len - b + 1);
    e->len -= b - a;
    if (e->pos > b)
        e->pos -= b - a;
    else if (e->pos > a)
        e->pos = a;
}

static bool insert(le_editor *e, const char *s, size_t n)
{
    if (e->len + n + 1 > e->cap) {
        size_t cap = (e->len + n + 1) * 2;
        char *b = realloc(e->buf, cap);
        if (!b)
            return false;
        e->buf = b;
        e->cap = cap;
    }
    memmove(e->buf + e->pos + n, e->buf + e->pos, e->len - e->pos + 1);
    memcpy(e->buf + e->pos, s, n);
    e->len += n;
    e->pos += n;
    return true;
}

static void show_history(le_editor *e, int to)
{
    if (to < 0 || to > e->nhist || to == e->browse)
        return;
    if (e->browse == e->nhist) { /* leaving the line being typed: keep it */
        free(e->scratch);
        e->scratch = strdup(e->buf);
        if (!e->scratch)
            return;
    }
    e->browse = to;
    set_line(e, to == e->nhist ? (e->scratch ? e->scratch : "") : e->hist[to]);
}

le_action le_apply(le_editor *e, le_key key, const char *text, size_t len)
{
    size_t i;
    switch (key) {
    case LE_KEY_TEXT: insert(e, text, len); break;
    case LE_KEY_LEFT: e->pos = prev_char(e, e->pos); break;
    case LE_KEY_RIGHT: e->pos = next_char(e, e->pos); break;
    case LE_KEY_WORD_LEFT:
        while (e->pos > 0 && !word_byte(e->buf[e->pos - 1]))
            e->pos--;
        while (e->pos > 0 && word_byte(e->buf[e->pos - 1]))
            e->pos--;
        break;
    case LE_KEY_WORD_RIGHT:
        while (e->pos < e->len && !word_byte(e->buf[e->pos]))
            e->pos++;
        while (e->pos < e->len && word_byte(e->buf[e->pos]))
            e->pos++;
        break;
    case LE_KEY_HOME: e->pos = 0; break;
    case LE_KEY_END: e->pos = e->len; break;
    case LE_KEY_UP: show_history(e, e->browse - 1); break;
    case LE_KEY_DOWN: show_history(e, e->browse + 1); break;
    case LE_KEY_BACKSPACE:
        if (e->pos > 0)
            delete_range(e, prev_char(e, e->pos), e->pos);
        break;
    case LE_KEY_CTRL_D: /* on a non-empty line: delete */
    case LE_KEY_DELETE:
        if (key == LE_KEY_CTRL_D && e->len == 0)
            return LE_EOF;
        if (e->pos < e->len)
            delete_range(e, e->pos, next_char(e, e->pos));
        break;
    case LE_KEY_KILL_END: delete_range(e, e->pos, e->len); break;
    case LE_KEY_KILL_START: delete_range(e, 0, e->pos); break;
    case LE_KEY_KILL_WORD:
        i = e->pos;
        while (i > 0 && !word_byte(e->buf[i - 1]))
            i--;
        while (i > 0 && word_byte(e->buf[i - 1]))
            i--;
        delete_range(e, i, e->pos);
        break;
    case LE_KEY_ENTER: return LE_DONE;
    case LE_KEY_CTRL_C:
        if (e->len == 0)
            return LE_INTERRUPT;
        le_begin(e);
        return LE_CANCEL;
    case LE_KEY_CLEAR: return LE_REDRAW_ALL;
    case LE_KEY_NONE: break;
    }
    return LE_CONTINUE;
}

/* ---- history ---- */

int le_history_count(const le_editor *e) { return e->nhist; }

bool le_history_add(le_editor *e, const char *line)
{
    if (!line[0] || (e->nhist > 0 && strcmp(e->hist[e->nhist - 1], line) == 0))
        return true;
    char *c = strdup(line);
    if (!c)
        return false;
    if (e->nhist == e->hist_max) {
        free(e->hist[0]);
        memmove(e->hist, e->hist + 1, sizeof *e->hist * (size_t)(e->nhist - 1));
        e->nhist--;
    }
    e->hist[e->nhist++] = c;
    e->browse = e->nhist;
    return true;
}

bool le_history_load(le_editor *e, const char *path)
{
    free(e->hist_path);
    e->hist_path = strdup(path);
    FILE *f = fopen(path, "r");
    if (!f)
        return errno == ENOENT;
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    while ((n = getline(&line, &cap, f)) >= 0) {
        if (n > 0 && line[n - 1] == '\n')
            line[--n] = '\0';
        le_history_add(e, line);
    }
    free(line);
    bool ok = !ferror(f);
    fclose(f);
    return ok;
}

void le_history_save_line(le_editor *e, const char *line)
{
    if (!e->hist_path || !line[0] || strchr(line, '\n'))
        return;
    FILE *f = fopen(e->hist_path, "a");
    if (!f)
        return; /* a history that cannot be written is not worth stopping for */
    fprintf(f, "%s\n", line);
    fclose(f);
}

/* ---- the terminal ---- */

/* columns of code point c: 0 for combining marks, 2 for the wide East Asian
 * ranges and emoji, 1 otherwise (a small table: enough for a prompt line) */
static int cp_width(uint32_t c)
{
    if ((c >= 0x300 && c <= 0x36F) || (c >= 0x200B && c <= 0x200F) || (c >= 0xFE00 && c <= 0xFE0F))
        return 0;
    if ((c >= 0x1100 && c <= 0x115F) || (c >= 0x2E80 && c <= 0xA4CF) || (c >= 0xAC00 && c <= 0xD7A3) ||
        (c >= 0xF900 && c <= 0xFAFF) || (c >= 0xFE30 && c <= 0xFE4F) || (c >= 0xFF00 && c <= 0xFF60) ||
        (c >= 0xFFE0 && c <= 0xFFE6) || (c >= 0x1F300 && c <= 0x1FAFF) || (c >= 0x20000 && c <= 0x3FFFD))
        return 2;
    return 1;
}

/* decodes the character at s[0..n): its length (>= 1) and code point */
static size_t utf8_at(const char *s, size_t n, uint32_t *cp)
{
    const unsigned char *u = (const unsigned char *)s;
    int need = utf8_need(u[0]);
    if (need == 1 || (size_t)need > n) {
        *cp = u[0];
        return 1;
    }
    uint32_t c = u[0] & (need == 2 ? 0x1F : need == 3 ? 0x0F : 0x07);
    for (int i = 1; i < need; i++) {
        if ((u[i] & 0xC0) != 0x80) {
            *cp = u[0];
            return 1;
        }
        c = c << 6 | (u[i] & 0x3F);
    }
    *cp = c;
    return (size_t)need;
}

size_t le_text_width(const char *s, size_t n)
{
    size_t w = 0;
    for (size_t i = 0; i < n;) {
        uint32_t c;
        i += utf8_at(s + i, n - i, &c);
        w += (size_t)cp_width(c);
    }
    return w;
}

static void put(int fd, const char *s, size_t n)
{
    while (n > 0) {
        ssize_t k = write(fd, s, n);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return;
        s += k;
        n -= (size_t)k;
    }
}

static int term_cols(int fd)
{
    struct winsize ws;
    if (ioctl(fd, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0)
        return ws.ws_col;
    return 80;
}

/* Redraws the prompt and the whole line, wrapped at the terminal's width
 * over as many rows as it needs, then puts the cursor in place. The rows
 * drawn before are found from e->cursor_row (the row the cursor was left on,
 * counted from the prompt's row) and cleared first. (A wide character that
 * does not fit at the end of a row moves to the next one on the terminal
 * but not in this count: the cursor may be one column off after it.) */
static void refresh(le_editor *e, const char *prompt, int fd)
{
    size_t cols = (size_t)term_cols(fd), pw = le_text_width(prompt, strlen(prompt));
    size_t cur = pw + le_text_width(e->buf, e->pos), all = pw + le_text_width(e->buf, e->len);
    char seq[32];
    int k;
    if (e->cursor_row > 0) {
        k = snprintf(seq, sizeof seq, "\x1b[%dA", e->cursor_row);
        put(fd, seq, (size_t)k);
    }
    put(fd, "\r\x1b[J", 4);
    put(fd, prompt, strlen(prompt));
    put(fd, e->buf, e->len);
    size_t end_row = all > 0 ? (all - 1) / cols : 0;
    if (e->pos == e->len && all > 0 && all % cols == 0) { /* the terminal waits to wrap: go to the next row */
        put(fd, "\n\r", 2);
        end_row++;
    }
    size_t crow = cur / cols, ccol = cur % cols;
    if (end_row > crow) {
        k = snprintf(seq, sizeof seq, "\x1b[%zuA", end_row - crow);
        put(fd, seq, (size_t)k);
    }
    put(fd, "\r", 1);
    if (ccol > 0) {
        k = snprintf(seq, sizeof seq, "\x1b[%zuC", ccol);
        put(fd, seq, (size_t)k);
    }
    e->cursor_row = (int)crow;
}

int le_readline(le_editor *e, const char *prompt, int fd_in, int fd_out, char **out)
{
    *out = NULL;
    struct termios old, raw;
    if (!isatty(fd_in) || tcgetattr(fd_in, &old) != 0)
        return -1;
    raw = old;
    raw.c_iflag &= ~(tcflag_t)(BRKINT | ICRNL | INPCK | ISTRIP | IXON);
    raw.c_lflag &= ~(tcflag_t)(ECHO | ICANON | IEXTEN | ISIG);
    raw.c_cflag |= CS8;
    raw.c_cc[VMIN] = 1;
    raw.c_cc[VTIME] = 0;
    if (tcsetattr(fd_in, TCSADRAIN, &raw) != 0) /* DRAIN, not FLUSH: keep what was typed ahead */
        return -1;
    le_begin(e);
    e->cursor_row = 0;
    le_parser p = {0};
    refresh(e, prompt, fd_out);
    int result = -1;
    for (;;) {
        unsigned char b;
        ssize_t k = read(fd_in, &b, 1);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0) {
            result = k == 0 ? LE_EOF : -1;
            break;
        }
        char text[8];
        size_t len;
        le_key key = le_parse_byte(&p, b, text, &len);
        le_action a = le_apply(e, key, text, len);
        if (a == LE_REDRAW_ALL) {
            put(fd_out, "\x1b[H\x1b[2J", 7);
            e->cursor_row = 0;
            a = LE_CONTINUE;
        }
        if (a == LE_CONTINUE) {
            refresh(e, prompt, fd_out);
            continue;
        }
        if (a == LE_DONE) {
            e->pos = e->len; /* the cursor after the whole line before leaving it */
            refresh(e, prompt, fd_out);
            *out = strdup(e->buf);
            result = *out ? LE_DONE : -1;
        } else if (a == LE_CANCEL) {
            put(fd_out, "^C", 2);
            result = LE_CANCEL;
        } else {
            result = (int)a;
        }
        break;
    }
    put(fd_out, "\r\n", 2);
    tcsetattr(fd_in, TCSADRAIN, &old);
    return result;
}

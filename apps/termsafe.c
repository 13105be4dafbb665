/* termsafe.c - control characters shown, not sent (termsafe.h). */
#include <stdbool.h>

#include "termsafe.h"

static const char replacement[] = "\xef\xbf\xbd"; /* U+FFFD */

/* length of the UTF-8 sequence a lead byte starts, 0 for a byte that cannot lead one */
static size_t seq_len(unsigned char c)
{
    if (c < 0x80)
        return 1;
    if (c >= 0xc2 && c <= 0xdf)
        return 2;
    if (c >= 0xe0 && c <= 0xef)
        return 3;
    if (c >= 0xf0 && c <= 0xf4)
        return 4;
    return 0;
}

/* whether b[0..n) (n = seq_len(b[0]) > 1) is one well-formed character: continuation bytes,
 * no overlong forms, no surrogates, nothing past U+10FFFF */
static bool well_formed(const unsigned char *b, size_t n)
{
    for (size_t i = 1; i < n; i++)
        if ((b[i] & 0xc0) != 0x80)
            return false;
    if (n == 3 && b[0] == 0xe0 && b[1] < 0xa0)
        return false;
    if (n == 3 && b[0] == 0xed && b[1] >= 0xa0)
        return false;
    if (n == 4 && b[0] == 0xf0 && b[1] < 0x90)
        return false;
    if (n == 4 && b[0] == 0xf4 && b[1] >= 0x90)
        return false;
    return true;
}

/* one ASCII byte: itself, or caret notation for a control character */
static bool put_ascii(FILE *f, unsigned char c)
{
    if (c == '\n' || c == '\t' || (c >= 0x20 && c < 0x7f))
        return fputc(c, f) != EOF;
    char caret[2] = {'^', c == 0x7f ? '?' : (char)(c + 0x40)};
    return fwrite(caret, 1, 2, f) == 2;
}

/* one complete multi-byte character: itself, or U+FFFD for a C1 control (U+0080..U+009F) */
static bool put_char(FILE *f, const unsigned char *b, size_t n)
{
    if (n == 2 && b[0] == 0xc2 && b[1] < 0xa0)
        return fputs(replacement, f) != EOF;
    return fwrite(b, 1, n, f) == n;
}

/* the next byte of the stream */
static bool put_byte(term_safe *s, FILE *f, unsigned char c)
{
    bool ok = true;
    if (s->nheld > 0 && (c & 0xc0) != 0x80) { /* a character cut short by a new one */
        ok = fputs(replacement, f) != EOF;
        s->nheld = 0;
    }
    if (s->nheld == 0) {
        size_t want = seq_len(c);
        if (want == 1)
            return put_ascii(f, c) && ok;
        if (want == 0) /* a stray continuation byte or a byte UTF-8 never uses */
            return fputs(replacement, f) != EOF && ok;
        s->held[s->nheld++] = c;
        return ok;
    }
    s->held[s->nheld++] = c;
    size_t want = seq_len(s->held[0]);
    if (s->nheld < want)
        return ok;
    s->nheld = 0;
    if (!well_formed(s->held, want))
        return fputs(replacement, f) != EOF && ok;
    return put_char(f, s->held, want) && ok;
}

bool term_safe_write(term_safe *s, FILE *f, const char *p, size_t n)
{
    bool ok = true;
    for (size_t i = 0; i < n; i++)
        ok = put_byte(s, f, (unsigned char)p[i]) && ok;
    return ok;
}

bool term_safe_flush(term_safe *s, FILE *f)
{
    bool ok = true;
    if (s->nheld > 0)
        ok = fputs(replacement, f) != EOF;
    s->nheld = 0;
    return fflush(f) == 0 && ok;
}

bool term_safe_puts(FILE *f, const char *text)
{
    term_safe s = {0};
    size_t n = 0;
    while (text[n])
        n++;
    return term_safe_write(&s, f, text, n) && term_safe_flush(&s, f);
}

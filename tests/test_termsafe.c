/* test_termsafe.c - model output shown safely on a terminal (apps/termsafe.h):
 * escape sequences, C0/C1 controls and bytes that are not UTF-8 become
 * visible text; newline, tab and well-formed UTF-8 pass unchanged, also when
 * a character is split across writes (tokens). Expected strings are written
 * out by hand from the rules in termsafe.h. */
#include <string.h>

#include "termsafe.h"
#include "testlib.h"

/* what term_safe_write gives for the pieces (NULL-terminated list), then flush */
static const char *render(const char *const *pieces, const size_t *lens)
{
    static char out[512];
    memset(out, 0, sizeof out);
    FILE *f = fmemopen(out, sizeof out - 1, "w");
    term_safe s = {0};
    for (int i = 0; pieces[i]; i++)
        term_safe_write(&s, f, pieces[i], lens ? lens[i] : strlen(pieces[i]));
    term_safe_flush(&s, f);
    fclose(f);
    return out;
}

static void one(const char *name, const char *in, size_t n, const char *want)
{
    const char *pieces[] = {in, NULL};
    size_t lens[] = {n, 0};
    const char *got = render(pieces, lens);
    TL_OK(strcmp(got, want) == 0, "%s: got \"%s\"", name, got);
}

int main(void)
{
    one("plain text and newline/tab", "Hello,\tworld\n", 13, "Hello,\tworld\n");
    one("OSC retitle sequence", "\x1b]0;pwned\x07!", 11, "^[]0;pwned^G!");
    one("CSI clear screen", "\x1b[2J\x1b[H", 7, "^[[2J^[[H");
    one("carriage return and backspace", "a\rb\bc", 5, "a^Mb^Hc");
    one("NUL and DEL", "x\0y\x7f", 4, "x^@y^?");
    one("UTF-8 passes", "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80", 14, "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80");
    one("C1 control U+009B (CSI) as U+FFFD", "a\xc2\x9b" "b", 4, "a\xef\xbf\xbd" "b");
    one("U+00A0 is not a control", "\xc2\xa0", 2, "\xc2\xa0");
    one("raw 8-bit CSI byte as U+FFFD", "\x9b" "31m", 4, "\xef\xbf\xbd" "31m");
    one("a lead byte cut short", "\xe2\x82" "A", 3, "\xef\xbf\xbd" "A");
    one("overlong form", "\xe0\x80\x80", 3, "\xef\xbf\xbd");
    one("surrogate", "\xed\xa0\x80", 3, "\xef\xbf\xbd");
    one("past U+10FFFF", "\xf4\x90\x80\x80", 4, "\xef\xbf\xbd");
    one("bytes UTF-8 never uses", "\xc0\xff", 2, "\xef\xbf\xbd\xef\xbf\xbd");
    one("incomplete at the end", "ok\xf0\x9f", 4, "ok\xef\xbf\xbd");

    /* a character split over two tokens arrives whole */
    const char *split[] = {"\xf0\x9f", "\x98\x80!", NULL};
    TL_OK(strcmp(render(split, NULL), "\xf0\x9f\x98\x80!") == 0, "a 4-byte character split across writes");
    const char *esc_split[] = {"ab\x1b", "]0;x\x07", NULL};
    TL_OK(strcmp(render(esc_split, NULL), "ab^[]0;x^G") == 0, "an escape split across writes");
    const char *c1_split[] = {"\xc2", "\x9b", NULL};
    TL_OK(strcmp(render(c1_split, NULL), "\xef\xbf\xbd") == 0, "a C1 control split across writes");

    /* nothing that a terminal would act on survives */
    char all[256];
    for (int i = 0; i < 256; i++)
        all[i] = (char)i;
    const char *every[] = {all, NULL};
    size_t len[] = {256, 0};
    const char *out = render(every, len);
    bool clean = true;
    for (const unsigned char *p = (const unsigned char *)out; *p; p++) {
        if ((*p < 0x20 && *p != '\n' && *p != '\t') || *p == 0x7f)
            clean = false;
        if (p[0] == 0xc2 && p[1] >= 0x80 && p[1] < 0xa0)
            clean = false;
        if (*p >= 0x80 && *p < 0xa0 && (p == (const unsigned char *)out || (p[-1] & 0x80) == 0))
            clean = false; /* a raw C1 byte not inside a multi-byte character */
    }
    TL_OK(clean, "every byte value: no control character reaches the terminal");
    TL_OK(term_safe_puts(stdout, "# term_safe_puts writes a whole text\n"), "term_safe_puts");
    return tl_done();
}

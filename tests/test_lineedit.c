/* test_lineedit.c - the line editor's key decoding and editing, without a
 * terminal: byte sequences as terminals send them go through le_parse_byte
 * and le_apply, and the resulting line and cursor are checked against what
 * the keys must do (worked out by hand in each case). */
#include <string.h>

#include "lineedit.h"
#include "testlib.h"

/* Types the bytes s into the editor (starting a new line unless cont);
 * returns the last action that was not LE_CONTINUE, or LE_CONTINUE. */
static le_action type(le_editor *e, const char *s, bool cont)
{
    static le_parser p;
    if (!cont) {
        le_begin(e);
        memset(&p, 0, sizeof p);
    }
    le_action last = LE_CONTINUE;
    for (const unsigned char *b = (const unsigned char *)s; *b; b++) {
        char text[8];
        size_t len;
        le_key k = le_parse_byte(&p, *b, text, &len);
        le_action a = le_apply(e, k, text, len);
        if (a != LE_CONTINUE)
            last = a;
    }
    return last;
}

static bool line_is(le_editor *e, const char *want, size_t want_cursor)
{
    size_t cur;
    const char *got = le_line(e, &cur);
    if (strcmp(got, want) != 0 || cur != want_cursor) {
        TL_NOTE("line '%s' cursor %zu; wanted '%s' cursor %zu", got, cur, want, want_cursor);
        return false;
    }
    return true;
}

#define LEFT "\x1b[D"
#define RIGHT "\x1b[C"
#define UP "\x1b[A"
#define DOWN "\x1b[B"

int main(void)
{
    le_editor *e = le_new(3);
    TL_OK(e != NULL, "editor created");
    if (!e)
        return tl_done();

    type(e, "abx" LEFT "\x7f" "y", false); /* abx, left, backspace (the b), y */
    TL_OK(line_is(e, "ayx", 2), "left + backspace + insert in the middle");
    type(e, "hello world\x01" "X\x05" "!", false); /* ctrl-a X, ctrl-e ! */
    TL_OK(line_is(e, "Xhello world!", 13), "ctrl-a / ctrl-e");
    type(e, "hello world\x1b[H" "\x1b[3~" "\x1b[F" "\x1bOD" "\x1bOH" RIGHT "\x04", false);
    TL_OK(line_is(e, "elo world", 1), "home/end/delete in CSI and SS3 spellings, ctrl-d deletes under the cursor");
    type(e, "one two three\x17", false); /* ctrl-w */
    TL_OK(line_is(e, "one two ", 8), "ctrl-w kills the word before the cursor");
    type(e, "one two  \x17", false);
    TL_OK(line_is(e, "one ", 4), "ctrl-w kills trailing spaces and the word before them");
    type(e, "abcdef" LEFT LEFT "\x0b", false); /* ctrl-k */
    TL_OK(line_is(e, "abcd", 4), "ctrl-k kills to the end");
    type(e, "abcdef" LEFT LEFT "\x15", false); /* ctrl-u */
    TL_OK(line_is(e, "ef", 0), "ctrl-u kills to the start");
    type(e, "ab cd ef\x1b[1;5D\x1b[1;5D" "X\x1b" "f" "Y", false); /* ctrl-left twice, X, alt-f, Y */
    TL_OK(line_is(e, "ab XcdY ef", 7), "word left/right (ctrl-arrows, alt-f)");

    /* UTF-8: é (2 bytes), 日 (3 bytes), 😀 (4 bytes) */
    type(e, "a\xc3\xa9\xe6\x97\xa5\xf0\x9f\x98\x80" LEFT LEFT, false);
    TL_OK(line_is(e, "a\xc3\xa9\xe6\x97\xa5\xf0\x9f\x98\x80", 3), "left moves over whole UTF-8 characters");
    type(e, "\x7f", true);
    TL_OK(line_is(e, "a\xe6\x97\xa5\xf0\x9f\x98\x80", 1), "backspace removes a whole 2-byte character");
    type(e, "\x1b[3~", true);
    TL_OK(line_is(e, "a\xf0\x9f\x98\x80", 1), "delete removes a whole 3-byte character");
    type(e, RIGHT "b", true);
    TL_OK(line_is(e, "a\xf0\x9f\x98\x80" "b", 6), "right moves over a 4-byte character");
    TL_OK(le_text_width("a\xc3\xa9\xe6\x97\xa5\xf0\x9f\x98\x80", 10) == 6, "display width: 1 + 1 + 2 + 2 columns");
    /* a lead byte followed by ASCII: the broken character is dropped, the ASCII kept */
    type(e, "\xe6" "z", false);
    TL_OK(line_is(e, "z", 1), "an incomplete UTF-8 character followed by ASCII");

    TL_OK(type(e, "abc\r", false) == LE_DONE, "enter ends the line");
    TL_OK(type(e, "\x04", false) == LE_EOF, "ctrl-d on an empty line is end of input");
    TL_OK(type(e, "\x03", false) == LE_INTERRUPT, "ctrl-c on an empty line interrupts");
    TL_OK(type(e, "abc\x03", false) == LE_CANCEL && line_is(e, "", 0), "ctrl-c on a line discards it");

    /* history: 3 entries kept, no empty lines, no repeats of the newest */
    le_history_add(e, "first");
    le_history_add(e, "second");
    le_history_add(e, "second");
    le_history_add(e, "");
    TL_OK(le_history_count(e) == 2, "repeats and empty lines are not added (%d entries)", le_history_count(e));
    type(e, "draft" UP, false);
    TL_OK(line_is(e, "second", 6), "up recalls the newest entry");
    type(e, UP UP, true);
    TL_OK(line_is(e, "first", 5), "up stops at the oldest entry");
    type(e, DOWN DOWN, true);
    TL_OK(line_is(e, "draft", 5), "down past the newest entry gives back the line being typed");
    type(e, UP LEFT "X\x10", true); /* edit a recalled entry, then ctrl-p */
    TL_OK(line_is(e, "first", 5), "ctrl-p goes up from an edited entry");
    le_history_add(e, "third");
    le_history_add(e, "fourth");
    type(e, UP UP UP UP, false);
    TL_OK(le_history_count(e) == 3 && line_is(e, "second", 6), "the oldest entries are forgotten past the limit");
    le_free(e);
    return tl_done();
}

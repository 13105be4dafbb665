/* termsafe.h - model output made safe for a terminal.
 *
 * Text a model generates is untrusted: a tokenizer's tokens can hold escape
 * sequences (retitle the terminal, rewrite the screen, worse). When output
 * goes to a terminal, term_safe_write shows control characters instead of
 * sending them: C0 controls as caret notation (ESC as "^[", CR as "^M"), DEL
 * as "^?", C1 controls (U+0080..U+009F) and bytes that are not UTF-8 as
 * U+FFFD. Newline and tab pass through, as does every other UTF-8 character.
 * A character split across two writes (a multi-byte character spread over
 * two tokens) is held back until it is complete; term_safe_flush ends the
 * stream (an incomplete character then becomes U+FFFD). Pipes and --json
 * keep the raw bytes: callers use this only when the stream is a terminal. */
#ifndef COL_APPS_TERMSAFE_H
#define COL_APPS_TERMSAFE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

typedef struct {
    unsigned char held[4]; /* the start of a UTF-8 character not complete yet */
    size_t nheld;
} term_safe;

/* Writes p[0..n) to f as described above; returns false on a write error. */
bool term_safe_write(term_safe *s, FILE *f, const char *p, size_t n);
/* Ends the stream: an incomplete character held back is written as U+FFFD. */
bool term_safe_flush(term_safe *s, FILE *f);
/* The whole of a NUL-terminated text, with term_safe_write and flush. */
bool term_safe_puts(FILE *f, const char *text);

#endif

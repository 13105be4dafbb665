/* lineedit.h - a small line editor for interactive programs on a terminal.
 *
 * One line at a time, wrapped over several rows when it is wider than the
 * terminal: left/right (ctrl-b/f), word left/right (ctrl-left/right,
 * alt-b/f), home/end (ctrl-a/e), backspace, delete (ctrl-d on a non-empty
 * line), ctrl-k (kill to end), ctrl-u (kill to start), ctrl-w (kill the word
 * before the cursor), ctrl-l (clear the screen), up/down (ctrl-p/n) through
 * an in-memory history. The cursor moves by UTF-8 characters; CJK and other
 * wide characters take two columns.
 *
 * The editing itself (le_parse_byte + le_apply) works on memory only, so it
 * can be tested without a terminal; le_readline puts the terminal in raw
 * mode around it and redraws the line after each key. */
#ifndef COL_APPS_LINEEDIT_H
#define COL_APPS_LINEEDIT_H

#include <stdbool.h>
#include <stddef.h>

typedef enum {
    LE_KEY_NONE,      /* nothing yet (inside an escape sequence), or a key that does nothing */
    LE_KEY_TEXT,      /* one UTF-8 character (or an invalid byte) to insert */
    LE_KEY_LEFT, LE_KEY_RIGHT, LE_KEY_WORD_LEFT, LE_KEY_WORD_RIGHT, LE_KEY_HOME, LE_KEY_END,
    LE_KEY_UP, LE_KEY_DOWN,
    LE_KEY_BACKSPACE, LE_KEY_DELETE, LE_KEY_CTRL_D,
    LE_KEY_KILL_END, LE_KEY_KILL_START, LE_KEY_KILL_WORD,
    LE_KEY_ENTER, LE_KEY_CTRL_C, LE_KEY_CLEAR,
} le_key;

/* Turns the bytes a terminal sends into keys (escape sequences, UTF-8). */
typedef struct {
    unsigned char seq[16];
    int n;     /* bytes held */
    int need;  /* UTF-8: bytes the character needs */
} le_parser;

/* Feeds one byte; returns the key it completes (LE_KEY_NONE while a
 * sequence is incomplete). For LE_KEY_TEXT, text[0..*len) is the character. */
le_key le_parse_byte(le_parser *p, unsigned char byte, char text[8], size_t *len);

typedef enum {
    LE_CONTINUE,  /* keep reading keys */
    LE_DONE,      /* ENTER: the line is complete */
    LE_EOF,       /* ctrl-d on an empty line */
    LE_INTERRUPT, /* ctrl-c on an empty line */
    LE_CANCEL,    /* ctrl-c on a non-empty line: the line was discarded */
    LE_REDRAW_ALL /* ctrl-l: clear the screen, then redraw */
} le_action;

typedef struct le_editor le_editor;

/* history_max: entries kept (older ones are forgotten). NULL when out of memory. */
le_editor *le_new(int history_max);
void le_free(le_editor *e);

/* Starts a new, empty line (history browsing starts from the newest entry). */
void le_begin(le_editor *e);
/* Applies one key to the line being edited. */
le_action le_apply(le_editor *e, le_key key, const char *text, size_t len);
/* The line being edited: NUL-terminated, *cursor is a byte offset on a
 * character boundary. */
const char *le_line(const le_editor *e, size_t *cursor);

/* Adds a line to the history (empty lines and repeats of the newest entry
 * are not added). Returns false when out of memory. */
bool le_history_add(le_editor *e, const char *line);
int le_history_count(const le_editor *e);
/* Loads a history file (one entry a line; a missing file is not an error)
 * and remembers the path: le_history_save_line appends each new entry to it.
 * Returns false when the file exists but cannot be read. */
bool le_history_load(le_editor *e, const char *path);
void le_history_save_line(le_editor *e, const char *line);

/* Display columns of the UTF-8 text s[0..n) (wide characters 2, combining 0). */
size_t le_text_width(const char *s, size_t n);

/* Reads one line from the terminal fd_in, echoing to fd_out with the prompt.
 * *out receives a malloc'ed NUL-terminated line (without the newline) on
 * LE_DONE; otherwise NULL. Returns LE_DONE, LE_EOF, LE_INTERRUPT, or
 * LE_CANCEL (never LE_CONTINUE); -1 when the terminal cannot be used (not
 * a terminal, read error). The line is not added to the history. */
int le_readline(le_editor *e, const char *prompt, int fd_in, int fd_out, char **out);

#endif

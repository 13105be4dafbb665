/* progress.h - a live progress line that fits the terminal: fields joined by two spaces, the least important
 * dropped first until the line fits, redrawn at the new width after the terminal is resized (SIGWINCH). */
#ifndef COL_APPS_PROGRESS_H
#define COL_APPS_PROGRESS_H

#include <stdbool.h>
#include <stddef.h>

typedef struct {
    const char *text; /* "" or NULL: left out */
    int rank;         /* importance: 0 the most important; the highest rank is dropped first */
    const char *sep;  /* what comes before it (after an earlier field): NULL for two spaces */
} progress_field;

/* Joins the fields in their order, two spaces apart (or their sep), into buf (size bytes), leaving out the least important ones
 * (the highest rank; of equal ranks the later one) until the line is at most width columns (one column per byte:
 * the fields are ASCII). The most important field alone is cut to width. Returns the line's length. */
size_t progress_fit(const progress_field *f, int n, int width, char *buf, size_t size);

/* The columns a line written to fd may take without wrapping: the terminal's width less one (TIOCGWINSZ), else
 * $COLUMNS less one, else 79. */
int progress_width(int fd);

/* Installs the SIGWINCH handler (it only sets a flag). */
void progress_watch_resize(void);
/* Whether the terminal was resized since the last call (clears the flag). */
bool progress_resized(void);

#endif

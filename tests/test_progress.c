/* test_progress.c - the progress line fitted to a width (apps/progress.c): fields dropped least important first,
 * the rest in their order, never longer than the width; the width from $COLUMNS when not a terminal. */
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "progress.h"
#include "testlib.h"

int main(void)
{
    /* the memory fields as one group: one space apart */
    const progress_field f[] = {{"step 12/200", 0, NULL}, {"loss 3.4567", 1, NULL}, {"lr 1.00e-03", 3, NULL},
                                {"1234 tok/s", 4, NULL},  {"ETA 3m20s", 2, NULL},   {"mem: compute 12.3M", 5, NULL},
                                {"host 234.5M", 6, " "},  {"nvme 0K", 7, " "}};
    char buf[256];
    const char *full = "step 12/200  loss 3.4567  lr 1.00e-03  1234 tok/s  ETA 3m20s  mem: compute 12.3M "
                       "host 234.5M nvme 0K";
    size_t n = progress_fit(f, 8, 200, buf, sizeof buf);
    TL_OK(strcmp(buf, full) == 0 && n == strlen(full), "wide enough: every field, two spaces apart (%s)", buf);
    n = progress_fit(f, 8, (int)strlen(full), buf, sizeof buf);
    TL_OK(strcmp(buf, full) == 0, "exactly as wide as the line: all of it");
    n = progress_fit(f, 8, (int)strlen(full) - 1, buf, sizeof buf);
    TL_OK(strcmp(buf, "step 12/200  loss 3.4567  lr 1.00e-03  1234 tok/s  ETA 3m20s  mem: compute 12.3M "
                      "host 234.5M") == 0,
          "one column short: the least important field (nvme) goes first (%s)", buf);
    n = progress_fit(f, 8, 60, buf, sizeof buf);
    TL_OK(strcmp(buf, "step 12/200  loss 3.4567  lr 1.00e-03  1234 tok/s  ETA 3m20s") == 0 && n == 60,
          "60 columns: the memory fields go, the rest keeps its order (%s)", buf);
    n = progress_fit(f, 8, 40, buf, sizeof buf);
    TL_OK(strcmp(buf, "step 12/200  loss 3.4567  ETA 3m20s") == 0, "40 columns: step, loss, ETA (%s)", buf);
    n = progress_fit(f, 8, 5, buf, sizeof buf);
    TL_OK(strcmp(buf, "step ") == 0 && n == 5, "narrower than the first field: it is cut to the width ('%s')", buf);
    const progress_field g[] = {{"a", 0, NULL}, {"", 9, NULL}, {NULL, 9, NULL}, {"b", 1, "-"}};
    progress_fit(g, 4, 80, buf, sizeof buf);
    TL_OK(strcmp(buf, "a-b") == 0, "empty fields are left out; a field's own separator ('%s')", buf);
    for (int w = 0; w <= 120; w++) {
        n = progress_fit(f, 8, w, buf, sizeof buf);
        if (n > (size_t)w || strlen(buf) != n) {
            TL_OK(false, "width %d gave %zu columns", w, n);
            break;
        }
        if (w == 120)
            TL_OK(true, "widths 0..120: never longer than the width");
    }
    /* not a terminal: $COLUMNS less one (a line of exactly the width would wrap on some terminals), else 79 */
    int fd = STDIN_FILENO;
    if (isatty(fd))
        TL_NOTE("stdin is a terminal: the $COLUMNS checks use a pipe");
    int p[2];
    if (pipe(p) == 0) {
        setenv("COLUMNS", "60", 1);
        TL_OK(progress_width(p[0]) == 59, "COLUMNS=60 on a pipe: 59 (%d)", progress_width(p[0]));
        unsetenv("COLUMNS");
        TL_OK(progress_width(p[0]) == 79, "no COLUMNS: 79");
        setenv("COLUMNS", "x", 1);
        TL_OK(progress_width(p[0]) == 79, "a COLUMNS that is no number: 79");
        close(p[0]), close(p[1]);
    }
    TL_OK(!progress_resized(), "no resize before the handler");
    progress_watch_resize();
    raise(SIGWINCH);
    TL_OK(progress_resized() && !progress_resized(), "SIGWINCH sets the flag once, the call clears it");
    return tl_done();
}

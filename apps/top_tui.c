/* top_tui.c - a whole terminal session of the statistics screens (top_view.h): colossal-top's live view, and a
 * program showing its own run (colossal-finetune --tui). */
#include "top_view.h"
#include "timer.h"

#include <locale.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

struct top_tui {
    top_ui ui;
    SCREEN *screen;
    top_proc cur, prev;
    bool quit;
    char status[512]; /* top_tui_set_status: the bottom row */
};

static double wall_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static double mono_ms(void) { return 1e3 * col_seconds(); }

top_tui *top_tui_open(const char *title)
{
    if (!isatty(STDIN_FILENO) || !isatty(STDOUT_FILENO))
        return NULL;
    top_tui *t = calloc(1, sizeof *t);
    if (!t)
        return NULL;
    setlocale(LC_ALL, "");
    t->screen = newterm(NULL, stdout, stdin); /* unlike initscr, returns NULL rather than exiting */
    if (!t->screen) {
        free(t);
        return NULL;
    }
    cbreak();
    noecho();
    set_escdelay(25); /* Esc is a key here (it clears the filter): no second's wait for a sequence after it */
    keypad(stdscr, TRUE);
    curs_set(0);
    t->ui = (top_ui){.view = TOP_VIEW_OVERVIEW, .delay = 1.0, .title = title ? title : "colossal-top"};
    top_view_setup(&t->ui);
    return t;
}

top_ui *top_tui_ui(top_tui *t) { return &t->ui; }

void top_tui_frame(top_tui *t, const top_proc *procs, int n)
{
    if (t->ui.selected >= n)
        t->ui.selected = n > 0 ? n - 1 : 0;
    t->ui.now = wall_now();
    top_view_draw(stdscr, &t->ui, procs, n);
    if (t->status[0] && LINES > 1) {
        wmove(stdscr, LINES - 1, 0);
        wclrtoeol(stdscr);
        mvwaddnstr(stdscr, LINES - 1, 1, t->status, COLS > 2 ? COLS - 2 : 0);
    }
    wnoutrefresh(stdscr);
    doupdate();
}

void top_tui_set_status(top_tui *t, const char *line) { snprintf(t->status, sizeof t->status, "%s", line); }

top_wait_result top_tui_wait(top_tui *t, const top_proc *procs, int n, int ms)
{
    double end = mono_ms() + ms;
    for (;;) {
        double left = end - mono_ms();
        if (left <= 0)
            return TOP_WAIT_TIME;
        wtimeout(stdscr, (int)left + 1);
        int ch = wgetch(stdscr);
        if (ch == ERR)
            continue; /* the time is up, or a signal came in: look at the clock */
        top_sort sort = t->ui.sort;
        char filter[sizeof t->ui.filter];
        memcpy(filter, t->ui.filter, sizeof filter);
        if (!top_view_key(&t->ui, ch, n))
            return TOP_WAIT_QUIT;
        if (ch == KEY_RESIZE)
            clearok(stdscr, TRUE); /* the terminal's old contents are not to be trusted */
        if (sort != t->ui.sort || strcmp(filter, t->ui.filter))
            return TOP_WAIT_LIST;
        top_tui_frame(t, procs, n);
    }
}

bool top_tui_show(top_tui *t, const mt_stats_snapshot *s)
{
    t->prev = t->cur;
    top_proc_set(&t->cur, s, &t->prev);
    t->ui.delay = 0;
    top_tui_frame(t, &t->cur, 1);
    wtimeout(stdscr, 0);
    int ch;
    while (!t->quit && (ch = wgetch(stdscr)) != ERR) {
        if (!top_view_key(&t->ui, ch, 1))
            t->quit = true;
        else
            top_tui_frame(t, &t->cur, 1);
    }
    return t->quit;
}

void top_tui_close(top_tui *t)
{
    if (!t)
        return;
    endwin();
    delscreen(t->screen);
    free(t);
}

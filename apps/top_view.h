/* top_view.h - draws the live statistics of colossal processes with
 * ncursesw: the screens of colossal-top, and of colossal-finetune --tui for
 * its own run, so the drawing code exists once.
 *
 * Views (keys 1 2 3, or Tab): 1 overview - per process a bar per tier
 * (used / budget), the step, loss and its sparkline; the ranks of a
 * parallel run under one header, a line each (device, tiers, step, loss,
 * collectives' bytes and wait); 2 chunk map of the selected process,
 * coloured by tier; 3 bandwidth per link, the step-time split, and a
 * rank's collectives. Up/Down or j/k select a process, h ? F1 show the
 * help, q quits; colossal-top's list (top_ui.lister) also has USER CPU% RSS
 * columns, sorting (s, F6) and a filter (/): top_procs.h.
 *
 * A program that shows its own run needs three calls:
 *     top_tui *t = top_tui_open("colossal-finetune");   (NULL: not a terminal)
 *     every step:  if (top_tui_show(t, &snapshot)) ...the user pressed q...
 *     at the end:  top_tui_close(t);
 * with the snapshot from mt_stats_pub_snapshot(). */
#ifndef COL_TOP_VIEW_H
#define COL_TOP_VIEW_H

#ifndef NCURSES_WIDECHAR
#define NCURSES_WIDECHAR 1
#endif
#include <curses.h>
#include <stdbool.h>

#include "mt_stats.h"
#include "units.h"

typedef enum { TOP_VIEW_OVERVIEW = 1, TOP_VIEW_CHUNKS = 2, TOP_VIEW_LINKS = 3 } top_view_kind;

/* One process as shown: its snapshot, or why there is none. */
typedef struct {
    int pid;
    bool ok;                 /* snap is valid */
    char problem[COL_ERR_MSG_MAX]; /* when !ok: one line saying why (another format version, a read error) */
    mt_stats_snapshot snap;
    double rate[MT_NLINKS];  /* bytes/s per link between the last two publishes; < 0: not known yet */
    /* the process as the system sees it (top_procs.h: top_proc_sys), left empty where /proc cannot tell */
    char user[32];           /* its owner's login name (the uid in digits when it has none); "" unknown */
    char cmdline[256];       /* its command line, the arguments joined by spaces, made printable */
    uint64_t cpu_ticks;      /* user + system time, clock ticks */
    double cpu_at;           /* monotonic seconds when cpu_ticks was read */
    double cpu_percent;      /* of one core between the last two refreshes; < 0: not known yet */
    uint64_t rss_bytes;      /* resident memory; 0 unknown */
} top_proc;

/* How colossal-top orders the processes (s or F6 cycles; the ranks of a run stay together). */
typedef enum { TOP_SORT_PID, TOP_SORT_MEMORY, TOP_SORT_RATE, TOP_SORT_NAME, TOP_NSORTS } top_sort;

typedef struct {
    top_view_kind view;
    int selected;      /* index of the selected process */
    bool color;        /* the terminal has colours (set by top_view_setup) */
    bool unicode;      /* the locale is UTF-8: block characters for the sparkline and bars */
    double delay;      /* refresh period shown in the title, seconds */
    const char *title; /* "colossal-top", or the program showing itself */
    double now;        /* wall-clock time of this frame (epoch seconds): uptimes, "no update for" */
    bool help;         /* the help screen is shown (h, ? or F1; any key closes it) */
    bool lister;       /* colossal-top's list (sort, filter, the USER CPU% RSS columns); not a program's own view */
    top_sort sort;
    char filter[64];   /* "": all; else a substring of the program, run name or command line (/ edits it) */
    bool filtering;    /* the filter prompt is open: keys edit the filter, Enter keeps it, Esc clears it */
    int total;         /* processes running, before the filter (the lister's title says "n of total") */
    uint64_t machine_memory; /* bytes: the bars of tiers without a budget show used against this; 0 unknown */
} top_ui;

/* Sets p from a fresh snapshot; prev (may be NULL) is the same process's
 * previous state, for the link rates. */
void top_proc_set(top_proc *p, const mt_stats_snapshot *s, const top_proc *prev);


/* After initscr/newterm: colour pairs (when the terminal has colours) and
 * the character set (from the locale, which the caller has set with
 * setlocale). Fills ui->color and ui->unicode. */
void top_view_setup(top_ui *ui);

/* Draws one whole frame of n processes into w (erased first; clipped to
 * its size, whatever it is). Does not refresh w. */
void top_view_draw(WINDOW *w, const top_ui *ui, const top_proc *procs, int n);

/* Applies a key: view switches and selection (n processes), the help
 * screen, and for a lister the sort and the filter prompt. Returns false
 * for the quit keys (q, Q, Esc with no filter and no prompt open). */
bool top_view_key(top_ui *ui, int key, int n);

/* ---- a whole terminal session (curses mode on stdin/stdout) ---- */

typedef struct top_tui top_tui;

/* Enters curses mode (setlocale, initscr, no echo, keys without Enter, hidden
 * cursor, colours). NULL when stdin or stdout is not a terminal or the
 * terminal cannot be used. */
top_tui *top_tui_open(const char *title);
/* Draws one process's snapshot (rates from the previous call) and handles
 * the keys typed since, without waiting. Returns true once q was pressed. */
bool top_tui_show(top_tui *t, const mt_stats_snapshot *s);
/* Draws n processes (ui state kept between calls). */
void top_tui_frame(top_tui *t, const top_proc *procs, int n);
/* Waits up to ms milliseconds for keys, redrawing on each key and on a
 * window resize. TOP_WAIT_TIME: the time is up; TOP_WAIT_QUIT: a quit key;
 * TOP_WAIT_LIST: the sort or the filter changed (the caller makes the list
 * again and waits for the rest of the time). */
typedef enum { TOP_WAIT_TIME, TOP_WAIT_QUIT, TOP_WAIT_LIST } top_wait_result;
top_wait_result top_tui_wait(top_tui *t, const top_proc *procs, int n, int ms);
top_ui *top_tui_ui(top_tui *t);
/* A line of the program's own (its progress line: ETA, learning rate) shown on the bottom row from the next
 * frame on ("" for none). */
void top_tui_set_status(top_tui *t, const char *line);
/* Leaves curses mode and frees t. NULL is ignored. */
void top_tui_close(top_tui *t);

#endif

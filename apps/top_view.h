/* top_view.h - draws the live statistics of colossal processes with
 * ncursesw: the screens of colossal-top, and of colossal-finetune --tui for
 * its own run, so the drawing code exists once.
 *
 * Views (keys 1 2 3, or Tab): 1 overview - per process a bar per tier
 * (used / budget), the step, loss and its sparkline; the ranks of a
 * parallel run under one header, a line each (device, tiers, step, loss,
 * collectives' bytes and wait); 2 chunk map of the selected process,
 * coloured by tier; 3 bandwidth per link, the step-time split, and a
 * rank's collectives. Up/Down or j/k select a process, q quits.
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

typedef enum { TOP_VIEW_OVERVIEW = 1, TOP_VIEW_CHUNKS = 2, TOP_VIEW_LINKS = 3 } top_view_kind;

/* One process as shown: its snapshot, or why there is none. */
typedef struct {
    int pid;
    bool ok;                 /* snap is valid */
    char problem[COL_ERR_MSG_MAX]; /* when !ok: one line saying why (another format version, a read error) */
    mt_stats_snapshot snap;
    double rate[MT_NLINKS];  /* bytes/s per link between the last two publishes; < 0: not known yet */
} top_proc;

typedef struct {
    top_view_kind view;
    int selected;      /* index of the selected process */
    bool color;        /* the terminal has colours (set by top_view_setup) */
    bool unicode;      /* the locale is UTF-8: block characters for the sparkline and bars */
    double delay;      /* refresh period shown in the title, seconds */
    const char *title; /* "colossal-top", or the program showing itself */
    double now;        /* wall-clock time of this frame (epoch seconds): uptimes, "no update for" */
} top_ui;

/* Sets p from a fresh snapshot; prev (may be NULL) is the same process's
 * previous state, for the link rates. */
void top_proc_set(top_proc *p, const mt_stats_snapshot *s, const top_proc *prev);

/* Orders procs for showing: the ranks of a parallel run (mt_stats_is_rank,
 * the same run id) together, by rank, where the run's lowest pid would be;
 * every other process keeps its place (the list comes sorted by pid). */
void top_procs_group(top_proc *procs, int n);
/* Whether procs[i] and procs[j] are ranks of the same parallel run. */
bool top_same_run(const top_proc *a, const top_proc *b);

/* After initscr/newterm: colour pairs (when the terminal has colours) and
 * the character set (from the locale, which the caller has set with
 * setlocale). Fills ui->color and ui->unicode. */
void top_view_setup(top_ui *ui);

/* Draws one whole frame of n processes into w (erased first; clipped to
 * its size, whatever it is). Does not refresh w. */
void top_view_draw(WINDOW *w, const top_ui *ui, const top_proc *procs, int n);

/* Applies a key: view switches and selection (n processes). Returns false
 * for the quit keys (q, Q, Esc). */
bool top_view_key(top_ui *ui, int key, int n);

/* "12.0M": bytes with a binary-prefix unit, one decimal ("512B" below 1 KiB). */
void top_fmt_bytes(double bytes, char *buf, size_t n);

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
 * window resize; returns false when a quit key was pressed. */
bool top_tui_wait(top_tui *t, const top_proc *procs, int n, int ms);
top_ui *top_tui_ui(top_tui *t);
/* A line of the program's own (its progress line: ETA, learning rate) shown on the bottom row from the next
 * frame on ("" for none). */
void top_tui_set_status(top_tui *t, const char *line);
/* Leaves curses mode and frees t. NULL is ignored. */
void top_tui_close(top_tui *t);

#endif

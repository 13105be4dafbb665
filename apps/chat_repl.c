/* chat_repl.c - colossal-chat's turns: the commands (/help, /stats, /reset,
 * /system, /quit), the interactive loop on a terminal (the line editor, a
 * quiet terminal while a reply streams) and the piped loop (see chat.h). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "chat.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <termios.h>
#include <unistd.h>

#include "lineedit.h"

#define PROG "colossal-chat"

volatile sig_atomic_t chat_interrupted;

static void on_sigint(int sig)
{
    (void)sig;
    chat_interrupted = 1;
}

const char chat_commands_help[] =
    "/help            these commands\n"
    "/stats           show (or stop showing) a tokens/s line after each reply (as --verbose)\n"
    "/reset           forget the conversation\n"
    "/system TEXT     set the system prompt (without TEXT: clear it); the conversation is kept\n"
    "/quit            quit (as ctrl-d)\n"
    "//TEXT           send /TEXT (a line starting with /)\n";

void chat_print_stats(const chat_reply *r)
{
    double gen = r->gen_s > 0 ? r->gen_s : 1e-9, pre = r->prompt_s > 0 ? r->prompt_s : 1e-9;
    fprintf(stderr, "(%d token%s in %.2f s, %.1f tokens/s; prompt: %d token%s in %.2f s, %.1f tokens/s)\n", r->nids,
            r->nids == 1 ? "" : "s", r->gen_s, r->nids / gen, r->nprompt, r->nprompt == 1 ? "" : "s", r->prompt_s,
            r->nprompt / pre);
}

static void history_path(char *buf, size_t size)
{
    const char *state = getenv("XDG_STATE_HOME"), *home = getenv("HOME");
    char dir[4096];
    buf[0] = '\0';
    if (state && state[0] == '/')
        snprintf(dir, sizeof dir, "%s", state);
    else if (home && home[0] == '/')
        snprintf(dir, sizeof dir, "%s/.local/state", home);
    else
        return;
    /* mkdir -p of dir/colossal; failures only mean no history file */
    for (char *p = dir + 1;; p++) {
        if (*p == '/' || *p == '\0') {
            char c = *p;
            *p = '\0';
            mkdir(dir, 0700);
            *p = c;
            if (!c)
                break;
        }
    }
    int k = snprintf(buf, size, "%s/colossal", dir);
    if (k < 0 || (size_t)k >= size || (mkdir(buf, 0700) != 0 && errno != EEXIST)) {
        buf[0] = '\0';
        return;
    }
    snprintf(buf + k, size - (size_t)k, "/chat_history");
}

/* A command line ("/..." but not "//..."). Returns false to quit. */
static bool handle_command(chat_session *s, const char *line, col_err *err)
{
    const char *arg = strchr(line, ' ');
    size_t cmd = arg ? (size_t)(arg - line) : strlen(line);
    arg = arg ? arg + 1 : "";
#define IS(name) (cmd == sizeof name - 1 && strncmp(line, name, cmd) == 0)
    if (IS("/quit"))
        return false;
    if (IS("/help")) {
        fputs(chat_commands_help, stderr);
    } else if (IS("/stats")) {
        s->stats = !s->stats;
        fprintf(stderr, s->stats ? "(tokens/s shown after each reply)\n" : "(tokens/s no longer shown)\n");
    } else if (IS("/reset")) {
        if (s->conv)
            chat_conv_reset(s->conv);
        if (s->interactive)
            fprintf(stderr, "(conversation cleared)\n");
    } else if (IS("/system")) {
        if (!s->conv)
            fprintf(stderr, PROG ": /system needs a chat template (this model completes text: use --template)\n");
        else if (chat_conv_set_system(s->conv, arg, err) != COL_OK)
            chat_print_err(err);
        else if (s->interactive)
            fprintf(stderr, *arg ? "(system prompt set)\n" : "(system prompt cleared)\n");
    } else {
        fprintf(stderr, PROG ": unknown command '%.*s': /help lists the commands (// sends a line starting with /)\n",
                (int)cmd, line);
        if (!s->interactive)
            s->failures++;
    }
#undef IS
    return true;
}

/* While a reply streams on a terminal: no echo and no line editing, so that what is typed does not land inside
 * the reply; it stays in the terminal's queue (ctrl-c still stops the reply). Returns whether it changed. */
static bool quiet_terminal(struct termios *old)
{
    struct termios t;
    if (tcgetattr(STDIN_FILENO, old) != 0)
        return false;
    t = *old;
    t.c_lflag &= ~(tcflag_t)(ECHO | ICANON);
    t.c_cc[VMIN] = 1;
    t.c_cc[VTIME] = 0;
    return tcsetattr(STDIN_FILENO, TCSADRAIN, &t) == 0;
}

bool chat_handle_line(chat_session *s, const char *line, col_err *err)
{
    if (line[0] == '\0')
        return true;
    if (line[0] == '/' && line[1] != '/')
        return handle_command(s, line, err);
    if (line[0] == '/')
        line++;
    chat_reply r;
    bool skipped = false;
    col_status st;
    struct sigaction sa = {.sa_handler = on_sigint}, old;
    struct termios term;
    bool quiet = false;
    chat_interrupted = 0;
    if (s->interactive) {
        sigaction(SIGINT, &sa, &old);
        quiet = quiet_terminal(&term);
    }
    if (s->conv)
        st = chat_turn(s->g, s->conv, line, stdout, &r, &skipped, err);
    else
        st = chat_complete(s->g, line, stdout, &r, err);
    if (quiet)
        tcsetattr(STDIN_FILENO, TCSADRAIN, &term); /* DRAIN: what was typed stays for the next line */
    if (s->interactive)
        sigaction(SIGINT, &old, NULL);
    if (st != COL_OK) {
        chat_print_err(err);
        s->failures++;
        return s->interactive; /* piped input: stop at a real error */
    }
    if (skipped) {
        s->failures++;
        return true;
    }
    printf("\n");
    fflush(stdout);
    if (r.finish == CHAT_FINISH_INTERRUPT)
        fprintf(stderr, "(reply stopped)\n");
    if (s->stats)
        chat_print_stats(&r);
    chat_reply_free(&r);
    return true;
}

int chat_run_interactive(chat_session *s, col_err *err)
{
    le_editor *ed = le_new(1000);
    if (!ed) {
        fprintf(stderr, PROG ": out of memory\n");
        return 1;
    }
    char hp[4200];
    history_path(hp, sizeof hp);
    if (hp[0] && !le_history_load(ed, hp))
        fprintf(stderr, PROG ": cannot read the history file %s: %s (going on without it)\n", hp, strerror(errno));
    fprintf(stderr, "%s\n", s->dev->desc);
    if (s->budget[0])
        fprintf(stderr, "%s\n", s->budget);
    if (s->dev->note[0])
        fprintf(stderr, "note: %s\n", s->dev->note);
    fprintf(stderr, "%s. /help lists the commands; ctrl-c stops a reply, ctrl-d quits.\n",
            s->conv ? "Chat" : "Text completion (no chat template)");
    for (;;) {
        char *line = NULL;
        int a = le_readline(ed, "> ", STDIN_FILENO, STDOUT_FILENO, &line);
        if (a == LE_CANCEL)
            continue;
        if (a != LE_DONE)
            break;
        le_history_add(ed, line);
        le_history_save_line(ed, line);
        bool go_on = chat_handle_line(s, line, err);
        free(line);
        if (!go_on)
            break;
    }
    le_free(ed);
    return 0;
}

int chat_run_piped(chat_session *s, col_err *err)
{
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    bool go_on = true;
    while (go_on && (n = getline(&line, &cap, stdin)) >= 0) {
        if (n > 0 && line[n - 1] == '\n')
            line[--n] = '\0';
        if (n > 0 && line[n - 1] == '\r')
            line[--n] = '\0';
        go_on = chat_handle_line(s, line, err);
    }
    free(line);
    return s->failures ? 1 : 0;
}

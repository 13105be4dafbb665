/* cliopt.h - what the command lines of every colossal program share: the
 * version line (--version), the suggestion for a mistyped long option
 * ("--stesp": did you mean '--steps'?), the exit statuses and the line of a
 * usage error. Each program keeps its own option table; these work on it. */
#ifndef COL_APPS_CLIOPT_H
#define COL_APPS_CLIOPT_H

#include <getopt.h>
#include <stdbool.h>
#include <stddef.h>

/* The exit statuses of every program (README.md, the man pages' EXIT STATUS). */
enum {
    CLI_EXIT_OK = 0,
    CLI_EXIT_FAIL = 1,         /* the work failed: a file, the model, the data, the device, the network */
    CLI_EXIT_USAGE = 2,        /* the command line is wrong: an unknown option, a bad value, a missing argument */
    CLI_EXIT_INTERRUPTED = 130 /* colossal-finetune stopped by Ctrl-C or SIGTERM, after saving */
};

/* The closing paragraph of every --help: "Exit status: ..." (the statuses above but the last, which
 * colossal-finetune's help adds), turned into the man page's EXIT STATUS section. */
extern const char cli_exit_help[];

/* "PROG 0.1.0 (git abc1234)": the release from configure.ac and the git revision the program was built from
 * ("PROG 0.1.0" when it was built outside a git checkout, e.g. from a release tarball); returns buf. */
const char *cli_version_line(const char *prog, char *buf, size_t n);

/* Prints the version line on stdout. */
void cli_print_version(const char *prog);

/* The long option of opts (an array ending with a zero entry) nearest to arg ("--stesp", "--stesp=3" or
 * "stesp"): at most 2 edits (insertions, deletions, substitutions, swaps of neighbours) away and close for
 * its length; NULL when none is. */
const char *cli_suggest(const char *arg, const struct option *opts);

/* The message for an argument getopt_long refused as unknown: "unknown option '--stesp'; did you mean
 * '--steps'?" (also for the one option it abbreviates), or "option '--lora' is ambiguous: --lora-rank,
 * --lora-alpha, ..." for a prefix of several options; into buf (n bytes), returned. */
const char *cli_unknown_option(const char *arg, const struct option *opts, char *buf, size_t n);

/* Writes the message into msg (n bytes) and returns CLI_EXIT_USAGE: for the parsers that return a usage
 * error to main. */
int cli_bad(char *msg, size_t n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* "PROG: MESSAGE (see PROG --help)" on stderr, then exit(CLI_EXIT_USAGE). */
_Noreturn void cli_usage_error(const char *prog, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* s as a whole decimal integer in lo..hi into *v; false (v untouched) otherwise. */
bool cli_to_ll(const char *s, long long lo, long long hi, long long *v);

/* s as an integer in lo..hi, or a usage error naming opt: "--ctx must be an integer in 2..16777216 (got 'x')". */
long long cli_parse_int(const char *prog, const char *s, const char *opt, long long lo, long long hi);

#endif

/* test_cliopt.c - the command-line pieces every program shares (apps/cliopt.c): the version line, the
 * suggestion for a mistyped long option (one or two edits, swaps of neighbours included, only when close
 * for the name's length), the message for an unknown or ambiguous option, the integer parser. */
#include <string.h>

#include "cliopt.h"
#include "testlib.h"

/* a program's table, as getopt_long takes it */
static const struct option opts[] = {
    {"steps", required_argument, 0, 1},     {"seed", required_argument, 0, 2},     {"seq", required_argument, 0, 3},
    {"temperature", required_argument, 0, 4}, {"lora-rank", required_argument, 0, 5},
    {"lora-alpha", required_argument, 0, 6}, {"lr", required_argument, 0, 7},      {"tokenizer", required_argument, 0, 8},
    {"overwrite", no_argument, 0, 9},       {"version", no_argument, 0, 10},       {0, 0, 0, 0}};

static bool suggests(const char *arg, const char *want)
{
    const char *got = cli_suggest(arg, opts);
    return want ? got && strcmp(got, want) == 0 : got == NULL;
}

static void test_suggest(void)
{
    TL_OK(suggests("--stesp", "steps"), "--stesp: two neighbours swapped, one edit: --steps");
    TL_OK(suggests("--stpes", "steps"), "--stpes: --steps");
    TL_OK(suggests("--step", "steps"), "--step: one letter missing: --steps");
    TL_OK(suggests("--stepss", "steps"), "--stepss: one letter too many: --steps");
    TL_OK(suggests("--tempreature", "temperature"), "--tempreature: --temperature");
    TL_OK(suggests("--temprature", "temperature"), "--temprature: --temperature");
    TL_OK(suggests("--tokeniser", "tokenizer"), "--tokeniser (British spelling): --tokenizer");
    TL_OK(suggests("--overwirte", "overwrite"), "--overwirte: --overwrite");
    TL_OK(suggests("--steps-x=3", "steps"), "--steps-x=3: two edits in a 7-letter name: --steps");
    TL_OK(suggests("--sx", NULL), "--sx: two edits in a 3-letter name are too far");
    TL_OK(suggests("--stesp=30", "steps"), "--stesp=30: the value after '=' is not part of the name");
    TL_OK(suggests("stesp", "steps"), "stesp without dashes: --steps");
    TL_OK(suggests("--ovrwrt", NULL), "--ovrwrt: three letters missing: too far");
    TL_OK(suggests("--l", NULL), "--l: one letter is close to nothing");
    TL_OK(suggests("--xy", NULL), "--xy: two edits from --lr but a 2-letter name: no suggestion");
    TL_OK(suggests("--bogus", NULL), "--bogus: nothing near");
    TL_OK(suggests("--", NULL), "--: nothing");
    TL_OK(suggests("--versoin", "version"), "--versoin: --version");
    char longname[200];
    memset(longname, 'a', sizeof longname - 1);
    longname[sizeof longname - 1] = '\0';
    TL_OK(suggests(longname, NULL), "a 199-letter argument: no suggestion, no overflow");
}

static void test_message(void)
{
    char buf[256];
    TL_OK(strcmp(cli_unknown_option("--stesp", opts, buf, sizeof buf),
                 "unknown option '--stesp'; did you mean '--steps'?") == 0, "the message suggests: %s", buf);
    TL_OK(strcmp(cli_unknown_option("--bogus", opts, buf, sizeof buf), "unknown option '--bogus'") == 0,
          "nothing near: no suggestion: %s", buf);
    TL_OK(strcmp(cli_unknown_option("--lora", opts, buf, sizeof buf),
                 "option '--lora' is ambiguous: --lora-rank, --lora-alpha") == 0, "a prefix of two: %s", buf);
    TL_OK(strcmp(cli_unknown_option("--tok", opts, buf, sizeof buf),
                 "unknown option '--tok'; did you mean '--tokenizer'?") == 0,
          "the one option a prefix abbreviates (a parser of whole names): %s", buf);
    TL_OK(strcmp(cli_unknown_option("-x", opts, buf, sizeof buf), "unknown option '-x'") == 0,
          "a short option: no suggestion: %s", buf);
    char small[16];
    cli_unknown_option("--stesp", opts, small, sizeof small);
    TL_OK(strlen(small) == sizeof small - 1, "a small buffer holds the message cut short");
    cli_unknown_option("--lora", opts, small, sizeof small);
    TL_OK(strlen(small) == sizeof small - 1, "a small buffer holds the ambiguity cut short");
}

static void test_version(void)
{
    char buf[256];
    cli_version_line("colossal-x", buf, sizeof buf);
    const char *want = "colossal-x " PACKAGE_VERSION;
    TL_OK(strncmp(buf, want, strlen(want)) == 0, "the version line starts with the name and the release: %s", buf);
    const char *rest = buf + strlen(want);
    bool plain = *rest == '\0';
    bool git = strncmp(rest, " (git ", 6) == 0 && rest[strlen(rest) - 1] == ')' && strlen(rest) >= 6 + 7 + 1;
    TL_OK(plain || git, "then nothing (no git checkout) or ' (git REV)': '%s'", rest);
}

static void test_int(void)
{
    long long v = -1;
    TL_OK(cli_to_ll("42", 0, 100, &v) && v == 42, "42 in 0..100");
    TL_OK(cli_to_ll("-5", -10, 10, &v) && v == -5, "-5 in -10..10");
    v = 7;
    TL_OK(!cli_to_ll("101", 0, 100, &v) && v == 7, "101 is out of 0..100 and v is untouched");
    TL_OK(!cli_to_ll("", 0, 100, &v), "an empty string is refused");
    TL_OK(!cli_to_ll("12x", 0, 100, &v), "trailing letters are refused");
    TL_OK(!cli_to_ll("99999999999999999999", 0, 1LL << 62, &v), "an overflow is refused");
    char msg[8];
    TL_OK(cli_bad(msg, sizeof msg, "%s", "a long message") == CLI_EXIT_USAGE && strcmp(msg, "a long ") == 0,
          "cli_bad returns the usage status with the message cut to the buffer");
}

int main(void)
{
    test_suggest();
    test_message();
    test_version();
    test_int();
    return tl_done();
}

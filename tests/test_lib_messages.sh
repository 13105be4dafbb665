#!/bin/sh
# test_lib_messages.sh - library code speaks of the library, not of a program's
# command line: no string literal in libcore/, memtier/ or models/ names an
# option such as --gpu-mem. A library error says what is wrong in its own terms
# and marks the setting at fault (col_err.settings, status.h); each program maps
# settings to its own options (apps/memopts.c and the apps' flag_of functions).
# The scanner is first shown to find such a literal and to pass the code that
# merely looks like one (stack[--sp], "models--%s").
set -u
: "${SRCDIR:?}"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
n=0
fails=0
ok() { n=$((n + 1)); echo "ok $n - $1"; }
notok() { n=$((n + 1)); fails=$((fails + 1)); echo "not ok $n - $1"; }

# scan FILE...: prints FILE:LINE: "literal" for each string literal that holds an
# option name: "--" then a letter, with no letter, digit, '_' or '-' before it
scan() {
    awk '{
        s = $0
        gsub(/\\./, "", s)             # escapes, so \" does not end a literal
        gsub(/\047"\047/, "", s)       # the character literal of a double quote
        while (match(s, /"[^"]*"/)) {
            lit = substr(s, RSTART, RLENGTH)
            if (lit ~ /(^|[^A-Za-z0-9_-])--[a-z]/)
                printf "%s:%d: %s\n", FILENAME, FNR, lit
            s = substr(s, RSTART + RLENGTH)
        }
    }' "$@"
}

# ---- the scanner finds a flag in a message and nothing in look-alikes ----
cat > "$tmp/flag.c" <<'EOF'
static int f(col_err *e) { return col_err_set(e, COL_EINVAL, "the budget is too small (--gpu-mem)"); }
static int g(col_err *e) { return col_err_set(e, COL_EINVAL, "a \"quoted\" word, then give --nvme-dir"); }
EOF
cat > "$tmp/clean.c" <<'EOF'
static int pop(int *stack, int sp) { return stack[--sp]; }
static void repo(char *b, const char *o, const char *m) { sprintf(b, "models--%s--%s", o, m); }
static const char q = '"'; static const char *s = "-- a dash pair, then --, and x--y";
EOF
[ "$(scan "$tmp/flag.c" | wc -l)" -eq 2 ] && ok "the scanner finds a flag name in a message (control)" ||
    notok "the scanner misses a flag name: $(scan "$tmp/flag.c")"
[ -z "$(scan "$tmp/clean.c")" ] && ok "the scanner passes code that only looks like a flag (control)" ||
    notok "the scanner flags clean code: $(scan "$tmp/clean.c")"

# ---- the libraries ----
for d in libcore memtier models; do
    files=$(find "$SRCDIR/$d" -type f \( -name '*.c' -o -name '*.h' -o -name '*.cu' \) | sort)
    if [ -z "$files" ]; then
        notok "$d: no sources found under $SRCDIR/$d"
        continue
    fi
    # shellcheck disable=SC2086
    scan $files | sed "s|^$SRCDIR/||" > "$tmp/hits"
    if [ -s "$tmp/hits" ]; then
        notok "$d: $(wc -l < "$tmp/hits") string literals name a command-line option"
        sed 's/^/# /' "$tmp/hits"
    else
        ok "$d: no string literal names a command-line option ($(echo "$files" | wc -l) files)"
    fi
done

echo "1..$n"
[ "$fails" -eq 0 ]

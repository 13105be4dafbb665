#!/bin/bash
# test_cli_docs.sh - each program's man page and its bash completion follow its --help, the one source:
# the page (man/PROG.1, made by tools/mkman.sh at build time) is what the program prints now, names every
# long option of --help and has NAME, SYNOPSIS and EXIT STATUS sections; every long option --help lists is one
# the program takes (none unknown); completion/colossal, run under bash with COMP_WORDS set, completes each
# program's options and a few of their values. TAP output.
src=$(cd "${SRCDIR:-.}" && pwd)
build=$(cd "${BUILDDIR:-.}" && pwd)
progs=${CLI_PROGS:-"apps/colossal-finetune apps/colossal-chat apps/colossal-serve apps/colossal-quantize apps/colossal-diffuse apps/colossal-fold apps/colossal-top apps/colossal-tokenize"}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
n=0
fails=0
ok() { n=$((n + 1)); echo "ok $n - $1"; }
notok() { n=$((n + 1)); fails=$((fails + 1)); echo "not ok $n - $1"; }
# the long options a help text names
long_opts() { grep -o -- '--[A-Za-z0-9][A-Za-z0-9-]*' | sort -u; }

# ---- the man pages ----
for p in $progs; do
    name=$(basename "$p")
    page="$build/man/$name.1"
    "$build/$p" --help > "$tmp/help" 2>&1
    long_opts < "$tmp/help" > "$tmp/opts"
    if [ ! -s "$page" ]; then
        notok "$name: no man page $page"
        continue
    fi
    sh "$src/tools/mkman.sh" "$build/$p" > "$tmp/page" 2>&1
    cmp -s "$tmp/page" "$page" && ok "$name.1 is what tools/mkman.sh makes of the program now" ||
        notok "$name.1 differs from the program's --help now (make it again)"
    sed 's/\\-/-/g' "$page" > "$tmp/plain"
    missing=
    while read -r o; do
        grep -qF -- "$o" "$tmp/plain" || missing="$missing $o"
    done < "$tmp/opts"
    count=$(wc -l < "$tmp/opts")
    [ -z "$missing" ] && [ "$count" -gt 2 ] && ok "$name.1 names all $count long options of --help" ||
        notok "$name.1 lacks:$missing (of $count)"
    if grep -q '^\.SH NAME' "$page" && grep -q '^\.SH SYNOPSIS' "$page" && grep -q '^\.SH "EXIT STATUS"' "$page" &&
        sed -n '/^\.SH "EXIT STATUS"/,$p' "$page" | grep -q "2 usage error"; then
        ok "$name.1 has NAME, SYNOPSIS and EXIT STATUS (2: usage error)"
    else
        notok "$name.1 lacks a section"
    fi
    if command -v man > /dev/null 2>&1 && command -v groff > /dev/null 2>&1; then
        MANWIDTH=100 man -l "$page" > "$tmp/man.txt" 2> "$tmp/man.err" </dev/null
        rc=$?
        [ "$rc" -eq 0 ] && [ ! -s "$tmp/man.err" ] && grep -q "EXIT STATUS" "$tmp/man.txt" &&
            ok "man renders $name.1 without a warning" || notok "man on $name.1: exit $rc: $(head -n 3 "$tmp/man.err")"
    else
        n=$((n + 1)); echo "ok $n # SKIP man or groff is not installed: $name.1 not rendered"
    fi
    # every long option of --help is one the program takes: given it (with a value, then surplus arguments
    # that stop every program before it does any work), no program calls it unknown or ambiguous
    bad=
    while read -r o; do
        timeout 20 "$build/$p" "$o" x y z w < /dev/null > /dev/null 2> "$tmp/err"
        if grep -q -- "unknown option '$o'\|'$o' is ambiguous\|unknown argument: $o\$" "$tmp/err"; then
            bad="$bad $o"
        fi
    done < "$tmp/opts"
    [ -z "$bad" ] && ok "$name takes every long option its --help names" || notok "$name refuses:$bad"
done

# ---- bash completion ----
# comp WORDS...: the completions of the last word, one a line, sorted
comp() {
    COMP_WORDS=("$@")
    COMP_CWORD=$((${#COMP_WORDS[@]} - 1))
    COMPREPLY=()
    _colossal
    printf '%s\n' "${COMPREPLY[@]}" | sort
}
. "$src/completion/colossal"
for p in $progs; do
    name=$(basename "$p")
    complete -p "$name" 2> /dev/null | grep -q -- "-F _colossal" && ok "bash completes $name with _colossal" ||
        notok "no completion registered for $name"
    "$build/$p" --help 2>&1 | long_opts > "$tmp/want"
    comp "$build/$p" -- > "$tmp/got"
    cmp -s "$tmp/want" "$tmp/got" && ok "$name --<TAB>: the $(wc -l < "$tmp/got") long options of its --help" ||
        notok "$name --<TAB>: $(tr '\n' ' ' < "$tmp/got")"
done
got=$(comp "$build/apps/colossal-finetune" --ste | tr '\n' ' ')
[ "$got" = "--steps " ] && ok "colossal-finetune --ste<TAB>: --steps" || notok "--ste: '$got'"
got=$(comp "$build/apps/colossal-chat" --ver | tr '\n' ' ')
[ "$got" = "--version " ] && ok "colossal-chat --ver<TAB>: --version" || notok "--ver: '$got'"
got=$(comp "$build/apps/colossal-chat" m --device cu | tr '\n' ' ')
[ "$got" = "cuda cuda:0 cuda:1 " ] && ok "--device cu<TAB>: the GPUs" || notok "--device cu: '$got'"
got=$(cd "$tmp" && comp "$build/apps/colossal-chat" m --tokenizer ll | tr '\n' ' ')
[ "$got" = "llama2 llama3 " ] && ok "--tokenizer ll<TAB>: the bundled llama tokenizers" || notok "--tokenizer ll: '$got'"
mkdir -p "$tmp/dir" && : > "$tmp/dir/corpus.txt"
got=$(comp "$build/apps/colossal-finetune" gpt2 "$tmp/dir/cor" | tr '\n' ' ')
[ "$got" = "$tmp/dir/corpus.txt " ] && ok "a positional argument completes as a file name" || notok "file: '$got'"

echo "1..$n"
[ "$fails" -eq 0 ]

#!/bin/sh
# test_cli_version.sh - what every program's command line shares (apps/cliopt): --version prints
# "colossal-X RELEASE (git REV)" with the release of configure.ac and the revision git names for the source
# tree (no "(git ...)" outside a checkout), a mistyped long option is a usage error (exit 2) that suggests
# the option meant, and a tokenizer path that does not exist lists the bundled tokenizers, exactly the
# directories of assets/tokenizers/. TAP output.
src=$(cd "${SRCDIR:-.}" && pwd)
build=${BUILDDIR:-.}
progs=${CLI_PROGS:-"apps/colossal-finetune apps/colossal-chat apps/colossal-serve apps/colossal-quantize apps/colossal-diffuse apps/colossal-fold apps/colossal-top apps/colossal-tokenize"}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
n=0
fails=0
ok() { n=$((n + 1)); echo "ok $n - $1"; }
notok() { n=$((n + 1)); fails=$((fails + 1)); echo "not ok $n - $1"; }

# the references: configure.ac's AC_INIT and git
release=$(sed -n 's/^AC_INIT(\[colossal\], \[\([^]]*\)\].*/\1/p' "$src/configure.ac")
rev=
if [ -e "$src/.git" ] && command -v git > /dev/null 2>&1; then
    rev=$(cd "$src" && git rev-parse --short=7 HEAD 2>/dev/null)
fi
[ -n "$release" ] && ok "configure.ac's release: $release" || notok "no release in configure.ac's AC_INIT"

# ---- --version ----
for p in $progs; do
    name=$(basename "$p")
    want="$name $release"
    [ -n "$rev" ] && want="$want (git $rev)"
    got=$("$build/$p" --version 2> "$tmp/err")
    rc=$?
    if [ "$rc" -eq 0 ] && [ "$got" = "$want" ] && [ ! -s "$tmp/err" ]; then
        ok "$name --version: '$got'"
    else
        notok "$name --version: exit $rc, '$got', wanted '$want'"
    fi
done

# ---- a mistyped long option: exit 2, one line naming the option meant ----
while read -r name typo meant; do
    "$build/apps/$name" "$typo" 5 > "$tmp/out" 2> "$tmp/err" < /dev/null
    rc=$?
    line=$(head -n 1 "$tmp/err")
    if [ "$rc" -eq 2 ] && grep -qF "unknown option '$typo'; did you mean '$meant'?" "$tmp/err"; then
        ok "$name $typo: exit 2: $line"
    else
        notok "$name $typo: exit $rc: '$line', wanted a suggestion of $meant"
    fi
done <<EOF
colossal-finetune --stesp --steps
colossal-chat --tempreature --temperature
colossal-serve --prot --port
colossal-quantize --tokeniser --tokenizer
colossal-diffuse --sede --seed
colossal-fold --recylces --recycles
colossal-top --jsno --json
colossal-tokenize --decdoe --decode
EOF
# nothing near: no suggestion
"$build/apps/colossal-chat" m --zzzzzz > "$tmp/out" 2> "$tmp/err"
rc=$?
if [ "$rc" -eq 2 ] && grep -q "unknown option '--zzzzzz' (see" "$tmp/err" && ! grep -q "did you mean" "$tmp/err"; then
    ok "an option near nothing: exit 2 and no suggestion"
else
    notok "--zzzzzz: exit $rc: $(cat "$tmp/err")"
fi
# a prefix of several options of colossal-finetune is ambiguous (not silently the first of them)
"$build/apps/colossal-finetune" --lora 4 > "$tmp/out" 2> "$tmp/err"
rc=$?
if [ "$rc" -eq 2 ] && grep -q "option '--lora' is ambiguous: --lora-rank, --lora-alpha, --lora-targets" "$tmp/err"; then
    ok "colossal-finetune --lora: ambiguous, exit 2"
else
    notok "colossal-finetune --lora: exit $rc: $(cat "$tmp/err")"
fi

# ---- a tokenizer that does not exist: the bundled names, as many as assets/tokenizers holds ----
bundled=$(cd "$src/assets/tokenizers" && for d in *; do [ -d "$d" ] && echo "$d"; done | sort | tr '\n' ' ')
for cmd in "colossal-tokenize $tmp/nothing-here" "colossal-chat gpt2-tiny --tokenizer $tmp/nothing-here --prompt hi" \
    "colossal-quantize gpt2-tiny $tmp/q --type q8_0 --tokenizer $tmp/nothing-here"; do
    set -- $cmd
    name=$1
    shift
    "$build/apps/$name" "$@" < /dev/null > "$tmp/out" 2> "$tmp/err"
    rc=$?
    listed=$(sed -n 's/.*not found: .*bundled tokenizer (\([^)]*\)).*/\1/p' "$tmp/err" | tr -d ',' | tr ' ' '\n' | sort | tr '\n' ' ')
    if [ "$rc" -eq 1 ] && [ -n "$listed" ] && [ "$listed" = "$bundled" ]; then
        ok "$name: a tokenizer not found lists the bundled ones ($listed), exit 1"
    else
        notok "$name: exit $rc, listed '$listed', assets/tokenizers holds '$bundled': $(cat "$tmp/err")"
    fi
done

echo "1..$n"
[ "$fails" -eq 0 ]

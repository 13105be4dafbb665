#!/bin/sh
# test_finetune_default.sh - colossal-finetune's embedded default (no MODEL: colossal-default/) replaces an
# earlier colossal-default/ that trained no further than it would, and refuses one that trained further (or
# holds another model's run, or files that are not a colossal-finetune output) unless --overwrite: the
# earlier output is left as it was. Shortened runs (a few steps of tiny batches). TAP output.
ft=${FINETUNE:-./apps/colossal-finetune}
ft=$(cd "$(dirname "$ft")" && pwd)/$(basename "$ft")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
n=0
fails=0
ok() { n=$((n + 1)); echo "ok $n - $1"; }
notok() { n=$((n + 1)); fails=$((fails + 1)); echo "not ok $n - $1"; }
# run WANT_RC PATTERN NAME -- ARGS...: colossal-finetune in $tmp, its exit status and a line of its output
run() {
    want=$1 pattern=$2 name=$3
    shift 4
    (cd "$tmp" && "$ft" --batch 2 --seq 16 --eval-batches 1 "$@") > "$tmp/out" 2> "$tmp/err"
    rc=$?
    if [ "$rc" -eq "$want" ] && grep -q -- "$pattern" "$tmp/out" "$tmp/err"; then
        ok "$name (exit $rc)"
    else
        notok "$name: exit $rc, wanted $want and '$pattern'"
        sed 's/^/# /' "$tmp/err" | head -5
    fi
}
# the step in colossal-default/trainer_state.json
saved_step() { sed -n 's/.*"step":[[:space:]]*"\([0-9]*\)".*/\1/p' "$tmp/colossal-default/trainer_state.json" | head -n 1; }
sum() { cat "$tmp/colossal-default/model.safetensors" "$tmp/colossal-default/trainer_state.json" | cksum; }

run 0 "the model is in colossal-default" "the embedded default writes colossal-default/ (4 steps)" -- --steps 4
[ "$(saved_step)" = 4 ] && ok "it saved step 4" || notok "saved step '$(saved_step)', wanted 4"
before=$(sum)
run 1 "colossal-default holds a run trained further (4 steps) than this one would (2): continue it with --resume colossal-default, replace it with --overwrite" \
    "a default run of 2 steps refuses to replace one of 4" -- --steps 2
[ "$(sum)" = "$before" ] && [ ! -e "$tmp/colossal-default.partial" ] && ok "... and leaves it as it was" ||
    notok "the earlier colossal-default changed"
run 0 "the model is in colossal-default" "a default run of 4 steps replaces one of 4" -- --steps 4 --seed 7
[ "$(saved_step)" = 4 ] && [ "$(sum)" != "$before" ] && ok "... with its own output (seed 7)" ||
    notok "step '$(saved_step)', same output: $( [ "$(sum)" = "$before" ] && echo yes || echo no)"
run 0 "the model is in colossal-default" "a default run of 6 steps replaces one of 4" -- --steps 6
[ "$(saved_step)" = 6 ] && ok "it saved step 6" || notok "saved step '$(saved_step)', wanted 6"
run 0 "the model is in colossal-default" "--overwrite: a default run of 2 steps replaces one of 6" -- --steps 2 --overwrite
[ "$(saved_step)" = 2 ] && ok "it saved step 2" || notok "saved step '$(saved_step)', wanted 2"

# another model's run in colossal-default: not the default's to replace
awk 'BEGIN { for (i = 0; i < 400; i++) printf "line %d of a small corpus\n", i }' > "$tmp/corpus.txt"
rm -rf "$tmp/colossal-default"
run 0 "the model is in colossal-default" "a gpt2-tiny run written to colossal-default (1 step)" -- \
    gpt2-tiny corpus.txt --out colossal-default --steps 1
before=$(sum)
run 1 "colossal-default holds a run of another model, not the embedded default's" \
    "a default run refuses to replace another model's run" -- --steps 2
[ "$(sum)" = "$before" ] && ok "... and leaves it as it was" || notok "the other run changed"

# the user's own files: never replaced
rm -rf "$tmp/colossal-default" && mkdir "$tmp/colossal-default" && echo mine > "$tmp/colossal-default/notes.txt"
run 1 "is not empty and is not a colossal-finetune output" "a default run refuses a folder of the user's files" -- --steps 2
run 1 "is not empty and is not a colossal-finetune output" "... even with --overwrite" -- --steps 2 --overwrite
[ "$(cat "$tmp/colossal-default/notes.txt")" = mine ] && ok "the user's file is untouched" || notok "notes.txt changed"

echo "1..$n"
[ "$fails" -eq 0 ]

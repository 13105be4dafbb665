#!/bin/sh
# test_quant_model.sh - quantized models end to end (TAP output): a tiny GPT-2 and a tiny LLaMA trained
# here on the bundled corpus by colossal-finetune, written as int8 (q8_0) and q4 (q4_0) by
# colossal-quantize, then tests/test_quant_ppl measures their perplexity against f32 (within 1% and 5%)
# and checks the written directories against quantizing while loading. Also: colossal-chat loads a
# quantized directory as it is and with --quant gives the same greedy tokens; colossal-quantize's usage
# errors, refusals (a preset, a link at OUT, a concurrent run) and that it keeps a user's files in OUT.
src=${SRCDIR:-${srcdir:-.}}
ft=${FINETUNE:-./apps/colossal-finetune}
qz=${QUANTIZE:-./apps/colossal-quantize}
chat=${CHAT:-./apps/colossal-chat}
ppl=${QUANT_PPL:-./tests/test_quant_ppl}
corpus="$src/assets/corpus/kjv.txt.gz"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
n=0
fails=0
pass() { n=$((n + 1)); echo "ok $n - $1"; }
fail() {
    n=$((n + 1)); fails=$((fails + 1)); echo "not ok $n - $1"
    [ -s "$tmp/err" ] && sed 's/^/# stderr: /' "$tmp/err" | head -5
}

# usage NAME WANT_RC PATTERN -- ARGS: colossal-quantize's exit code and its one stderr line
usage() {
    name=$1 want=$2 pattern=$3
    shift 4
    "$qz" "$@" > "$tmp/out" 2> "$tmp/err"
    rc=$?
    lines=$(wc -l < "$tmp/err")
    if [ "$rc" -eq "$want" ] && grep -qF -- "$pattern" "$tmp/err" && [ "$lines" -eq 1 ]; then
        pass "$name (exit $rc: $(head -c 100 "$tmp/err"))"
    else
        fail "$name: exit $rc (wanted $want), $lines stderr lines, wanted '$pattern'"
    fi
}

for arch in gpt2-tiny llama-tiny; do
    m="$tmp/$arch"
    if "$ft" "$arch" "$corpus" --steps 300 --batch 8 --seq 64 --lr 3e-3 --eval-every 0 --out "$m" \
        > "$tmp/ft.out" 2> "$tmp/err"; then
        pass "$arch trained on the corpus ($(grep -o 'loss [0-9.]*' "$tmp/ft.out" | tail -1))"
    else
        fail "$arch: colossal-finetune failed"
        continue
    fi
    for type in int8 q4; do
        if "$qz" "$m" "$m-$type" --type "$type" > "$tmp/out" 2> "$tmp/err" && cp "$tmp/err" "$tmp/$type.err" &&
            [ -s "$m-$type/model.safetensors" ] &&
            [ -s "$m-$type/config.json" ] && [ -s "$m-$type/tokenizer.json" ]; then
            pass "$arch: colossal-quantize --type $type ($(head -c 120 "$tmp/err"))"
        else
            fail "$arch: colossal-quantize --type $type"
        fi
    done
    "$ppl" "$m" "$m-int8" "$m-q4" "$corpus" | sed "s/^\(not \)*ok [0-9]* - /&$arch: /" > "$tmp/ppl.out"
    while IFS= read -r line; do
        case "$line" in
        "ok "*) pass "${line#ok * - }" ;;
        "not ok "*) fail "${line#not ok * - }" ;;
        "#"*) echo "$line" ;;
        esac
    done < "$tmp/ppl.out"
    # chat: the quantized directory as it is (its blocks read in place from the file), the same copied
    # (--no-mmap), and the f32 one with --quant, give the same greedy ids
    quantized=$(sed -n 's/.*: \([0-9]*\) of [0-9]* weight tensors as q4_0.*/\1/p' "$tmp/q4.err")
    "$chat" "$m-q4" --prompt "And God said" --raw --temperature 0 --max-new-tokens 24 --json --verbose > "$tmp/a" \
        2> "$tmp/err"
    ra=$?
    mapped=$(sed -n 's/.*loaded in [0-9.]* s; \([0-9]*\) weight tensors .* read in place.*/\1/p' "$tmp/err")
    "$chat" "$m-q4" --prompt "And God said" --raw --temperature 0 --max-new-tokens 24 --json --no-mmap --verbose \
        > "$tmp/c" 2> "$tmp/err"
    rc=$?
    copied=$(sed -n 's/.*loaded in [0-9.]* s; \([0-9]*\) weight tensors .* read in place.*/\1/p' "$tmp/err")
    "$chat" "$m" --quant q4 --prompt "And God said" --raw --temperature 0 --max-new-tokens 24 --json > "$tmp/b" \
        2> "$tmp/err"
    rb=$?
    if [ "$ra" -eq 0 ] && [ "$rb" -eq 0 ] && grep -q '"ids"' "$tmp/a" && cmp -s "$tmp/a" "$tmp/b"; then
        pass "$arch: colossal-chat on the q4 directory and with --quant q4 gives the same greedy ids"
    else
        fail "$arch: colossal-chat q4 directory (exit $ra) against --quant q4 (exit $rb)"
    fi
    if [ -n "$quantized" ] && [ "${mapped:-0}" -ge "$quantized" ] && [ "$copied" = 0 ] && [ "$rc" -eq 0 ] &&
        cmp -s "$tmp/a" "$tmp/c"; then
        pass "$arch: the q4 directory's $quantized block tensors are read in place ($mapped tensors mapped); with --no-mmap none, and the same ids"
    else
        fail "$arch: q4 tensors read in place: quantized '$quantized', mapped '$mapped', with --no-mmap '$copied' (exit $rc)"
    fi
done

m="$tmp/gpt2-tiny"
usage "no arguments" 2 "no MODEL and OUT given" --
usage "no --type" 2 "--type is required" -- "$m" "$tmp/x"
usage "an unknown type" 2 "is not one of int8" -- "$m" "$tmp/x" --type q3
usage "an unknown option" 2 "unknown option '--bits'" -- "$m" "$tmp/x" --bits 4
usage "a preset has no weights" 1 "nothing to quantize" -- gpt2-tiny "$tmp/x" --type int8
usage "a missing model" 1 "$tmp/none" -- "$tmp/none" "$tmp/x" --type int8
ln -s "$tmp/elsewhere" "$tmp/link"
usage "OUT a symbolic link is refused" 1 "link" -- "$m" "$tmp/link" --type int8
[ ! -e "$tmp/elsewhere" ] && pass "nothing was written through the link" || fail "something was written through the link"
# a user's file in OUT survives a second quantization into it
mkdir -p "$tmp/keep" && echo notes > "$tmp/keep/notes.txt"
"$qz" "$m" "$tmp/keep" --type int8 2> "$tmp/err" && "$qz" "$m" "$tmp/keep" --type q4 2>> "$tmp/err"
if [ "$(cat "$tmp/keep/notes.txt" 2> /dev/null)" = notes ] && grep -q q4_0 "$tmp/keep/model.safetensors"; then
    pass "a user's file in OUT is kept; the model is replaced"
else
    fail "a user's file in OUT"
fi

echo "1..$n"
[ "$fails" -eq 0 ]

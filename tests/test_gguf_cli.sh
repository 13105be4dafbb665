#!/bin/sh
# test_gguf_cli.sh - colossal-chat on GGUF files written by llama.cpp's own converter (TAP output;
# tests/fixtures/gguf_model, tools/refgen/make_gguf_model_fixtures.py): the f32 file gives the greedy ids of
# the Hugging Face directory it was converted from, the q8_0 file those of the same directory quantized to
# int8 while loading (ggml's q8_0 is ours, byte for byte), the f16 file loads; tensors read in place from the
# file's mapping give the ids of copies (--no-mmap); the tokenizer and the chat template come from the file; a
# damaged file is refused in one line.
chat=${CHAT:-./apps/colossal-chat}
src=${SRCDIR:-${srcdir:-.}}
fx="$src/tests/fixtures/gguf_model"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
n=0
fails=0
pass() { n=$((n + 1)); echo "ok $n - $1"; }
fail() {
    n=$((n + 1)); fails=$((fails + 1)); echo "not ok $n - $1"
    [ -s "$tmp/err" ] && sed 's/^/# stderr: /' "$tmp/err" | head -5
}
greedy="--temperature 0 --max-new-tokens 16 --json"

# same NAME ARGS_A -- ARGS_B: the two runs print the same ids, both exit 0
same() {
    name=$1
    shift
    a=""
    while [ "$1" != "--" ]; do a="$a $1"; shift; done
    shift
    # shellcheck disable=SC2086
    "$chat" $a $greedy > "$tmp/a" 2> "$tmp/err"; ra=$?
    "$chat" "$@" $greedy > "$tmp/b" 2>> "$tmp/err"; rb=$?
    if [ "$ra" -eq 0 ] && [ "$rb" -eq 0 ] && grep -q '"ids":\[[0-9]' "$tmp/a" && cmp -s "$tmp/a" "$tmp/b"; then
        pass "$name ($(cat "$tmp/a"))"
    else
        fail "$name: exit $ra/$rb: $(cat "$tmp/a") against $(cat "$tmp/b")"
    fi
}

gp="--prompt-ids 73,110,32,116,104,101"
lp="--prompt-ids 1,301,338,261,296"
same "gpt2: the f32 GGUF gives the ids of the safetensors model" "$fx/gpt2-f32.gguf" $gp -- \
    "$src/tests/fixtures/chat_model/base" $gp
same "gpt2: the q8_0 GGUF gives the ids of the safetensors model quantized to int8" "$fx/gpt2-q8_0.gguf" $gp -- \
    "$src/tests/fixtures/chat_model/base" --quant int8 $gp
same "llama: the f32 GGUF gives the ids of the safetensors model (q/k rows un-permuted)" "$fx/llama-f32.gguf" $lp -- \
    "$fx/llama" $lp
same "llama: the q8_0 GGUF gives the ids of the safetensors model quantized to int8" "$fx/llama-q8_0.gguf" $lp -- \
    "$fx/llama" --quant int8 $lp
# read in place from the file's mapping (the default) or copied (--no-mmap): the same ids; --verbose says how many
# tensors were mapped: some for the f32 and q8_0 files (not LLaMA's q/k, whose rows the converter permuted), none
# with --no-mmap
mapped() { sed -n 's/.*loaded in [0-9.]* s; \([0-9]*\) weight tensors .* read in place.*/\1/p' "$tmp/err"; }
for f in gpt2-f32 gpt2-q8_0 llama-f32 llama-q8_0; do
    case $f in gpt2*) p=$gp ;; *) p=$lp ;; esac
    "$chat" "$fx/$f.gguf" $p $greedy --verbose > "$tmp/a" 2> "$tmp/err"; ra=$?
    m1=$(mapped)
    "$chat" "$fx/$f.gguf" $p $greedy --verbose --no-mmap > "$tmp/b" 2> "$tmp/err"; rb=$?
    m0=$(mapped)
    if [ "$ra" -eq 0 ] && [ "$rb" -eq 0 ] && grep -q '"ids":\[[0-9]' "$tmp/a" && cmp -s "$tmp/a" "$tmp/b" &&
        [ "${m1:-0}" -gt 0 ] && [ "$m0" = 0 ]; then
        pass "$f: $m1 tensors read in place from the file give the ids of --no-mmap's copies"
    else
        fail "$f: mapped ($m1 tensors, exit $ra) against --no-mmap ($m0, exit $rb): $(cat "$tmp/a") / $(cat "$tmp/b")"
    fi
done
"$chat" "$fx/llama-f16.gguf" $lp $greedy > "$tmp/a" 2> "$tmp/err" && grep -q '"ids":\[[0-9]' "$tmp/a" &&
    pass "llama: the f16 GGUF loads" || fail "llama: the f16 GGUF"
# text: the tokenizer the file carries
if "$chat" "$fx/gpt2-q8_0.gguf" --raw --prompt "In the beginning" --temperature 0 --max-new-tokens 8 > "$tmp/a" \
    2> "$tmp/err" && [ -s "$tmp/a" ]; then
    pass "gpt2: text in and out through the file's own tokenizer ($(head -c 60 "$tmp/a" | tr '\n' ' '))"
else
    fail "gpt2: text through the file's tokenizer"
fi
# damaged files: one line, exit 1
head -c 5000 "$fx/llama-q8_0.gguf" > "$tmp/cut.gguf"
"$chat" "$tmp/cut.gguf" $lp $greedy > "$tmp/a" 2> "$tmp/err"
rc=$?
if [ "$rc" -eq 1 ] && [ "$(wc -l < "$tmp/err")" -eq 1 ] && grep -q "cut.gguf" "$tmp/err"; then
    pass "a truncated GGUF is refused in one line ($(head -c 120 "$tmp/err"))"
else
    fail "a truncated GGUF: exit $rc"
fi
printf 'GGUF\003\000\000\000' > "$tmp/bad.gguf"
"$chat" "$tmp/bad.gguf" $lp $greedy > "$tmp/a" 2> "$tmp/err"
rc=$?
if [ "$rc" -eq 1 ] && [ "$(wc -l < "$tmp/err")" -eq 1 ]; then
    pass "a GGUF header alone is refused in one line ($(head -c 120 "$tmp/err"))"
else
    fail "a GGUF header alone: exit $rc"
fi
echo "1..$n"
[ "$fails" -eq 0 ]

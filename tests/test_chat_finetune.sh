#!/bin/sh
# test_chat_finetune.sh - a chat fine-tune keeps its template (TAP output).
# colossal-finetune trains a tiny built-in model on .jsonl chat data for a few
# steps, once per template; its output's tokenizer_config.json must hold the
# template as Jinja text (chat_template, the one col_chat_jinja gives), and
# colossal-chat must take the output for a chat model in that format: no
# the prompt fed is the rendered conversation, the template's end-of-turn
# marker is never printed, the reply is the one --template gives. Checking the Jinja against transformers is
# tools/refgen/check_chat_roundtrip.py (not part of make check).
ft=${FINETUNE:-./apps/colossal-finetune}
chat=${CHAT:-./apps/colossal-chat}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
n=0
fails=0
pass() { n=$((n + 1)); echo "ok $n - $1"; }
fail() {
    n=$((n + 1)); fails=$((fails + 1)); echo "not ok $n - $1"
    [ -s "$tmp/err" ] && sed 's/^/# stderr: /' "$tmp/err" | head -5
}

awk 'BEGIN { for (i = 0; i < 200; i++) printf "{\"messages\": [{\"role\": \"user\", \"content\": \"%d+%d?\"}, {\"role\": \"assistant\", \"content\": \"%d\"}]}\n", i, i + 1, 2 * i + 1 }' > "$tmp/chat.jsonl"
printf 'the cat sat on the mat. ' > "$tmp/corpus.txt"
for i in 1 2 3 4 5 6; do cat "$tmp/corpus.txt" "$tmp/corpus.txt" > "$tmp/c2" && mv "$tmp/c2" "$tmp/corpus.txt"; done

for t in chatml llama3 llama2 plain; do
    out="$tmp/ft_$t"
    if ! "$ft" llama-tiny "$tmp/chat.jsonl" --out "$out" --steps 2 --batch 2 --seq 64 --template "$t" --quiet \
        > "$tmp/log" 2> "$tmp/err"; then
        fail "$t: the fine-tune runs"
        continue
    fi
    # the template is the Jinja text, and bos/eos stay the tokenizer's
    if grep -q '"chat_template":' "$out/tokenizer_config.json" && grep -q '"eos_token":' "$out/tokenizer_config.json"; then
        pass "$t: tokenizer_config.json names the template and the special tokens"
    else
        fail "$t: tokenizer_config.json has no chat_template: $(cat "$out/tokenizer_config.json")"
    fi
    # colossal-chat takes it for a chat model in that format: the prompt is the rendered conversation (dozens of
    # byte tokens; a completer would feed BOS and the 4 bytes of the line), and the reply never shows the
    # template's end-of-turn marker
    printf '1+2?\n' > "$tmp/in"
    "$chat" "$out" --max-new-tokens 8 --temperature 0 --verbose < "$tmp/in" > "$tmp/out" 2> "$tmp/err"
    rc=$?
    fed=$(sed -n 's/.*prompt: \([0-9]*\) tokens.*/\1/p' "$tmp/err")
    case $t in llama3) eot='<|eot_id|>' ;; chatml) eot='<|im_end|>' ;; llama2) eot='</s>' ;; plain) eot='' ;; esac
    if [ "$rc" -eq 0 ] && [ "${fed:-0}" -gt 10 ] && { [ -z "$eot" ] || ! grep -qF "$eot" "$tmp/out"; }; then
        pass "$t: colossal-chat OUT chats in the template ($fed prompt tokens)"
    else
        fail "$t: colossal-chat OUT: exit $rc, ${fed:-no} prompt tokens, reply '$(cat "$tmp/out")'"
    fi
    # the same reply as with the template named
    "$chat" "$out" --template "$t" --max-new-tokens 8 --temperature 0 --verbose < "$tmp/in" > "$tmp/out2" 2> "$tmp/err2"
    if cmp -s "$tmp/out" "$tmp/out2" && [ "$(grep -c 'prompt: '"$fed"' tokens' "$tmp/err2")" -eq 1 ]; then
        pass "$t: the same reply as with --template $t"
    else
        fail "$t: the reply differs from --template $t's: '$(cat "$tmp/out")' vs '$(cat "$tmp/out2")'"
    fi
done

# the output trained again keeps its template, as it is (the model's own)
if "$ft" "$tmp/ft_llama3" "$tmp/chat.jsonl" --out "$tmp/again" --steps 1 --batch 2 --seq 64 --quiet > /dev/null 2> "$tmp/err" &&
    cmp -s "$tmp/ft_llama3/tokenizer_config.json" "$tmp/again/tokenizer_config.json"; then
    pass "a second fine-tune of the output keeps its tokenizer_config.json"
else
    fail "a second fine-tune of the output keeps its tokenizer_config.json"
fi
# text data: a completer, as before (no template written)
if "$ft" llama-tiny "$tmp/corpus.txt" --out "$tmp/text" --steps 1 --batch 2 --seq 32 --quiet > /dev/null 2> "$tmp/err" &&
    ! grep -q chat_template "$tmp/text/tokenizer_config.json"; then
    pass "a fine-tune on text writes no chat template"
else
    fail "a fine-tune on text writes no chat template"
fi
echo "1..$n"
[ "$fails" -eq 0 ]

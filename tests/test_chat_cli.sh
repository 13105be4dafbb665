#!/bin/sh
# test_chat_cli.sh - colossal-chat against transformers (TAP output).
# References: tests/fixtures/chat_model/ (tools/refgen/make_chat_model_fixture.py:
# a tiny byte-level GPT-2 and transformers' greedy generate() on it, plus the
# greedy ids of tests/fixtures/hf/*_ref.safetensors as text). Covers greedy
# ids and text, chat templates (from --tokenizer, from the model directory,
# --template, --system), multi-turn conversations, stop strings, seeded
# sampling, context overflow (oldest turns dropped, the end of a message too
# long alone kept, the default reply room), bad input, and in a
# pseudo-terminal (tmux; skipped when tmux is absent) the line editor (editing,
# history, wrapping at a narrow width), the loading line, /help, /stats, and
# keys typed during a reply.
chat=${CHAT:-./apps/colossal-chat}
src=${SRCDIR:-${srcdir:-.}}
fx="$src/tests/fixtures/chat_model"
hf="$src/tests/fixtures/hf"
tmp=$(mktemp -d)
tmux_sock="$tmp/tmux.sock"
trap 'tmux -S "$tmux_sock" kill-server 2>/dev/null; rm -rf "$tmp"' EXIT
n=0
fails=0
. "$fx/refs.sh"
. "$fx/hf_greedy.sh"
base="$fx/base"
chatml="$fx/chatml"
greedy="--temperature 0"

pass() { n=$((n + 1)); echo "ok $n - $1"; }
fail() {
    n=$((n + 1)); fails=$((fails + 1)); echo "not ok $n - $1"
    [ -s "$tmp/err" ] && sed 's/^/# stderr: /' "$tmp/err" | head -5
}

# same NAME EXPECTED_FILE -- ARGS...: stdout of the tool (stdin from $tmp/in) equals the file, exit 0
same() {
    name=$1 want=$2
    shift 3
    "$chat" "$@" < "$tmp/in" > "$tmp/out" 2> "$tmp/err"
    rc=$?
    if [ "$rc" -eq 0 ] && cmp -s "$want" "$tmp/out"; then
        pass "$name"
    else
        fail "$name: exit $rc"
        printf '# got:  '; head -c 200 "$tmp/out" | od -An -c | head -3
        printf '# want: '; head -c 200 "$want" | od -An -c | head -3
    fi
}

# check NAME WANT_RC FIXED_STRING -- ARGS...: exit code, the string in stderr,
# one line on stderr for a failure
check() {
    name=$1 want=$2 pattern=$3
    shift 4
    "$chat" "$@" < "$tmp/in" > "$tmp/out" 2> "$tmp/err"
    rc=$?
    lines=$(wc -l < "$tmp/err")
    if [ "$rc" -eq "$want" ] && grep -qF -- "$pattern" "$tmp/err" && [ "$lines" -eq 1 ]; then
        pass "$name (exit $rc: $(head -c 110 "$tmp/err"))"
    else
        fail "$name: exit $rc (wanted $want), $lines stderr lines, wanted '$pattern'"
    fi
}

# expect FILE TEXT...: FILE holds the concatenation of the reference files
# named (and a newline after each)
expect() {
    out=$1
    shift
    : > "$out"
    for f in "$@"; do cat "$fx/$f" >> "$out"; echo >> "$out"; done
}

: > "$tmp/in"

# ---- transformers' greedy ids (tests/fixtures/hf) ----
for m in gpt2 opt llama2 llama3; do
    eval "prompt=\$${m}_prompt want=\$${m}_new"
    k=$(echo "$want" | tr ',' '\n' | wc -l)
    printf '{"ids":[%s]}\n' "$want" > "$tmp/want"
    same "$m: --prompt-ids --json gives transformers' greedy ids" "$tmp/want" -- \
        "$hf/$m" --prompt-ids "$prompt" $greedy --max-new-tokens "$k" --json
done

# ---- memory tiers: a compute tier and the weights on NVMe change nothing ----
printf '{"ids":[%s]}\n' "$llama3_new" > "$tmp/want"
k=$(echo "$llama3_new" | tr ',' '\n' | wc -l)
check "--gpu-mem below what decoding needs names the smallest" 1 "of them activations (--gpu-mem)" -- \
    "$hf/llama3" --prompt-ids "$llama3_prompt" $greedy --max-new-tokens "$k" --json --chunk-size 4K --gpu-mem 4K
mkdir -p "$tmp/nvme"
same "llama3: weights on NVMe, through a 2 MiB compute tier: transformers' greedy ids" "$tmp/want" -- \
    "$hf/llama3" --prompt-ids "$llama3_prompt" $greedy --max-new-tokens "$k" --json --chunk-size 4K --gpu-mem 2M \
    --nvme-dir "$tmp/nvme" --nvme-kinds params
[ -z "$(ls -A "$tmp/nvme")" ] && pass "nothing is left in --nvme-dir" || fail "files left in --nvme-dir"
check "--nvme-kinds with a bad list" 2 "--nvme-kinds must be" -- "$hf/llama3" --nvme-kinds weights
check "parameters on NVMe without --gpu-mem" 1 "need a compute tier to run on: set a compute tier budget (--gpu-mem)" -- \
    "$hf/llama3" --prompt-ids "$llama3_prompt" --json --nvme-dir "$tmp/nvme" --nvme-kinds params
check "an --nvme-dir that is a file" 1 "is not a directory; choose another NVMe directory (--nvme-dir)" -- \
    "$hf/llama3" --prompt-ids "$llama3_prompt" --json --chunk-size 4K --gpu-mem 2M --nvme-dir "$tmp/in" --nvme-kinds params
check "a host budget too small" 1 "host budget of 4.0 KiB is too small" -- "$hf/llama3" --prompt-ids "$llama3_prompt" \
    --json --cpu-mem 4K
grep -q -- "needs at least .* (--cpu-mem)$" "$tmp/err" && pass "... and names --cpu-mem" || fail "no --cpu-mem: $(cat "$tmp/err")"

# ---- weights that do not fit the config, or hold NaN/Inf values ----
mkdir -p "$tmp/tied" && cp "$hf/llama2/model.safetensors" "$tmp/tied/" &&
    sed 's/"tie_word_embeddings": false/"tie_word_embeddings": true/' "$hf/llama2/config.json" > "$tmp/tied/config.json"
check "a tensor the model does not use is an error naming it" 1 \
    "has a tensor 'lm_head.weight' that a 2-layer LLaMA model with tied embeddings does not use" -- \
    "$tmp/tied" --prompt-ids "$llama2_prompt" --json $greedy --max-new-tokens 1
grep -q -- "(--ignore-extra-tensors)$" "$tmp/err" && pass "... and names --ignore-extra-tensors" ||
    fail "no --ignore-extra-tensors: $(cat "$tmp/err")"
check "--ignore-extra-tensors loads it, with one warning line" 0 \
    "colossal-chat: warning: ignored 1 checkpoint tensor the model does not use: 'lm_head.weight'" -- \
    "$tmp/tied" --prompt-ids "$llama2_prompt" --json $greedy --max-new-tokens 1 --ignore-extra-tensors
# NaN, +Inf, NaN in row 0 of gpt2_untied's wte (token 0, in no prompt; the logits come from lm_head)
mkdir -p "$tmp/nan" && cp "$hf/gpt2_untied/"* "$tmp/nan/"
st="$tmp/nan/model.safetensors"
hl=$(od -An -tu8 -N8 "$st" | tr -d ' ')
off=$(head -c $((8 + hl)) "$st" | tail -c "$hl" | grep -o '"transformer.wte.weight":{[^}]*}' |
    sed 's/.*"data_offsets":\[\([0-9]*\),.*/\1/')
printf '\377\377\377\177\000\000\200\177\000\000\300\177' | dd of="$st" bs=1 seek=$((8 + hl + off)) conv=notrunc 2> /dev/null
check "weights holding NaN/Inf: a warning naming the tensor" 0 \
    "colossal-chat: warning: tensor 'transformer.wte.weight' holds 3 NaN/Inf values" -- \
    "$tmp/nan" --prompt-ids 5,6,7 --json $greedy --max-new-tokens 1

# ---- text completion (a base model: no chat template) ----
expect "$tmp/raw" raw_greedy.txt
same "base model completes --prompt text as transformers' greedy generate()" "$tmp/raw" -- \
    "$base" --prompt "The cat" $greedy --max-new-tokens "$raw_new"
printf '{"ids":[%s]}\n' "$raw_new_ids" > "$tmp/want"
same "--prompt TEXT --json gives the greedy ids" "$tmp/want" -- \
    "$base" --prompt "The cat" $greedy --max-new-tokens "$raw_new" --json
same "--raw completes as-is with a chat tokenizer" "$tmp/raw" -- \
    "$base" --tokenizer "$chatml" --raw --prompt "The cat" $greedy --max-new-tokens "$raw_new"
printf '{"ids":[%s]}\n' "$raw_new_ids" > "$tmp/want"
same "--prompt-ids of the encoded prompt gives the same ids" "$tmp/want" -- \
    "$base" --prompt-ids "$raw_ids" $greedy --max-new-tokens "$raw_new" --json

# ---- --device: cpu gives the same text; a device that is no device, or no GPU here, is a usage error ----
same "--device cpu completes as the default does here" "$tmp/raw" -- \
    "$base" --prompt "The cat" $greedy --max-new-tokens "$raw_new" --device cpu
check "--device gpu" 2 "--device must be cpu, cuda or cuda:N" -- "$base" --device gpu --prompt hi
check "--device cuda:x" 2 "(got 'cuda:x')" -- "$base" --device cuda:x --prompt hi
check "--device cuda:1023 (no machine has so many)" 2 "--device cuda:1023: " -- "$base" --device cuda:1023 --prompt hi
grep -q -- "use --device cuda:0 or --device cpu\|; use --device cpu" "$tmp/err" && pass "... and says what to use" ||
    fail "--device cuda:1023 names no way out"
if nvidia-smi -L > /dev/null 2>&1; then
    n=$((n + 1)); echo "ok $n # SKIP --device cuda without a GPU: this machine has one"
else
    check "--device cuda without a usable GPU" 2 "--device cuda: no usable GPU: " -- "$base" --device cuda --prompt hi
fi
"$chat" --help | grep -q -- "--device DEV .*cpu, or a GPU" && pass "--help names --device" || fail "--help lacks --device"

# ---- a chat template colossal does not know: said on stderr, then plain completion ----
mkdir -p "$tmp/jinja"
cp "$chatml/tokenizer.json" "$tmp/jinja/"
printf '{"chat_template": "{%% for m in messages %%}{{ m.content }}{%% endfor %%}", "eos_token": "<|endoftext|>"}\n' \
    > "$tmp/jinja/tokenizer_config.json"
"$chat" "$base" --tokenizer "$tmp/jinja" --prompt "The cat" $greedy --max-new-tokens "$raw_new" \
    < /dev/null > "$tmp/out" 2> "$tmp/err"
if [ $? -eq 0 ] && cmp -s "$tmp/raw" "$tmp/out" && grep -q "chat template colossal does not know" "$tmp/err" &&
    grep -q -- "--template" "$tmp/err" && [ "$(wc -l < "$tmp/err")" -eq 1 ]; then
    pass "an unknown chat template is named on stderr (with --template as the way out), then plain completion"
else
    fail "unknown chat template warning"
fi
"$chat" "$base" --tokenizer "$tmp/jinja" --raw --prompt "The cat" $greedy --max-new-tokens "$raw_new" \
    < /dev/null > "$tmp/out" 2> "$tmp/err"
[ ! -s "$tmp/err" ] && cmp -s "$tmp/raw" "$tmp/out" && pass "--raw: no warning" || fail "--raw with an unknown template"

# ---- chat ----
expect "$tmp/c1" chat1_reply.txt
same "chat template from --tokenizer's tokenizer_config.json (ChatML)" "$tmp/c1" -- \
    "$base" --tokenizer "$chatml" --prompt "$u1" $greedy --max-new-tokens "$chat_new"
mkdir -p "$tmp/chat_model"
cp "$base/config.json" "$base/model.safetensors" "$chatml/tokenizer.json" "$chatml/tokenizer_config.json" \
    "$tmp/chat_model/"
same "chat template from the model directory's tokenizer_config.json" "$tmp/c1" -- \
    "$tmp/chat_model" --prompt "$u1" $greedy --max-new-tokens "$chat_new"
same "--template chatml on a model without a template" "$tmp/c1" -- \
    "$base" --template chatml --prompt "$u1" $greedy --max-new-tokens "$chat_new"
expect "$tmp/sys" sys_reply.txt
same "--system" "$tmp/sys" -- "$base" --template chatml --system "$sys" --prompt "$u1" $greedy \
    --max-new-tokens "$chat_new"
printf '%s\n%s\n' "$u1" "$u2" > "$tmp/in"
expect "$tmp/c12" chat1_reply.txt chat2_reply.txt
same "piped lines are turns of one conversation" "$tmp/c12" -- \
    "$tmp/chat_model" $greedy --max-new-tokens "$chat_new"
printf '%s\n/reset\n\n%s\n' "$u1" "$u1" > "$tmp/in"
expect "$tmp/c11" chat1_reply.txt chat1_reply.txt
same "/reset forgets the conversation (empty lines are skipped)" "$tmp/c11" -- \
    "$tmp/chat_model" $greedy --max-new-tokens "$chat_new"
printf '/system %s\n%s\n' "$sys" "$u1" > "$tmp/in"
same "/system sets the system prompt" "$tmp/sys" -- "$tmp/chat_model" $greedy --max-new-tokens "$chat_new"
: > "$tmp/in"

# ---- stop strings ----
cp "$fx/stop_expect.txt" "$tmp/stop" && echo >> "$tmp/stop"
same "--stop '$stop_str' cuts the greedy text right before it" "$tmp/stop" -- \
    "$base" --prompt "The cat" $greedy --max-new-tokens "$raw_new" --stop "$stop_str"
same "a --stop string that never completes is printed in full" "$tmp/raw" -- \
    "$base" --prompt "The cat" $greedy --max-new-tokens "$raw_new" --stop "${stop_str}QQ" --stop zzz

# ---- sampling ----
sample() { "$chat" "$base" --prompt "The cat" --temperature 1.5 --max-new-tokens 24 --json --seed "$1" 2>/dev/null; }
a=$(sample 7); b=$(sample 7); c=$(sample 8); d=$(sample 9)
if [ -n "$a" ] && [ "$a" = "$b" ]; then pass "the same --seed gives the same sample"; else fail "same seed: '$a' vs '$b'"; fi
if [ -n "$c" ] && { [ "$a" != "$c" ] || [ "$a" != "$d" ]; }; then
    pass "other seeds give other samples"
else
    fail "seeds 7, 8, 9 all gave '$a'"
fi
e=$("$chat" "$base" --prompt "The cat" --temperature 0 --top-k 5 --top-p 0.5 --repetition-penalty 1 \
    --max-new-tokens "$raw_new" --json --seed 3 2>/dev/null)
if [ "$e" = "{\"ids\":[$raw_new_ids]}" ]; then pass "temperature 0 is greedy whatever the other settings"; else fail "temperature 0: $e"; fi

# ---- context overflow ----
printf '%s\n%s\n' "$u1" "$u2" > "$tmp/in"
expect "$tmp/drop" chat1_reply.txt alone2_reply.txt
same "--ctx $ctx_drop: the oldest turn is dropped and the reply is the one without it" "$tmp/drop" -- \
    "$tmp/chat_model" $greedy --max-new-tokens "$chat_new" --ctx "$ctx_drop"
if grep -qF "dropping the oldest turns" "$tmp/err" && [ "$(wc -l < "$tmp/err")" -eq 1 ]; then
    pass "the drop is reported once on stderr"
else
    fail "no single drop note on stderr"
fi
printf '%s\n%s\n%s\n' "$u1" "$u1" "$u1" > "$tmp/in"
"$chat" "$tmp/chat_model" $greedy --max-new-tokens "$chat_new" --ctx "$ctx_drop" < "$tmp/in" > "$tmp/out" 2> "$tmp/err"
rc=$?
if [ "$rc" -eq 0 ] && [ "$(wc -l < "$tmp/out")" -eq 3 ] && [ "$(grep -c dropping "$tmp/err")" -eq 1 ]; then
    pass "three turns in a small context: three replies, one note"
else
    fail "three turns in a small context: exit $rc, $(wc -l < "$tmp/out") replies"
fi
# a message too long alone keeps its end: the reply is the one to that end sent in a context that holds it
printf '%s\n' "$u1" > "$tmp/in"
"$chat" "$tmp/chat_model" $greedy --max-new-tokens "$chat_new" --ctx $((chat1_len + chat_new - 1)) < "$tmp/in" \
    > "$tmp/out" 2> "$tmp/err"
rc=$?
kept=$(sed -n 's/.*keeping its last \([0-9]*\) of .*/\1/p' "$tmp/err")
tail=$(printf '%s' "$u1" | tail -c "${kept:-0}")
printf '%s\n' "$tail" > "$tmp/in"
"$chat" "$tmp/chat_model" $greedy --max-new-tokens "$chat_new" < "$tmp/in" > "$tmp/out2" 2> /dev/null
if [ "$rc" -eq 0 ] && [ "$(wc -l < "$tmp/err")" -eq 1 ] && [ -n "$kept" ] && [ "$kept" -lt ${#u1} ] &&
    [ -s "$tmp/out" ] && cmp -s "$tmp/out" "$tmp/out2"; then
    pass "a message too long alone keeps its last $kept characters ('$tail'), with one note"
    cp "$tmp/out" "$tmp/cut_reply"
else
    fail "a message too long alone: exit $rc, kept '${kept}', replies '$(cat "$tmp/out")' / '$(cat "$tmp/out2")'"
fi
printf '%s\n' "$u1" > "$tmp/in"
check "a system prompt that leaves no room: the turn is skipped" 1 "this message does not fit" -- \
    "$tmp/chat_model" $greedy --max-new-tokens "$chat_new" --ctx $((chat1_len + chat_new - 1)) \
    --system "a system prompt far too long for this context"
: > "$tmp/in"
"$chat" "$tmp/chat_model" --prompt "$u1" $greedy --max-new-tokens "$chat_new" --ctx $((chat1_len + chat_new - 1)) \
    > "$tmp/out3" 2> "$tmp/err"
if [ $? -eq 0 ] && grep -q "keeping its last $kept of" "$tmp/err" && cmp -s "$tmp/cut_reply" "$tmp/out3"; then
    pass "--prompt too long alone: the same end kept, the same reply"
else
    fail "--prompt too long alone"
fi
# raw text longer than the context: its end is completed (the byte-level base: one token a byte)
long=$(printf 'The cat sat. %.0s' 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 24)
"$chat" "$base" --prompt "$long" $greedy --max-new-tokens 4 --ctx 40 > "$tmp/out" 2> "$tmp/err"
rc=$?
kept=$(sed -n 's/.*completing its last \([0-9]*\) tokens.*/\1/p' "$tmp/err")
"$chat" "$base" --prompt "$(printf '%s' "$long" | tail -c "${kept:-0}")" $greedy --max-new-tokens 4 > "$tmp/out2" 2> /dev/null
if [ "$rc" -eq 0 ] && [ "${kept:-0}" -eq 36 ] && [ -s "$tmp/out" ] && cmp -s "$tmp/out" "$tmp/out2"; then
    pass "raw text past the context: its last 36 tokens completed, as the same text given alone"
else
    fail "raw text past the context: exit $rc, kept ${kept:-none}: $(cat "$tmp/err")"
fi
# the default room for the reply is what the context leaves: a 70-character prompt to a 128-position model
p70=$(printf 'And God said, Let there be light: and there was light. And God saw it.')
"$chat" gpt2-bytes --prompt "$p70" $greedy --seed 1 --verbose > "$tmp/out" 2> "$tmp/err"
rc=$?
made=$(sed -n 's/^(\([0-9]*\) tokens in.*prompt: \([0-9]*\) tokens.*/\1 \2/p' "$tmp/err")
if [ "$rc" -eq 0 ] && [ "${#p70}" -eq 70 ] && [ -n "$made" ] && [ $(echo "$made" | awk '{print $1 + $2}') -le 128 ]; then
    pass "a 70-character prompt to a 128-position model is answered (tokens made, fed: $made)"
else
    fail "a 70-character prompt to a 128-position model: exit $rc: $(cat "$tmp/err")"
fi

# ---- bad input ----
mkdir -p "$tmp/corrupt"
printf '{"model_type": "gpt2", "n_embd": ' > "$tmp/corrupt/config.json"
cp "$base/model.safetensors" "$tmp/corrupt/"
mkdir -p "$tmp/notok"
cp "$base/config.json" "$base/model.safetensors" "$tmp/notok/"
check "missing model directory" 1 "is neither a directory" -- "$tmp/nothing/here" --prompt hi
check "corrupt config.json" 1 "config.json" -- "$tmp/corrupt" --prompt hi
check "--prompt-ids with an id >= vocab" 1 "id 257 (at position 1) is out of range" -- \
    "$base" --prompt-ids 5,257 --json
check "--prompt without a tokenizer" 1 "has no tokenizer files" -- "$tmp/notok" --prompt hi
grep -q -- "give a tokenizer apart from the model (--tokenizer)$" "$tmp/err" && pass "... and names --tokenizer" ||
    fail "no --tokenizer: $(cat "$tmp/err")"
check "a --tokenizer that does not exist" 1 "nothing-here not found: give a tokenizer directory or file, or a bundled tokenizer (gpt2, llama2, llama3, bytes, clip) (--tokenizer)" -- "$base" \
    --tokenizer "$tmp/nothing-here" --prompt hi
check "--stop without a tokenizer" 1 "--stop needs a tokenizer" -- "$tmp/notok" --prompt-ids 1,2 --json --stop x
check "unknown option" 2 "unknown option '--bogus'" -- "$base" --bogus
check "--top-p 2" 2 "top_p" -- "$base" --top-p 2 --prompt hi
check "--temperature -1" 2 "temperature" -- "$base" --temperature -1 --prompt hi
check "--max-new-tokens abc" 2 "--max-new-tokens must be an integer" -- "$base" --max-new-tokens abc
check "--prompt-ids 1,x" 2 "--prompt-ids must be a comma-separated list" -- "$base" --prompt-ids 1,x --json
check "--template bogus" 2 "--template" -- "$base" --template bogus --prompt hi
check "--ctx past the model's positions says why" 2 "the model has 256 positions (max_position_embeddings in its config.json)" -- "$base" --ctx 1000 --prompt hi
check "--max-new-tokens filling the context" 2 "leaves no room" -- "$base" --ctx 16 --max-new-tokens 16 --prompt hi
check "--system on a model without a template" 2 "--system needs a chat template" -- "$base" --system x --prompt hi
check "--json without a prompt" 2 "--json goes with --prompt" -- "$base" --json
check "no model" 2 "no MODEL given" --
check "option without its value" 2 "needs a value" -- "$base" --seed

# ---- what colossal-finetune writes: a LoRA adapter beside the base weights ----
# the adapter applied at run time must give what the same run merged gives
ft=${FINETUNE:-./apps/colossal-finetune}
if [ -x "$ft" ]; then
    i=0
    while [ $i -lt 30 ]; do echo "The cat ate the fish and the dog ate the bone. "; i=$((i + 1)); done > "$tmp/ft.txt"
    for v in lora merged; do
        extra=; [ $v = merged ] && extra=--merge-lora
        "$ft" "$base" "$tmp/ft.txt" --out "$tmp/ft_$v" --lora-rank 4 $extra --steps 4 --lr 0.05 --batch 2 \
            --seq 32 --dropout 0 --val-percent 10 --quiet > /dev/null 2>&1
    done
    la=$("$chat" "$tmp/ft_lora" --prompt "The cat" $greedy --max-new-tokens "$raw_new" --json 2>"$tmp/err")
    me=$("$chat" "$tmp/ft_merged" --prompt "The cat" $greedy --max-new-tokens "$raw_new" --json 2>>"$tmp/err")
    if [ -f "$tmp/ft_lora/adapter_config.json" ] && [ -n "$la" ] && [ "$la" = "$me" ]; then
        pass "a LoRA output of colossal-finetune: the adapter at run time gives the merged model's ids"
    else
        fail "LoRA adapter '$la' vs merged '$me'"
    fi
    if [ -n "$la" ] && [ "$la" != "{\"ids\":[$raw_new_ids]}" ]; then
        pass "the adapter changes the base model's output"
    else
        fail "the adapter was not applied"
    fi
else
    for t in "LoRA adapter = merged" "the adapter changes the output"; do
        n=$((n + 1)); echo "ok $n # SKIP $t: no colossal-finetune"
    done
fi

# ---- the line editor in a pseudo-terminal ----
# wait_for PATTERN [COUNT]: waits until COUNT (default 1) lines of the pane
# match the extended regex (up to ~10 s); the pane is left in $tmp/screen
wait_for() {
    i=0
    while [ $i -lt 100 ]; do
        tmux -S "$tmux_sock" capture-pane -p -t chat > "$tmp/screen" 2>/dev/null
        [ "$(grep -cE -- "$1" "$tmp/screen")" -ge "${2:-1}" ] && return 0
        sleep 0.1
        i=$((i + 1))
    done
    return 1
}
why=
if ! command -v tmux > /dev/null 2>&1; then
    why="tmux is not installed"
elif ! tmux -S "$tmux_sock" new-session -d -s chat -x 100 -y 30 \
        "XDG_STATE_HOME='$tmp/state' '$chat' '$tmp/chat_model' $greedy --max-new-tokens $chat_new; echo \"exit=\$?\"; sleep 60"
then
    why="tmux cannot start a session here"
fi
if [ -n "$why" ]; then
    for t in "editing keys" "history recall" "history file" "ctrl-d quits"; do
        n=$((n + 1)); echo "ok $n # SKIP $t: $why"
    done
else
    reply1=$(cat "$fx/chat1_reply.txt")
    wait_for '^> ?$' || true
    # "hxllo abc", ctrl-w (kills abc), backspace (the space), home, right, delete (x), "e": "hello"
    tmux -S "$tmux_sock" send-keys -t chat -l 'hxllo abc'
    tmux -S "$tmux_sock" send-keys -t chat C-w BSpace Home Right DC e Enter
    if wait_for "^$reply1\$" && grep -qx '> hello' "$tmp/screen"; then
        pass "editing keys: the edited line is the turn sent (the reply is transformers' for '$u1')"
    else
        fail "editing keys"; sed 's/^/# screen: /' "$tmp/screen" | grep -v '^# screen: $'
    fi
    tmux -S "$tmux_sock" send-keys -t chat -l '/reset'
    tmux -S "$tmux_sock" send-keys -t chat Enter
    wait_for 'conversation cleared' && wait_for '^> ?$' || true
    tmux -S "$tmux_sock" send-keys -t chat Up Up Enter
    if wait_for "^$reply1\$" 2 && [ "$(grep -cx '> hello' "$tmp/screen")" -eq 2 ]; then
        pass "history recall: up, up gives the first line back (the same reply after /reset)"
    else
        fail "history recall"; sed 's/^/# screen: /' "$tmp/screen" | grep -v '^# screen: $'
    fi
    if printf 'hello\n/reset\nhello\n' | cmp -s - "$tmp/state/colossal/chat_history"; then
        pass "history file under \$XDG_STATE_HOME/colossal"
    else
        fail "history file"
    fi
    tmux -S "$tmux_sock" send-keys -t chat C-d
    if wait_for '^exit=0$'; then pass "ctrl-d quits with exit 0"; else fail "ctrl-d"; fi
fi

# ---- the terminal during and around replies: a narrow pane (40 columns), a model slow enough to type during
# its reply (the gpt2 architecture, random weights: some 10-20 tokens/s here) ----
wait_in() { # wait_in SESSION PATTERN [COUNT [TENTHS]]: as wait_for, for another session (up to ~30 s, or TENTHS)
    i=0
    while [ $i -lt "${4:-300}" ]; do
        tmux -S "$tmux_sock" capture-pane -p -J -t "$1" > "$tmp/screen" 2>/dev/null
        [ "$(grep -cE -- "$2" "$tmp/screen")" -ge "${3:-1}" ] && return 0
        sleep 0.1
        i=$((i + 1))
    done
    return 1
}
show() { sed 's/^/# screen: /' "$tmp/screen" | grep -v '^# screen: $' | tail -${1:-12}; }
if [ -n "$why" ] || ! tmux -S "$tmux_sock" new-session -d -s slow -x 40 -y 60 \
        "XDG_STATE_HOME='$tmp/state2' '$chat' gpt2 $greedy --max-new-tokens 120 --device cpu; echo \"exit=\$?\"; sleep 60"; then
    for t in "loading message" "long lines wrap" "/help" "/stats" "type-ahead during a reply" "ctrl-c"; do
        n=$((n + 1)); echo "ok $n # SKIP $t: ${why:-tmux cannot start a session here}"
    done
else
    if wait_in slow '^colossal-chat: loading gpt2 \.\.\. done in [0-9.]+ s$'; then
        pass "on a terminal, a loading line while the weights load"
    else
        fail "no loading line"; show
    fi
    wait_in slow '^> ?$' || true
    # 59 characters after the 2 of the prompt: two rows of 40; a character typed at the start moves both
    tmux -S "$tmux_sock" send-keys -t slow -l 'the quick brown fox jumps over the lazy dog again and again'
    tmux -S "$tmux_sock" send-keys -t slow Home X
    i=0
    # (until the edit is drawn: on a loaded machine the first drawing of the line comes well before it)
    while [ $i -lt 300 ]; do
        tmux -S "$tmux_sock" capture-pane -p -t slow > "$tmp/screen"
        grep -qx 'zy dog again and again' "$tmp/screen" && grep -qx '> Xthe quick brown fox jumps over the la' \
            "$tmp/screen" && break
        sleep 0.1
        i=$((i + 1))
    done
    if grep -qx '> Xthe quick brown fox jumps over the la' "$tmp/screen" && grep -qx 'zy dog again and again' "$tmp/screen" &&
        ! grep -q 'y dog again and again.' "$tmp/screen"; then
        pass "a line wider than the terminal wraps onto a second row, redrawn whole after an edit at its start"
    else
        fail "long lines wrap"; show
    fi
    tmux -S "$tmux_sock" send-keys -t slow End C-u
    i=0
    while [ $i -lt 300 ]; do
        tmux -S "$tmux_sock" capture-pane -p -t slow > "$tmp/screen"
        ! grep -q 'again' "$tmp/screen" && grep -qx '> *' "$tmp/screen" && break
        sleep 0.1
        i=$((i + 1))
    done
    if ! grep -q 'again' "$tmp/screen" && grep -qx '> *' "$tmp/screen"; then
        pass "killing the wrapped line clears both rows"
    else
        fail "the wrapped line is not cleared"; show
    fi
    tmux -S "$tmux_sock" send-keys -t slow -l '/help'
    tmux -S "$tmux_sock" send-keys -t slow Enter
    if wait_in slow '^/stats +show' && wait_in slow '^/reset ' && wait_in slow '^> ?$' 1; then
        pass "/help lists the commands"
    else
        fail "/help"; show
    fi
    tmux -S "$tmux_sock" send-keys -t slow -l '/stats'
    tmux -S "$tmux_sock" send-keys -t slow Enter
    wait_in slow 'tokens/s shown after each reply' || true
    # "hi", then keys typed while the reply streams: not inside the reply, waiting on the next line
    tmux -S "$tmux_sock" send-keys -t slow -l 'hi'
    tmux -S "$tmux_sock" send-keys -t slow Enter
    sleep 0.3
    tmux -S "$tmux_sock" send-keys -t slow -l 'typed ahead'
    tmux -S "$tmux_sock" capture-pane -p -J -t slow > "$tmp/during"
    if grep -q 'tokens/s;' "$tmp/during"; then
        fail "type-ahead: the reply was over before the keys were sent (too fast a machine for this check)"
    elif wait_in slow '^\([0-9]+ tokens in [0-9.]+ s, [0-9.]+ tokens/s; prompt: 1 token in' 1 1200 &&
        wait_in slow '^> typed ahead$' && [ "$(grep -c 'typed ahead' "$tmp/screen")" -eq 1 ]; then
        pass "/stats: a tokens/s line after the reply; keys typed during it are not echoed into it but begin the next line"
    else
        fail "/stats or type-ahead"; show
    fi
    # ctrl-c stops a reply; the typed-ahead text was sent with it
    tmux -S "$tmux_sock" send-keys -t slow Enter
    sleep 0.3
    tmux -S "$tmux_sock" send-keys -t slow C-c
    if wait_in slow '^\(reply stopped\)$' 1 1200 && wait_in slow '^\([0-9]+ tokens? in' 2 1200; then
        pass "ctrl-c stops a reply on the quiet terminal"
    else
        fail "ctrl-c during a reply"; show
    fi
    tmux -S "$tmux_sock" send-keys -t slow C-d
fi

# ---- model output on a terminal: control characters shown, not sent ----
# The escape fixture (tools/refgen/make_escape_tokenizer.py) makes the model's
# first greedy tokens decode to ESC and the 8-bit CSI byte 0x9b. Through a pipe
# the bytes stay raw; on a terminal (script(1) gives one) they must arrive as
# "^[" and U+FFFD, and no ESC or C1 byte may reach the terminal.
esc_args="$base --tokenizer $fx/escape --prompt-ids 72,101,108,108,111 --max-new-tokens 6 $greedy"
"$chat" $esc_args > "$tmp/out" 2> "$tmp/err"
if [ "$(od -An -tx1 "$tmp/out" | tr -d ' \n')" = "1b9b696d5f650a" ]; then
    pass "escape fixture through a pipe: the raw bytes (ESC 0x9b im_e)"
else
    fail "escape fixture through a pipe"; od -c "$tmp/out" | head -3 | sed 's/^/# /'
fi
if command -v script > /dev/null 2>&1; then
    script -qec "$chat $esc_args" /dev/null > "$tmp/tty" 2>&1 < /dev/null
    if grep -q '\^\[' "$tmp/tty" && [ "$(tr -d '\033\233' < "$tmp/tty" | wc -c)" -eq "$(wc -c < "$tmp/tty")" ] &&
        grep -q "$(printf '\357\277\275')im_e" "$tmp/tty"; then
        pass "escape fixture on a terminal: shown as ^[ and U+FFFD, no ESC or CSI byte sent"
    else
        fail "escape fixture on a terminal"; od -c "$tmp/tty" | head -3 | sed 's/^/# /'
    fi
else
    n=$((n + 1)); echo "ok $n # SKIP script(1) is not installed (util-linux)"
fi

echo "1..$n"
[ "$fails" -eq 0 ]

#!/bin/sh
# test_tokenize_cli.sh - colossal-tokenize on good and bad input: the ids of
# the bundled tokenizers (references from Hugging Face tokenizers), decode
# round trips, and one clear line on stderr with exit 1 (bad files or input)
# or 2 (usage) for each bad case (TAP output).
tok=${TOKENIZE:-./apps/colossal-tokenize}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
n=0
fails=0

# check NAME WANT_RC FIXED_STRING INPUT_FILE -- ARGS...: runs the tool on the
# input, compares the exit code and looks for the string in stdout + stderr
check() {
    name=$1 want=$2 pattern=$3 input=$4
    shift 5
    "$tok" "$@" < "$input" > "$tmp/out" 2> "$tmp/err"
    rc=$?
    n=$((n + 1))
    lines=$(wc -l < "$tmp/err")
    if [ "$rc" -eq "$want" ] && grep -qF -- "$pattern" "$tmp/out" "$tmp/err" && { [ "$rc" -eq 0 ] || [ "$rc" -eq 2 ] || [ "$lines" -eq 1 ]; }; then
        echo "ok $n - $name (exit $rc: $(head -n 1 "$tmp/out" "$tmp/err" | grep -v '^==' | grep . | head -n 1 | cut -c1-100))"
    else
        fails=$((fails + 1))
        echo "not ok $n - $name: exit $rc, wanted $want and '$pattern'"
        sed 's/^/# /' "$tmp/out" "$tmp/err" | head -5
    fi
}

# same_bytes NAME FILE_A FILE_B
same_bytes() {
    n=$((n + 1))
    if cmp -s "$2" "$3"; then
        echo "ok $n - $1"
    else
        fails=$((fails + 1))
        echo "not ok $n - $1: the files differ"
    fi
}

printf 'Hello world!' > "$tmp/hello"
printf 'x<|eot_id|>y' > "$tmp/eot"
printf '[15496, 995, 0]' > "$tmp/ids"
printf '[128000, 87, 128009, 88]' > "$tmp/ids3"
printf 'naïve café — 日本語 😀\n\ttabs  and   spaces\r\n' > "$tmp/utf8"
printf '[1, 2' > "$tmp/badjson"
printf '[15496, 50257]' > "$tmp/range"
printf '[15496, 1.5]' > "$tmp/frac"
printf '{"model": {"vocab": ' > "$tmp/corrupt.json"
: > "$tmp/empty"

check "gpt2 ids" 0 "[15496, 995, 0]" "$tmp/hello" -- gpt2
check "llama2 adds BOS" 0 "[1, 15043, 3186, 29991]" "$tmp/hello" -- llama2
check "llama2 --no-special" 0 "[15043, 3186, 29991]" "$tmp/hello" -- --no-special llama2
check "llama3 adds BOS, matches <|eot_id|>" 0 "[128000, 87, 128009, 88]" "$tmp/eot" -- llama3
check "llama3 --split-special" 0 "[87, 27, 91, 68, 354, 851, 91, 29, 88]" "$tmp/eot" -- --no-special --split-special llama3
check "empty input" 0 "[]" "$tmp/empty" -- --no-special llama3
check "a tokenizer.json path" 0 "[1, 15043, 3186, 29991]" "$tmp/hello" -- "${srcdir:-.}/assets/tokenizers/llama2/tokenizer.json"
check "a vocab.json + merges.txt directory" 0 "[15496, 995, 0]" "$tmp/hello" -- "${srcdir:-.}/assets/tokenizers/gpt2"
check "gpt2 --decode" 0 "Hello world!" "$tmp/ids" -- --decode gpt2
# CLIP (references: tests/fixtures/clip_tokenizer/cases_sd1.jsonl, from transformers' CLIPTokenizer)
printf 'A PHOTO OF A CAT' > "$tmp/cat"
printf '[49406, 320, 1125, 539, 320, 2368, 49407]' > "$tmp/catids"
check "clip: lower case, BOS and EOS" 0 "[49406, 320, 1125, 539, 320, 2368, 49407]" "$tmp/cat" -- clip
check "clip --decode" 0 "<|startoftext|>a photo of a cat <|endoftext|>" "$tmp/catids" -- --decode clip
check "clip --decode --skip-special" 0 "a photo of a cat" "$tmp/catids" -- --decode --skip-special clip
check "llama3 --decode keeps special tokens" 0 "<|begin_of_text|>x<|eot_id|>y" "$tmp/ids3" -- --decode llama3
check "llama3 --decode --skip-special" 0 "xy" "$tmp/ids3" -- --decode --skip-special llama3
for m in gpt2 llama2 llama3; do
    "$tok" $m < "$tmp/utf8" > "$tmp/rt.ids" && "$tok" --decode --skip-special $m < "$tmp/rt.ids" > "$tmp/rt.txt"
    same_bytes "$m: decode(encode(text)) gives the text back" "$tmp/utf8" "$tmp/rt.txt"
done
# a hub id found in a Hugging Face cache laid out as huggingface_hub writes it
snap="$tmp/hf/hub/models--acme--tiny-gpt/snapshots/0123abcd"
mkdir -p "$snap" "$tmp/hf/hub/models--acme--tiny-gpt/refs"
printf '0123abcd' > "$tmp/hf/hub/models--acme--tiny-gpt/refs/main"
cp "${srcdir:-.}/assets/tokenizers/gpt2/vocab.json" "${srcdir:-.}/assets/tokenizers/gpt2/merges.txt" "$snap/"
HF_HOME="$tmp/hf" check "a hub id from the Hugging Face cache" 0 "[15496, 995, 0]" "$tmp/hello" -- acme/tiny-gpt
HF_HOME="$tmp/hf" check "a hub id missing from the cache" 1 "huggingface-cli download acme/other" "$tmp/hello" -- acme/other
check "missing tokenizer: the bundled ones are named" 1 "nothing-here not found: give a tokenizer directory or file, a hub id, or a bundled tokenizer (gpt2, llama2, llama3, bytes, clip)" "$tmp/hello" -- "$tmp/nothing-here"
check "directory without tokenizer files" 1 "no tokenizer.json, nor vocab.json with merges.txt" "$tmp/hello" -- "$tmp"
check "corrupt tokenizer.json" 1 "invalid JSON at byte" "$tmp/hello" -- "$tmp/corrupt.json"
check "--decode of invalid JSON" 1 "not a JSON array of token ids" "$tmp/badjson" -- --decode gpt2
check "--decode of an id out of range" 1 "token id 50257 at position 1 is out of range [0, 50257)" "$tmp/range" -- --decode gpt2
check "--decode of a fractional id" 1 "element 1 of the array is not an integer id" "$tmp/frac" -- --decode gpt2
# --chat: the conversation as the model's chat template renders it (chatml written out here by hand), decoded back
chatml_dir="${srcdir:-.}/tests/fixtures/chat_model/chatml"
printf '{"messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]}' > "$tmp/conv"
"$tok" --chat --generation-prompt "$chatml_dir" < "$tmp/conv" > "$tmp/ids" 2> "$tmp/err" &&
    "$tok" --decode "$chatml_dir" < "$tmp/ids" > "$tmp/text"
printf '<|im_start|>system\nbe brief<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n' > "$tmp/want"
same_bytes "--chat --generation-prompt: the ids of the chatml conversation" "$tmp/want" "$tmp/text"
printf '[{"role": "user", "content": "hi"}]' > "$tmp/conv2"
"$tok" --chat "$chatml_dir" < "$tmp/conv2" > "$tmp/ids" 2> "$tmp/err" && "$tok" --decode "$chatml_dir" < "$tmp/ids" > "$tmp/text"
printf '<|im_start|>user\nhi<|im_end|>\n' > "$tmp/want"
same_bytes "--chat without the generation prompt, a bare list of messages" "$tmp/want" "$tmp/text"
check "--chat on a tokenizer without a chat template" 1 "no chat_template" "$tmp/conv" -- --chat gpt2
printf '[{"role": "wizard", "content": "hi"}]' > "$tmp/conv3"
check "--chat with an unknown role" 1 "message 0 needs a \"role\"" "$tmp/conv3" -- --chat "$chatml_dir"
check "--chat with text that is not a conversation" 1 "not a JSON list of messages" "$tmp/hello" -- --chat "$chatml_dir"
check "--generation-prompt without --chat" 2 "goes with --chat" "$tmp/hello" -- --generation-prompt gpt2
check "unknown option" 2 "usage:" "$tmp/hello" -- --bogus gpt2
check "no model" 2 "no MODEL given" "$tmp/hello" --
check "extra argument" 2 "unexpected argument" "$tmp/hello" -- gpt2 llama2

echo "1..$n"
[ "$fails" -eq 0 ]

#!/bin/sh
# test_serve_cli.sh - colossal-serve over HTTP with curl (TAP output).
# References: transformers' greedy texts of tests/fixtures/chat_model (refs.sh,
# tools/refgen/make_chat_model_fixture.py) and colossal-chat run alone on the
# same prompt. Covers every endpoint, streamed and whole responses, usage
# counts, seeds, n, stop strings, every error status with OpenAI's error
# object (and the server still answering after each), the API key, 16
# concurrent greedy clients (each must get what colossal-chat gives alone),
# a full queue (503), a client killed mid-stream (its slot is freed) and
# SIGTERM with a request in flight (it completes, exit 0). The slow cases run
# on a wide model of zero weights written here (11 ms a token on 2 cores), so
# a request outlasts what the test does to it.
serve=${SERVE:-./apps/colossal-serve}
chat=${CHAT:-./apps/colossal-chat}
src=${SRCDIR:-${srcdir:-.}}
fx="$src/tests/fixtures/chat_model"
base="$fx/base"
chatml="$fx/chatml"
. "$fx/refs.sh"
tmp=$(mktemp -d)
pid=
trap '[ -n "$pid" ] && kill -9 $pid 2>/dev/null; rm -rf "$tmp"' EXIT
n=0
fails=0
for t in curl python3; do
    if ! command -v $t > /dev/null 2>&1; then echo "1..0 # SKIP $t is not installed"; exit 0; fi
done

pass() { n=$((n + 1)); echo "ok $n - $1"; }
fail() {
    n=$((n + 1)); fails=$((fails + 1)); echo "not ok $n - $1"
    [ -s "$tmp/out" ] && head -c 600 "$tmp/out" | sed 's/^/# body: /'
    [ -n "$log" ] && [ -s "$log" ] && tail -4 "$log" | sed 's/^/# server: /'
    return 0
}
ok_if() { if [ "$1" = 0 ]; then pass "$2"; else fail "$2"; fi; }

# start NAME ARGS...: the server on a free port, waiting for its listening line (url, pid, log)
start() {
    log="$tmp/$1.log"
    shift
    rm -f "$log" # a log of the same name from an earlier server must not be read as this one's
    "$serve" "$@" --port 0 2> "$log" &
    pid=$!
    url=
    i=0
    while [ $i -lt 600 ]; do
        url=$(sed -n 's/^colossal-serve: listening on \(http:.*\)$/\1/p' "$log" 2> /dev/null)
        [ -n "$url" ] && return 0
        kill -0 $pid 2> /dev/null || break
        sleep 0.1
        i=$((i + 1))
    done
    echo "# the server did not start:"; sed 's/^/# /' "$log"
    return 1
}
# stop: SIGTERM, and the exit code in $stop_rc
stop() {
    kill -TERM $pid 2> /dev/null
    wait $pid
    stop_rc=$?
    pid=
}

# post PATH JSON [CURL ARGS]: the body in $tmp/out, the status in $code; get PATH [CURL ARGS] the same
post() {
    p=$1 b=$2
    shift 2
    code=$(curl -s -o "$tmp/out" -w '%{http_code}' -H 'Content-Type: application/json' --data-binary "$b" "$@" "$url$p")
}
get() {
    p=$1
    shift
    code=$(curl -s -o "$tmp/out" -w '%{http_code}' "$@" "$url$p")
}
# js EXPR [FILE]: a Python expression of the JSON d in FILE (default $tmp/out), printed
js() { python3 -c 'import json, sys; d = json.load(open(sys.argv[2])); print(eval(sys.argv[1]))' "$1" "${2:-$tmp/out}" 2>&1; }
# chunks FILE: the stream's data lines checked (each JSON but the final [DONE]) and merged into one JSON:
# {"text": [per choice], "finish": [...], "role": [...], "usage": ..., "objects": [...], "ids": [...]}
chunks() {
    python3 - "$1" << 'EOF'
import json, sys
raw = open(sys.argv[1], encoding="utf-8").read()
assert raw.endswith("data: [DONE]\n\n"), "no final data: [DONE]"
events = [e for e in raw.split("\n\n") if e]
assert all(e.startswith("data: ") for e in events), "an event that is not a data line"
datas = [json.loads(e[6:]) for e in events[:-1]]
out = {"text": {}, "finish": {}, "role": {}, "usage": None, "objects": sorted({d["object"] for d in datas}),
       "ids": sorted({d["id"] for d in datas})}
for d in datas:
    if d.get("usage"):
        out["usage"] = d["usage"]
    for c in d["choices"]:
        i = str(c["index"])
        delta = c.get("delta", c)
        if "role" in delta:
            out["role"][i] = delta["role"]
        out["text"][i] = out["text"].get(i, "") + (delta.get("content") or delta.get("text") or "")
        if c["finish_reason"]:
            assert i not in out["finish"], "two finish reasons"
            out["finish"][i] = c["finish_reason"]
json.dump(out, sys.stdout)
EOF
}
# error STATUS PARAM CODE: $tmp/out is OpenAI's error object ('-' for null) with status $code
error_is() {
    [ "$code" = "$1" ] && python3 - "$tmp/out" "$2" "$3" << 'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
e = d["error"]
assert list(d) == ["error"] and sorted(e) == ["code", "message", "param", "type"], d
assert isinstance(e["message"], str) and e["message"], e
assert e["type"] in ("invalid_request_error", "server_error"), e
assert e["param"] == (None if sys.argv[2] == "-" else sys.argv[2]), ("param", e["param"])
assert e["code"] == (None if sys.argv[3] == "-" else sys.argv[3]), ("code", e["code"])
EOF
}
# the server still answers (after a bad request): /health 200 and a greedy completion as before
still_serves() {
    c2=$(curl -s -o "$tmp/h" -w '%{http_code}' "$url/health")
    [ "$c2" = 200 ] && [ "$(js 'd["status"]' "$tmp/h")" = ok ]
}
# bad NAME STATUS PARAM CODE PATH BODY [CURL ARGS]
bad() {
    name=$1 st=$2 pa=$3 co=$4 p=$5 b=$6
    shift 6
    post "$p" "$b" "$@"
    if error_is "$st" "$pa" "$co" > "$tmp/why" 2>&1 && still_serves; then
        pass "$name: $st, param $pa, code $co ($(js 'd["error"]["message"]' | head -c 90)); the server answers after"
    else
        fail "$name: status $code, wanted $st $pa $co"; sed 's/^/# /' "$tmp/why" | tail -2
    fi
}

raw_text=$(cat "$fx/raw_greedy.txt")
chat1_text=$(cat "$fx/chat1_reply.txt")
nraw_ids=$(echo "$raw_ids" | tr ',' '\n' | wc -l)

# ---- the command line ----
"$serve" --help > "$tmp/out" 2>&1 && grep -q -- "--parallel N" "$tmp/out" && grep -q -- "--api-key KEY" "$tmp/out" &&
    grep -q -- "--device DEV" "$tmp/out"
ok_if $? "--help names the options (--parallel, --api-key, --device)"
"$serve" --version > "$tmp/out" 2>&1 && grep -q "^colossal-serve [0-9]" "$tmp/out"
ok_if $? "--version"
for args in "--bogus|unknown option '--bogus'" "--parallel 0|--parallel must be an integer in 1..1024" \
    "--port 70000|--port must be an integer in 0..65535" "--max-body 1Q|--max-body must be a size" \
    "--template bogus|--template" "|no MODEL given" "--kv-mem 1Q|--kv-mem must be a size" \
    "--kv-mem 10K --ctx 100|need 200.0 KiB of key/value caches"; do
    a=${args%%|*} want=${args#*|}
    # shellcheck disable=SC2086
    "$serve" $a $( [ -n "$a" ] && echo "$base") > "$tmp/out" 2> "$tmp/err"
    rc=$?
    if [ $rc -eq 2 ] && grep -qF -- "$want" "$tmp/err" && [ "$(wc -l < "$tmp/err")" -eq 1 ]; then
        pass "usage error '$a': exit 2, one line ($(head -c 80 "$tmp/err"))"
    else
        fail "usage error '$a': exit $rc: $(cat "$tmp/err")"
    fi
done
"$serve" "$tmp/nothing" --port 0 > "$tmp/out" 2> "$tmp/err"
rc=$?
[ $rc -eq 1 ] && grep -q "is neither a directory" "$tmp/err"
ok_if $? "a model that does not exist: exit 1 ($(head -c 80 "$tmp/err"))"

# ---- a chat model (ChatML template from --tokenizer): every endpoint ----
log=
if ! start chatml "$base" --tokenizer "$chatml" --parallel 4 --max-body 8K; then
    echo "Bail out! colossal-serve did not start"
    exit 1
fi
get /health
[ "$code" = 200 ] && [ "$(js '(d["status"], d["slots"], d["busy"], d["queued"])')" = "('ok', 4, 0, 0)" ]
ok_if $? "/health: ok, 4 slots, none busy"
get /v1/models
[ "$code" = 200 ] && [ "$(js '(d["object"], [(m["id"], m["object"], m["owned_by"]) for m in d["data"]])')" = \
    "('list', [('base', 'model', 'colossal')])" ]
ok_if $? "/v1/models lists the model by its directory's name"
get /v1/models/base
[ "$code" = 200 ] && [ "$(js 'd["id"]')" = base ]
ok_if $? "/v1/models/base"
get /v1/models/gpt-4
error_is 404 model model_not_found
ok_if $? "/v1/models/gpt-4: 404 model_not_found"

# chat, whole: transformers' greedy reply, colossal-chat's token count
want_ids=$("$chat" "$base" --tokenizer "$chatml" --prompt "$u1" --temperature 0 --max-new-tokens "$chat_new" --json)
nwant=$(echo "$want_ids" | python3 -c 'import json, sys; print(len(json.load(sys.stdin)["ids"]))')
post /v1/chat/completions "{\"model\":\"base\",\"messages\":[{\"role\":\"user\",\"content\":\"$u1\"}],\"temperature\":0,\"max_tokens\":$chat_new}"
cp "$tmp/out" "$tmp/chat_whole"
got=$(js 'd["choices"][0]["message"]["content"]')
[ "$code" = 200 ] && [ "$got" = "$chat1_text" ]
ok_if $? "chat completion (greedy) is transformers' reply: '$got'"
[ "$(js '(d["object"], d["id"][:9], d["model"], d["choices"][0]["message"]["role"], d["choices"][0]["finish_reason"], type(d["created"]).__name__)')" = \
    "('chat.completion', 'chatcmpl-', 'base', 'assistant', 'stop', 'int')" ]
ok_if $? "... as a chat.completion object: id chatcmpl-..., role assistant, finish_reason stop"
[ "$(js '(d["usage"]["prompt_tokens"], d["usage"]["completion_tokens"], d["usage"]["total_tokens"])')" = \
    "($chat1_len, $nwant, $((chat1_len + nwant)))" ]
ok_if $? "... usage: $chat1_len prompt tokens (the template's), $nwant completion tokens (colossal-chat's ids), the sum"
post /v1/chat/completions "{\"messages\":[{\"role\":\"system\",\"content\":\"$sys\"},{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"$u1\"}]}],\"temperature\":0,\"max_tokens\":$chat_new}"
[ "$code" = 200 ] && [ "$(js 'd["choices"][0]["message"]["content"]')" = "$(cat "$fx/sys_reply.txt")" ] &&
    [ "$(js 'd["usage"]["prompt_tokens"]')" = "$sys_len" ]
ok_if $? "a system message and content as text parts: transformers' reply, $sys_len prompt tokens"
post /v1/chat/completions "{\"messages\":[{\"role\":\"user\",\"content\":\"$u1\"},{\"role\":\"assistant\",\"content\":\"$chat1_text\"},{\"role\":\"user\",\"content\":\"$u2\"}],\"temperature\":0,\"max_tokens\":$chat_new}"
[ "$code" = 200 ] && [ "$(js 'd["choices"][0]["message"]["content"]')" = "$(cat "$fx/chat2_reply.txt")" ]
ok_if $? "a conversation of three messages: transformers' second reply"

# chat, streamed
curl -sN -o "$tmp/sse" -D "$tmp/hdr" -H 'Content-Type: application/json' --data-binary \
    "{\"messages\":[{\"role\":\"user\",\"content\":\"$u1\"}],\"temperature\":0,\"max_tokens\":$chat_new,\"stream\":true,\"stream_options\":{\"include_usage\":true}}" \
    "$url/v1/chat/completions"
chunks "$tmp/sse" > "$tmp/out" 2> "$tmp/why"
grep -qi '^content-type: text/event-stream' "$tmp/hdr" &&
    [ "$(js '(d["text"]["0"], d["role"]["0"], d["finish"]["0"], d["objects"], len(d["ids"]))')" = \
    "('$chat1_text', 'assistant', 'stop', ['chat.completion.chunk'], 1)" ]
ok_if $? "chat stream: text/event-stream, chunks of one id, the role first, the same text, finish stop, data: [DONE]"
[ "$(js '(d["usage"]["prompt_tokens"], d["usage"]["completion_tokens"])')" = "($chat1_len, $nwant)" ]
ok_if $? "... stream_options.include_usage: the usage chunk counts as the whole response does"
grep -q '"usage":null' "$tmp/sse"
ok_if $? "... and the other chunks carry usage null"

# completions
post /v1/completions "{\"model\":\"base\",\"prompt\":\"The cat\",\"temperature\":0,\"max_tokens\":$raw_new}"
[ "$code" = 200 ] && [ "$(js 'd["choices"][0]["text"]')" = "$raw_text" ]
ok_if $? "completion (greedy) is transformers' text"
[ "$(js '(d["object"], d["id"][:5], d["choices"][0]["finish_reason"], d["usage"]["prompt_tokens"], d["usage"]["completion_tokens"], d["usage"]["total_tokens"])')" = \
    "('text_completion', 'cmpl-', 'length', $nraw_ids, $raw_new, $((nraw_ids + raw_new)))" ]
ok_if $? "... a text_completion, finish length, usage $nraw_ids + $raw_new"
post /v1/completions "{\"prompt\":[$raw_ids],\"temperature\":0,\"max_tokens\":$raw_new}"
[ "$code" = 200 ] && [ "$(js 'd["choices"][0]["text"]')" = "$raw_text" ]
ok_if $? "a prompt of token ids gives the same text"
curl -sN -o "$tmp/sse" -H 'Content-Type: application/json' --data-binary \
    "{\"prompt\":\"The cat\",\"temperature\":0,\"max_tokens\":$raw_new,\"stream\":true}" "$url/v1/completions"
chunks "$tmp/sse" > "$tmp/out" 2> "$tmp/why"
[ "$(js '(d["text"]["0"], d["finish"]["0"], d["objects"], d["usage"])')" = "('$raw_text', 'length', ['text_completion'], None)" ]
ok_if $? "completion stream: the same text, finish length, no usage unless asked"

# stop strings
post /v1/completions "{\"prompt\":\"The cat\",\"temperature\":0,\"max_tokens\":$raw_new,\"stop\":\"$stop_str\"}"
[ "$code" = 200 ] && [ "$(js '(d["choices"][0]["text"], d["choices"][0]["finish_reason"])')" = \
    "('$(cat "$fx/stop_expect.txt")', 'stop')" ]
ok_if $? "stop '$stop_str' cuts transformers' text right before it (finish stop)"
post /v1/completions "{\"prompt\":\"The cat\",\"temperature\":0,\"max_tokens\":$raw_new,\"stop\":[\"QQ\",\"$stop_str\"]}"
[ "$(js 'd["choices"][0]["text"]')" = "$(cat "$fx/stop_expect.txt")" ]
ok_if $? "stop as an array"
post /v1/completions "{\"prompt\":\"The cat\",\"temperature\":0,\"max_tokens\":$raw_new,\"stop\":[\"${stop_str}QQ\",\"zzz\"]}"
[ "$(js '(d["choices"][0]["text"], d["choices"][0]["finish_reason"])')" = "('$raw_text', 'length')" ]
ok_if $? "stop strings that never complete: the whole text"

# seeds and n
sample() { post /v1/completions "{\"prompt\":\"The cat\",\"temperature\":1.5,\"max_tokens\":24$1}"; js "$2"; }
a=$(sample ',"seed":7' 'd["choices"][0]["text"]')
b=$(sample ',"seed":7' 'd["choices"][0]["text"]')
c=$(sample ',"seed":8' 'd["choices"][0]["text"]')
d=$(sample ',"seed":9' 'd["choices"][0]["text"]')
[ -n "$a" ] && [ "$a" = "$b" ]
ok_if $? "the same seed gives the same sample"
[ "$a" != "$c" ] || [ "$a" != "$d" ]
ok_if $? "other seeds give other samples"
two=$(sample ',"seed":7,"n":2' '[c["index"] for c in d["choices"]] == [0, 1] and [c["text"] for c in d["choices"]]')
[ "$two" = "$(python3 -c 'import sys; print(sys.argv[1:])' "$a" "$c")" ]
ok_if $? "n 2 with seed 7: choice 0 is seed 7's sample and choice 1 seed 8's"
[ "$(js 'd["usage"]["completion_tokens"] == 48 and d["usage"]["prompt_tokens"] == '"$nraw_ids")" = True ]
ok_if $? "... usage counts both choices' tokens and the prompt once"
post /v1/chat/completions "{\"messages\":[{\"role\":\"user\",\"content\":\"$u1\"}],\"temperature\":0,\"max_tokens\":$chat_new,\"n\":3}"
[ "$(js '[c["message"]["content"] for c in d["choices"]]')" = "['$chat1_text', '$chat1_text', '$chat1_text']" ]
ok_if $? "n 3 at temperature 0: three greedy replies"
curl -sN -o "$tmp/sse" -H 'Content-Type: application/json' --data-binary \
    "{\"messages\":[{\"role\":\"user\",\"content\":\"$u1\"}],\"temperature\":0,\"max_tokens\":$chat_new,\"n\":2,\"stream\":true}" \
    "$url/v1/chat/completions"
chunks "$tmp/sse" > "$tmp/out" 2> "$tmp/why"
[ "$(js '(d["text"], d["finish"])')" = "({'0': '$chat1_text', '1': '$chat1_text'}, {'0': 'stop', '1': 'stop'})" ]
ok_if $? "n 2 streamed: each choice's chunks by index"

# ---- bad requests: OpenAI's error object, and the server goes on ----
p=/v1/completions
bad "malformed JSON" 400 - invalid_json $p '{"prompt": "x",'
bad "trailing garbage" 400 - invalid_json $p '{"prompt": "x"} x'
bad "an empty body" 400 - invalid_json $p ''
bad "a body that is not an object" 400 - invalid_type $p '["prompt"]'
bad "temperature as a string" 400 temperature invalid_type $p '{"prompt":"x","temperature":"hot"}'
bad "temperature 2.5" 400 temperature invalid_value $p '{"prompt":"x","temperature":2.5}'
bad "top_p 0" 400 top_p invalid_value $p '{"prompt":"x","top_p":0}'
bad "top_p 1.5" 400 top_p invalid_value $p '{"prompt":"x","top_p":1.5}'
bad "n 0" 400 n invalid_value $p '{"prompt":"x","n":0}'
bad "n 5 (over --parallel 4)" 400 n invalid_value $p '{"prompt":"x","n":5}'
bad "n 1.5" 400 n invalid_type $p '{"prompt":"x","n":1.5}'
bad "max_tokens 0" 400 max_tokens invalid_value $p '{"prompt":"x","max_tokens":0}'
bad "max_tokens as a string" 400 max_tokens invalid_type $p '{"prompt":"x","max_tokens":"9"}'
bad "five stop strings" 400 stop invalid_value $p '{"prompt":"x","stop":["a","b","c","d","e"]}'
bad "a stop that is a number" 400 stop invalid_type $p '{"prompt":"x","stop":3}'
bad "an empty stop string" 400 "stop[1]" invalid_value $p '{"prompt":"x","stop":["a",""]}'
bad "stream as a string" 400 stream invalid_type $p '{"prompt":"x","stream":"yes"}'
bad "stream_options without stream" 400 stream_options invalid_value $p '{"prompt":"x","stream_options":{"include_usage":true}}'
bad "no prompt" 400 prompt missing_required_parameter $p '{"max_tokens":3}'
bad "a prompt that is a number" 400 prompt invalid_type $p '{"prompt":3}'
bad "a token id past the vocabulary" 400 "prompt[1]" invalid_value $p '{"prompt":[5,257]}'
long=$(python3 -c 'print("ab" * 200)')
bad "a prompt longer than the context" 400 prompt context_length_exceeded $p "{\"prompt\":\"$long\"}"
bad "an unknown model" 404 model model_not_found $p '{"model":"gpt-4","prompt":"x"}'
bad "logprobs" 400 logprobs unsupported_parameter $p '{"prompt":"x","logprobs":3}'
p=/v1/chat/completions
bad "no messages" 400 messages missing_required_parameter $p '{"model":"base"}'
bad "messages empty" 400 messages empty_array $p '{"messages":[]}'
bad "a message without content" 400 "messages[0].content" missing_required_parameter $p '{"messages":[{"role":"user"}]}'
bad "a role that is no role" 400 "messages[0].role" invalid_value $p '{"messages":[{"role":"wizard","content":"x"}]}'
bad "an image part" 400 "messages[0].content[0].type" unsupported_value $p \
    '{"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"x"}}]}]}'
bad "tools" 400 tools unsupported_parameter $p '{"messages":[{"role":"user","content":"x"}],"tools":[{"type":"function"}]}'
big=$(python3 -c 'print("{\"prompt\":\"" + "a" * 9000 + "\"}")')
bad "a body over --max-body (8K)" 413 - request_too_large $p "$big"
python3 -c 'print("{\"prompt\":\"" + "a" * 9000 + "\"}")' > "$tmp/big.json"
curl -s -o "$tmp/out" -H 'Transfer-Encoding: chunked' --data-binary @"$tmp/big.json" "$url/v1/completions"
still_serves && grep -q "POST /v1/completions 413 " "$log"
ok_if $? "a chunked body over --max-body: refused while read (connection closed, 413 in the log); the server answers after"
bad "an unknown path" 404 - unknown_url /v1/embeddings '{"input":"x"}'
get /v1/completions
error_is 405 - method_not_allowed && grep -q 405 "$log"
ok_if $? "GET /v1/completions: 405 method_not_allowed"
code=$(curl -s -o /dev/null -D "$tmp/hdr" -w '%{http_code}' -X DELETE "$url/v1/models")
[ "$code" = 405 ] && grep -qi '^allow: GET' "$tmp/hdr"
ok_if $? "DELETE /v1/models: 405 with Allow"
post /v1/completions "{\"prompt\":\"The cat\",\"temperature\":0,\"max_tokens\":$raw_new}"
[ "$code" = 200 ] && [ "$(js 'd["choices"][0]["text"]')" = "$raw_text" ]
ok_if $? "after every bad request: the same greedy completion"

# the access log: one line per request with time, client, method, path, status, tokens, duration
nreq=$(grep -c '^20[0-9-]*T[0-9:.]*Z 127\.0\.0\.1 [A-Z]* /[^ ]* [0-9][0-9][0-9] prompt_tokens=[0-9]* completion_tokens=[0-9]* [0-9.]*s' "$log")
[ "$nreq" -ge 60 ] && grep -q "POST /v1/chat/completions 200 prompt_tokens=$chat1_len completion_tokens=$nwant " "$log"
ok_if $? "access log: $nreq lines in the format, tokens counted"
stop
[ "$stop_rc" -eq 0 ] && tail -1 "$log" | grep -q "colossal-serve: stopped"
ok_if $? "SIGTERM when idle: exit 0"

# ---- 16 concurrent greedy clients: each gets what colossal-chat gives that prompt alone ----
start concurrent "$base" --tokenizer "$chatml" --parallel 4 --queue 16 || exit 1
i=0
for p in "The cat" "The dog" "A cat sat" "the mat" "I am" "Once upon a time" "hello" "who are you?" \
    "The cat" "Be brief." "It was" "The" "cat cat cat" "What is" "The man" "on the mat"; do
    k=$((8 + (i * 7) % 33))
    mode=raw
    [ $((i % 4)) -eq 3 ] && mode=chat
    stream=false
    [ $((i % 2)) -eq 1 ] && stream=true
    if [ $mode = chat ]; then
        "$chat" "$base" --tokenizer "$chatml" --prompt "$p" --temperature 0 --max-new-tokens $k > "$tmp/want$i" 2> /dev/null
        "$chat" "$base" --tokenizer "$chatml" --prompt "$p" --temperature 0 --max-new-tokens $k --json > "$tmp/ids$i"
        body="{\"messages\":[{\"role\":\"user\",\"content\":\"$p\"}],\"temperature\":0,\"max_tokens\":$k,\"stream\":$stream}"
        path=/v1/chat/completions
    else
        "$chat" "$base" --tokenizer "$chatml" --raw --prompt "$p" --temperature 0 --max-new-tokens $k > "$tmp/want$i" 2> /dev/null
        "$chat" "$base" --tokenizer "$chatml" --raw --prompt "$p" --temperature 0 --max-new-tokens $k --json > "$tmp/ids$i"
        body="{\"prompt\":\"$p\",\"temperature\":0,\"max_tokens\":$k,\"stream\":$stream,\"stream_options\":$( [ $stream = true ] && echo '{"include_usage":true}' || echo null)}"
        path=/v1/completions
    fi
    echo "$stream $path" > "$tmp/kind$i"
    echo "$body" > "$tmp/body$i"
    i=$((i + 1))
done
i=0
curls=
while [ $i -lt 16 ]; do
    curl -sN -o "$tmp/got$i" -H 'Content-Type: application/json' --data-binary @"$tmp/body$i" \
        "$url$(cut -d' ' -f2 "$tmp/kind$i")" &
    curls="$curls $!"
    i=$((i + 1))
done
# shellcheck disable=SC2086
wait $curls
same=0
i=0
while [ $i -lt 16 ]; do
    if [ "$(cut -d' ' -f1 "$tmp/kind$i")" = true ]; then
        chunks "$tmp/got$i" > "$tmp/g" 2> /dev/null
        text=$(js 'd["text"]["0"]' "$tmp/g")
        cnt=$(js 'd["usage"]["completion_tokens"] if d["usage"] else -1' "$tmp/g")
    else
        text=$(js 'd["choices"][0].get("text", d["choices"][0].get("message", {}).get("content"))' "$tmp/got$i")
        cnt=$(js 'd["usage"]["completion_tokens"]' "$tmp/got$i")
    fi
    want=$(cat "$tmp/want$i")
    nids=$(js 'len(d["ids"])' "$tmp/ids$i")
    if [ "$text" = "$want" ] && { [ "$cnt" = "$nids" ] || [ "$cnt" = -1 ]; }; then
        same=$((same + 1))
    else
        echo "# client $i ($(cat "$tmp/kind$i")): got '$text' ($cnt tokens), colossal-chat alone '$want' ($nids ids)"
    fi
    i=$((i + 1))
done
[ $same -eq 16 ]
ok_if $? "16 concurrent greedy clients (4 slots, streamed and whole, chat and completion): $same of 16 get colossal-chat's text and token count"
get /health
[ "$(js '(d["busy"], d["queued"], d["requests"])')" = "(0, 0, 16)" ]
ok_if $? "... then /health: none busy, none queued, 16 requests"
stop

# ---- an API key: from the environment, every endpoint but /health ----
COLOSSAL_API_KEY=s3cret-key
export COLOSSAL_API_KEY
start key "$base" --tokenizer "$chatml" || exit 1
unset COLOSSAL_API_KEY
! grep -q s3cret "$log" && ! ps -o args= -p $pid | grep -q s3cret
ok_if $? "COLOSSAL_API_KEY: the key is neither on the command line nor in the log"
get /v1/models
error_is 401 - invalid_api_key
ok_if $? "no key: 401 invalid_api_key"
get /v1/models -H 'Authorization: Bearer s3cret-kez'
error_is 401 - invalid_api_key
ok_if $? "a wrong key of the same length: 401"
get /v1/models -H 'Authorization: Bearer s3cret'
error_is 401 - invalid_api_key
ok_if $? "a prefix of the key: 401"
post /v1/completions '{"prompt":"The cat","temperature":0,"max_tokens":4}' -H 'Authorization: Bearer s3cret-keyX'
error_is 401 - invalid_api_key
ok_if $? "the key with a byte more, on a POST: 401"
get /v1/models -H 'Authorization: Bearer s3cret-key'
[ "$code" = 200 ]
ok_if $? "the right key: 200"
post /v1/completions "{\"prompt\":\"The cat\",\"temperature\":0,\"max_tokens\":$raw_new}" -H 'Authorization: bearer s3cret-key'
[ "$code" = 200 ] && [ "$(js 'd["choices"][0]["text"]')" = "$raw_text" ]
ok_if $? "... and a completion with it (the scheme's case does not matter)"
get /health
[ "$code" = 200 ]
ok_if $? "/health needs no key"
stop

# ---- a model without a chat template: completions only ----
start plain "$base" --model-name tiny || exit 1
bad "chat on a model without a chat template" 400 messages unsupported_value /v1/chat/completions \
    '{"messages":[{"role":"user","content":"hi"}]}'
post /v1/completions "{\"model\":\"tiny\",\"prompt\":\"The cat\",\"temperature\":0,\"max_tokens\":$raw_new}"
[ "$code" = 200 ] && [ "$(js '(d["model"], d["choices"][0]["text"])')" = "('tiny', '$raw_text')" ]
ok_if $? "--model-name tiny: requests name it, responses carry it"
stop

# ---- --kv-mem: the context the caches hold (2.0 KiB a position for the 4 sequences of the tiny model) ----
start kvmem "$base" --kv-mem 100K || exit 1
grep -q "context 50, 4 parallel (100.0 KiB of key/value caches)" "$tmp/kvmem.log"
ok_if $? "--kv-mem 100K with --parallel 4: a context of 50 positions ($(grep -o 'context [^q]*' "$tmp/kvmem.log"))"
post /v1/completions '{"prompt":"The cat","temperature":0,"max_tokens":200}'
[ "$code" = 200 ] && [ "$(js '(d["usage"]["prompt_tokens"] + d["usage"]["completion_tokens"] <= 50, d["choices"][0]["finish_reason"])')" = "(True, 'length')" ]
ok_if $? "... a request asking for more ends at the context (finish_reason length)"
stop

# ---- quantized weights, a GGUF file: what colossal-chat gives with them ----
gp="73,110,32,116,104,101"
for m in "$base --quant int8" "$src/tests/fixtures/gguf_model/gpt2-q8_0.gguf"; do
    # shellcheck disable=SC2086
    want=$("$chat" $m --prompt-ids $gp --temperature 0 --max-new-tokens 16 2> /dev/null)
    # shellcheck disable=SC2086
    start quant $m || exit 1
    post /v1/completions "{\"prompt\":[$gp],\"temperature\":0,\"max_tokens\":16}"
    got=$(js 'd["choices"][0]["text"]')
    name=$(js 'd["model"]')
    [ "$code" = 200 ] && [ -n "$want" ] && [ "$got" = "$want" ]
    ok_if $? "$(basename "${m%% *}")${m#"${m%% *}"}: colossal-chat's greedy text ('$got', model '$name')"
    stop
done

# ---- slow requests: a wide model of zero weights (every token id 0, ~11 ms a token) ----
mkdir -p "$tmp/slow"
cp "$base/tokenizer.json" "$base/tokenizer_config.json" "$tmp/slow/"
python3 - "$tmp/slow" "$base/config.json" << 'EOF'
import json, struct, sys
d, (h, L, P, V) = sys.argv[1], (512, 4, 1024, 257)
cfg = json.load(open(sys.argv[2]))
cfg.update(n_embd=h, n_layer=L, n_positions=P, n_head=h // 64)
json.dump(cfg, open(d + "/config.json", "w"))
shapes = {"transformer.wte.weight": [V, h], "transformer.wpe.weight": [P, h], "transformer.ln_f.weight": [h],
          "transformer.ln_f.bias": [h]}
for i in range(L):
    p = "transformer.h.%d." % i
    for k, s in {"ln_1.weight": [h], "ln_1.bias": [h], "ln_2.weight": [h], "ln_2.bias": [h],
                 "attn.c_attn.weight": [h, 3 * h], "attn.c_attn.bias": [3 * h], "attn.c_proj.weight": [h, h],
                 "attn.c_proj.bias": [h], "mlp.c_fc.weight": [h, 4 * h], "mlp.c_fc.bias": [4 * h],
                 "mlp.c_proj.weight": [4 * h, h], "mlp.c_proj.bias": [h]}.items():
        shapes[p + k] = s
hdr, off = {}, 0
for k, s in sorted(shapes.items()):
    nb = 4
    for x in s:
        nb *= x
    hdr[k] = {"dtype": "F32", "shape": s, "data_offsets": [off, off + nb]}
    off += nb
b = json.dumps(hdr).encode()
b += b" " * (-len(b) % 8)
with open(d + "/model.safetensors", "wb") as f:
    f.write(struct.pack("<Q", len(b)) + b)
    f.truncate(8 + len(b) + off)  # the zeros of a sparse file
EOF
start slow "$tmp/slow" --parallel 1 --queue 1 || exit 1
# health_wait EXPR: up to 20 s until the /health JSON d satisfies EXPR
health_wait() {
    j=0
    while [ $j -lt 200 ]; do
        curl -s -o "$tmp/h" "$url/health"
        [ "$(js "$1" "$tmp/h")" = True ] && return 0
        sleep 0.1
        j=$((j + 1))
    done
    return 1
}

# a full queue: one request runs, one waits, the third gets 503
curl -s -o "$tmp/q1" -H 'Content-Type: application/json' --data-binary '{"prompt":"a","temperature":0,"max_tokens":900}' "$url/v1/completions" &
q1=$!
health_wait 'd["busy"] == 1'
curl -s -o "$tmp/q2" -H 'Content-Type: application/json' --data-binary '{"prompt":"b","temperature":0,"max_tokens":900}' "$url/v1/completions" &
q2=$!
health_wait 'd["queued"] == 1'
code=$(curl -s -o "$tmp/out" -D "$tmp/hdr" -w '%{http_code}' -H 'Content-Type: application/json' \
    --data-binary '{"prompt":"c","temperature":0,"max_tokens":5}' "$url/v1/completions")
error_is 503 - server_overloaded && grep -qi '^retry-after: [0-9]' "$tmp/hdr"
ok_if $? "--parallel 1 --queue 1 with one running and one waiting: 503 server_overloaded with Retry-After"
# the clients go away: the waiting one leaves the queue, the running one frees its slot
kill $q2 $q1
wait $q2 $q1 2> /dev/null
health_wait 'd["busy"] == 0 and d["queued"] == 0'
ok_if $? "clients killed while waiting and while running (no stream): the slot and the queue are freed"
t0=$(date +%s)
curl -sN -o "$tmp/sse" -H 'Content-Type: application/json' --data-binary \
    '{"prompt":"a","temperature":0,"max_tokens":1000,"stream":true}' "$url/v1/completions" &
c=$!
j=0
while [ $j -lt 200 ] && ! grep -q '"text"' "$tmp/sse" 2> /dev/null; do sleep 0.05; j=$((j + 1)); done
kill $c
wait $c 2> /dev/null
health_wait 'd["busy"] == 0 and d["queued"] == 0'
r=$?
sleep 0.3
line=$(grep 'POST /v1/completions 200 .* aborted' "$log" | tail -1)
ct=$(echo "$line" | sed -n 's/.*completion_tokens=\([0-9]*\).*/\1/p')
[ $r -eq 0 ] && [ -n "$ct" ] && [ "$ct" -lt 1000 ]
ok_if $? "a client killed mid-stream: its slot is freed after $ct of 1000 tokens (/health busy 0; the log says aborted)"
post /v1/completions '{"prompt":"a","temperature":0,"max_tokens":3}'
[ "$code" = 200 ] && [ "$(js 'd["usage"]["completion_tokens"]')" = 3 ]
ok_if $? "... and the next request is served"

# SIGTERM with a request in flight: it completes, new connections are refused, exit 0
curl -s -o "$tmp/inflight" -w '%{http_code}' -H 'Content-Type: application/json' \
    --data-binary '{"prompt":"a","temperature":0,"max_tokens":600}' "$url/v1/completions" > "$tmp/inflight_code" &
c=$!
health_wait 'd["busy"] == 1'
kill -TERM $pid
j=0
refused=0
while [ $j -lt 50 ] && [ $refused -ne 7 ]; do
    sleep 0.1
    curl -s -o /dev/null "$url/health"
    refused=$?
    j=$((j + 1))
done
running=no
kill -0 $c 2> /dev/null && running=yes
wait $c
[ "$(cat "$tmp/inflight_code")" = 200 ] && [ "$(js 'd["usage"]["completion_tokens"]' "$tmp/inflight")" = 600 ]
ok_if $? "SIGTERM with a request in flight: it completes (200, 600 tokens)"
[ $refused -eq 7 ] && [ $running = yes ]
ok_if $? "... while new connections are refused (curl exit $refused, the request still running: $running)"
wait $pid
rc=$?
pid=
[ $rc -eq 0 ] && grep -q "stopping: 1 request in flight" "$log" && tail -1 "$log" | grep -q "stopped"
ok_if $? "... then the server exits 0"

# a second signal exits at once
start slow2 "$tmp/slow" --parallel 1 || exit 1
curl -s -o /dev/null -H 'Content-Type: application/json' --data-binary '{"prompt":"a","temperature":0,"max_tokens":1000}' \
    "$url/v1/completions" &
c=$!
health_wait 'd["busy"] == 1'
kill -TERM $pid
sleep 0.3
kill -TERM $pid
wait $pid
rc=$?
pid=
wait $c 2> /dev/null
[ $rc -ne 0 ]
ok_if $? "a second SIGTERM exits at once (exit $rc)"

echo "1..$n"
[ "$fails" -eq 0 ]

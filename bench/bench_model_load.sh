#!/bin/sh
# bench_model_load.sh - how long colossal-chat takes to load a model, against reading its weights file once
# (issue 19: "load time within 2x of reading the file once"; resident memory <= 1.1x the weights).
#
#   bench/bench_model_load.sh MODEL... [RUNS=5 CHAT=apps/colossal-chat in the environment]
#
# MODEL: a Hugging Face directory (its model.safetensors), a colossal-quantize output or a .gguf file. Per model,
# RUNS times each, medians: `cat FILE > /dev/null` (the file is in the page cache after the first read, as it is
# for a model loaded again); colossal-chat's "loaded in S s" (--verbose) with the weights read in place from the
# file's mapping (the default), and the same with --no-mmap (copied); peak resident memory (/usr/bin/time's
# maximum RSS) of each, over the file's size. One generated token, so the figures are the load's.
set -u
CHAT=${CHAT:-apps/colossal-chat}
RUNS=${RUNS:-5}
[ $# -ge 1 ] || { echo "usage: bench/bench_model_load.sh MODEL..." >&2; exit 2; }
[ -x "$CHAT" ] || { echo "bench_model_load: $CHAT not built (./quickstart build)" >&2; exit 1; }
timer=
[ -x /usr/bin/time ] && timer=/usr/bin/time
median() { sort -g | awk '{v[NR] = $1} END {if (NR == 0) print "-"; else print v[int((NR + 1) / 2)]}'; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

printf '%-40s %9s %8s | %8s %6s %6s | %8s %6s %6s\n' model "file MiB" "cat s" "mapped s" "x cat" "RSS x" \
    "copied s" "x cat" "RSS x"
for m in "$@"; do
    f=$m
    [ -d "$m" ] && f="$m/model.safetensors"
    [ -f "$f" ] || { echo "bench_model_load: no weights file at $f" >&2; continue; }
    bytes=$(stat -c %s "$f")
    cat "$f" > /dev/null # into the page cache
    i=0
    while [ $i -lt "$RUNS" ]; do
        s=$(date +%s.%N); cat "$f" > /dev/null; e=$(date +%s.%N)
        echo "$s $e" | awk '{print $2 - $1}' >> "$tmp/cat"
        for mode in mapped copied; do
            extra=
            [ $mode = copied ] && extra=--no-mmap
            # shellcheck disable=SC2086
            if [ -n "$timer" ]; then
                $timer -f 'maxrss %M' "$CHAT" "$m" --prompt-ids 1 --max-new-tokens 1 --json --verbose $extra \
                    > /dev/null 2> "$tmp/err"
            else
                "$CHAT" "$m" --prompt-ids 1 --max-new-tokens 1 --json --verbose $extra > /dev/null 2> "$tmp/err"
            fi
            sed -n 's/.*loaded in \([0-9.]*\) s;.*/\1/p' "$tmp/err" >> "$tmp/$mode.s"
            sed -n 's/^maxrss \([0-9]*\)$/\1/p' "$tmp/err" >> "$tmp/$mode.rss"
        done
        i=$((i + 1))
    done
    c=$(median < "$tmp/cat")
    row=$(printf '%-40s %9.1f %8.3f' "$(basename "$m")" "$(echo "$bytes" | awk '{print $1 / 1048576}')" "$c")
    for mode in mapped copied; do
        l=$(median < "$tmp/$mode.s")
        r=$(median < "$tmp/$mode.rss")
        row="$row | $(echo "$l $c $r $bytes" | awk '{printf "%8.3f %6.2f %6s", $1, $1 / $2, $3 == "-" ? "-" : sprintf("%.2f", $3 * 1024 / $4)}')"
    done
    echo "$row"
    rm -f "$tmp"/cat "$tmp"/*.s "$tmp"/*.rss
done

#!/bin/sh
# bench_llamacpp.sh - single-stream decode speed of colossal (bench/bench_lm generate) side by side with
# llama.cpp (llama-bench) on the same ~1B LLaMA-shaped model with random weights, in f32, 8-bit and 4-bit
# weights, each as a fraction of the memory-bandwidth bound measured in the same run. From scratch: makes
# the model, converts and quantizes it with llama.cpp's own tools, then measures, the two programs back to
# back, ROUNDS times, and prints the medians. llama.cpp is never part of the repository: build it anywhere,
# e.g. from the sdist of llama-cpp-python (vendor/llama.cpp):
#
#   cmake -S .../vendor/llama.cpp -B /scratch/llamacpp-build -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON \
#         -DLLAMA_CURL=OFF && cmake --build /scratch/llamacpp-build -j2 --target llama-bench llama-quantize
#
# Run from the repository root (after make: bench/bench_lm):
#
#   LLAMA_BUILD=/scratch/llamacpp-build MODELS=/scratch/models bench/bench_llamacpp.sh
#
# Environment:
#   LLAMA_BUILD  llama.cpp's build directory (bin/llama-bench, bin/llama-quantize)           (required)
#   LLAMA_SRC    llama.cpp's source (convert_hf_to_gguf.py, gguf-py/)     (default: the build's CMakeCache)
#   MODELS       where the model files go, outside the repository (~8 GB)                    (required)
#   PYTHON       a python with numpy, safetensors, torch and transformers (the converter's needs)
#                                                               (default: tools/refgen/.venv/bin/python)
#   PYDEPS       extra PYTHONPATH for the converter (sentencepiece, protobuf), e.g. /tmp/gguf_pydeps
#   THREADS      threads for both programs (default 2); OMP_NUM_THREADS is set to it for bench_lm
#   ROUNDS       rounds of (ours, llama.cpp) per format, back to back (default 3)
#   REPS         repetitions inside each program per round (default 3; llama-bench -r)
#   NGEN         tokens decoded (default 64: llama-bench's tg64); PROMPT our prompt before them (default 16;
#                llama-bench's tg starts from an empty context)
#   FORMATS      of f32 q8_0 q4_0 q4_0-pure (default: all four); q4_0 is llama-quantize's Q4_0 (the output
#                matrix in Q6_K, its default), q4_0-pure the same with --pure (every matrix in Q4_0, as ours)
#   OMP_WAIT_POLICY  bench_lm generate keeps libgomp's default (spin a while, then sleep: apps/procsetup.h, as
#                colossal-chat and colossal-serve); set active to spin always as llama.cpp does
#   OUT          where the raw outputs go (default: $MODELS/bench-YYYYmmdd-HHMMSS)
#   QUIET        before each run, wait until the machine's CPUs were at most this % busy over a second (default
#                15; 100 = never wait), at most QUIET_WAIT seconds (default 600); each run's wait and the busy
#                share it started at are kept beside its output (a shared machine: runs beside other work are
#                slower, llama.cpp's spinning threads much slower)
#
# Our figure is bench_lm's decode tok/s with the same f32 weights loaded from the Hugging Face directory and
# quantized as they load (ggml's reference quantizers: the same blocks llama-quantize writes); llama.cpp's is
# llama-bench's tg avg_ts. The bound is the weight bytes one token reads (every tensor but the token
# embedding table) over the read-only bandwidth bench_lm measured in the same round.
set -eu

die() { echo "bench_llamacpp.sh: $*" >&2; exit 1; }
[ -n "${LLAMA_BUILD:-}" ] || die "set LLAMA_BUILD to llama.cpp's build directory"
[ -n "${MODELS:-}" ] || die "set MODELS to a directory outside the repository for the model files (~8 GB)"
[ -x bench/bench_lm ] || die "run from the repository root after make (bench/bench_lm)"
BIN=$LLAMA_BUILD/bin
[ -x "$BIN/llama-bench" ] && [ -x "$BIN/llama-quantize" ] || die "$BIN has no llama-bench and llama-quantize"
if [ -z "${LLAMA_SRC:-}" ]; then
    LLAMA_SRC=$(sed -n 's/^CMAKE_HOME_DIRECTORY:INTERNAL=//p' "$LLAMA_BUILD/CMakeCache.txt" 2>/dev/null || true)
fi
[ -f "${LLAMA_SRC:-}/convert_hf_to_gguf.py" ] || die "set LLAMA_SRC to llama.cpp's source (convert_hf_to_gguf.py)"
PYTHON=${PYTHON:-tools/refgen/.venv/bin/python}
THREADS=${THREADS:-2}
ROUNDS=${ROUNDS:-3}
REPS=${REPS:-3}
NGEN=${NGEN:-64}
PROMPT=${PROMPT:-16}
FORMATS=${FORMATS:-f32 q8_0 q4_0 q4_0-pure}
QUIET=${QUIET:-15}
QUIET_WAIT=${QUIET_WAIT:-600}
mkdir -p "$MODELS"
OUT=${OUT:-$MODELS/bench-$(date +%Y%m%d-%H%M%S)}
mkdir -p "$OUT"
HF=$MODELS/llama-1b-random
PP=$LLAMA_SRC/gguf-py${PYDEPS:+:$PYDEPS}

# ---- the model: Hugging Face directory, GGUF f32, Q8_0, Q4_0 (each made once) ----
if [ ! -f "$HF/model.safetensors" ]; then
    "$PYTHON" bench/make_llama_random.py "$HF"
fi
gguf() { echo "$MODELS/llama-1b-random-$1.gguf"; }
if [ ! -f "$(gguf f32)" ]; then
    PYTHONPATH=$PP "$PYTHON" "$LLAMA_SRC/convert_hf_to_gguf.py" "$HF" --outtype f32 --outfile "$(gguf f32)"
fi
[ -f "$(gguf q8_0)" ] || "$BIN/llama-quantize" "$(gguf f32)" "$(gguf q8_0)" Q8_0 "$THREADS"
[ -f "$(gguf q4_0)" ] || "$BIN/llama-quantize" "$(gguf f32)" "$(gguf q4_0)" Q4_0 "$THREADS"
[ -f "$(gguf q4_0-pure)" ] || "$BIN/llama-quantize" --pure "$(gguf f32)" "$(gguf q4_0-pure)" Q4_0 "$THREADS"

# percent of the CPUs busy over the next second (all processes)
busy() {
    a=$(sed -n 's/^cpu  //p' /proc/stat); sleep 1; b=$(sed -n 's/^cpu  //p' /proc/stat)
    echo "$a" "$b" | awk '{n = NF / 2; for (i = 1; i <= n; i++) { d = $(i + n) - $i; t += d; if (i == 4 || i == 5) idle += d }
                           printf "%d\n", (t > 0 ? 100 * (t - idle) / t : 0) }'
}
# waits (at most QUIET_WAIT s) for a second with at most QUIET % busy; prints "waited S s, busy B%"
wait_quiet() {
    w=0
    while :; do
        b=$(busy)
        if [ "$b" -le "$QUIET" ] || [ "$w" -ge "$QUIET_WAIT" ]; then echo "waited $w s, busy $b%"; return; fi
        w=$((w + 1))
    done
}

# ---- measuring: per round and format, ours then llama.cpp's ----
{
    echo "# $(date -u +%Y-%m-%dT%H:%M:%SZ) $(uname -n), $(nproc) CPUs: $(sed -n 's/^model name[^:]*: //p' /proc/cpuinfo | head -1)"
    echo "# colossal $(git rev-parse --short HEAD 2>/dev/null || echo '?'); llama.cpp $(git -C "$LLAMA_SRC" rev-parse --short HEAD 2>/dev/null || sed -n 's/.*GGML_BUILD_COMMIT[^=]*=//p' "$LLAMA_BUILD/CMakeCache.txt" | head -1)"
    echo "# THREADS=$THREADS ROUNDS=$ROUNDS REPS=$REPS NGEN=$NGEN PROMPT=$PROMPT OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-}"
} > "$OUT/header.txt"
cat "$OUT/header.txt"
r=1
while [ "$r" -le "$ROUNDS" ]; do
    for f in $FORMATS; do
        ours=${f%-pure}
        q=$(wait_quiet)
        echo "round $r/$ROUNDS, $f: ours ($q)" >&2
        echo "$q" > "$OUT/ours-$f-$r.quiet"
        OMP_NUM_THREADS=$THREADS COL_BENCH_PROMPT=$PROMPT COL_BENCH_DECODE=$NGEN \
            bench/bench_lm generate "$REPS" "$HF" "$ours" > "$OUT/ours-$f-$r.txt"
        q=$(wait_quiet)
        echo "round $r/$ROUNDS, $f: llama.cpp ($q)" >&2
        echo "$q" > "$OUT/llamacpp-$f-$r.quiet"
        "$BIN/llama-bench" -m "$(gguf "$f")" -t "$THREADS" -p 0 -n "$NGEN" -r "$REPS" -o jsonl \
            > "$OUT/llamacpp-$f-$r.jsonl" 2> "$OUT/llamacpp-$f-$r.err"
    done
    r=$((r + 1))
done

# ---- the table: medians over the rounds ----
PYTHONPATH=$PP "$PYTHON" - "$OUT" "$MODELS" "$FORMATS" <<'EOF'
import glob, json, re, statistics, sys
import gguf
out, models, formats = sys.argv[1], sys.argv[2], sys.argv[3].split()
med = statistics.median
runs = {}
for f in formats:
    o, l, rd, gb = [], [], [], None
    for p in sorted(glob.glob(f"{out}/ours-{f}-[0-9]*.txt")):
        m = re.search(r"decode ([0-9.]+) tok/s.*weights ([0-9.]+) GB per token.*of the read rate ([0-9.]+) GB/s",
                      open(p).read())
        if m:
            o.append(float(m.group(1))); gb = float(m.group(2)); rd.append(float(m.group(3)))
    for p in sorted(glob.glob(f"{out}/llamacpp-{f}-[0-9]*.jsonl")):
        l += [json.loads(x)["avg_ts"] for x in open(p) if x.strip()]
    rdr = gguf.GGUFReader(f"{models}/llama-1b-random-{f}.gguf")
    lgb = sum(int(t.n_bytes) for t in rdr.tensors if t.name != "token_embd.weight") / 1e9
    runs[f] = (o, l, rd, gb, lgb)
bw = max([x for r in runs.values() for x in r[2]] or [0])
print(f"read bandwidth (the highest bench_lm measured): {bw:.1f} GB/s")
print("| format | ours tok/s | llama.cpp tok/s | ours / llama.cpp | ours GB/token | llama.cpp GB/token "
      "| ours / bound | llama.cpp / bound |")
print("|---|---|---|---|---|---|---|---|")
for f, (o, l, rd, gb, lgb) in runs.items():
    if not o or not l:
        print(f"| {f} | {o} | {l} | (missing runs) |")
        continue
    print(f"| {f} | {med(o):.2f} | {med(l):.2f} | {med(o) / med(l):.2f} | {gb:.3f} | {lgb:.3f} "
          f"| {med(o) * gb / bw:.2f} | {med(l) * lgb / bw:.2f} |")
for f, (o, l, rd, gb, lgb) in runs.items():
    print(f"{f}: ours {o} tok/s, llama.cpp {[round(x, 2) for x in l]} tok/s, read GB/s {rd}")
EOF
echo "raw outputs in $OUT" >&2

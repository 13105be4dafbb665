#!/bin/sh
# bench_nvme.sh - the NVMe tier's slot store against fio on the same
# directory: sequential write and read, same block (slot) size, O_DIRECT,
# io_uring, queue depth and size; 3 runs of each, medians, and the ratio
# store/fio (the target is >= 0.8).
#
#   bench/bench_nvme.sh DIR [SIZE_MIB (1024)] [SLOT_MIB (4)] [QUEUE_DEPTHS ("8 32")]
#
# Needs fio (Debian: apt-get install fio) and bench/bench_nvme
# (make bench/bench_nvme); BENCH_NVME overrides the path of the latter.
# fio gets registered buffers and file (fixedbufs, registerfiles), as the
# store uses them, so it is compared with fio's best.
set -eu
usage() { echo "usage: bench_nvme.sh DIR [SIZE_MIB] [SLOT_MIB] [QUEUE_DEPTHS]" >&2; exit 2; }
[ $# -ge 1 ] || usage
DIR=$1
SIZE_MIB=${2:-1024}
SLOT_MIB=${3:-4}
QDS=${4:-"8 32"}
RUNS=3
BENCH=${BENCH_NVME:-$(dirname "$0")/bench_nvme}

if ! command -v fio >/dev/null 2>&1; then
    echo "bench_nvme.sh: fio not found; install it (Debian/Ubuntu: apt-get install fio)" >&2
    exit 1
fi
if [ ! -x "$BENCH" ]; then
    echo "bench_nvme.sh: $BENCH not found; build it first (make bench/bench_nvme)" >&2
    exit 1
fi
if [ ! -d "$DIR" ] || [ ! -w "$DIR" ]; then
    echo "bench_nvme.sh: $DIR is not a writable directory" >&2
    exit 1
fi

FIOFILE=bench_nvme_fio.$$.tmp
trap 'rm -f "$DIR/$FIOFILE"' EXIT INT TERM

echo "# date: $(date -u '+%Y-%m-%d %H:%M UTC')"
echo "# machine: $(uname -srm); $(grep -m1 'model name' /proc/cpuinfo 2>/dev/null | sed 's/.*: //'); $(nproc) cpus"
echo "# $(fio --version); directory $DIR on:"
df -hT "$DIR" | sed 's/^/#   /'
DEV=$(df --output=source "$DIR" | tail -n 1)
lsblk -o NAME,TYPE,SIZE,ROTA,MODEL "$DEV" 2>/dev/null | sed 's/^/#   /' || true
echo "# size ${SIZE_MIB} MiB, block/slot ${SLOT_MIB} MiB, ${RUNS} runs each"

# median of the numbers on stdin
median() { sort -g | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }

# fio_gbps RW QD: one fio run; prints GB/s (fio's terse bandwidth is KiB/s:
# field 7 for reads, 48 for writes)
fio_gbps() {
    field=7
    [ "$1" = write ] && field=48
    fio --name="nvme_$1" --directory="$DIR" --filename="$FIOFILE" --rw="$1" --bs="${SLOT_MIB}M" \
        --size="${SIZE_MIB}M" --direct=1 --ioengine=io_uring --iodepth="$2" --fixedbufs --registerfiles \
        --unlink=0 --minimal |
        awk -F';' -v f="$field" '{printf "%.3f\n", $f * 1024 / 1e9}'
}

printf '%-6s %-6s %10s %10s %8s\n' qd op fio_GB/s store_GB/s ratio
for qd in $QDS; do
    fw=$(for i in $(seq $RUNS); do fio_gbps write "$qd"; done | median)
    fr=$(for i in $(seq $RUNS); do fio_gbps read "$qd"; done | median)
    rm -f "$DIR/$FIOFILE"
    out=$("$BENCH" "$DIR" --size-mib "$SIZE_MIB" --slot-mib "$SLOT_MIB" --qd "$qd" --runs "$RUNS")
    echo "$out" | sed 's/^/#   /'
    sw=$(echo "$out" | awk '/^median write/ {print $3}')
    sr=$(echo "$out" | awk '/^median read/ {print $3}')
    printf '%-6s %-6s %10s %10s %8s\n' "$qd" write "$fw" "$sw" "$(awk -v a="$sw" -v b="$fw" 'BEGIN {printf "%.2f", a / b}')"
    printf '%-6s %-6s %10s %10s %8s\n' "$qd" read "$fr" "$sr" "$(awk -v a="$sr" -v b="$fr" 'BEGIN {printf "%.2f", a / b}')"
done

#!/bin/sh
# test_top_cli.sh - colossal-top against the scripted tests/stats_publisher:
# --json carries exactly the published values, --once draws them, bad
# arguments are refused, and the live screen is driven in tmux (start,
# capture, switch views, select, resize, quit). TAP output.
TOP=${TOP:-apps/colossal-top}
PUB=${STATS_PUBLISHER:-tests/stats_publisher}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/colossal-top-test.XXXXXX")
sock=colossal-top-test-$$
n=0
failed=0
pids=

ok() { # ok STATUS DESCRIPTION
    n=$((n + 1))
    if [ "$1" -eq 0 ]; then echo "ok $n - $2"; else echo "not ok $n - $2"; failed=1; fi
}
skip() { n=$((n + 1)); echo "ok $n # SKIP $1"; }
cleanup() {
    command -v tmux >/dev/null 2>&1 && tmux -L "$sock" kill-server 2>/dev/null
    for p in $pids; do kill "$p" 2>/dev/null; done
    wait 2>/dev/null
    rm -rf "$tmp"
}
trap cleanup EXIT INT TERM

# start_pub FILE ARGS...: starts a publisher, waits until it has published, sets $pub_pid
start_pub() {
    out=$1
    shift
    # they live 5 minutes (killed at the end), and a loaded machine may take long to start one
    "$PUB" --seconds 300 "$@" >"$out" &
    pids="$pids $!"
    i=0
    while [ $i -lt 300 ] && ! grep -q '^ready' "$out" 2>/dev/null; do sleep 0.1; i=$((i + 1)); done
    pub_pid=$(sed -n 's/^ready //p' "$out")
}

start_pub "$tmp/a.out" --program top-test-pub --run gpt2-test
A=$pub_pid
start_pub "$tmp/b.out" --program top-test-pub --run second-run
B=$pub_pid
[ -n "$A" ] && [ -n "$B" ] && [ -e "/dev/shm/colossal-$A" ]
ok $? "two scripted publishers are running ($A, $B)"

# ---- --json: the published values, exactly (expected values from the script in stats_publisher.c) ----
M=1048576
G=1073741824
"$TOP" --json -p "$A" >"$tmp/json"
ok $? "--json exits 0"
# our object, cut out of the array (other colossal processes may be running)
sed 's/.*{"pid":'"$A"',/{"pid":'"$A"',/; s/\("cmdline":"[^"]*"}\).*/\1/' "$tmp/json" >"$tmp/obj"
grep -q '^{"format_version":4,"processes":\[{"pid":'"$A"',"program":"top-test-pub","run":"gpt2-test",' "$tmp/json"
ok $? "--json: one object with an array; pid, program and run name"
want='"step":120,"total_steps":600,"loss":2.5,"tokens_per_s":1234.5,'
want=$want'"tiers":{"compute":{"used":'$((48 * M))',"budget":'$((64 * M))'},"host":{"used":'$((12 * M))
want=$want',"budget":'$((64 * M))'},"nvme":{"used":'$((3 * G / 2))',"budget":0}},'
grep -qF "$want" "$tmp/obj"
ok $? "--json: step, loss, tokens/s and the bytes of every tier"
want='"kinds":{"params":{"compute":'$((32 * M))',"host":'$((8 * M))',"nvme":0},"grads":{"compute":'$((16 * M))
want=$want',"host":0,"nvme":0},"optimizer":{"compute":0,"host":'$((4 * M))',"nvme":'$((3 * G / 2))'}},'
want=$want'"links":{"host->compute":'$((3 * G))',"compute->host":'$G',"host->nvme":'$((3 * G / 2))
want=$want',"nvme->host":'$((512 * M))'},"nvme_written":'$((3 * G / 2))','
grep -qF "$want" "$tmp/obj"
ok $? "--json: bytes per kind and tier, per link, written to NVMe"
grep -qF '"step_time":{"last":{"compute":0.5,"wait":0.25,"optimizer":0.25},"total":{"compute":60,"wait":30,"optimizer":30}}' "$tmp/obj"
ok $? "--json: the step-time split, last step and all steps"
grep -qF '"losses":[4,3.875,3.75,3.625,3.5,3.375,3.25,3.125,3,2.875,2.75,2.625,2.5]' "$tmp/obj"
ok $? "--json: the losses, oldest first"
grep -qF '"models":[],"chunks":{"count":10,"tier":"ccchcchnn-","kind":"ppppggoooo","flags":".d..u.d..."},"user":' "$tmp/obj"
ok $? "--json: the chunk map (tier, kind, dirty / in use)"
"$TOP" --json | grep -q '"pid":'"$B"',"program":"top-test-pub","run":"second-run"'
ok $? "--json without -p lists the other publisher too"
out=$("$TOP" --json -p 1)
[ "$out" = '{"format_version":4,"processes":[],"runs":[]}' ]
ok $? "--json with no matching process: an empty array"

# ---- --once: one frame as text ----
COLUMNS=120 LINES=20 LC_ALL=C "$TOP" --once -p "$A" >"$tmp/once"
ok $? "--once exits 0"
grep -q "^>$A  *[^ ][^ ]*  *[0-9][0-9.]*  *[0-9][0-9.]* [KMG]iB  *top-test-pub  *gpt2-test  *step 120/600  loss 2.5000  1234 tok/s" "$tmp/once"
ok $? "--once: the process line"
grep -q '^    compute \[|*  *\] 48\.0 MiB/64\.0 MiB' "$tmp/once" && grep -q '^    host    \[|*  *\] 12\.0 MiB/64\.0 MiB' "$tmp/once" &&
    grep -q '^    nvme    \[  *\] 1\.5 GiB/-' "$tmp/once"
ok $? "--once: a bar per tier with used/budget"
# 48/64 and 12/64 of the same width: the compute bar is 4 times the host bar (give or take rounding)
cb=$(grep '^    compute \[' "$tmp/once" | tr -cd '|' | wc -c)
hb=$(grep '^    host    \[' "$tmp/once" | tr -cd '|' | wc -c)
[ "$cb" -gt 0 ] && [ $((4 * hb - cb)) -le 3 ] && [ $((cb - 4 * hb)) -le 3 ]
ok $? "--once: bar lengths follow used/budget (compute $cb, host $hb)"
# 13 losses from 4 to 2.5 scaled to 8 levels ._-~=+*# (level = round((loss - 2.5) / 1.5 * 7))
grep -q 'loss #\*\*++==~--__\.$' "$tmp/once"
ok $? "--once: the loss sparkline in ASCII without a UTF-8 locale"
COLUMNS=100 LINES=20 LC_ALL=C.UTF-8 "$TOP" --once -p "$A" | grep -q 'loss █▇▇▆▆▅▅▄▃▃▂▂▁$'
ok $? "--once: the loss sparkline in block characters with UTF-8"
COLUMNS=80 LINES=30 LC_ALL=C "$TOP" --once --view 2 -p "$A" >"$tmp/once2"
grep -q '^ params: 4 chunks (compute 3, host 1, nvme 0, none 0)' "$tmp/once2" && grep -q '^ cCch$' "$tmp/once2" &&
    grep -q '^ cc$' "$tmp/once2" && grep -q '^ Hnn-$' "$tmp/once2" &&
    grep -q '^ optimizer  *0 B  *4\.0 MiB  *1\.5 GiB$' "$tmp/once2"
ok $? "--once --view 2: the chunk map per kind and the bytes per kind and tier"
COLUMNS=80 LINES=30 LC_ALL=C "$TOP" --once --view 3 -p "$A" >"$tmp/once3"
grep -q '^ host->compute  *3\.0 GiB' "$tmp/once3" && grep -q '^ nvme->host  *512\.0 MiB' "$tmp/once3" &&
    grep -q '^ waiting  *0\.250s  *30\.0s  25%' "$tmp/once3"
ok $? "--once --view 3: link totals and the step-time split"
COLUMNS=80 LINES=24 "$TOP" --once -p 1 | grep -q 'no colossal process is running'
ok $? "--once with no process: says so"

# ---- a compute tier on a GPU: the device's memory beside the tier's (the host publisher above shows none) ----
start_pub "$tmp/g.out" --program gpu-pub --run gpt2-gpu --device
D=$pub_pid
"$TOP" --json -p "$D" >"$tmp/gj"
want='"tiers":{"compute":{"used":'$((48 * M))',"budget":'$((64 * M))',"device":"cuda:0: Test GPU (sm_90, 132 SMs)",'
want=$want'"device_used":'$((30 * G))',"device_total":'$((80 * G))'},"host":'
grep -qF "$want" "$tmp/gj" && ! grep -q '"device_used' "$tmp/obj"
ok $? "--json: a GPU's name, memory used and total with the compute tier (none for a host compute tier)"
COLUMNS=100 LINES=20 LC_ALL=C "$TOP" --once -p "$D" >"$tmp/gonce"
grep -q '^    compute \[|*  *\] 48\.0 MiB/64\.0 MiB  cuda:0 30\.0 GiB/80\.0 GiB' "$tmp/gonce" &&
    [ "$(grep '^    compute \[' "$tmp/gonce" | cut -d']' -f1 | wc -c)" -eq \
      "$(grep '^    host    \[' "$tmp/gonce" | cut -d']' -f1 | wc -c)" ]
ok $? "--once: the compute bar names the GPU and its memory used/total; the bars stay aligned"
kill "$D" 2>/dev/null

# ---- a parallel run: 3 ranks publishing with one run id, started out of rank order ----
# (each rank's values from the script in stats_publisher.c: sent (R+1) G, received (R+1)/2 G, blocked
# 1.5 (R+1) s, 100 (R+1) ops; rank 2 on a GPU "cuda:2")
RID=top-test-run-$$
start_pub "$tmp/r2.out" --program par-pub --run gpt2-par --rank 2 --world-size 3 --run-id "$RID" --device
R2=$pub_pid
start_pub "$tmp/r0.out" --program par-pub --run gpt2-par --rank 0 --world-size 3 --run-id "$RID"
R0=$pub_pid
start_pub "$tmp/r1.out" --program par-pub --run gpt2-par --rank 1 --world-size 3 --run-id "$RID"
R1=$pub_pid
"$TOP" --json -p "$R0,$R1,$R2,$A" >"$tmp/pj"
ok $? "--json with a 3-rank run and a process on its own exits 0"
# the processes: the run's ranks together, by rank
got=$(grep -o '"pid":[0-9]*,"program":"[^"]*"' "$tmp/pj" | sed 's/"pid":\([0-9]*\).*/\1/' | tr '\n' ' ')
# the run goes where its lowest pid would be (rank 2's, unless pids wrapped around)
low=$R0
[ "$R1" -lt "$low" ] && low=$R1
[ "$R2" -lt "$low" ] && low=$R2
if [ "$A" -lt "$low" ]; then want="$A $R0 $R1 $R2 "; else want="$R0 $R1 $R2 $A "; fi
[ "$got" = "$want" ]
ok $? "--json: the ranks listed together in rank order, where the run's lowest pid goes (got $got; want $want)"
bad=0
for r in 0 1 2; do
    eval pid=\$R$r
    dev='"device":""'
    [ $r -eq 2 ] && dev='"device":"cuda:2: Test GPU (sm_90, 132 SMs)"'
    want='{"pid":'$pid',"program":"par-pub","run":"gpt2-par",'
    grep -qF "$want" "$tmp/pj" || bad=1
    want='"run_id":"'$RID'","rank":'$r',"world_size":3,'$dev',"comm":{"sent":'$(((r + 1) * G))',"recv":'$(((r + 1) * G / 2))
    want=$want',"wait":'$(awk "BEGIN{print 1.5 * ($r + 1)}")',"ops":'$((100 * (r + 1)))'},"step":120,"total_steps":600,"loss":2.5,'
    grep -qF "$want" "$tmp/pj" || { bad=1; echo "# missing: $want"; }
done
ok $bad "--json: each rank's run id, rank, world size, device and collectives (bytes, wait, ops)"
grep -qF '"runs":[{"run_id":"'"$RID"'","world_size":3,"ranks":[{"rank":0,"pid":'"$R0"'},{"rank":1,"pid":'"$R1"'},{"rank":2,"pid":'"$R2"'}]}]}' "$tmp/pj"
ok $? "--json: the run with its 3 ranks' pids by rank"
grep -qF '{"pid":'"$A"',"program":"top-test-pub","run":"gpt2-test","start_time":' "$tmp/pj" &&
    grep -qF '"run_id":"","rank":0,"world_size":1,"device":"","comm":{"sent":0,"recv":0,"wait":0,"ops":0},"step":120' "$tmp/pj"
ok $? "--json: a process on its own has no run id, rank 0 of 1, no traffic"
COLUMNS=130 LINES=24 LC_ALL=C "$TOP" --once -p "$R0,$R1,$R2,$A" >"$tmp/ponce"
ok $? "--once with the run exits 0"
# the frame's lines: A's block (first when older), the run's header and column names, its ranks 0 1 2
hdr=$(grep -n "^ run $RID  par-pub  gpt2-par  3 of 3 ranks  up " "$tmp/ponce" | cut -d: -f1)
l0=$(grep -n "^ $R0  *0 host  *48\.0 MiB/64\.0 MiB 12\.0 MiB/64\.0 MiB 1\.5 GiB  *120/600  2\.5000  *1\.0 GiB  *512\.0 MiB  *1\.5s$" "$tmp/ponce" | cut -d: -f1)
l1=$(grep -n "^ $R1  *1 host  *48\.0 MiB/64\.0 MiB 12\.0 MiB/64\.0 MiB 1\.5 GiB  *120/600  2\.5000  *2\.0 GiB  *1\.0 GiB  *3\.0s$" "$tmp/ponce" | cut -d: -f1)
l2=$(grep -n "^ $R2  *2 cuda:2  *48\.0 MiB/64\.0 MiB 12\.0 MiB/64\.0 MiB 1\.5 GiB  *120/600  2\.5000  *3\.0 GiB  *1\.5 GiB  *4\.5s$" "$tmp/ponce" | cut -d: -f1)
la=$(grep -n "^>$A  .*  top-test-pub  *gpt2-test  *step 120/600" "$tmp/ponce" | cut -d: -f1)
[ -n "$hdr" ] && [ -n "$l0" ] && [ -n "$l1" ] && [ -n "$l2" ] && [ -n "$la" ] &&
    { [ "$la" -lt "$hdr" ] || [ "$A" -gt "$low" ]; } &&
    [ "$l0" -eq $((hdr + 2)) ] && [ "$l1" -eq $((hdr + 3)) ] && [ "$l2" -eq $((hdr + 4)) ] &&
    sed -n "$((hdr + 1))p" "$tmp/ponce" | grep -q '^ pid  *rank device  *compute  *host  *nvme  *step  *loss  *sent  *recv  *wait$'
ok $? "--once: the process on its own as before, then the run's header, column names and one line per rank by rank"
[ $? -eq 0 ] || sed 's/^/# /' "$tmp/ponce"
COLUMNS=100 LINES=24 LC_ALL=C "$TOP" --once -p "$R0,$R2" | grep -q "^ run $RID  par-pub  gpt2-par  2 of 3 ranks"
ok $? "--once: a run with a rank not shown says 2 of 3 ranks"
COLUMNS=80 LINES=30 LC_ALL=C "$TOP" --once --view 3 -p "$R1" >"$tmp/ponce3"
grep -q "^ collectives: rank 1 of 3, run $RID$" "$tmp/ponce3" &&
    grep -q '^ sent 2\.0 GiB  received 1\.0 GiB  blocked 3\.0s  200 ops$' "$tmp/ponce3" &&
    ! grep -q collectives "$tmp/once3"
ok $? "--once --view 3: a rank's collectives (none for a process on its own)"
kill "$R0" "$R1" "$R2" 2>/dev/null

# ---- like htop: USER, CPU%, RSS; sorting, filtering; bars without a budget; the chunk view's totals; the hint ----
# BIG: 4 times the memory, steps 4 times as long; Y: twice, and it spins (a whole core); O: 8 MiB of activations
# beside its chunks on the compute tier. Memory (compute + host): BIG 240 MiB, Y 120, O 68, A 60; steps per
# second: A and O 1, Y 0.5, BIG 0.25.
start_pub "$tmp/big.out" --program big-pub --run aaa-big --scale 4
BIG=$pub_pid
start_pub "$tmp/busy.out" --program busy-pub --run busy-run --scale 2 --busy
Y=$pub_pid
start_pub "$tmp/o.out" --program other-pub --run zzz-other --other-mib 8
O=$pub_pid
# obj PID FILE: that process's object of a --json snapshot
obj() { sed 's/.*{"pid":'"$1"',"program"/{"pid":'"$1"',"program"/; s/\("cmdline":"[^"]*"}\).*/\1/' "$2"; }
num() { grep -o '"'"$1"'":[-0-9.]*' | head -n 1 | cut -d: -f2; }
sleep 1
"$TOP" --json -p "$A,$Y" >"$tmp/sj"
me=$(id -un)
rss_a=$(obj "$A" "$tmp/sj" | num rss_bytes)
rss_ref=$(awk '/^VmRSS:/{print $2 * 1024}' "/proc/$A/status")
cpu_a=$(obj "$A" "$tmp/sj" | num cpu_percent)
cpu_y=$(obj "$Y" "$tmp/sj" | num cpu_percent)
obj "$A" "$tmp/sj" | grep -qF '"user":"'"$me"'","cpu_percent":' &&
    obj "$A" "$tmp/sj" | grep -qF '"cmdline":"'"$PUB"' --seconds 300 --program top-test-pub --run gpt2-test"}' &&
    awk "BEGIN{d = $rss_a - $rss_ref; exit !($rss_ref > 0 && d * d <= ($rss_ref / 10) ^ 2)}"
ok $? "--json: user ($me), cmdline, rss_bytes ($rss_a; /proc says $rss_ref)"
# (on a busy machine the spinning one gets its share of a core, not all of it)
awk "BEGIN{exit !($cpu_y >= 5 && $cpu_a >= 0 && $cpu_a < $cpu_y / 4)}"
ok $? "--json: cpu_percent of a spinning process ($cpu_y) and of one that sleeps ($cpu_a)"
COLUMNS=130 LINES=12 LC_ALL=C "$TOP" --once -p "$A" >"$tmp/cols"
grep -q "^ PID  *USER  *CPU%  *RSS  *PROGRAM  *RUN  .*sort: pid$" "$tmp/cols" &&
    grep -q "^>$A  *$me  *[0-9][0-9.]*  *[0-9.]* [KMG]iB  *top-test-pub  *gpt2-test  *step" "$tmp/cols"
ok $? "--once: the column names, and USER CPU% RSS on the process line"
# order PIDS...: the pids of the process lines of a frame (stdin), as one line
order() { grep -E '^[ >][0-9]+ ' | sed 's/^[ >]\([0-9]*\) .*/\1/' | tr '\n' ' '; }
bypid=$(printf '%s\n' "$A" "$BIG" "$Y" "$O" | sort -n | tr '\n' ' ')
ao=$(printf '%s\n' "$A" "$O" | sort -n | tr '\n' ' ')
good=0
for k in "pid:$bypid" "memory:$BIG $Y $O $A " "rate:$ao$Y $BIG " "name:$BIG $Y $O $A "; do
    got=$(COLUMNS=130 LINES=40 LC_ALL=C "$TOP" --once --sort "${k%%:*}" -p "$A,$BIG,$Y,$O" | order)
    [ "$got" = "${k#*:}" ] || { good=1; echo "# --sort ${k%%:*}: got $got, want ${k#*:}"; }
done
ok $good "--once --sort pid, memory, rate, name: the processes in that order"
COLUMNS=130 LINES=40 LC_ALL=C "$TOP" --once --sort rate -p "$A,$BIG" | grep -q 'sort: step rate$'
ok $? "--once --sort rate: the sort is named on the screen"
f1=$(COLUMNS=130 LINES=40 LC_ALL=C "$TOP" --once --filter AAA-B -p "$A,$BIG,$Y,$O" | order)
f2=$(COLUMNS=130 LINES=40 LC_ALL=C "$TOP" --once --filter '--busy' -p "$A,$BIG,$Y,$O" | order)
COLUMNS=130 LINES=40 LC_ALL=C "$TOP" --once --filter nomatch -p "$A,$BIG" >"$tmp/nf"
[ "$f1" = "$BIG " ] && [ "$f2" = "$Y " ] && grep -q '^colossal-top  0 of 2 processes' "$tmp/nf" &&
    grep -q 'no process matches the filter "nomatch" (2 running)' "$tmp/nf" &&
    [ "$("$TOP" --json --filter other -p "$A,$O" | grep -o '"pid":[0-9]*' | tr '\n' ' ')" = "\"pid\":$O " ]
ok $? "--filter: a run name in any case, a command line's argument, nothing matching (says so), --json too"
start_pub "$tmp/nb.out" --program nobudget-pub --no-budget
NB=$pub_pid
mach=$(awk '/^MemTotal:/{v = $2; u = "KiB"; if (v >= 1023.95) {v /= 1024; u = "MiB"} if (v >= 1023.95) {v /= 1024; u = "GiB"}
    if (v >= 1023.95) {v /= 1024; u = "TiB"} printf "%.1f %s", v, u}' /proc/meminfo)
COLUMNS=120 LINES=12 LC_ALL=C "$TOP" --once -p "$NB" >"$tmp/nb"
grep -q "^    compute \[||*  *\] 48\.0 MiB/$mach machine" "$tmp/nb" &&
    grep -q "^    host    \[||*  *\] 12\.0 MiB/$mach machine" "$tmp/nb" && grep -q '^    nvme    \[  *\] 1\.5 GiB/-' "$tmp/nb"
ok $? "--once without budgets: the bars show used against the machine's memory ($mach), labelled so"
kill "$NB" 2>/dev/null
COLUMNS=120 LINES=12 LC_ALL=C "$TOP" --once -p "$O" >"$tmp/ov"
COLUMNS=80 LINES=30 LC_ALL=C "$TOP" --once --view 2 -p "$O" >"$tmp/ch"
grep -q '^    compute \[|*  *\] 56\.0 MiB/64\.0 MiB' "$tmp/ov" && grep -q '^ total  *56\.0 MiB  *12\.0 MiB  *1\.5 GiB$' "$tmp/ch" &&
    grep -q '^ other  *8\.0 MiB  *0 B  *0 B$' "$tmp/ch" && ! grep -q '^ other' "$tmp/once2" &&
    grep -q '^ total  *48\.0 MiB  *12\.0 MiB  *1\.5 GiB$' "$tmp/once2"
ok $? "overview and chunk view agree on the compute tier: 56.0 MiB in both, 8.0 MiB of it outside the chunks"
COLUMNS=120 LINES=24 LC_ALL=C "$TOP" --once -p 1 >"$tmp/hint"
grep -q '^ start one and it shows here: colossal-finetune MODEL DATA' "$tmp/hint" && grep -q 'colossal-chat, colossal-serve or colossal-diffuse' "$tmp/hint"
ok $? "--once with no process: a hint of what to start"

# ---- untrusted contents: random bytes in every field must not crash any view ----
bad=0
for seed in 1 2 3; do
    start_pub "$tmp/r$seed.out" --program random-pub --random $seed
    R=$pub_pid
    "$TOP" --json -p "$R" >"$tmp/rj" && grep -q '"pid":'"$R"',"program":"random-pub"' "$tmp/rj" || bad=1
    for v in 1 2 3; do
        for size in 100x40 30x5 200x60; do
            COLUMNS=${size%x*} LINES=${size#*x} LC_ALL=C.UTF-8 "$TOP" --once --view $v -p "$R" >/dev/null || bad=1
        done
    done
    kill "$R" 2>/dev/null
done
ok $bad "random contents: --json and every view at three sizes exit 0"

# ---- every program that runs a model in memtier publishes: colossal-chat and colossal-serve on the tiny model ----
CHAT=${CHAT:-apps/colossal-chat}
SERVE=${SERVE:-apps/colossal-serve}
fx=${SRCDIR:-.}/tests/fixtures/chat_model/base
if [ -x "$CHAT" ] && [ -x "$SERVE" ] && [ -d "$fx" ]; then
    # the chat waits for its prompt on a fifo held open by this shell
    mkfifo "$tmp/fifo"
    "$CHAT" "$fx" --temperature 0 --max-new 4 <"$tmp/fifo" >"$tmp/chat.out" 2>"$tmp/chat.err" &
    C=$!
    pids="$pids $C"
    exec 7>"$tmp/fifo"
    i=0
    while [ $i -lt 300 ] && ! [ -e "/dev/shm/colossal-$C" ]; do sleep 0.1; i=$((i + 1)); done
    "$TOP" --json -p "$C" >"$tmp/cj"
    # the host tier holds the model's weights: more than nothing
    host=$(sed 's/.*"tiers":{[^}]*},"host":{"used":\([0-9]*\).*/\1/' "$tmp/cj")
    grep -q '^{"format_version":4,"processes":\[{"pid":'"$C"',"program":"colossal-chat","run":"base",' "$tmp/cj" &&
        [ "${host:-0}" -gt 0 ] 2>/dev/null
    ok $? "colossal-chat publishes: --json lists it (program, model, host tier ${host:-?} bytes)"
    sleep 1.5 # the statistics are republished every second while it waits
    "$TOP" --json -p "$C" >"$tmp/cj2"
    u1=$(grep -o '"updated":[0-9.]*' "$tmp/cj" | cut -d: -f2)
    u2=$(grep -o '"updated":[0-9.]*' "$tmp/cj2" | cut -d: -f2)
    awk "BEGIN{exit !($u2 > $u1)}"
    ok $? "colossal-chat: republished while it waits for a prompt ($u1, then $u2)"
    echo hello >&7
    exec 7>&-
    wait "$C"
    rc=$?
    [ $rc -eq 0 ] && [ -s "$tmp/chat.out" ] && ! [ -e "/dev/shm/colossal-$C" ]
    ok $? "colossal-chat: answers and ends (exit $rc) and its segment is gone"
    "$SERVE" "$fx" --port 0 >/dev/null 2>"$tmp/serve.err" &
    S=$!
    pids="$pids $S"
    i=0
    while [ $i -lt 300 ] && ! grep -q 'listening on' "$tmp/serve.err" 2>/dev/null; do sleep 0.1; i=$((i + 1)); done
    "$TOP" --json -p "$S" | grep -q '"pid":'"$S"',"program":"colossal-serve","run":"base",'
    ok $? "colossal-serve publishes: --json lists it"
    kill "$S" 2>/dev/null
    wait "$S" 2>/dev/null
    ! [ -e "/dev/shm/colossal-$S" ]
    ok $? "colossal-serve: stopped by SIGTERM, its segment is gone"
else
    for t in chat chat-alive chat-end serve serve-end; do skip "colossal-chat, colossal-serve or the fixture not built"; done
fi
DIFFUSE=${DIFFUSE:-apps/colossal-diffuse}
sd=${SRCDIR:-.}/tests/fixtures
if [ -x "$DIFFUSE" ] && [ -d "$sd/sd_pipeline/model" ]; then
    # a training run of many quick steps: its steps and losses as it goes
    "$DIFFUSE" --train "$sd/sd_pipeline/model" "$sd/sd_train/images" --batch 2 --seed 5 -q --steps 1000000 \
        --out "$tmp/dtrain" >/dev/null 2>"$tmp/dtrain.err" &
    Dt=$!
    pids="$pids $Dt"
    i=0
    while [ $i -lt 300 ] && ! "$TOP" --json -p "$Dt" | grep -q '"step":[1-9]'; do sleep 0.1; i=$((i + 1)); done
    "$TOP" --json -p "$Dt" >"$tmp/dj"
    grep -q '"pid":'"$Dt"',"program":"colossal-diffuse","run":"model",.*"step":[1-9][0-9]*,"total_steps":1000000,"loss":[0-9]' "$tmp/dj" &&
        grep -q '"losses":\[[0-9]' "$tmp/dj"
    ok $? "colossal-diffuse --train publishes: --json lists it with its step, loss and losses"
    kill "$Dt" 2>/dev/null
else
    skip "colossal-diffuse or its fixture not built"
fi

# ---- bad arguments ----
for bad in "-d 0" "-d x" "--view 9" "-p abc" "--bogus" "--json --once" "-d"; do
    # shellcheck disable=SC2086
    "$TOP" $bad >/dev/null 2>"$tmp/err"
    rc=$?
    [ $rc -eq 2 ] && grep -q '^colossal-top: ' "$tmp/err"
    ok $? "'$bad' is a usage error (exit $rc): $(head -c 100 "$tmp/err")"
done
"$TOP" </dev/null >/dev/null 2>"$tmp/err"
rc=$?
[ $rc -eq 1 ] && grep -q 'must be a terminal' "$tmp/err"
ok $? "without a terminal the live view refuses clearly (exit $rc)"

# ---- the live screen in tmux ----
if ! command -v tmux >/dev/null 2>&1; then
    for t in start views select links resize tiny back quit tui tui-keys tui-quit help sort rate name pid filter edit esc cpu quit2; do skip "tmux not installed"; done
else
    T="tmux -L $sock -f /dev/null"
    # ends SESSION FILE: up to 10 s for the session to end; true when it did and FILE holds the exit status 0
    ends() {
        i=0
        while [ $i -lt 100 ] && $T has-session -t "$1" 2>/dev/null; do sleep 0.1; i=$((i + 1)); done
        ! $T has-session -t "$1" 2>/dev/null && [ "$(cat "$2" 2>/dev/null)" = 0 ]
    }
    sess=top # the tmux session screen and wait_for look at
    screen() { $T capture-pane -p -t "$sess" 2>/dev/null; }
    # wait_for REGEX: up to 10 s (a loaded machine) for the screen to show it
    wait_for() {
        i=0
        while [ $i -lt 100 ]; do
            screen | grep -q -- "$1" && return 0
            sleep 0.1
            i=$((i + 1))
        done
        screen >"$tmp/last_screen"
        return 1
    }
    $T new-session -d -s top -x 100 -y 30 \
        "LC_ALL=C.UTF-8 '$TOP' -d 0.2 -p $A,$B; echo \$? >'$tmp/rc'; sleep 0.3"
    wait_for "^>$A  .*  top-test-pub  *gpt2-test" && wait_for "^    host    \[|*  *\] 12\.0 MiB/64\.0 MiB" &&
        wait_for "^ $B  .*  top-test-pub  *second-run"
    ok $? "tmux: both processes, the first selected, with their tier bars"
    $T send-keys -t top 2
    wait_for '\[2 chunks\]' && wait_for "^ $A  .*  top-test-pub" && wait_for '^ cCch$' && wait_for '^ Hnn-$'
    ok $? "tmux: key 2 shows the chunk map of the selected process"
    $T send-keys -t top j
    wait_for "^ $B  .*  top-test-pub  *second-run"
    ok $? "tmux: j selects the next process"
    $T send-keys -t top 3
    # the values do not change, so once two snapshots were seen every rate is 0
    wait_for '\[3 links\]' && wait_for '^ host->compute  *3\.0 GiB  *0 B/s$'
    ok $? "tmux: key 3 shows the links with their totals and rates"
    $T resize-window -t top -x 50 -y 20
    # the step-time bar is laid out for the width: 46 columns of C, W, O (cut off, the 100-column one shows only C)
    wait_for '^  CCCCCCCCCCCCCCCCCCCCCCCWWWWWWWWWWWWOOOOOOOOOOO$'
    ok $? "tmux: resized to 50x20, it redraws to fit"
    $T resize-window -t top -x 20 -y 3
    sleep 0.5
    wait_for '^colossal-top: window'
    ok $? "tmux: a 20x3 window gets a short note, no crash"
    $T resize-window -t top -x 100 -y 30
    wait_for '\[3 links\]' && wait_for '^ nvme->host  *512\.0 MiB'
    ok $? "tmux: back to 100x30, the full view again"
    $T send-keys -t top q
    ends top "$tmp/rc"
    ok $? "tmux: q quits with status 0 and the session ends"

    # a program showing its own run (what colossal-finetune --tui does): top_tui_show every 100 ms
    $T new-session -d -s top -x 100 -y 30 \
        "LC_ALL=C.UTF-8 '$PUB' --tui --program tui-pub --seconds 20; echo \$? >'$tmp/rc2'; sleep 0.3"
    wait_for '^stats_publisher  this run' && wait_for '^>[0-9]*  *tui-pub  *gpt2-test  *step 120/600' &&
        wait_for '^    host    \[|*  *\] 12\.0 MiB/64\.0 MiB' && wait_for 'loss █▇▇▆▆▅▅▄▃▃▂▂▁'
    ok $? "tmux: a program's own view (top_tui_show): title, process line, bars, sparkline"
    $T send-keys -t top 3
    wait_for '\[3 links\]' && wait_for '^ host->compute  *3\.0 GiB  *0 B/s$'
    ok $? "tmux: its keys switch views too"
    $T send-keys -t top q
    ends top "$tmp/rc2"
    ok $? "tmux: q ends it with status 0"
    # the keys of colossal-top: help, sort, filter; CPU% between refreshes
    $T new-session -d -s keys -x 130 -y 40 \
        "LC_ALL=C.UTF-8 '$TOP' -d 0.3 -p $A,$BIG,$Y,$O; echo \$? >'$tmp/rc3'; sleep 0.3"
    sess=keys
    # korder WANT: up to 10 s for the screen's processes to come in that order
    korder() {
        i=0
        while [ $i -lt 100 ]; do
            [ "$(screen | order)" = "$1" ] && return 0
            sleep 0.1
            i=$((i + 1))
        done
        echo "# order: got $(screen | order), want $1"
        return 1
    }
    wait_for "^>$A " && wait_for 'sort: pid$'
    bad=0
    for key in h '?' F1; do
        $T send-keys -t keys "$key"
        wait_for '^ colossal-top keys' && wait_for '^   h, ?, F1  *this help; any key closes it' &&
            wait_for '^   s, F6  *sort by pid, memory' && wait_for '^   /  *filter: a part of the program' || bad=1
        $T send-keys -t keys x
        wait_for "^>$A " || bad=1
    done
    ok $bad "tmux: h, ? and F1 show the help with every key; any key closes it"
    $T send-keys -t keys s
    wait_for 'sort: memory$' && korder "$BIG $Y $O $A "
    ok $? "tmux: s sorts by memory, shown top right"
    $T send-keys -t keys F6
    wait_for 'sort: step rate$' && korder "$ao$Y $BIG "
    ok $? "tmux: F6 sorts by step rate"
    $T send-keys -t keys s
    wait_for 'sort: name$' && korder "$BIG $Y $O $A " && wait_for "^>$A "
    ok $? "tmux: s again sorts by name; the selection follows its process"
    $T send-keys -t keys s
    wait_for 'sort: pid$' && korder "$bypid"
    ok $? "tmux: s again: back to pid order"
    $T send-keys -t keys / b u S
    wait_for '^ filter: buS' && korder "$Y " && wait_for '  1 of 4 processes  '
    ok $? "tmux: / opens the filter prompt; typing filters as it goes (any case)"
    $T send-keys -t keys BSpace BSpace BSpace o t h Enter
    wait_for 'sort: pid  filter: oth$' && korder "$O "
    ok $? "tmux: Backspace edits the filter, Enter keeps it"
    $T send-keys -t keys Escape
    wait_for '  4 processes  ' && korder "$bypid"
    ok $? "tmux: Esc clears the filter"
    # a spinning process's CPU% between two refreshes
    cpu=$(screen | grep -E "^[ >]$Y " | awk '{print $3}')
    cpu_idle=$(screen | grep -E "^[ >]$A " | awk '{print $3}')
    awk "BEGIN{exit !(${cpu:-0} >= 5 && ${cpu_idle:-100} < ${cpu:-0} / 4)}"
    ok $? "tmux: CPU% between refreshes: a spinning process $cpu, a sleeping one $cpu_idle"
    $T send-keys -t keys Escape
    ends keys "$tmp/rc3"
    ok $? "tmux: Esc with no filter quits with status 0"
    [ -f "$tmp/last_screen" ] && sed 's/^/# /' "$tmp/last_screen"
fi

echo "1..$n"
exit $failed

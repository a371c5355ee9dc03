#!/usr/bin/env bash
# Scenario runner for txn-bench (see docs/performance.md).
#
#   bench/run.sh [SCENARIO...]        scenarios: matrix coordinator ceiling latency recovery kafka
#                                     crabka etcd parking plots; ab (not in the default list:
#                                     OLD_DAEMON=<old txn-coordinator> against this tree's);
#                                     lr (not in the default list: one librdkafka producer's
#                                     transaction latency, us beside Kafka; needs .venv)
#                                     (default: all of them, in that order)
#
# Environment:
#   OUT=DIR          results directory (default /tmp/txn-bench-results-<time>)
#   DURATION=S       measured seconds per run (default 10); WARMUP=S (default 2)
#   PRODUCERS=LIST   producer counts of the matrix (default 1,16,64,256)
#   PPT=LIST         partitions per transaction (default "1 8")
#   RECOVERY_IDS=N   transactional ids of the recovery scenario (default 1000000)
#   RSS_SETTLE_S=N   recovery: seconds idle before the RSS per idle id is read (default 15)
#   KAFKA_LIBS=DIR   resolved Kafka jars (default $OUT/../txn-bench-kafka-libs, resolved with mvn)
#   NO_BUILD=1       skip cargo build
#
# Everything listens on 127.0.0.1 on free ports, data lives in temp directories under $OUT,
# and every process started here is killed (by pid) on exit.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT="${OUT:-/tmp/txn-bench-results-$(date +%Y%m%d-%H%M%S)}"
DURATION="${DURATION:-10}"
WARMUP="${WARMUP:-2}"
PRODUCERS="${PRODUCERS:-1,16,64,256}"
PPT="${PPT:-1 8}"
RECOVERY_IDS="${RECOVERY_IDS:-1000000}"
RSS_SETTLE_S="${RSS_SETTLE_S:-15}"
KAFKA_LIBS="${KAFKA_LIBS:-/tmp/txn-bench-kafka-libs}"
TOPIC=txn-bench
TOPIC_PARTITIONS=16
mkdir -p "$OUT"
BIN="$ROOT/target/release"
BENCH="$BIN/txn-bench"
PIDS=()

log() { echo "[$(date +%H:%M:%S)] $*" | tee -a "$OUT/run.log" >&2; }

cleanup() {
    for p in "${PIDS[@]:-}"; do
        [ -n "$p" ] && kill -9 "$p" 2>/dev/null || true
    done
}
trap cleanup EXIT

free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'
}

# wait_for FILE PATTERN TIMEOUT_S: waits until FILE has a line matching PATTERN.
wait_for() {
    local f=$1 pat=$2 t=${3:-60} i=0
    while ! grep -q "$pat" "$f" 2>/dev/null; do
        sleep 0.1
        i=$((i + 1))
        if [ $i -gt $((t * 10)) ]; then
            log "timeout waiting for '$pat' in $f"; tail -20 "$f" >&2 || true; return 1
        fi
    done
}

stop() { # stop PID: SIGTERM, then SIGKILL after 10 s
    local p=$1 i=0
    kill "$p" 2>/dev/null || return 0
    while kill -0 "$p" 2>/dev/null; do
        sleep 0.1; i=$((i + 1))
        [ $i -gt 100 ] && { kill -9 "$p" 2>/dev/null || true; break; }
    done
    wait "$p" 2>/dev/null || true
}

machine_info() {
    {
        echo "date: $(date -u +%FT%TZ)"
        echo "nproc: $(nproc)"
        echo "model: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | xargs)"
        echo "memory: $(free -h | awk '/Mem:/{print $2}')"
        echo "kernel: $(uname -r)"
        echo "disk: $(df -hT "$OUT" | tail -1)"
        echo "block: $(lsblk -dno NAME,ROTA,SIZE,MODEL 2>/dev/null | tr '\n' ';')"
        echo "uptime: $(uptime)"
        echo "git: $(git -C "$ROOT" rev-parse --short HEAD)"
    } > "$OUT/machine.txt"
    cat "$OUT/machine.txt" >&2
}

build() {
    [ -n "${NO_BUILD:-}" ] && return 0
    log "building release binaries"
    (cd "$ROOT" && cargo build --release -p txn-bench -p txn-tests -p coordinator \
        --bin txn-bench --bin refbroker --bin txn-coordinator --bin etcd-cluster)
}

# start_embedded DIR: refbroker with its embedded coordinator. Sets SRV_ADDR, SRV_PIDS.
start_embedded() {
    local d=$1 port
    mkdir -p "$d"
    port=$(free_port)
    RUST_LOG=warn "$BIN/refbroker" --listen "127.0.0.1:$port" --data-dir "$d/broker" \
        --topics "$TOPIC:$TOPIC_PARTITIONS" --embedded-coordinator >"$d/refbroker.out" 2>"$d/refbroker.err" &
    local pid=$!
    PIDS+=("$pid")
    wait_for "$d/refbroker.out" "listening on" 60
    SRV_ADDR="127.0.0.1:$port"
    SRV_PIDS=("$pid")
}

# start_daemon_pair DIR [daemon args...]: txn-coordinator daemon + refbroker in standalone mode
# (REFBROKER_ARGS: extra refbroker arguments).
start_daemon_pair() {
    local d=$1; shift
    local dport rport
    mkdir -p "$d"
    dport=$(free_port); rport=$(free_port)
    RUST_LOG=warn "${DAEMON:-$BIN/txn-coordinator}" serve --listen "127.0.0.1:$dport" --data-dir "$d/coord" \
        --bootstrap-servers "127.0.0.1:$rport" "$@" >"$d/daemon.out" 2>"$d/daemon.err" &
    local dpid=$!
    PIDS+=("$dpid")
    RUST_LOG=warn "$BIN/refbroker" --listen "127.0.0.1:$rport" --data-dir "$d/broker" \
        --topics "$TOPIC:$TOPIC_PARTITIONS" --coordinator "127.0.0.1:$dport" ${REFBROKER_ARGS:-} \
        >"$d/refbroker.out" 2>"$d/refbroker.err" &
    local rpid=$!
    PIDS+=("$rpid")
    wait_for "$d/daemon.out" "listening on" 120
    wait_for "$d/refbroker.out" "listening on" 60
    SRV_ADDR="127.0.0.1:$rport"
    SRV_PIDS=("$dpid" "$rpid")
}

# start_daemon_null DIR [daemon args...]: the daemon with txn-bench's null broker as its only data
# broker (acknowledges Produce and WriteTxnMarkers without storing): the coordinator alone.
start_daemon_null() {
    local d=$1; shift
    local dport nport
    mkdir -p "$d"
    dport=$(free_port); nport=$(free_port)
    "$BENCH" --null-broker "127.0.0.1:$nport" --coordinator "127.0.0.1:$dport" --topic "$TOPIC" \
        --create-partitions "$TOPIC_PARTITIONS" >"$d/null.out" 2>"$d/null.err" &
    local npid=$!
    PIDS+=("$npid")
    RUST_LOG=warn "${DAEMON:-$BIN/txn-coordinator}" serve --listen "127.0.0.1:$dport" --data-dir "$d/coord" \
        --bootstrap-servers "127.0.0.1:$nport" "$@" >"$d/daemon.out" 2>"$d/daemon.err" &
    local dpid=$!
    PIDS+=("$dpid")
    wait_for "$d/null.out" "listening on" 30
    wait_for "$d/daemon.out" "listening on" 120
    SRV_ADDR="127.0.0.1:$nport"
    SRV_PIDS=("$dpid")
    NULL_PID=$npid
}

stop_servers() {
    for p in "${SRV_PIDS[@]}"; do stop "$p"; done
    if [ -n "${NULL_PID:-}" ]; then stop "$NULL_PID"; NULL_PID=; fi
}

# bench LABEL FILE [txn-bench args...]
bench() {
    local label=$1 file=$2; shift 2
    local spids=()
    for p in "${SRV_PIDS[@]}"; do spids+=(--server-pid "$p"); done
    log "bench $label $* (load: $(cut -d' ' -f1-3 /proc/loadavg))"
    "$BENCH" --bootstrap "$SRV_ADDR" --topic "$TOPIC" --duration "$DURATION" --warmup "$WARMUP" \
        --label "$label" "${spids[@]}" --out "$file" "$@" | tee -a "$OUT/tables.txt"
}

scenario_matrix() {
    local ppt
    for mode in embedded daemon; do
        for ppt in $PPT; do
            if [ $mode = embedded ]; then start_embedded "$OUT/data/matrix-$mode-$ppt"
            else start_daemon_pair "$OUT/data/matrix-$mode-$ppt"; fi
            bench "$mode" "$OUT/matrix-$mode-ppt$ppt.json" --sweep "$PRODUCERS" --partitions-per-txn "$ppt" || true
            stop_servers
        done
    done
    # TV2 (EndTxn v5, epoch bump per transaction) at 64 producers, where the server offers it.
    start_daemon_pair "$OUT/data/matrix-daemon-tv2"
    bench "daemon-tv2" "$OUT/matrix-daemon-tv2.json" --producers 64 --txn-version 2 || true
    stop_servers
    # At 64 producers with Kafka's default durability (nothing fsync'd: the daemon's log
    # OS-buffered, the refbroker's journal written to the OS), to set beside "kafka".
    REFBROKER_ARGS="--set log.flush=none" start_daemon_pair "$OUT/data/matrix-daemon-nofsync" \
        --set txn.log.sync=os-buffered
    bench "daemon-nofsync" "$OUT/matrix-daemon-nofsync.json" --producers 64 || true
    stop_servers
}

scenario_coordinator() {
    local ppt
    for ppt in $PPT; do
        start_daemon_null "$OUT/data/coordinator-$ppt"
        bench "daemon+null" "$OUT/coordinator-ppt$ppt.json" --sweep "$PRODUCERS" --partitions-per-txn "$ppt" || true
        stop_servers
    done
    start_daemon_null "$OUT/data/coordinator-tv2"
    bench "daemon+null-tv2" "$OUT/coordinator-tv2.json" --producers 64 --txn-version 2 || true
    stop_servers
}

# The etcd log backend against sled, coordinator alone (null broker), same run: 64 producers,
# TV1, one partition per transaction. A 3-member etcd cluster on loopback (etcd-cluster).
scenario_etcd() {
    local d="$OUT/data/etcd" endpoints
    mkdir -p "$d"
    "$BIN/etcd-cluster" --members 3 >"$d/etcd.out" 2>"$d/etcd.err" &
    local epid=$!
    wait_for "$d/etcd.out" "etcd endpoints:" 60
    endpoints=$(sed -n 's/^etcd endpoints: //p' "$d/etcd.out")
    start_daemon_null "$d/sled"
    bench "daemon+null-sled" "$OUT/etcd-sled.json" --producers 64 || true
    stop_servers
    start_daemon_null "$d/etcd" --set txn.log.backend=etcd --set "etcd.endpoints=$endpoints" \
        --set transaction.state.log.num.partitions=50
    bench "daemon+null-etcd" "$OUT/etcd-etcd.json" --producers 64 || true
    stop_servers
    kill -TERM "$epid" 2>/dev/null || true
    wait "$epid" 2>/dev/null || true
}

# Parking (txn.park.max.ms) on and off, sled and etcd, coordinator alone (null broker), same run:
# 64 producers, TV1, one partition per transaction. 0 is Kafka's immediate CONCURRENT_TRANSACTIONS.
scenario_parking() {
    local d="$OUT/data/parking" endpoints park
    mkdir -p "$d"
    "$BIN/etcd-cluster" --members 3 >"$d/etcd.out" 2>"$d/etcd.err" &
    local epid=$!
    wait_for "$d/etcd.out" "etcd endpoints:" 60
    endpoints=$(sed -n 's/^etcd endpoints: //p' "$d/etcd.out")
    for park in 0 1000; do
        start_daemon_null "$d/sled-$park" --set "txn.park.max.ms=$park"
        bench "sled-park$park" "$OUT/parking-sled-$park.json" --producers 64 || true
        stop_servers
        start_daemon_null "$d/etcd-$park" --set txn.log.backend=etcd --set "etcd.endpoints=$endpoints" \
            --set "etcd.key.prefix=/bench-park-$park" --set "txn.park.max.ms=$park"
        bench "etcd-park$park" "$OUT/parking-etcd-$park.json" --producers 64 || true
        stop_servers
    done
    kill -TERM "$epid" 2>/dev/null || true
    wait "$epid" 2>/dev/null || true
}

# An older daemon binary against this tree's, alternating, coordinator alone (null broker), sled:
# 64 producers, TV1, one partition per transaction. OLD_DAEMON=path/to/old/txn-coordinator.
scenario_ab() {
    local d="$OUT/data/ab" which
    [ -x "${OLD_DAEMON:-}" ] || { log "ab needs OLD_DAEMON=<an older txn-coordinator binary>"; return 1; }
    mkdir -p "$d"
    for which in old new old new; do
        if [ $which = old ]; then DAEMON=$OLD_DAEMON; else DAEMON=$BIN/txn-coordinator; fi
        DAEMON=$DAEMON start_daemon_null "$d/$which-$RANDOM"
        bench "$which" "$OUT/ab-$which.json" --producers 64 || true
        stop_servers
    done
}

scenario_ceiling() {
    mkdir -p "$OUT/data/fsync"
    log "fsync probe (load: $(cut -d' ' -f1-3 /proc/loadavg))"
    "$BENCH" --fsync-probe "$OUT/data/fsync" --duration 5 --out "$OUT/fsync.json" | tee -a "$OUT/tables.txt"
    "$BENCH" --fsync-probe "$OUT/data/fsync" --duration 5 --fsync-write-bytes 4096 --out "$OUT/fsync-4k.json" | tee -a "$OUT/tables.txt"
    # The OS-buffered durability mode (txn.log.sync=os-buffered), if the daemon has the key;
    # fsync (the default) side by side in the same scenario, coordinator alone (null broker).
    if start_daemon_null "$OUT/data/ceiling-osbuf" --set txn.log.sync=os-buffered; then
        bench "daemon+null-osbuf" "$OUT/ceiling-null-osbuf.json" --sweep 1,16,64,256 || true
        stop_servers
    else
        log "txn-coordinator refused --set txn.log.sync=os-buffered: $(tail -1 "$OUT/data/ceiling-osbuf/daemon.err")" | tee -a "$OUT/tables.txt"
        stop_servers
    fi
}

scenario_latency() {
    # EndTxn latency at a fixed offered load (target: p99 <= 2 ms at 10,000 txn/s).
    for rate in 1000 5000 10000; do
        start_daemon_null "$OUT/data/latency-null-$rate"
        bench "daemon+null-rate" "$OUT/latency-null-$rate.json" --producers 64 --rate "$rate" || true
        stop_servers
        start_daemon_pair "$OUT/data/latency-$rate"
        bench "daemon-rate" "$OUT/latency-daemon-$rate.json" --producers 64 --rate "$rate" || true
        stop_servers
    done
}

rss_kib() { awk '/VmRSS/{print $2}' "/proc/$1/status"; }

# recovery_of DAEMON LABEL DIR: RSS of DAEMON idle on an empty log, then two starts on the log in
# DIR/coord (the second after a SIGKILL): spawn -> ready, RSS 1 s after and idle; one JSON line.
recovery_of() {
    local daemon=$1 label=$2 d=$3 port pid
    port=$(free_port)
    rm -rf "$d/empty-$label"
    RUST_LOG=warn "$daemon" serve --listen "127.0.0.1:$port" --data-dir "$d/empty-$label" \
        >"$d/empty-$label.out" 2>"$d/empty-$label.err" &
    pid=$!; PIDS+=("$pid")
    "$BENCH" --wait-ready --bootstrap "127.0.0.1:$port" --generate-ids 1 --json >"$d/ready-empty-$label.json"
    sleep 1
    local rss_empty; rss_empty=$(rss_kib "$pid")
    stop "$pid"

    local results=() round
    for round in first-start after-sigkill; do
        port=$(free_port)
        local t0; t0=$(date +%s.%N)
        RUST_LOG=info "$daemon" serve --listen "127.0.0.1:$port" --data-dir "$d/coord" \
            >"$d/$label-$round.out" 2>"$d/$label-$round.err" &
        pid=$!; PIDS+=("$pid")
        "$BENCH" --wait-ready --bootstrap "127.0.0.1:$port" --generate-ids "$RECOVERY_IDS" --ready-timeout 600 \
            --out "$d/ready-$label-$round.json" >/dev/null
        local t1; t1=$(date +%s.%N)
        sleep 1
        local rss_1s; rss_1s=$(rss_kib "$pid")
        # Idle: the daemon's allocator gives back what recovery freed within its decay time.
        sleep "$RSS_SETTLE_S"
        local rss; rss=$(rss_kib "$pid")
        local hwm; hwm=$(awk '/VmHWM/{print $2}' "/proc/$pid/status")
        results+=("{\"round\":\"$round\",\"wall_s\":$(echo "$t1 - $t0" | bc),\"rss_1s_kib\":$rss_1s,\"rss_kib\":$rss,\"hwm_kib\":$hwm}")
        log "recovery $label $round: $(echo "$t1 - $t0" | bc) s from spawn to ready; RSS $rss_1s KiB 1 s after, $rss KiB $((RSS_SETTLE_S + 1)) s after (peak $hwm KiB)"
        kill -9 "$pid"; wait "$pid" 2>/dev/null || true
    done
    local rss_full; rss_full=$(echo "${results[1]}" | sed 's/.*"rss_kib":\([0-9]*\).*/\1/')
    echo "{\"binary\":\"$label\",\"ids\":$RECOVERY_IDS,\"rss_empty_kib\":$rss_empty,\"rounds\":[$(IFS=,; echo "${results[*]}")],\"bytes_per_idle_id\":$(( (rss_full - rss_empty) * 1024 / RECOVERY_IDS ))}"
}

# With OLD_DAEMON=<binary>, the old and the new daemon alternate (old new old new) on the same log.
scenario_recovery() {
    local d="$OUT/data/recovery"
    rm -rf "$d"; mkdir -p "$d"
    log "generating $RECOVERY_IDS ids (load: $(cut -d' ' -f1-3 /proc/loadavg))"
    "$BENCH" --generate-ids "$RECOVERY_IDS" --data-dir "$d/coord" --out "$OUT/recovery-generate.json" | tee -a "$OUT/tables.txt"

    log "load probe: SledTxnLog::open and load of every partition, no coordinator"
    "$BENCH" --load-probe --data-dir "$d/coord" --out "$OUT/recovery-load-probe.json" | tee -a "$OUT/tables.txt"

    local runs=(new) which
    [ -x "${OLD_DAEMON:-}" ] && runs=(old new old new)
    : >"$OUT/recovery.json"
    for which in "${runs[@]}"; do
        local daemon=$BIN/txn-coordinator
        [ "$which" = old ] && daemon=$OLD_DAEMON
        recovery_of "$daemon" "$which" "$d" | tee -a "$OUT/recovery.json" | tee -a "$OUT/tables.txt"
    done
    grep -h "read at open\|all transaction log partitions loaded" "$d"/*.err | tail -4 >>"$OUT/tables.txt" || true
}

kafka_libs() {
    if [ ! -f "$KAFKA_LIBS/.done" ]; then
        log "resolving Apache Kafka jars with Maven into $KAFKA_LIBS"
        mvn -q -B -f "$ROOT/bench/kafka/pom.xml" dependency:copy-dependencies -DoutputDirectory="$KAFKA_LIBS"
        touch "$KAFKA_LIBS/.done"
    fi
}

# start_kafka DIR [extra server.properties lines...]
start_kafka() {
    local d=$1; shift
    local port cport
    mkdir -p "$d/logs"
    port=$(free_port); cport=$(free_port)
    cat >"$d/server.properties" <<EOF
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:$cport
listeners=PLAINTEXT://127.0.0.1:$port,CONTROLLER://127.0.0.1:$cport
advertised.listeners=PLAINTEXT://127.0.0.1:$port
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
log.dirs=$d/logs
num.partitions=$TOPIC_PARTITIONS
offsets.topic.replication.factor=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
group.initial.rebalance.delay.ms=0
auto.create.topics.enable=false
EOF
    for l in "$@"; do echo "$l" >>"$d/server.properties"; done
    local cp="$KAFKA_LIBS/*" id
    id=$(java -cp "$cp" kafka.tools.StorageTool random-uuid 2>/dev/null | tail -1)
    java -cp "$cp" kafka.tools.StorageTool format -t "$id" -c "$d/server.properties" >"$d/format.log" 2>&1
    java -Xms1g -Xmx1g -XX:+UseG1GC -cp "$cp" kafka.Kafka "$d/server.properties" >"$d/kafka.out" 2>&1 &
    local pid=$!; PIDS+=("$pid")
    local i=0
    until "$BENCH" --bootstrap "127.0.0.1:$port" --topic "$TOPIC" --create-partitions "$TOPIC_PARTITIONS" \
        --producers 1 --duration 1 --warmup 0 --label kafka-probe >/dev/null 2>&1; do
        sleep 1; i=$((i + 1))
        [ $i -gt 90 ] && { log "Kafka did not come up"; tail -30 "$d/kafka.out" >&2; return 1; }
    done
    SRV_ADDR="127.0.0.1:$port"
    SRV_PIDS=("$pid")
}

scenario_kafka() {
    if ! kafka_libs; then
        log "peer Apache Kafka: jar resolution failed" | tee -a "$OUT/tables.txt"; return 0
    fi
    local ppt
    for ppt in $PPT; do
        start_kafka "$OUT/data/kafka-$ppt" || { echo "Kafka failed to start" >>"$OUT/tables.txt"; return 0; }
        bench "kafka" "$OUT/kafka-ppt$ppt.json" --sweep "$PRODUCERS" --partitions-per-txn "$ppt" || true
        stop_servers
    done
    # Kafka with an fsync per append (log.flush.interval.messages=1), durable like our default.
    start_kafka "$OUT/data/kafka-fsync" "log.flush.interval.messages=1" || return 0
    bench "kafka-fsync" "$OUT/kafka-fsync.json" --sweep 16,64,256 || true
    stop_servers
}

# One librdkafka producer (confluent-kafka from .venv), sequential begin/produce/commit, durable:
# transaction latency p50/p90/p99 (and its split into the servers' round trips and the client's
# rest) of the daemon + refbroker, embedded refbroker, Apache Kafka
# (OS-buffered and with an fsync per append) and, with OLD_DAEMON=<older txn-coordinator>, the
# older daemon + refbroker, alternating, in one run.
scenario_lr() {
    local py="$ROOT/.venv/bin/python" round setup
    [ -x "$py" ] || { log "lr needs .venv with confluent-kafka (scripts/test creates it)"; return 1; }
    kafka_libs || { log "lr: Kafka jar resolution failed"; return 1; }
    lr() { # lr LABEL
        log "lr $1 (load: $(cut -d' ' -f1-3 /proc/loadavg))"
        "$py" "$ROOT/bench/lr_latency.py" --bootstrap "$SRV_ADDR" --topic "$TOPIC" \
            --partitions "$TOPIC_PARTITIONS" --duration "$DURATION" --warmup "$WARMUP" --label "$1" --split \
            | tee -a "$OUT/lr.json" | tee -a "$OUT/tables.txt"
    }
    for round in 1 2; do
        for setup in daemon old embedded kafka kafka-fsync; do
            case $setup in
                daemon) start_daemon_pair "$OUT/data/lr-$setup-$round" ;;
                old) [ -x "${OLD_DAEMON:-}" ] || continue
                     DAEMON=$OLD_DAEMON start_daemon_pair "$OUT/data/lr-$setup-$round" ;;
                embedded) start_embedded "$OUT/data/lr-$setup-$round" ;;
                kafka) start_kafka "$OUT/data/lr-$setup-$round" || continue ;;
                kafka-fsync) start_kafka "$OUT/data/lr-$setup-$round" "log.flush.interval.messages=1" || continue ;;
            esac
            lr "$setup" || true
            stop_servers
        done
    done
}

scenario_crabka() {
    # One try, as the peer report did (reference/peer-bench.md §1).
    local root="$OUT/crabka"
    log "cargo install crabka-broker"
    if (cd /tmp && cargo install crabka-broker --root "$root") >"$OUT/crabka-install.log" 2>&1; then
        log "crabka-broker installed; run it by hand (needs meta.properties.json, see peer-bench.md)"
    else
        log "crabka-broker did not install: $(grep -m1 error "$OUT/crabka-install.log")" | tee -a "$OUT/tables.txt"
    fi
    (cd /tmp && cargo install crabka-broker --version 0.3.8 --locked --root "$root") >>"$OUT/crabka-install.log" 2>&1 ||
        log "crabka-broker 0.3.8: $(grep error "$OUT/crabka-install.log" | tail -1)" | tee -a "$OUT/tables.txt"
}

scenario_plots() {
    local files=()
    for f in "$OUT"/matrix-*-ppt1.json "$OUT"/coordinator-ppt1.json "$OUT"/kafka-ppt1.json; do [ -f "$f" ] && files+=("$f"); done
    [ ${#files[@]} -gt 0 ] && "$BENCH" --plot-from "$(IFS=,; echo "${files[*]}")" --plot "$OUT/ppt1.png" \
        --plot-title "1 partition per transaction, 1 record of 100 B, durable (Kafka: OS-buffered)"
    files=()
    for f in "$OUT"/matrix-*-ppt8.json "$OUT"/coordinator-ppt8.json "$OUT"/kafka-ppt8.json; do [ -f "$f" ] && files+=("$f"); done
    [ ${#files[@]} -gt 0 ] && "$BENCH" --plot-from "$(IFS=,; echo "${files[*]}")" --plot "$OUT/ppt8.png" \
        --plot-title "8 partitions per transaction, 1 record of 100 B each"
    true
}

machine_info
build
SCENARIOS=("$@")
[ ${#SCENARIOS[@]} -eq 0 ] && SCENARIOS=(matrix coordinator ceiling latency recovery kafka crabka etcd parking plots)
for s in "${SCENARIOS[@]}"; do
    log "=== scenario $s"
    "scenario_$s" || { log "scenario $s failed"; cleanup; PIDS=(); }
done
log "results in $OUT"

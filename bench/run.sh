#!/usr/bin/env bash
# Scenario runner for txn-bench (see docs/performance.md).
#
#   bench/run.sh [SCENARIO...]        scenarios: matrix coordinator ceiling latency recovery kafka
#                                     crabka etcd parking security plots; ab (not in the default list:
#                                     OLD_DAEMON=<old txn-coordinator> against this tree's);
#                                     lr (not in the default list: one librdkafka producer's
#                                     transaction latency, us beside Kafka; needs .venv);
#                                     failover (not in the default list, ~15 min: 3 etcd members,
#                                     3 daemons on etcd, a refbroker and 8 librdkafka producers;
#                                     the commit gap each client sees around daemon SIGKILLs,
#                                     SIGSTOPs and etcd leader SIGKILLs, then an exactly-once
#                                     check, the Java client's SIGKILL loop; needs .venv, etcd)
#                                     (default: all of them, in that order)
#
# Environment:
#   OUT=DIR          results directory (default /tmp/txn-bench-results-<time>)
#   DURATION=S       measured seconds per run (default 10); WARMUP=S (default 2)
#   PRODUCERS=LIST   producer counts of the matrix (default 1,16,64,256)
#   PPT=LIST         partitions per transaction (default "1 8")
#   RECOVERY_IDS=N   transactional ids of the recovery scenario (default 1000000)
#   RSS_SETTLE_S=N   recovery: seconds idle before the RSS per idle id is read (default 15)
#   SECURITY_ROUNDS=N security: alternating PLAINTEXT / SASL_SSL runs of each (default 2)
#   KAFKA_LIBS=DIR   resolved Kafka jars (default $OUT/../txn-bench-kafka-libs, resolved with mvn)
#   NO_BUILD=1       skip cargo build
#   failover:        KILLS (20) STOPS (5) ETCD_KILLS (5) JAVA_KILLS (5, 0: no Java) faults;
#                    LEASE_MS (3000) etcd.lease.ttl.ms; STOP_MS (LEASE_MS + 1000) how long a
#                    stop-daemon fault holds the SIGSTOP; FAILOVER_PRODUCERS (8); ETCD_DOWN_S (3);
#                    DAEMON_LOG (info) and REFBROKER_LOG (warn) their RUST_LOG;
#                    LR_SETTINGS="k=v ..." extra librdkafka settings, JAVA_SETTINGS="k=v ..." the
#                    Java client's; LR_DEBUG=eos,broker,protocol librdkafka debug logs per producer;
#                    SUITE_MEASURE=1 also the suite's failover_times (about 2 min)
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
BIN="${CARGO_TARGET_DIR:-$ROOT/target}/release"
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
    RUST_LOG="${REFBROKER_LOG:-warn}" "$BIN/refbroker" --listen "127.0.0.1:$port" --data-dir "$d/broker" \
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
    RUST_LOG="${REFBROKER_LOG:-warn}" "$BIN/refbroker" --listen "127.0.0.1:$rport" --data-dir "$d/broker" \
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
    local dport nport sport
    mkdir -p "$d"
    dport=$(free_port); nport=$(free_port); sport=$(free_port)
    "$BENCH" --null-broker "127.0.0.1:$nport" --coordinator "127.0.0.1:$dport" --topic "$TOPIC" \
        --create-partitions "$TOPIC_PARTITIONS" --stats-listen "127.0.0.1:$sport" \
        >"$d/null.out" 2>"$d/null.err" &
    local npid=$!
    PIDS+=("$npid")
    # DAEMON_PROTOCOL=SASL_SSL (...): the daemon's one listener has that protocol instead.
    local listen=(--listen "127.0.0.1:$dport")
    [ -n "${DAEMON_PROTOCOL:-}" ] && listen=(--set "listeners=$DAEMON_PROTOCOL://127.0.0.1:$dport")
    RUST_LOG=warn "${DAEMON:-$BIN/txn-coordinator}" serve "${listen[@]}" --data-dir "$d/coord" \
        --bootstrap-servers "127.0.0.1:$nport" "$@" >"$d/daemon.out" 2>"$d/daemon.err" &
    local dpid=$!
    PIDS+=("$dpid")
    wait_for "$d/null.out" "listening on" 30
    wait_for "$d/daemon.out" "listening on" 120
    SRV_ADDR="127.0.0.1:$nport"
    SRV_PIDS=("$dpid")
    NULL_PID=$npid
    NULL_STATS="127.0.0.1:$sport"
}

stop_servers() {
    for p in "${SRV_PIDS[@]}"; do stop "$p"; done
    if [ -n "${NULL_PID:-}" ]; then stop "$NULL_PID"; NULL_PID=; NULL_STATS=; fi
}

# bench LABEL FILE [txn-bench args...]
bench() {
    local label=$1 file=$2; shift 2
    local spids=()
    for p in "${SRV_PIDS[@]}"; do spids+=(--server-pid "$p"); done
    # With the null broker: its CPU per request beside the daemon's per transaction.
    [ -n "${NULL_STATS:-}" ] && spids+=(--null-broker-stats "$NULL_STATS")
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

# The cost of security, coordinator alone (null broker), same run, 64 producers, TV1, one
# partition per transaction: the daemon on PLAINTEXT without authorizer, then on SASL_SSL
# (TLS, SCRAM-SHA-512) with Kafka's StandardAuthorizer and ACLs for the producers' principal
# (WRITE on the transactional ids txn-bench*, WRITE on the topic). Certificates made with
# openssl; txn-bench connects to the daemon with --coordinator-security (the daemon's own TLS
# and SASL client code). Prints daemon CPU per transaction and EndTxn p50/p99 side by side.
scenario_security() {
    local d="$OUT/data/security" rounds=${SECURITY_ROUNDS:-2} r
    mkdir -p "$d/pki"
    command -v openssl >/dev/null || { log "security needs openssl"; return 1; }
    (
        cd "$d/pki"
        openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 \
            -subj "/CN=txn-bench CA" -keyout ca.key -out ca.pem 2>/dev/null
        openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=127.0.0.1" \
            -keyout server.key -out server.csr 2>/dev/null
        printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\n' >san.ext
        openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 \
            -extfile san.ext -out server.crt 2>/dev/null
        cat server.crt server.key >server.pem
    )
    local secure_args=(
        --set "ssl.keystore.location=$d/pki/server.pem"
        --set sasl.enabled.mechanisms=SCRAM-SHA-512
        --set "txn.scram.credentials=SCRAM-SHA-512=[name=bench,password=bench-secret]"
        --set authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer
    )
    local client_args=(
        --coordinator-security security.protocol=SASL_SSL
        --coordinator-security "ssl.truststore.location=$d/pki/ca.pem"
        --coordinator-security sasl.mechanism=SCRAM-SHA-512
        --coordinator-security 'sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username="bench" password="bench-secret";'
    )
    # Alternating rounds: plaintext, SASL_SSL, plaintext, SASL_SSL, ...
    for r in $(seq 1 "$rounds"); do
        start_daemon_null "$d/plain-$r"
        bench "plaintext" "$OUT/security-plaintext-$r.json" --producers 64 || true
        stop_servers
        mkdir -p "$d/sasl-$r/coord"
        "$BIN/txn-coordinator" acl add --data-dir "$d/sasl-$r/coord" --principal User:bench \
            --resource-type TransactionalId --resource-name txn-bench --pattern-type prefixed \
            --operation Write >/dev/null
        "$BIN/txn-coordinator" acl add --data-dir "$d/sasl-$r/coord" --principal User:bench \
            --resource-type Topic --resource-name "$TOPIC" --operation Write >/dev/null
        DAEMON_PROTOCOL=SASL_SSL start_daemon_null "$d/sasl-$r" "${secure_args[@]}"
        bench "sasl_ssl" "$OUT/security-sasl_ssl-$r.json" --producers 64 "${client_args[@]}" || true
        stop_servers
    done
    python3 - "$OUT" "$rounds" <<'PY' | tee -a "$OUT/tables.txt"
import json, sys
out, rounds = sys.argv[1], int(sys.argv[2])
def load(kind):
    rows = []
    for r in range(1, rounds + 1):
        try:
            v = json.load(open(f"{out}/security-{kind}-{r}.json"))
        except OSError:
            continue
        res = (v.get("results") or [v])[0] if isinstance(v, dict) else v[0]
        srv = res["servers"][0]
        rows.append((srv["cpu_s_per_1000_txn"] * 1000.0, res["end_txn"]["p50_us"],
                     res["end_txn"]["p99_us"], res["committed_per_s"], res["errors"]))
    return rows
plain, sasl = load("plaintext"), load("sasl_ssl")
if not plain or not sasl:
    print("security: missing results"); sys.exit(0)
def avg(rows, i): return sum(r[i] for r in rows) / len(rows)
print("security cost, daemon + null broker, 64 producers, 1 partition/txn, TV1 "
      f"(mean of {len(plain)} and {len(sasl)} runs)")
print(f"{'':22}{'PLAINTEXT':>12}{'SASL_SSL+ACL':>14}{'ratio':>8}")
for name, i, fmt in (("daemon CPU us/txn", 0, "{:.1f}"), ("EndTxn p50 us", 1, "{:.0f}"),
                     ("EndTxn p99 us", 2, "{:.0f}"), ("committed txn/s", 3, "{:.0f}"),
                     ("errors", 4, "{:.0f}")):
    a, b = avg(plain, i), avg(sasl, i)
    ratio = f"{b / a:.3f}" if a else "-"
    print(f"{name:22}{fmt.format(a):>12}{fmt.format(b):>14}{ratio:>8}")
PY
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

# --- failover: a coordinator failover as a real client sees it -------------------------------
# 3 etcd members (started here, by pid, with tests/src/etcd.rs's flags, so that the leader can be
# SIGKILLed and restarted on its data directory), 3 daemons on them, one refbroker, and
# bench/failover.py's librdkafka producers (FAILOVER_PRODUCERS, default 8). Faults, each followed
# by recovery and a settle pause: KILLS x kill-daemon (SIGKILL the owner of a producer's
# transactional id, restart it after the measurement window), STOPS x stop-daemon (SIGSTOP the
# owner for STOP_MS, default LEASE + 1 s, then SIGCONT), ETCD_KILLS x kill-etcd-leader (SIGKILL,
# restart after ETCD_DOWN_S). Then the client-side commit gap per fault kind, an exactly-once check
# (read_committed), the same kill-daemon loop with the Java client (JAVA_KILLS), and with
# SUITE_MEASURE=1 the suite's own failover_times beside it. Raw data in $OUT/data/failover;
# with LR_DEBUG=eos,protocol,broker, `bench/failover.py timeline --dir $OUT/data/failover`
# says where each victim's commit gap went.

FO_D=""
FO_EPID=(); FO_ECP=(); FO_EPP=(); FO_DPID=(); FO_DP=(); FO_MP=()

fo_now() { date +%s.%N; }

# fo_etcd_start I STATE: member I (0..2) on its data directory.
fo_etcd_start() {
    local i=$1 state=$2 init="" j
    for j in 0 1 2; do init+="${init:+,}m$j=http://127.0.0.1:${FO_EPP[$j]}"; done
    etcd --name "m$i" --data-dir "$FO_D/etcd/m$i" \
        --listen-client-urls "http://127.0.0.1:${FO_ECP[$i]}" --advertise-client-urls "http://127.0.0.1:${FO_ECP[$i]}" \
        --listen-peer-urls "http://127.0.0.1:${FO_EPP[$i]}" --initial-advertise-peer-urls "http://127.0.0.1:${FO_EPP[$i]}" \
        --initial-cluster "$init" --initial-cluster-state "$state" --initial-cluster-token "failover-${FO_EPP[0]}" \
        --heartbeat-interval 50 --election-timeout 500 --pre-vote=true --logger zap --log-outputs stderr \
        >>"$FO_D/etcd/m$i.log" 2>&1 &
    FO_EPID[$i]=$!; PIDS+=("$!")
}

# fo_etcd_status I: "member_id leader" of member I (empty if it does not answer in 2 s).
fo_etcd_status() {
    local s
    s=$(curl -s -m 2 -X POST "http://127.0.0.1:${FO_ECP[$1]}/v3/maintenance/status" -d '{}' 2>/dev/null || true)
    [[ "$s" =~ \"member_id\":\"([0-9]+)\" ]] || return 0
    local id=${BASH_REMATCH[1]} leader=0
    [[ "$s" =~ \"leader\":\"([0-9]+)\" ]] && leader=${BASH_REMATCH[1]}
    echo "$id $leader"
}

# fo_etcd_leader: the index of the member that is the leader (waits up to 20 s), else fails.
fo_etcd_leader() {
    local t=0 i st
    while [ $t -lt 100 ]; do
        for i in 0 1 2; do
            st=$(fo_etcd_status "$i")
            if [ -n "$st" ] && [ "${st% *}" = "${st#* }" ]; then echo "$i"; return 0; fi
        done
        sleep 0.2; t=$((t + 1))
    done
    return 1
}

# fo_etcd_wait I: member I answers and knows a leader (up to 30 s).
fo_etcd_wait() {
    local t=0 st
    while [ $t -lt 150 ]; do
        st=$(fo_etcd_status "$1")
        [ -n "$st" ] && [ "${st#* }" != "0" ] && return 0
        sleep 0.2; t=$((t + 1))
    done
    log "etcd member m$1 not serving after 30 s"; return 1
}

# fo_daemon_start N: daemon N (1..3) on etcd; waits until it listens and /ready says ready.
fo_daemon_start() {
    local n=$1 t=0
    RUST_LOG="${DAEMON_LOG:-info}" "$BIN/txn-coordinator" serve --listen "127.0.0.1:${FO_DP[$n]}" --node-id "$n" \
        --data-dir "$FO_D/daemon-$n" --bootstrap-servers "127.0.0.1:$FO_RP" \
        --metrics-listen "127.0.0.1:${FO_MP[$n]}" --set txn.log.backend=etcd \
        --set "etcd.endpoints=$FO_ENDPOINTS" --set "etcd.lease.ttl.ms=$LEASE_MS" \
        >"$FO_D/daemon-$n.out" 2>>"$FO_D/daemon-$n.err" &
    FO_DPID[$n]=$!; PIDS+=("$!")
    wait_for "$FO_D/daemon-$n.out" "listening on" 60 || return 1
    until [ "$(curl -s -m 1 "http://127.0.0.1:${FO_MP[$n]}/ready" 2>/dev/null)" = "ready" ]; do
        sleep 0.1; t=$((t + 1))
        if [ $t -gt 600 ]; then log "daemon-$n not ready after 60 s"; return 1; fi
    done
}

# fo_owners PRODUCER...: "<name> <node>" per producer (FindCoordinator asked of the daemons).
fo_owners() {
    local prefix=$1; shift
    local ask="127.0.0.1:${FO_DP[1]},127.0.0.1:${FO_DP[2]},127.0.0.1:${FO_DP[3]}" ids=() p
    for p in "$@"; do ids+=("$prefix-$p"); done
    "$FO_PY" "$ROOT/bench/failover.py" owners --ask "$ask" "${ids[@]}" | sed "s/^$prefix-//" | cut -d' ' -f1,2
}

# fo_fault CLIENT KIND N T VICTIM PRODUCERS [KEY JSON-VALUE]...: one line of faults.jsonl.
fo_fault() {
    local client=$1 kind=$2 n=$3 t=$4 victim=$5 prods=$6; shift 6
    local list="" p extra=""
    for p in $prods; do list+="${list:+,}\"$p\""; done
    while [ $# -ge 2 ]; do extra+=",\"$1\":$2"; shift 2; done
    echo "{\"client\":\"$client\",\"kind\":\"$kind\",\"n\":$n,\"t\":$t,\"victim\":\"$victim\",\"victim_producers\":[$list]$extra}" \
        >>"$FO_D/faults.jsonl"
}

# fo_wait_commits SINCE TIMEOUT COMMIT-FILES...: every producer of FO_WAIT_PRODS (p0,p1,...)
# committed after SINCE.
fo_wait_commits() {
    local since=$1 t=$2; shift 2
    { "$FO_PY" "$ROOT/bench/failover.py" wait-commits --since "$since" --timeout "$t" \
        --producers "$FO_WAIT_PRODS" "$@" 2>&1 || true; } |
        while read -r l; do log "$l"; done
}

# fo_kill_daemon_loop CLIENT COUNT PREFIX COMMIT-FILES PRODUCER...: the kill-daemon faults.
fo_kill_daemon_loop() {
    local client=$1 count=$2 prefix=$3 files=$4; shift 4
    local prods=("$@") k target owners victim vp t tr
    for ((k = 1; k <= count; k++)); do
        target=${prods[$(((k - 1) % ${#prods[@]}))]}
        owners=$(fo_owners "$prefix" "${prods[@]}")
        victim=$(awk -v p="$target" '$1 == p {print $2}' <<<"$owners")
        if ! [[ "$victim" =~ ^[123]$ ]]; then log "kill-daemon $k: no owner for $target"; sleep 1; continue; fi
        vp=$(awk -v v="$victim" '$2 == v {print $1}' <<<"$owners" | xargs)
        t=$(fo_now)
        kill -9 "${FO_DPID[$victim]}" 2>/dev/null || true
        wait "${FO_DPID[$victim]}" 2>/dev/null || true
        log "$client kill-daemon $k/$count: daemon-$victim (coordinates $vp) SIGKILLed (load: $(cut -d' ' -f1-3 /proc/loadavg))"
        fo_wait_commits "$t" "$FO_WINDOW_S" $files
        tr=$(fo_now)
        fo_daemon_start "$victim" || return 1
        fo_fault "$client" kill-daemon "$k" "$t" "daemon-$victim" "$vp" restarted "$tr" ready "$(fo_now)"
        fo_fault "$client" rejoin-after-kill "$k" "$tr" "daemon-$victim" "$vp"
        sleep $((LEASE_MS / 1000 + 2))
        fo_wait_commits "$tr" "$FO_WINDOW_S" $files
    done
}

scenario_failover() {
    local py="$ROOT/.venv/bin/python" n i k t tr victim vp owners target leader
    [ -x "$py" ] || { log "failover needs .venv with confluent-kafka (scripts/test creates it)"; return 1; }
    command -v etcd >/dev/null || { log "failover needs etcd (Debian's etcd-server)"; return 1; }
    FO_PY=$py
    FO_D="$OUT/data/failover"
    rm -rf "$FO_D"; mkdir -p "$FO_D/etcd" "$FO_D/lr"
    LEASE_MS="${LEASE_MS:-3000}"
    local stop_ms="${STOP_MS:-$((LEASE_MS + 1000))}"
    FO_WINDOW_S="${FAILOVER_WINDOW_S:-60}"
    local nprod="${FAILOVER_PRODUCERS:-8}" kills="${KILLS:-20}" stops="${STOPS:-5}" ekills="${ETCD_KILLS:-5}"
    local jkills="${JAVA_KILLS:-5}" settle=$((LEASE_MS / 1000 + 2)) prefix="fo$(date +%s)"
    local lr_settings=(${LR_SETTINGS:-}) java_settings=(${JAVA_SETTINGS:-})
    : >"$FO_D/faults.jsonl"

    for i in 0 1 2; do FO_ECP[$i]=$(free_port); FO_EPP[$i]=$(free_port); done
    for i in 0 1 2; do fo_etcd_start "$i" new; done
    FO_ENDPOINTS="http://127.0.0.1:${FO_ECP[0]},http://127.0.0.1:${FO_ECP[1]},http://127.0.0.1:${FO_ECP[2]}"
    for i in 0 1 2; do fo_etcd_wait "$i" || return 1; done
    FO_RP=$(free_port)
    for n in 1 2 3; do FO_DP[$n]=$(free_port); FO_MP[$n]=$(free_port); done
    for n in 1 2 3; do fo_daemon_start "$n" || return 1; done
    # Node ids: the daemons 1..3, the refbroker 100 (its default, 1, would be daemon-1's: clients
    # could not tell them apart).
    RUST_LOG="${REFBROKER_LOG:-warn}" "$BIN/refbroker" --listen "127.0.0.1:$FO_RP" --node-id 100 --data-dir "$FO_D/broker" --topics failover:8 \
        --coordinator "127.0.0.1:${FO_DP[1]},127.0.0.1:${FO_DP[2]},127.0.0.1:${FO_DP[3]}" \
        >"$FO_D/refbroker.out" 2>"$FO_D/refbroker.err" &
    PIDS+=("$!")
    wait_for "$FO_D/refbroker.out" "listening on" 60 || return 1
    log "failover: etcd $FO_ENDPOINTS, daemons 127.0.0.1:${FO_DP[1]},${FO_DP[2]},${FO_DP[3]}, refbroker 127.0.0.1:$FO_RP," \
        "lease $LEASE_MS ms, $nprod librdkafka producers, librdkafka settings: ${lr_settings[*]:-defaults}${LR_DEBUG:+, debug $LR_DEBUG}"

    # librdkafka producers, until the stop file exists (bounded: 3 hours at most).
    local prods=() lrfiles="$FO_D/lr/p*.txt"
    for ((i = 0; i < nprod; i++)); do prods+=("p$i"); done
    "$py" "$ROOT/bench/failover.py" produce --bootstrap "127.0.0.1:$FO_RP" --topic failover --dir "$FO_D/lr" \
        --id-prefix "$prefix" --stop-file "$FO_D/lr/stop" --producers "$nprod" --max-seconds 10800 \
        ${LR_DEBUG:+--debug "$LR_DEBUG"} "${lr_settings[@]}" >"$FO_D/lr/produce.out" 2>&1 &
    local ppid=$!; PIDS+=("$ppid")
    # Warm-up: every producer has committed, then FAILOVER_WARMUP_S of commits (the baseline row).
    FO_WAIT_PRODS=$(IFS=,; echo "${prods[*]}")
    fo_wait_commits 0 "$FO_WINDOW_S" $lrfiles
    sleep "${FAILOVER_WARMUP_S:-10}"
    fo_wait_commits "$(fo_now)" "$FO_WINDOW_S" $lrfiles

    fo_kill_daemon_loop librdkafka "$kills" "$prefix" "$lrfiles" "${prods[@]}" || return 1

    for ((k = 1; k <= stops; k++)); do
        target=${prods[$(((k - 1) % nprod))]}
        owners=$(fo_owners "$prefix" "${prods[@]}")
        victim=$(awk -v p="$target" '$1 == p {print $2}' <<<"$owners")
        if ! [[ "$victim" =~ ^[123]$ ]]; then log "stop-daemon $k: no owner for $target"; sleep 1; continue; fi
        vp=$(awk -v v="$victim" '$2 == v {print $1}' <<<"$owners" | xargs)
        t=$(fo_now)
        kill -STOP "${FO_DPID[$victim]}"
        log "librdkafka stop-daemon $k/$stops: daemon-$victim (coordinates $vp) SIGSTOPped for $stop_ms ms (load: $(cut -d' ' -f1-3 /proc/loadavg))"
        sleep "$(echo "scale=3; $stop_ms / 1000" | bc)"
        tr=$(fo_now)
        kill -CONT "${FO_DPID[$victim]}"
        fo_fault librdkafka stop-daemon "$k" "$t" "daemon-$victim" "$vp" resumed "$tr" stop_ms "$stop_ms"
        fo_wait_commits "$tr" "$FO_WINDOW_S" $lrfiles
        sleep "$settle"
        fo_wait_commits "$(fo_now)" "$FO_WINDOW_S" $lrfiles
    done

    for ((k = 1; k <= ekills; k++)); do
        leader=$(fo_etcd_leader) || { log "kill-etcd-leader $k: no etcd leader found"; return 1; }
        t=$(fo_now)
        kill -9 "${FO_EPID[$leader]}" 2>/dev/null || true
        wait "${FO_EPID[$leader]}" 2>/dev/null || true
        log "librdkafka kill-etcd-leader $k/$ekills: etcd member m$leader (the leader) SIGKILLed (load: $(cut -d' ' -f1-3 /proc/loadavg))"
        sleep "${ETCD_DOWN_S:-3}"
        tr=$(fo_now)
        fo_etcd_start "$leader" existing
        fo_etcd_wait "$leader" || return 1
        fo_fault librdkafka kill-etcd-leader "$k" "$t" "etcd-m$leader" "" restarted "$tr" ready "$(fo_now)"
        fo_wait_commits "$t" "$FO_WINDOW_S" $lrfiles
        sleep "$settle"
        fo_wait_commits "$(fo_now)" "$FO_WINDOW_S" $lrfiles
    done

    touch "$FO_D/lr/stop"
    wait "$ppid" 2>/dev/null || true
    local extra="${lr_settings[*]:-}"
    "$py" "$ROOT/bench/failover.py" report --faults "$FO_D/faults.jsonl" --client librdkafka --lease-ms "$LEASE_MS" \
        --extra "$extra" --json-out "$OUT/failover.json" --gaps-out "$FO_D/gaps-librdkafka.jsonl" $lrfiles |
        tee -a "$OUT/tables.txt"
    "$py" "$ROOT/bench/failover.py" verify --bootstrap "127.0.0.1:$FO_RP" --topic failover --dir "$FO_D/lr" \
        --id-prefix "$prefix" --json-out "$OUT/failover.json" | tee -a "$OUT/tables.txt" || true

    # The Java client (kafka-clients 4.1.1, resolved by tests/java/pom.xml as scripts/test does).
    if [ "$jkills" -gt 0 ]; then
        if ! command -v java >/dev/null || ! command -v javac >/dev/null || ! command -v mvn >/dev/null; then
            log "failover: java, javac or mvn missing: the Java client's kill-daemon loop is skipped" | tee -a "$OUT/tables.txt"
        elif fo_java "$prefix" "$nprod" "$jkills" "${java_settings[@]}"; then :
        else log "failover: the Java client's loop failed" | tee -a "$OUT/tables.txt"; fi
    fi

    # Everything of this scenario stops before the suite's own measure (two cores).
    for p in "${FO_DPID[@]}" "${FO_EPID[@]}"; do kill -9 "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
    cleanup; PIDS=()
    if [ "${SUITE_MEASURE:-}" = 1 ]; then
        log "failover: the suite's own measure (failover_times, about 2 minutes)"
        local line
        (cd "$ROOT" && cargo test --release -p txn-tests --test etcd_cluster failover_times -- --ignored --nocapture) \
            >"$FO_D/suite-failover-times.log" 2>&1 || log "failover_times failed (see $FO_D/suite-failover-times.log)"
        line=$(grep -m1 "^failover over" "$FO_D/suite-failover-times.log" || echo "no result line")
        echo "suite (daemon's side: SIGKILL to the first InitProducerId a survivor serves, own ids, no client): $line" |
            tee -a "$OUT/tables.txt"
        echo "{\"scenario\":\"failover-suite\",\"line\":\"$line\"}" >>"$OUT/failover.json"
    fi
    log "failover: raw data in $FO_D (faults.jsonl, lr/p<i>.txt commits and events, lr/p<i>.log librdkafka," \
        "gaps-*.jsonl per fault and producer, daemon-<n>.err, etcd/m<i>.log)"
}

# fo_java PREFIX PRODUCERS KILLS [key=value...]: the Java client under the kill-daemon loop.
fo_java() {
    local prefix=$1 nprod=$2 kills=$3; shift 3
    local jars="${KAFKA_CLIENT_JARS:-$ROOT/target/kafka-tools-jars}" stamp prods=() i
    stamp="$(sha256sum "$ROOT/tests/java/pom.xml" | cut -d' ' -f1)"
    if [ "$(cat "$jars/.resolved" 2>/dev/null)" != "$stamp" ]; then
        log "resolving kafka-clients (tests/java/pom.xml) with Maven into $jars"
        rm -rf "$jars"
        mvn -q -B -f "$ROOT/tests/java/pom.xml" dependency:copy-dependencies -DoutputDirectory="$jars" || return 1
        echo "$stamp" >"$jars/.resolved"
    fi
    mkdir -p "$FO_D/java/classes"
    javac -d "$FO_D/java/classes" -cp "$jars/*" "$ROOT/bench/java/FailoverProducer.java" || return 1
    for ((i = 0; i < nprod; i++)); do prods+=("j$i"); done
    java -cp "$FO_D/java/classes:$jars/*" FailoverProducer "127.0.0.1:$FO_RP" failover "$nprod" "$prefix" \
        "$FO_D/java/stop" 10800 "$@" >"$FO_D/java/commits.txt" 2>"$FO_D/java/java.err" &
    local jpid=$!; PIDS+=("$jpid")
    log "failover: $nprod Java producers (kafka-clients $(ls "$jars" | sed -n 's/^kafka-clients-\(.*\)\.jar$/\1/p'), settings: ${*:-defaults})"
    FO_WAIT_PRODS=$(IFS=,; echo "${prods[*]}")
    fo_wait_commits 0 "$FO_WINDOW_S" "$FO_D/java/commits.txt"
    sleep "${FAILOVER_WARMUP_S:-10}"
    fo_wait_commits "$(fo_now)" "$FO_WINDOW_S" "$FO_D/java/commits.txt"
    fo_kill_daemon_loop java "$kills" "$prefix" "$FO_D/java/commits.txt" "${prods[@]}" || return 1
    touch "$FO_D/java/stop"
    local t=0
    while kill -0 "$jpid" 2>/dev/null && [ $t -lt 900 ]; do sleep 0.1; t=$((t + 1)); done
    kill -9 "$jpid" 2>/dev/null || true
    "$FO_PY" "$ROOT/bench/failover.py" report --faults "$FO_D/faults.jsonl" --client java --lease-ms "$LEASE_MS" \
        --extra "$*" --json-out "$OUT/failover.json" --gaps-out "$FO_D/gaps-java.jsonl" "$FO_D/java/commits.txt" |
        tee -a "$OUT/tables.txt"
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
[ ${#SCENARIOS[@]} -eq 0 ] && SCENARIOS=(matrix coordinator ceiling latency recovery kafka crabka etcd parking security plots)
for s in "${SCENARIOS[@]}"; do
    log "=== scenario $s"
    "scenario_$s" || { log "scenario $s failed"; cleanup; PIDS=(); }
done
log "results in $OUT"

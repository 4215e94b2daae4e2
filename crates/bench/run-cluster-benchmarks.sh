#!/usr/bin/env bash
# The three-broker loopback cluster benchmark of docs/benchmarks.md: three brokers (racks az1,
# az2, az3, each its own controller voter) on this machine, RF=3 topics, librdkafka clients.
# The remote WAL's buckets live, by default, on one S3 API server per rack (s3s-fs's storage:
# `ferry-s3-test-server`, built here, or the stock `s3s-fs` binary), started and stopped here,
# each broker reaching its rack's server through `remote.wal.s3.endpoints`; STORE=local puts
# them in local directories instead.
#
# For each topic kind (classic, and remote-WAL when the broker knows `remote.wal.enable`) it
# runs: produce acks=1, acks=all, and acks=all with big batches (batch.size=1000000,
# linger.ms=20); consume from the az2 replica (`client.rack=az2`); end-to-end latency with
# acks=all; and follower-read latency (acks=1, the leader pinned to az1, the consumer in az2).
# The kinds take turns run by run, and before each run the page cache is written back (and, as
# root, dropped). After each run it prints the cross-rack bytes per produced byte, the
# object-store requests (from the brokers' metrics), and the brokers' CPU seconds (per GB
# produced).
#
#   crates/bench/run-cluster-benchmarks.sh
#
# Environment: FERRY_BENCH_SKIP_BUILD=1, FERRY and BENCH (binaries), STORE (s3 or local; default
# s3), S3_SERVER (default: ferry-s3-test-server of this build, else s3s-fs; `s3s-fs` for the
# stock binary, installed by scripts/install-s3s-fs.sh when missing; or a path), PARTITIONS (default 12), RECORDS (default 500000 of 1.6 KB,
# ~0.8 GB per produce run), E2E_SECONDS (20), KINDS ("classic remote-wal"), RUNS (default
# "produce-acks1 produce-acksall produce-acksall-bigbatch consume-az2 e2e-acksall
# e2e-follower-acks1"; consume-az2 reads what produce-acks1 wrote; catchup-az3, not in the
# default list, stops az3 for CATCHUP_SECONDS (60) of CATCHUP_RATE (6000) records/s and
# measures its catch-up; restart-az3, not in the default list either, writes RECORDS with acks=all,
# restarts az3 cleanly (a step of a rolling restart) and measures until it is in sync and, after
# 3 x REBALANCE_CHECK_SECONDS, leads its preferred partitions again; REBALANCE_CHECK_SECONDS
# (default 300, Kafka's) is every broker's `leader.imbalance.check.interval.seconds`), OUT, KEEP_DATA=1 (keep the
# brokers' data and buckets, several GB, after the run), BROKER_CONFIG (extra lines for every
# broker's ferry.toml, e.g. '"remote.wal.upload.max.bytes" = 4194304').
# Not part of CI: never assert on wall-clock numbers in tests.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$(pwd)
PARTITIONS=${PARTITIONS:-12}
RECORDS=${RECORDS:-500000}
E2E_SECONDS=${E2E_SECONDS:-20}
CATCHUP_SECONDS=${CATCHUP_SECONDS:-60}
CATCHUP_RATE=${CATCHUP_RATE:-6000}
REBALANCE_CHECK_SECONDS=${REBALANCE_CHECK_SECONDS:-300}
KINDS=${KINDS:-classic remote-wal}
RUNS=${RUNS:-produce-acks1 produce-acksall produce-acksall-bigbatch consume-az2 e2e-acksall e2e-follower-acks1}
STORE=${STORE:-s3}
OUT=${OUT:-$(mktemp -d /tmp/ferry-cluster-bench.XXXXXX)}
mkdir -p "$OUT"
case "$STORE" in
s3 | local) ;;
*)
    echo "STORE must be s3 or local, not $STORE" >&2
    exit 2
    ;;
esac

if [ "${FERRY_BENCH_SKIP_BUILD:-0}" != 1 ]; then
    cargo build --release -p ferry -p ferry-bench -p ferry-s3-test-server
fi
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
FERRY=${FERRY:-$TARGET/release/ferry}
BENCH=${BENCH:-$TARGET/release/ferry-bench}
METRICS="python3 $ROOT/crates/bench/cluster_metrics.py"

free_port() { python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'; }
# wait_port PORT: until something accepts connections on 127.0.0.1:PORT (at most ~10 s).
wait_port() {
    for _ in $(seq 100); do
        if python3 -c 'import socket,sys;socket.create_connection(("127.0.0.1",int(sys.argv[1])),0.2)' "$1" 2>/dev/null; then
            return 0
        fi
        sleep 0.1
    done
    return 1
}

declare -a PORTS MPORTS PIDS S3PIDS S3PORTS
S3PIDS=()
# The data directories and buckets hold several GB per run: removed at exit (KEEP_DATA=1 keeps them).
# The S3 servers stop after the brokers, whose shutdown may still upload.
cleanup() {
    if [ ${#PIDS[@]} -gt 0 ]; then
        kill "${PIDS[@]}" 2>/dev/null || true
        wait "${PIDS[@]}" 2>/dev/null || true
    fi
    [ ${#S3PIDS[@]} -eq 0 ] || kill "${S3PIDS[@]}" 2>/dev/null || true
    wait 2>/dev/null || true
    [ "${KEEP_DATA:-0}" = 1 ] || rm -rf "$OUT"/data-az* "$OUT"/buckets "$OUT"/s3-az[123]
}
trap cleanup EXIT

VOTERS=""
for i in 1 2 3; do
    PORTS[$i]=$(free_port)
    MPORTS[$i]=$(free_port)
    VOTERS+="${VOTERS:+,}$i@127.0.0.1:$(free_port)"
done

S3_KEY=ferry-bench-access
S3_SECRET=ferry-bench-secret-key
STORE_DESC=""
WAL_CONFIG=""
if ! "$FERRY" config-reference 2>/dev/null | grep -q 'remote.wal.enable'; then
    KINDS=${KINDS/remote-wal/}
    STORE_DESC="none (this ferry has no remote WAL)"
elif [ "$STORE" = local ]; then
    mkdir -p "$OUT/buckets/az1" "$OUT/buckets/az2" "$OUT/buckets/az3"
    WAL_CONFIG="\"remote.wal.buckets\" = \"az1=$OUT/buckets/az1,az2=$OUT/buckets/az2,az3=$OUT/buckets/az3\""
    STORE_DESC="local directories under $OUT/buckets"
else
    # ferry-s3-test-server is s3s-fs's storage behind a listener with TCP_NODELAY; the stock
    # s3s-fs leaves Nagle on, so its GET responses stall on delayed ACKs that real S3 endpoints
    # do not cause (see crates/s3-test-server/Cargo.toml).
    S3_SERVER=${S3_SERVER:-}
    if [ -z "$S3_SERVER" ]; then
        S3_SERVER=$TARGET/release/ferry-s3-test-server
        if [ ! -x "$S3_SERVER" ]; then
            echo "note: $S3_SERVER not built; using the stock s3s-fs (Nagle on: slower GETs)" >&2
            S3_SERVER=s3s-fs
        fi
    fi
    if [ "$S3_SERVER" = s3s-fs ]; then
        S3_SERVER=$(command -v s3s-fs || echo "${CARGO_HOME:-$HOME/.cargo}/bin/s3s-fs")
        [ -x "$S3_SERVER" ] || "$ROOT/scripts/install-s3s-fs.sh"
    fi
    S3_NAME=$(basename "$S3_SERVER")
    # One server per rack, as one S3 Express One Zone endpoint per AZ; a ferry without
    # `remote.wal.s3.endpoints` (older builds, for before/after runs) gets one server for all.
    SERVERS="1 2 3"
    if ! "$FERRY" config-reference 2>/dev/null | grep -q 'remote.wal.s3.endpoints'; then
        SERVERS=1
    fi
    ENDPOINTS=""
    for i in $SERVERS; do
        S3PORTS[$i]=$(free_port)
        mkdir -p "$OUT/s3-az$i"
        "$S3_SERVER" --host 127.0.0.1 --port "${S3PORTS[$i]}" --access-key "$S3_KEY" \
            --secret-key "$S3_SECRET" "$OUT/s3-az$i" >"$OUT/s3-az$i.log" 2>&1 &
        S3PIDS+=($!)
        ENDPOINTS+="${ENDPOINTS:+,}az$i=http://127.0.0.1:${S3PORTS[$i]}"
    done
    for i in 1 2 3; do
        # s3s-fs's storage maps a bucket to a directory of its root.
        if [ "$SERVERS" = 1 ]; then mkdir -p "$OUT/s3-az1/ferry-wal-az$i"; else mkdir -p "$OUT/s3-az$i/ferry-wal-az$i"; fi
    done
    for i in $SERVERS; do
        wait_port "${S3PORTS[$i]}" || {
            echo "$S3_NAME of az$i did not start; see $OUT/s3-az$i.log" >&2
            exit 1
        }
    done
    if [ "$SERVERS" = 1 ]; then
        ENDPOINT_CONFIG="\"remote.wal.s3.endpoint\" = \"http://127.0.0.1:${S3PORTS[1]}\""
        STORE_DESC="s3 (one $S3_NAME for all racks: this ferry has no remote.wal.s3.endpoints)"
    else
        ENDPOINT_CONFIG="\"remote.wal.s3.endpoints\" = \"$ENDPOINTS\""
        STORE_DESC="s3 (one $S3_NAME per rack: $ENDPOINTS)"
    fi
    WAL_CONFIG="\"remote.wal.store\" = \"s3\"
\"remote.wal.buckets\" = \"az1=ferry-wal-az1,az2=ferry-wal-az2,az3=ferry-wal-az3\"
$ENDPOINT_CONFIG
\"remote.wal.s3.path.style\" = true
\"remote.wal.s3.access.key.id\" = \"$S3_KEY\"
\"remote.wal.s3.secret.access.key\" = \"$S3_SECRET\""
fi
echo "remote WAL store: $STORE_DESC" | tee -a "$OUT/summary.txt"

for i in 1 2 3; do
    cat >"$OUT/az$i.toml" <<EOF2
"node.id" = $i
"process.roles" = "broker,controller"
"controller.quorum.voters" = "$VOTERS"
"broker.rack" = "az$i"
"listeners" = "PLAINTEXT://127.0.0.1:${PORTS[$i]}"
"log.dirs" = "$OUT/data-az$i"
"metrics.address" = "127.0.0.1:${MPORTS[$i]}"
"min.insync.replicas" = 2
"leader.imbalance.check.interval.seconds" = $REBALANCE_CHECK_SECONDS
$WAL_CONFIG
${BROKER_CONFIG:-}
EOF2
    "$FERRY" serve --config "$OUT/az$i.toml" >"$OUT/az$i.log" 2>&1 &
    PIDS[$i]=$!
done
# start_broker I: starts broker I again (after a stop), appending to its log.
start_broker() {
    "$FERRY" serve --config "$OUT/az$1.toml" >>"$OUT/az$1.log" 2>&1 &
    PIDS[$1]=$!
    wait_port "${PORTS[$1]}"
}
BOOT="127.0.0.1:${PORTS[1]},127.0.0.1:${PORTS[2]},127.0.0.1:${PORTS[3]}"
MURLS=(az1=http://127.0.0.1:${MPORTS[1]}/metrics az2=http://127.0.0.1:${MPORTS[2]}/metrics az3=http://127.0.0.1:${MPORTS[3]}/metrics)
for _ in $(seq 120); do
    if $METRICS "${MURLS[@]}" >/dev/null 2>&1 && "$BENCH" produce --bootstrap "$BOOT" --topic warmup \
        --replication-factor 3 --records 10 >/dev/null 2>&1; then break; fi
    sleep 0.5
done

# cpu_ticks PID...: user+system CPU of these processes, in clock ticks (fields 14 and 15 of
# /proc/PID/stat, counted after the `(comm)` field, which may hold spaces).
cpu_ticks() {
    local total=0 pid stat
    for pid in "$@"; do
        stat=$(cat "/proc/$pid/stat" 2>/dev/null) || continue
        stat=${stat##*) }
        total=$((total + $(echo "$stat" | awk '{print $12 + $13}')))
    done
    echo "$total"
}
TICKS=$(getconf CLK_TCK)

# run LABEL PRODUCED_BYTES ferry-bench-args...
run() {
    local label=$1 produced=$2 before after cpu0 cpu1 s3cpu0 s3cpu1 stat0 stat1
    shift 2
    before=${RUN_BEFORE:-$($METRICS "${MURLS[@]}")}
    cpu0=$(cpu_ticks "${PIDS[@]}")
    s3cpu0=$(cpu_ticks "${S3PIDS[@]}")
    stat0=$(head -1 /proc/stat)
    if [ "$1" = wait-caught-up ]; then
        # Not a client: the time a restarted broker takes to hold every record again.
        echo "\$ (waiting for every partition to have its replicas in sync)" | tee -a "$OUT/summary.txt"
        local t0=$SECONDS
        wait_caught_up >"$OUT/$label.out" 2>&1 || echo "not caught up in 10 minutes" >>"$OUT/$label.out"
        echo "caught up in about $((SECONDS - t0)) s" >"$OUT/$label.time"
    elif [ "$1" = restart-az3 ]; then
        echo "\$ (az3 restarted cleanly; waiting for its replicas in sync, then 3 leader-imbalance checks)" | tee -a "$OUT/summary.txt"
        local t0=$SECONDS
        kill -TERM "${PIDS[3]}"
        wait "${PIDS[3]}" || true
        start_broker 3
        wait_caught_up >"$OUT/$label.out" 2>&1 || echo "not caught up in 10 minutes" >>"$OUT/$label.out"
        echo "in sync after about $((SECONDS - t0)) s" >"$OUT/$label.time"
        sleep $((3 * REBALANCE_CHECK_SECONDS))
    else
        echo "\$ ferry-bench $*" | tee -a "$OUT/summary.txt"
        /usr/bin/time -f "client cpu: user %U s sys %S s" -o "$OUT/$label.time" \
            "$BENCH" "$@" >"$OUT/$label.out" 2>"$OUT/$label.err" || echo "exit code $?" >>"$OUT/$label.out"
    fi
    stat1=$(head -1 /proc/stat) # the machine while the client ran (without the wait below)
    sleep 2 # let followers finish and the last uploads publish
    after=$($METRICS "${MURLS[@]}")
    cpu1=$(cpu_ticks "${PIDS[@]}")
    s3cpu1=$(cpu_ticks "${S3PIDS[@]}")
    {
        echo "[$label, store: $STORE_DESC]"
        cat "$OUT/$label.out" "$OUT/$label.time"
        python3 - "$produced" "$before" "$after" "$((cpu1 - cpu0))" "$((s3cpu1 - s3cpu0))" "$TICKS" "$stat0" "$stat1" <<'PY'
import sys
# /proc/stat's first line: user nice system idle iowait irq softirq steal ...
s0, s1 = ([int(x) for x in l.split()[1:9]] for l in sys.argv[7:9])
d_stat = [b - a for a, b in zip(s0, s1)]
total = sum(d_stat) or 1
print(f"  machine while the client ran: busy {100 * (total - d_stat[3] - d_stat[4]) / total:.0f} %, "
      f"idle {100 * d_stat[3] / total:.0f} %, iowait {100 * d_stat[4] / total:.0f} %, "
      f"softirq {100 * d_stat[6] / total:.0f} %")
produced = int(sys.argv[1])
parse = lambda s: dict(kv.split("=") for kv in s.split())
b, a = parse(sys.argv[2]), parse(sys.argv[3])
ticks = int(sys.argv[6])
broker_cpu, s3_cpu = int(sys.argv[4]) / ticks, int(sys.argv[5]) / ticks
d = {k: int(a[k]) - int(b.get(k, 0)) for k in a}
print("  metrics delta: " + " ".join(f"{k}={v}" for k, v in sorted(d.items()) if v))
# The window includes the 2 s wait after the client exits (followers catching up).
cpu = f"  broker cpu: {broker_cpu:.2f} s (three brokers)"
if s3_cpu:
    cpu += f"; S3 servers cpu: {s3_cpu:.2f} s"
if produced:
    cpu += f"; broker cpu per GB produced: {broker_cpu / (produced / 1e9):.1f} s"
print(cpu)
if produced:
    print(f"  cross-rack replication bytes per produced byte: {d.get('cross_rack_replication', 0) / produced:.4f}")
    cross = sum(v for k, v in d.items() if k.startswith('cross_rack_'))
    print(f"  cross-rack bytes of all kinds per produced byte: {cross / produced:.4f}")
    # The brokers' default price table (remote.wal.cost.*): S3 Express One Zone list prices,
    # and cross-AZ transfer at $0.01/GB charged on each side, so $0.02 per GB that crosses.
    gb = 1e9
    usd = (cross / gb * 0.02
           + sum(v for k, v in d.items() if k.startswith('objstore_put') and k.endswith('_requests')) / 1000 * 0.00113
           + sum(v for k, v in d.items() if k.startswith('objstore_get') and k.endswith('_requests')) / 1000 * 0.00003
           + d.get('objstore_upload_bytes', 0) / gb * 0.0032
           + d.get('objstore_download_bytes', 0) / gb * 0.0006)
    print(f"  estimated cost per GB produced: ${usd / (produced / gb):.4f}")
PY
        echo
    } | tee -a "$OUT/summary.txt"
}

# wait_caught_up: until no broker reports an under-replicated partition (at most 10 minutes).
wait_caught_up() {
    for _ in $(seq 1200); do
        if python3 - "${MURLS[@]}" <<'PY'; then return 0; fi
import sys, urllib.request
total = 0.0
for arg in sys.argv[1:]:
    body = urllib.request.urlopen(arg.split("=", 1)[1], timeout=5).read().decode()
    total += sum(float(l.rsplit(" ", 1)[1]) for l in body.splitlines()
                 if l.startswith("ferry_under_replicated_partitions "))
sys.exit(0 if total == 0 else 1)
PY
        sleep 0.5
    done
    return 1
}

# settle: before each run, write back what earlier runs left dirty and (as root) drop the page
# cache, so that no run pays for its predecessor's writeback or finds memory full of its pages.
# Without it the figures drift by a third over a session, against whichever kind runs later.
settle() {
    sync
    if [ -w /proc/sys/vm/drop_caches ]; then echo 1 >/proc/sys/vm/drop_caches; fi
    sleep 1
}

SIZE=1600
# run_step STEP KIND: one run of the list in RUNS for one topic kind.
run_step() {
    local step=$1 kind=$2 wal=()
    [ "$kind" = remote-wal ] && wal=(--topic-config remote.wal.enable=true)
    local T=(--replication-factor 3 --partitions "$PARTITIONS" --batch-size 32768 --linger-ms 5 --record-size $SIZE "${wal[@]}")
    # What today's producers can do for acks=all throughput: large batches, a little linger
    # (librdkafka's batch.size=1000000 and linger.ms=20, set through ferry-bench's own flags so
    # that its summary line shows them).
    local B=(--replication-factor 3 --partitions "$PARTITIONS" --batch-size 1000000 --linger-ms 20 --record-size $SIZE "${wal[@]}")
    local E=(--replication-factor 3 --partitions 1 --rate 2000 --seconds "$E2E_SECONDS" --record-size $SIZE --linger-ms 0 "${wal[@]}")
    case $step in
    produce-acks1)
        run "$kind-produce-acks1" $((RECORDS * SIZE)) produce --bootstrap "$BOOT" "${T[@]}" --topic "$kind-a1" --records "$RECORDS" --acks 1
        ;;
    produce-acksall)
        run "$kind-produce-acksall" $((RECORDS * SIZE)) produce --bootstrap "$BOOT" "${T[@]}" --topic "$kind-aall" --records "$RECORDS" --acks all
        ;;
    produce-acksall-bigbatch)
        run "$kind-produce-acksall-bigbatch" $((RECORDS * SIZE)) produce --bootstrap "$BOOT" "${B[@]}" --topic "$kind-aall-big" --records "$RECORDS" --acks all
        ;;
    consume-az2)
        run "$kind-consume-az2" 0 consume --bootstrap "$BOOT" --topic "$kind-a1" --records "$RECORDS" -X client.rack=az2
        ;;
    e2e-acksall)
        run "$kind-e2e-acksall" $((2000 * (E2E_SECONDS + 1) * SIZE)) e2e --bootstrap "$BOOT" "${E[@]}" --topic "$kind-e2e" --acks all
        ;;
    e2e-follower-acks1)
        # Follower reads: the leader pinned to broker 1 (az1); -X reaches the e2e consumer,
        # whose rack makes the leader send it to the az2 replica (KIP-392).
        run "$kind-e2e-follower-acks1" $((2000 * (E2E_SECONDS + 1) * SIZE)) e2e --bootstrap "$BOOT" "${E[@]}" --replica-assignment 1,2,3 \
            --topic "$kind-e2e-follower" --acks 1 -X client.rack=az2
        ;;
    catchup-az3)
        # A follower back from an outage: az3 stops, CATCHUP_SECONDS of acks=1 records at
        # CATCHUP_RATE per second (spread over every partition, so each object has a slice of
        # each) go to az1 and az2, az3 starts again. The measured window is its catch-up, until
        # every partition is in sync again; the bytes are per byte of the backlog.
        local topic="$kind-catchup" n=$((CATCHUP_RATE * CATCHUP_SECONDS))
        "$BENCH" produce --bootstrap "$BOOT" "${T[@]}" --topic "$topic" --records 100 --acks all >/dev/null 2>&1
        kill -TERM "${PIDS[3]}"
        wait "${PIDS[3]}" || true
        "$BENCH" produce --bootstrap "$BOOT" "${T[@]}" --topic "$topic" --records "$n" --rate "$CATCHUP_RATE" \
            --acks 1 -X sticky.partitioning.linger.ms=0 >"$OUT/$kind-catchup-backlog.out" 2>&1
        local -a LIVE=("${MURLS[0]}" "${MURLS[1]}")
        RUN_BEFORE=$($METRICS "${LIVE[@]}") # az3's counters start at 0 with it
        start_broker 3
        RUN_BEFORE=$RUN_BEFORE run "$kind-catchup-az3" $((n * SIZE)) wait-caught-up
        ;;
    restart-az3)
        # A step of a rolling restart: what a clean leader move costs. The leaderships az3 held
        # move to az1 and az2 and, once az3 is back in sync, back to az3 (preferred leaders);
        # each new leader republishes (remote.wal.failover.republish). Bytes are per byte of the
        # log.
        local topic="$kind-restart"
        "$BENCH" produce --bootstrap "$BOOT" "${T[@]}" --topic "$topic" --records "$RECORDS" \
            --acks all >"$OUT/$kind-restart-fill.out" 2>&1
        local -a LIVE=("${MURLS[0]}" "${MURLS[1]}")
        RUN_BEFORE=$($METRICS "${LIVE[@]}") # az3's counters start at 0 when it restarts
        RUN_BEFORE=$RUN_BEFORE run "$kind-restart-az3" $((RECORDS * SIZE)) restart-az3
        ;;
    *)
        echo "unknown run $step (RUNS)" >&2
        exit 2
        ;;
    esac
}

# The kinds take turns within each run (classic, remote WAL; then the next run), so that a drift
# of the machine's speed over the session does not fall on one kind.
for step in $RUNS; do
    for kind in $KINDS; do
        settle
        run_step "$step" "$kind"
    done
done
echo "remote WAL store: $STORE_DESC" | tee -a "$OUT/summary.txt"
echo "logs and summary: $OUT"

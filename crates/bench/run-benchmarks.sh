#!/usr/bin/env bash
# Runs the benchmark matrix of docs/benchmarks.md against a fresh single-node ferry on loopback.
#
#   crates/bench/run-benchmarks.sh            # build release binaries, run everything
#
# Environment:
#   FERRY_BENCH_SKIP_BUILD=1   use the existing target/release/{ferry,ferry-bench}
#   PARTITIONS                 partitions of the produce/consume topics (default 3)
#   RECORDS_1K / RECORDS_1600  records per produce run (defaults 2500000 / 2000000, ~2.5 / 3.2 GB)
#   E2E_SECONDS                measured seconds of each e2e run (default 20)
#   IDLE_WAIT_SECS             how long to wait for an idle machine before each run (default 300)
#   OUT                        directory for the logs (default: a new temp dir)
#
# Before each run it waits (up to IDLE_WAIT_SECS) until the machine's CPUs are >= 90% idle, so a
# concurrent build does not skew the numbers, and after each run it prints how the CPU time was
# split between the broker, the client and everything else. Not part of CI: never assert on
# wall-clock numbers in tests.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$(pwd)
PARTITIONS=${PARTITIONS:-3}
RECORDS_1K=${RECORDS_1K:-2500000}
RECORDS_1600=${RECORDS_1600:-2000000}
E2E_SECONDS=${E2E_SECONDS:-20}
IDLE_WAIT_SECS=${IDLE_WAIT_SECS:-300}
OUT=${OUT:-$(mktemp -d /tmp/ferry-bench.XXXXXX)}
mkdir -p "$OUT"
TICK=$(getconf CLK_TCK)

if [ "${FERRY_BENCH_SKIP_BUILD:-0}" != 1 ]; then
    cargo build --release -p ferry -p ferry-bench
fi
FERRY=$ROOT/target/release/ferry
BENCH=$ROOT/target/release/ferry-bench

free_port() { python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'; }
PORT=$(free_port)
MPORT=$(free_port)
cat >"$OUT/ferry.toml" <<EOF
"node.id" = 1
"listeners" = "PLAINTEXT://127.0.0.1:$PORT"
"log.dirs" = "$OUT/data"
"metrics.address" = "127.0.0.1:$MPORT"
EOF
BROKER_PID=
start_broker() {
    "$FERRY" serve --config "$OUT/ferry.toml" >>"$OUT/broker.log" 2>&1 &
    BROKER_PID=$!
    for _ in $(seq 50); do
        # connect and close without writing (a partial frame would be logged as a bad frame)
        (: </dev/tcp/127.0.0.1/"$PORT") 2>/dev/null && return 0
        sleep 0.1
    done
    echo "broker did not start, see $OUT/broker.log" >&2
    exit 1
}
# The broker must still be the one we started; if something stopped it, say so and restart it.
ensure_broker() {
    if ! kill -0 "$BROKER_PID" 2>/dev/null; then
        echo "warning: broker (pid $BROKER_PID) is gone, restarting it; see $OUT/broker.log" |
            tee -a "$OUT/summary.txt" >&2
        start_broker
    fi
}
start_broker
trap 'kill "$BROKER_PID" 2>/dev/null || true; wait "$BROKER_PID" 2>/dev/null || true' EXIT
BOOT=127.0.0.1:$PORT

# busy and total jiffies of all CPUs
cpu_jiffies() { awk '/^cpu /{idle=$5+$6; t=0; for(i=2;i<=NF;i++) t+=$i; print t-idle, t}' /proc/stat; }
proc_jiffies() { awk '{print $14+$15}' "/proc/$1/stat"; }

wait_idle() {
    local deadline=$((SECONDS + IDLE_WAIT_SECS)) b0 t0 b1 t1
    while :; do
        read -r b0 t0 < <(cpu_jiffies)
        sleep 2
        read -r b1 t1 < <(cpu_jiffies)
        if [ $(((b1 - b0) * 100)) -le $(((t1 - t0) * 10)) ]; then return 0; fi
        if [ "$SECONDS" -ge "$deadline" ]; then
            echo "warning: machine not idle after ${IDLE_WAIT_SECS}s, running anyway" >&2
            return 0
        fi
    done
}

# run LABEL ferry-bench-args...
run() {
    local label=$1 b0 t0 br0 b1 t1 br1 s e rc=0
    shift
    sync
    wait_idle
    ensure_broker
    echo "\$ ferry-bench $*" | tee -a "$OUT/summary.txt"
    read -r b0 t0 < <(cpu_jiffies)
    br0=$(proc_jiffies "$BROKER_PID")
    s=$(date +%s%N)
    /usr/bin/time -f "client cpu: user %U s sys %S s" -o "$OUT/$label.time" \
        "$BENCH" "$@" >"$OUT/$label.out" 2>"$OUT/$label.err" || rc=$?
    e=$(date +%s%N)
    read -r b1 t1 < <(cpu_jiffies)
    br1=$(proc_jiffies "$BROKER_PID")
    {
        cat "$OUT/$label.out"
        grep -v '^rdkafka' "$OUT/$label.err" || true
        echo "librdkafka log lines: $(grep -c '^rdkafka' "$OUT/$label.err" || true)"
        cat "$OUT/$label.time"
        awk -v s="$s" -v e="$e" -v b="$((b1 - b0))" -v br="$((br1 - br0))" -v tick="$TICK" \
            -v client="$(awk '{print $4+$7}' FS='[ ]' "$OUT/$label.time")" 'BEGIN {
                wall = (e - s) / 1e9; total = b / tick; broker = br / tick;
                printf "cpu split over %.1f s wall (2 cores = %.1f core-s): broker %.1f s, client %.1f s, other %.1f s\n",
                    wall, 2 * wall, broker, client, total - broker - client }'
        echo "exit code: $rc"
        echo
    } | tee -a "$OUT/summary.txt"
}

P=(--bootstrap "$BOOT" --partitions "$PARTITIONS" --batch-size 32768 --linger-ms 5 --compression none)
run produce-1k-acks1 produce "${P[@]}" --topic b1k --record-size 1000 --records "$RECORDS_1K" --acks 1
run produce-1k-acksall produce "${P[@]}" --topic b1k-all --record-size 1000 --records "$RECORDS_1K" --acks all
run produce-1600-acks1 produce "${P[@]}" --topic b1600 --record-size 1600 --records "$RECORDS_1600" --acks 1
run produce-1600-acksall produce "${P[@]}" --topic b1600-all --record-size 1600 --records "$RECORDS_1600" --acks all
run consume-1k consume --bootstrap "$BOOT" --topic b1k --records "$RECORDS_1K"
run consume-1600 consume --bootstrap "$BOOT" --topic b1600 --records "$RECORDS_1600"
E=(--bootstrap "$BOOT" --partitions 1 --rate 2000 --seconds "$E2E_SECONDS" --record-size 1600 --linger-ms 0)
run e2e-acks1 e2e "${E[@]}" --topic e2e-acks1 --acks 1
run e2e-acksall e2e "${E[@]}" --topic e2e-acksall --acks all

echo "logs and summary: $OUT"

#!/usr/bin/env bash
# The three-broker loopback cluster benchmark of docs/benchmarks.md: three brokers (racks az1,
# az2, az3, each its own controller voter) on this machine, RF=3 topics, librdkafka clients.
# For each topic kind (classic, and remote-WAL when the broker knows `remote.wal.enable`) it
# runs: produce acks=1 and acks=all, consume from the az2 replica (`client.rack=az2`), and
# end-to-end latency with acks=all; after each run it prints the cross-rack bytes per produced
# byte and the object-store requests, from the brokers' metrics.
#
#   crates/bench/run-cluster-benchmarks.sh
#
# Environment: FERRY_BENCH_SKIP_BUILD=1, PARTITIONS (default 12), RECORDS (default 500000 of
# 1.6 KB, ~0.8 GB per produce run), E2E_SECONDS (20), KINDS ("classic remote-wal"), OUT,
# KEEP_DATA=1 (keep the brokers' data and buckets, several GB, after the run).
# Not part of CI: never assert on wall-clock numbers in tests.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$(pwd)
PARTITIONS=${PARTITIONS:-12}
RECORDS=${RECORDS:-500000}
E2E_SECONDS=${E2E_SECONDS:-20}
KINDS=${KINDS:-classic remote-wal}
OUT=${OUT:-$(mktemp -d /tmp/ferry-cluster-bench.XXXXXX)}
mkdir -p "$OUT"

if [ "${FERRY_BENCH_SKIP_BUILD:-0}" != 1 ]; then
    cargo build --release -p ferry -p ferry-bench
fi
FERRY=${FERRY:-$ROOT/target/release/ferry}
BENCH=${BENCH:-$ROOT/target/release/ferry-bench}
METRICS="python3 $ROOT/crates/bench/cluster_metrics.py"

free_port() { python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'; }
VOTERS=""
declare -a PORTS MPORTS PIDS
for i in 1 2 3; do
    PORTS[$i]=$(free_port)
    MPORTS[$i]=$(free_port)
    VOTERS+="${VOTERS:+,}$i@127.0.0.1:$(free_port)"
done
WAL_CONFIG=""
if "$FERRY" config-reference 2>/dev/null | grep -q 'remote.wal.enable'; then
    mkdir -p "$OUT/buckets/az1" "$OUT/buckets/az2" "$OUT/buckets/az3"
    WAL_CONFIG="\"remote.wal.buckets\" = \"az1=$OUT/buckets/az1,az2=$OUT/buckets/az2,az3=$OUT/buckets/az3\""
else
    KINDS=${KINDS/remote-wal/}
fi
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
$WAL_CONFIG
EOF2
    "$FERRY" serve --config "$OUT/az$i.toml" >"$OUT/az$i.log" 2>&1 &
    PIDS[$i]=$!
done
# The data directories and buckets hold several GB per run: removed at exit (KEEP_DATA=1 keeps them).
cleanup() {
    kill "${PIDS[@]}" 2>/dev/null || true
    wait 2>/dev/null || true
    [ "${KEEP_DATA:-0}" = 1 ] || rm -rf "$OUT"/data-az* "$OUT"/buckets
}
trap cleanup EXIT
BOOT="127.0.0.1:${PORTS[1]},127.0.0.1:${PORTS[2]},127.0.0.1:${PORTS[3]}"
MURLS=(az1=http://127.0.0.1:${MPORTS[1]}/metrics az2=http://127.0.0.1:${MPORTS[2]}/metrics az3=http://127.0.0.1:${MPORTS[3]}/metrics)
for _ in $(seq 120); do
    if $METRICS "${MURLS[@]}" >/dev/null 2>&1 && "$BENCH" produce --bootstrap "$BOOT" --topic warmup \
        --replication-factor 3 --records 10 >/dev/null 2>&1; then break; fi
    sleep 0.5
done

# run LABEL PRODUCED_BYTES ferry-bench-args...
run() {
    local label=$1 produced=$2 before after
    shift 2
    before=$($METRICS "${MURLS[@]}")
    echo "\$ ferry-bench $*" | tee -a "$OUT/summary.txt"
    /usr/bin/time -f "client cpu: user %U s sys %S s" -o "$OUT/$label.time" \
        "$BENCH" "$@" >"$OUT/$label.out" 2>"$OUT/$label.err" || echo "exit code $?" >>"$OUT/$label.out"
    sleep 2 # let followers finish and the last uploads publish
    after=$($METRICS "${MURLS[@]}")
    {
        cat "$OUT/$label.out" "$OUT/$label.time"
        python3 - "$produced" "$before" "$after" <<'PY'
import sys
produced = int(sys.argv[1])
parse = lambda s: dict(kv.split("=") for kv in s.split())
b, a = parse(sys.argv[2]), parse(sys.argv[3])
d = {k: int(a[k]) - int(b.get(k, 0)) for k in a}
print("  metrics delta: " + " ".join(f"{k}={v}" for k, v in sorted(d.items()) if v))
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

SIZE=1600
for kind in $KINDS; do
    T=(--replication-factor 3 --partitions "$PARTITIONS" --batch-size 32768 --linger-ms 5 --record-size $SIZE)
    [ "$kind" = remote-wal ] && T+=(--topic-config remote.wal.enable=true)
    run "$kind-produce-acks1" $((RECORDS * SIZE)) produce --bootstrap "$BOOT" "${T[@]}" --topic "$kind-a1" --records "$RECORDS" --acks 1
    run "$kind-produce-acksall" $((RECORDS * SIZE)) produce --bootstrap "$BOOT" "${T[@]}" --topic "$kind-aall" --records "$RECORDS" --acks all
    run "$kind-consume-az2" 0 consume --bootstrap "$BOOT" --topic "$kind-a1" --records "$RECORDS" -X client.rack=az2
    E=(--replication-factor 3 --partitions 1 --rate 2000 --seconds "$E2E_SECONDS" --record-size $SIZE --linger-ms 0)
    [ "$kind" = remote-wal ] && E+=(--topic-config remote.wal.enable=true)
    run "$kind-e2e-acksall" $((2000 * (E2E_SECONDS + 1) * SIZE)) e2e --bootstrap "$BOOT" "${E[@]}" --topic "$kind-e2e" --acks all
done
echo "logs and summary: $OUT"

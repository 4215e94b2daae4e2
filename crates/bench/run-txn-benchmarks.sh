#!/usr/bin/env bash
# Transactions against idempotence on one fresh single-node ferry (issue 12's targets):
#   produce: a transactional producer committing every 100 ms vs an idempotent one (acks=all);
#   consume: read_committed vs read_uncommitted over the transactional topic.
# The two sides of each comparison run in turn, ROUNDS times, so the ratio of each pair holds
# when the machine's speed drifts. Not part of CI: never assert on wall-clock numbers in tests.
#
#   crates/bench/run-txn-benchmarks.sh
#
# Environment:
#   FERRY_BENCH_SKIP_BUILD=1   use the existing target/release/{ferry,ferry-bench}
#   RECORDS                    records per produce run (default 1000000, 1 KB each)
#   ROUNDS                     pairs of runs (default 3)
#   OUT                        directory for the logs (default: a new temp dir)
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$(pwd)
RECORDS=${RECORDS:-1000000}
ROUNDS=${ROUNDS:-3}
OUT=${OUT:-$(mktemp -d /tmp/ferry-txn-bench.XXXXXX)}
mkdir -p "$OUT"
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}

if [ "${FERRY_BENCH_SKIP_BUILD:-0}" != 1 ]; then
    cargo build --release -p ferry -p ferry-bench
fi
FERRY=${FERRY:-$TARGET/release/ferry}
BENCH=${BENCH:-$TARGET/release/ferry-bench}

free_port() { python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'; }
PORT=$(free_port)
cat >"$OUT/ferry.toml" <<EOF
"node.id" = 1
"listeners" = "PLAINTEXT://127.0.0.1:$PORT"
"log.dirs" = "$OUT/data"
EOF
"$FERRY" serve --config "$OUT/ferry.toml" >>"$OUT/broker.log" 2>&1 &
BROKER_PID=$!
# Each round writes 2 GB; drop the broker's data when done so repeated runs do not fill the disk.
trap 'kill $BROKER_PID 2>/dev/null; wait $BROKER_PID 2>/dev/null || true; rm -rf "$OUT/data"' EXIT
for _ in $(seq 50); do
    (: </dev/tcp/127.0.0.1/"$PORT") 2>/dev/null && break
    sleep 0.1
done
B=127.0.0.1:$PORT
COMMON=(--bootstrap "$B" --partitions 3 --record-size 1000 --records "$RECORDS" --acks all
        --batch-size 32768 --linger-ms 5 -X enable.idempotence=true)

mbps() { sed -n 's/.* = \([0-9.]*\) MB\/s.*/\1/p' | head -1; }
ratio() { python3 -c "print(f'{$1/$2:.3f}')"; }

echo "round  idempotent MB/s  transactional MB/s  ratio  |  read_uncommitted MB/s  read_committed MB/s  ratio"
for r in $(seq "$ROUNDS"); do
    # Write back the previous run's dirty pages now, not during the next run.
    sync
    idem=$("$BENCH" produce "${COMMON[@]}" --topic "idem-$r" 2>>"$OUT/bench.err" | tee -a "$OUT/runs.log" | mbps)
    sync
    txn=$("$BENCH" produce "${COMMON[@]}" --topic "txn-$r" --transactional-id "bench-$r" \
        --commit-interval-ms 100 2>>"$OUT/bench.err" | tee -a "$OUT/runs.log" | mbps)
    unc=$("$BENCH" consume --bootstrap "$B" --topic "txn-$r" --records "$RECORDS" \
        2>>"$OUT/bench.err" | tee -a "$OUT/runs.log" | mbps)
    com=$("$BENCH" consume --bootstrap "$B" --topic "txn-$r" --records "$RECORDS" \
        -X isolation.level=read_committed 2>>"$OUT/bench.err" | tee -a "$OUT/runs.log" | mbps)
    echo "$r      $idem            $txn               $(ratio "$txn" "$idem")  |  $unc                  $com                 $(ratio "$com" "$unc")"
done
echo "logs: $OUT"

#!/usr/bin/env bash
# Usage: scripts/bench-peer.sh FERRY 'PEER COMMAND' [ROUNDS]   (FERRY_BENCH: ferry-bench)
# One node against a peer Kafka-compatible broker (issue 16), in turn, each fresh per run:
# 1,000,000 records of 1.6 KB to 6 partitions (32 KB batches, linger 5 ms) at acks=1, then
# consumed from the beginning; then a fresh broker for acks=all. Prints throughput and the
# broker's CPU seconds per GB (from /proc). The peer command is run with `{port}` replaced by
# a free port on 127.0.0.1, from a fresh temporary directory, e.g. for nisshi (formerly tansu):
#   scripts/bench-peer.sh target/release/ferry \
#     '/path/to/nisshi broker --listener-url tcp://127.0.0.1:{port} --advertised-listener-url tcp://127.0.0.1:{port} --storage-engine memory://nisshi/'
set -uo pipefail
FERRY=$1; PEER=$2; ROUNDS=${3:-2}
BENCH=${FERRY_BENCH:-target/release/ferry-bench}
PARTS=6; RECS=1000000; SIZE=1600
cpu_ticks() { awk '{print $14 + $15}' /proc/$1/stat; }
run() {
  local kind=$1 acks=$2 dir; dir=$(mktemp -d /tmp/ferry-peer.XXXX)
  local port=$((20000 + RANDOM % 20000)) pid
  if [ "$kind" = ferry ]; then
    cat > "$dir/ferry.toml" <<T
"node.id" = 1
"listeners" = "PLAINTEXT://127.0.0.1:$port"
"log.dirs" = "$dir/data"
"metrics.address" = ""
T
    "$FERRY" serve --config "$dir/ferry.toml" > "$dir/log" 2>&1 &
    pid=$!
  else
    (cd "$dir" && exec ${PEER//\{port\}/$port}) > "$dir/log" 2>&1 &
    pid=$!
  fi
  for _ in $(seq 50); do (echo > /dev/tcp/127.0.0.1/$port) 2>/dev/null && break; sleep 0.1; done
  sleep 1
  local gb t0 t1 t2 p c=""
  gb=$(awk "BEGIN{print $RECS*$SIZE/1e9}")
  t0=$(cpu_ticks $pid)
  p=$(timeout 300 "$BENCH" produce --bootstrap 127.0.0.1:$port --partitions $PARTS --topic peer --record-size $SIZE --records $RECS --acks "$acks" --batch-size 32768 --linger-ms 5 --compression none 2>&1 | grep -oE "[0-9.]+ MB/s" | head -1)
  t1=$(cpu_ticks $pid)
  if [ "$acks" = 1 ]; then
    c=$(timeout 300 "$BENCH" consume --bootstrap 127.0.0.1:$port --topic peer --records $RECS 2>&1 | grep -oE "[0-9.]+ MB/s" | head -1)
  fi
  t2=$(cpu_ticks $pid)
  kill $pid; wait $pid 2>/dev/null
  rm -rf "$dir"
  echo "$kind acks=$acks: produce ${p:-failed} ($(awk "BEGIN{printf \"%.2f\", ($t1-$t0)/100/$gb}") broker s/GB)${c:+, consume $c ($(awk "BEGIN{printf \"%.2f\", ($t2-$t1)/100/$gb}") broker s/GB)}"
}
for _ in $(seq "$ROUNDS"); do
  for kind in ferry peer; do run $kind 1; run $kind all; done
done

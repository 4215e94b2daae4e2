#!/usr/bin/env bash
# Usage: scripts/ab-plaintext.sh NEW_FERRY OLD_FERRY [ROUNDS]   (FERRY_BENCH: the ferry-bench binary)
# Each run starts a fresh one-node broker in a temporary directory, produces 1.5 GB of 1 KB
# records to 3 partitions (acks=1, 32 KB batches, linger 5 ms) and consumes them back.
# A/B: produce and consume throughput of two ferry binaries on a PLAINTEXT listener, in turn,
# with the broker's CPU seconds per GB of each phase (from /proc/PID/stat).
# A_CONFIG / B_CONFIG: extra lines for that broker's config file (e.g. '"fetch.sendfile.enable" = true').
set -euo pipefail
A=$1; B=$2; ROUNDS=${3:-4}
cpu_ticks() { awk '{print $14 + $15}' /proc/$1/stat; }
run() {
  local label=$1 bin=$2 extra=$3 dir; dir=$(mktemp -d /tmp/ferry-ab.XXXX)
  local port=$((20000 + RANDOM % 20000))
  cat > $dir/ferry.toml <<T
"node.id" = 1
"listeners" = "PLAINTEXT://127.0.0.1:$port"
"log.dirs" = "$dir/data"
$extra
T
  $bin serve --config $dir/ferry.toml > $dir/log 2>&1 &
  local pid=$!
  for i in $(seq 50); do (echo > /dev/tcp/127.0.0.1/$port) 2>/dev/null && break; sleep 0.1; done
  sleep 0.5
  local t0=$(cpu_ticks $pid)
  local p=$(${FERRY_BENCH:-target/release/ferry-bench} produce --bootstrap 127.0.0.1:$port --partitions 3 --topic b1k --record-size 1000 --records 1500000 --acks 1 --batch-size 32768 --linger-ms 5 --compression none 2>&1 | grep -oE "[0-9.]+ MB/s" | head -1)
  local t1=$(cpu_ticks $pid)
  local c=$(${FERRY_BENCH:-target/release/ferry-bench} consume --bootstrap 127.0.0.1:$port --topic b1k --records 1500000 2>&1 | grep -oE "[0-9.]+ MB/s" | head -1)
  local t2=$(cpu_ticks $pid)
  kill $pid; wait $pid 2>/dev/null || true
  rm -rf $dir
  # 1.5 GB per phase; ticks are 1/100 s.
  local tick=$(getconf CLK_TCK)
  echo "$label produce $p ($(awk "BEGIN{printf \"%.2f\", ($t1-$t0)/$tick/1.5}") broker s/GB) consume $c ($(awk "BEGIN{printf \"%.2f\", ($t2-$t1)/$tick/1.5}") broker s/GB)"
}
echo "A = $A"; echo "B = $B"
for r in $(seq $ROUNDS); do run A $A "${A_CONFIG:-}"; run B $B "${B_CONFIG:-}"; done

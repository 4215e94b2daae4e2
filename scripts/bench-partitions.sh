#!/usr/bin/env bash
# Usage: scripts/bench-partitions.sh FERRY [ROUNDS] [PARTITIONS...]   (FERRY_BENCH: ferry-bench)
# Many partitions on one node (issue 16): for each partition count in turn (default 6 and
# 1000), a fresh one-node broker in a temporary directory, the topic created (timed), then
# 1,000,000 records of 1.6 KB produced (acks=1, 32 KB batches, linger 5 ms) and consumed back
# from the beginning; prints throughput, the broker's CPU seconds per GB of each phase and its
# RSS at the end; with /usr/bin/time, also the producer's and the consumer's CPU seconds per GB,
# the consumer's page faults and both clients' voluntary context switches.
# BROKER_CONFIG: extra lines for the broker's config file (e.g. '"fetch.max.bytes" = 57671680').
set -euo pipefail
BIN=$1; ROUNDS=${2:-2}; shift $(( $# >= 2 ? 2 : $# ))
COUNTS=${*:-"6 1000"}
BENCH=${FERRY_BENCH:-target/release/ferry-bench}
RECORDS=${RECORDS:-1000000}; SIZE=1600
cpu_ticks() { awk '{print $14 + $15}' /proc/$1/stat; }
run() {
  local parts=$1 dir; dir=$(mktemp -d /tmp/ferry-parts.XXXX)
  local port=$((20000 + RANDOM % 20000))
  cat > $dir/ferry.toml <<T
"node.id" = 1
"listeners" = "PLAINTEXT://127.0.0.1:$port"
"log.dirs" = "$dir/data"
"metrics.address" = ""
${BROKER_CONFIG:-}
T
  $BIN serve --config $dir/ferry.toml > $dir/log 2>&1 &
  local pid=$!
  for i in $(seq 50); do (echo > /dev/tcp/127.0.0.1/$port) 2>/dev/null && break; sleep 0.1; done
  sleep 0.5
  # The topic is created first (with 1,000 records), so its creation is timed on its own.
  local c0; c0=$(date +%s.%N)
  $BENCH produce --bootstrap 127.0.0.1:$port --partitions $parts --topic parts --record-size $SIZE --records 1000 --acks 1 --batch-size 32768 --linger-ms 5 --compression none > /dev/null 2>&1
  local created; created=$(awk "BEGIN{printf \"%.1f\", $(date +%s.%N) - $c0}")
  local t0; t0=$(cpu_ticks $pid)
  local ptimer=(); [ -x /usr/bin/time ] && ptimer=(/usr/bin/time -o "$dir/producer-time" -f "%U %S %c %w")
  local p; p=$("${ptimer[@]}" $BENCH produce --bootstrap 127.0.0.1:$port --partitions $parts --topic parts --record-size $SIZE --records $RECORDS --acks 1 --batch-size 32768 --linger-ms 5 --compression none 2>&1 | grep -oE "[0-9.]+ MB/s" | head -1)
  local t1; t1=$(cpu_ticks $pid)
  local timer=(); [ -x /usr/bin/time ] && timer=(/usr/bin/time -o "$dir/consumer-time" -f "%U %S %R %c %w")
  local c; c=$("${timer[@]}" $BENCH consume --bootstrap 127.0.0.1:$port --topic parts --records $((RECORDS + 1000)) 2>&1 | grep -oE "[0-9.]+ MB/s" | head -1)
  local t2; t2=$(cpu_ticks $pid)
  local rss; rss=$(awk '/VmRSS/{print $2/1024 " MB"}' /proc/$pid/status)
  kill $pid; wait $pid 2>/dev/null || true
  local tick; tick=$(getconf CLK_TCK)
  local gb; gb=$(awk "BEGIN{print $RECORDS*$SIZE/1e9}")
  # The clients' CPU per GB and voluntary context switches (their threads handing work to each
  # other), so that a change that only moves work to the client shows.
  local client="" producer=""
  [ -s "$dir/consumer-time" ] && client=$(awk -v gb="$gb" '{printf ", consumer %.2f s/GB with %d page faults, %d switches", ($1 + $2) / gb, $3, $5}' "$dir/consumer-time")
  [ -s "$dir/producer-time" ] && producer=$(awk -v gb="$gb" '{printf ", producer %.2f s/GB, %d switches", ($1 + $2) / gb, $4}' "$dir/producer-time")
  rm -rf $dir
  echo "partitions $parts: created in ${created}s, produce $p ($(awk "BEGIN{printf \"%.2f\", ($t1-$t0)/$tick/$gb}") broker s/GB${producer}) consume $c ($(awk "BEGIN{printf \"%.2f\", ($t2-$t1)/$tick/$gb}") broker s/GB${client}) rss $rss"
}
for r in $(seq $ROUNDS); do for n in $COUNTS; do run $n; done; done

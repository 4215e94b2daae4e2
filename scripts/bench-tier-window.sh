#!/usr/bin/env bash
# Usage: scripts/bench-tier-window.sh [FERRY] [RECORDS]   (FERRY_BENCH: the ferry-bench binary)
# Several GB through a small local window (issue 14): RECORDS (default 4,000,000) records of
# 1 KB into a tiered topic (3 partitions, 64 MiB segments, local.retention.bytes 64 MiB) on one
# broker with a directory tier; prints the produce rate, the largest and last size of the local
# data directory, the tier size, and the rate of a consumer reading everything from offset 0.
set -e
FERRY=${1:-target/release/ferry}; BENCH=${FERRY_BENCH:-target/release/ferry-bench}; RECORDS=${2:-4000000}
dir=$(mktemp -d /tmp/bounded.XXXX); port=$((20000 + RANDOM % 20000)); mport=$((port+1))
cat > $dir/ferry.toml <<T
"node.id" = 1
"listeners" = "PLAINTEXT://127.0.0.1:$port"
"log.dirs" = "$dir/data"
"metrics.address" = "127.0.0.1:$mport"
"remote.log.storage.system.enable" = true
"remote.log.manager.task.interval.ms" = 1000
"log.retention.check.interval.ms" = 1000
"remote.log.storage.local.dir" = "$dir/tier"
T
$FERRY serve --config $dir/ferry.toml > $dir/log 2>&1 &
pid=$!
for _ in $(seq 100); do (echo > /dev/tcp/127.0.0.1/$port) 2>/dev/null && break; sleep 0.1; done
sleep 0.5
( while kill -0 $pid 2>/dev/null; do du -sb $dir/data | awk '{print $1}' >> $dir/du; sleep 1; done ) &
$BENCH produce --bootstrap 127.0.0.1:$port --partitions 3 --topic t --record-size 1000 --records $RECORDS --acks 1 --batch-size 32768 --linger-ms 5 --compression none --topic-config segment.bytes=67108864 --topic-config remote.storage.enable=true --topic-config local.retention.bytes=67108864 2>&1 | grep -oE "[0-9.]+ MB/s" | head -1
sleep 8
echo "max local bytes during the run: $(sort -n $dir/du | tail -1); at the end: $(du -sb $dir/data | awk '{print $1}'); tier: $(du -sb $dir/tier | awk '{print $1}')"
c=$($BENCH consume --bootstrap 127.0.0.1:$port --topic t --records $RECORDS 2>&1 | grep -oE "[0-9.]+ MB/s|records[^,]*" | head -2 | tr '\n' ' ')
echo "consume from offset 0: $c"
kill $pid; wait $pid 2>/dev/null || true
rm -rf $dir

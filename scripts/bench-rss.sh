#!/usr/bin/env bash
# Usage: scripts/bench-rss.sh FERRY [GB]   (FERRY_BENCH: ferry-bench)
# Memory that does not grow with retained data (issue 16): a fresh one-node broker receives
# 1 GB of 1.6 KB records on 6 partitions (acks=1, 32 KB batches, default 1 GiB segments),
# then GB-1 more; prints its RSS after the first GB and at the end.
set -euo pipefail
BIN=$1; GB=${2:-20}
BENCH=${FERRY_BENCH:-target/release/ferry-bench}
dir=$(mktemp -d /tmp/ferry-rss.XXXX); port=$((20000 + RANDOM % 20000))
cat > $dir/ferry.toml <<T
"node.id" = 1
"listeners" = "PLAINTEXT://127.0.0.1:$port"
"log.dirs" = "$dir/data"
"metrics.address" = ""
T
$BIN serve --config $dir/ferry.toml > $dir/log 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null; rm -rf $dir' EXIT
for i in $(seq 50); do (echo > /dev/tcp/127.0.0.1/$port) 2>/dev/null && break; sleep 0.1; done
sleep 0.5
rss() { awk '/VmRSS/{printf "%.1f MB", $2/1024}' /proc/$pid/status; }
produce() { $BENCH produce --bootstrap 127.0.0.1:$port --partitions 6 --topic rss --record-size 1600 --records $1 --acks 1 --batch-size 32768 --linger-ms 5 --compression none 2>&1 | grep -oE "[0-9.]+ MB/s" | head -1; }
per_gb=625000
echo "after 1 GB: $(produce $per_gb) RSS $(rss)"
for g in $(seq 2 $GB); do
  r=$(produce $per_gb)
  if (( g % 5 == 0 || g == GB )); then echo "after $g GB: $r RSS $(rss), segments $(ls $dir/data/rss-*/ | grep -c '\.log$')"; fi
done

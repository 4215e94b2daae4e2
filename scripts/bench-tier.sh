#!/usr/bin/env bash
# Usage: scripts/bench-tier.sh FERRY [ROUNDS] [STORE]   (FERRY_BENCH: the ferry-bench binary)
# The long-term tier's targets (issue 14), on one broker, in turn per round:
#   local: a plain topic; 1 GB of 1 KB records produced (3 partitions, acks=1, 32 KB batches,
#          linger 5 ms), then consumed from the beginning, all from the local log;
#   tiered: the same into a topic with remote.storage.enable=true and local.retention.bytes of
#          one 64 MiB segment per partition; once the tier holds every closed segment and the
#          disk kept only the last ones, consumed from the beginning: ~90 % from the tier.
# Prints produce and consume MB/s and the broker's CPU s/GB per phase. STORE: `local` (a
# directory, default) or `s3` (ferry-s3-test-server next to FERRY, or s3s-fs, on loopback).
set -euo pipefail
FERRY=$1; ROUNDS=${2:-2}; STORE=${3:-local}
BENCH=${FERRY_BENCH:-target/release/ferry-bench}
RECORDS=1000000
cpu_ticks() { awk '{print $14 + $15}' /proc/$1/stat; }
tick=$(getconf CLK_TCK)
per_gb() { awk "BEGIN{printf \"%.2f\", ($2-$1)/$tick/1.0}"; }

start_s3() {
  local root=$1 port=$2 bin
  bin="$(dirname "$FERRY")/ferry-s3-test-server"
  [ -x "$bin" ] || bin=$(command -v s3s-fs || echo "$HOME/.cargo/bin/s3s-fs")
  mkdir -p "$root/tier"
  "$bin" --host 127.0.0.1 --port "$port" --access-key bench --secret-key bench-secret-key \
    "$root" > /dev/null 2>&1 &
  echo $!
}

run() {
  local label=$1 dir port mport s3pid="" s3port
  dir=$(mktemp -d /tmp/ferry-tier-bench.XXXX)
  port=$((20000 + RANDOM % 20000)); mport=$((port + 1))
  cat > "$dir/ferry.toml" <<T
"node.id" = 1
"listeners" = "PLAINTEXT://127.0.0.1:$port"
"log.dirs" = "$dir/data"
"metrics.address" = "127.0.0.1:$mport"
"remote.log.storage.system.enable" = true
"remote.log.manager.task.interval.ms" = 1000
"log.retention.check.interval.ms" = 1000
T
  if [ "$STORE" = s3 ]; then
    s3port=$((port + 2))
    s3pid=$(start_s3 "$dir/s3" "$s3port")
    cat >> "$dir/ferry.toml" <<T
"remote.log.storage.type" = "s3"
"remote.log.storage.s3.bucket" = "tier"
"remote.log.storage.s3.endpoint" = "http://127.0.0.1:$s3port"
"remote.log.storage.s3.path.style" = true
"remote.log.storage.s3.access.key.id" = "bench"
"remote.log.storage.s3.secret.access.key" = "bench-secret-key"
T
  else
    echo "\"remote.log.storage.local.dir\" = \"$dir/tier\"" >> "$dir/ferry.toml"
  fi
  "$FERRY" serve --config "$dir/ferry.toml" > "$dir/log" 2>&1 &
  local pid=$!
  for _ in $(seq 100); do (echo > /dev/tcp/127.0.0.1/$port) 2>/dev/null && break; sleep 0.1; done
  sleep 0.5
  local configs=(--topic-config segment.bytes=67108864)
  if [ "$label" = tiered ]; then
    configs+=(--topic-config remote.storage.enable=true --topic-config local.retention.bytes=67108864)
  fi
  local t0 t1 t2 p c
  t0=$(cpu_ticks $pid)
  p=$("$BENCH" produce --bootstrap 127.0.0.1:$port --partitions 3 --topic t --record-size 1000 \
      --records $RECORDS --acks 1 --batch-size 32768 --linger-ms 5 --compression none \
      "${configs[@]}" 2>&1 | grep -oE "[0-9.]+ MB/s" | head -1)
  t1=$(cpu_ticks $pid)
  if [ "$label" = tiered ]; then
    # Until the disk keeps about one segment per partition (the rest went to the tier).
    for _ in $(seq 600); do
      local local_bytes
      local_bytes=$(du -sb "$dir/data"/t-* | awk '{s+=$1} END {print s}')
      [ "$local_bytes" -lt $((6 * 67108864)) ] && break
      sleep 0.5
    done
  fi
  sync
  local t1b; t1b=$(cpu_ticks $pid)
  c=$("$BENCH" consume --bootstrap 127.0.0.1:$port --topic t --records $RECORDS 2>&1 \
      | grep -oE "[0-9.]+ MB/s" | head -1)
  t2=$(cpu_ticks $pid)
  local copied
  copied=$(curl -s "http://127.0.0.1:$mport/metrics" | awk '/^ferry_tier_bytes_copied_total/ {print $2}')
  kill $pid; wait $pid 2>/dev/null || true
  [ -n "$s3pid" ] && { kill "$s3pid"; wait "$s3pid" 2>/dev/null || true; }
  echo "$label produce $p ($(per_gb $t0 $t1) broker s/GB) consume $c ($(per_gb $t1b $t2) broker s/GB) tier bytes copied ${copied:-0}"
  rm -rf "$dir"
}
echo "FERRY = $FERRY, store = $STORE"
for _ in $(seq "$ROUNDS"); do run local; run tiered; done

#!/usr/bin/env bash
# Starts the three-AZ cluster of config/cluster-az{1,2,3}.toml on loopback (racks az1, az2, az3;
# Kafka listeners 127.0.0.1:9091-9093, metrics 127.0.0.1:9301-9303), with data and logs under
# ./data-az1..3. Ctrl-C (or SIGTERM) stops the three brokers with a controlled shutdown each.
#
#   scripts/local-cluster.sh            # release build, then run in the foreground
#   FERRY_BIN=target/debug/ferry scripts/local-cluster.sh
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ -z "${FERRY_BIN:-}" ]]; then
    cargo build --release -p ferry
    FERRY_BIN=target/release/ferry
fi
pids=()
stop() {
    for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
    wait
}
trap stop INT TERM
for i in 1 2 3; do
    mkdir -p "data-az$i"
    "$FERRY_BIN" serve --config "config/cluster-az$i.toml" >"data-az$i/ferry.log" 2>&1 &
    pids+=($!)
    echo "broker $i (az$i): pid $!, 127.0.0.1:909$i, log data-az$i/ferry.log"
done
echo "bootstrap.servers=127.0.0.1:9091,127.0.0.1:9092,127.0.0.1:9093 (Ctrl-C stops the cluster)"
wait

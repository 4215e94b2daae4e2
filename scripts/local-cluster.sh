#!/usr/bin/env bash
# Starts the three-AZ cluster of config/cluster-az{1,2,3}.toml on loopback (racks az1, az2, az3;
# Kafka listeners 127.0.0.1:9091-9093, metrics 127.0.0.1:9301-9303), with data and logs under
# ./data-az1..3, and the remote WAL's per-AZ S3 servers the configs name: one per AZ on
# 127.0.0.1:9011-9013, bucket ferry-wal-azN under ./data-s3-azN (`ferry-s3-test-server`, s3s-fs's
# storage with TCP_NODELAY, when this script builds it; else the stock `s3s-fs`, installed by
# scripts/install-s3s-fs.sh when missing; S3_SERVER=PATH picks one). Ctrl-C (or SIGTERM) stops
# the three brokers with a controlled shutdown each, then the S3 servers.
#
#   scripts/local-cluster.sh            # release build, then run in the foreground
#   FERRY_BIN=target/debug/ferry scripts/local-cluster.sh
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ -z "${FERRY_BIN:-}" ]]; then
    cargo build --release -p ferry -p ferry-s3-test-server
    FERRY_BIN=${CARGO_TARGET_DIR:-target}/release/ferry
    S3_SERVER=${S3_SERVER:-${CARGO_TARGET_DIR:-target}/release/ferry-s3-test-server}
fi
if [[ -z "${S3_SERVER:-}" ]]; then
    S3_SERVER=$(command -v s3s-fs || echo "${CARGO_HOME:-$HOME/.cargo}/bin/s3s-fs")
    [[ -x "$S3_SERVER" ]] || scripts/install-s3s-fs.sh
fi
pids=()
s3_pids=()
stop() {
    for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
    wait "${pids[@]}" 2>/dev/null || true
    for pid in "${s3_pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
    wait
}
trap stop INT TERM
for i in 1 2 3; do
    # s3s-fs's storage maps a bucket to a directory of its root; the keys are the configs'.
    mkdir -p "data-s3-az$i/ferry-wal-az$i"
    "$S3_SERVER" --host 127.0.0.1 --port "901$i" --access-key ferry --secret-key ferry-secret \
        "data-s3-az$i" >"data-s3-az$i.log" 2>&1 &
    s3_pids+=($!)
    echo "S3 server of az$i ($(basename "$S3_SERVER")): pid $!, http://127.0.0.1:901$i, bucket ferry-wal-az$i in data-s3-az$i"
done
for i in 1 2 3; do
    mkdir -p "data-az$i"
    "$FERRY_BIN" serve --config "config/cluster-az$i.toml" >"data-az$i/ferry.log" 2>&1 &
    pids+=($!)
    echo "broker $i (az$i): pid $!, 127.0.0.1:909$i, log data-az$i/ferry.log"
done
echo "bootstrap.servers=127.0.0.1:9091,127.0.0.1:9092,127.0.0.1:9093 (Ctrl-C stops the cluster)"
wait

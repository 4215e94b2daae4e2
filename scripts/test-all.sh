#!/usr/bin/env bash
# Runs ferry's whole test suite: rustfmt and clippy checks, Rust unit tests, then the end-to-end suites (tests/e2e) against
# the built `ferry` binary with real Kafka clients (confluent-kafka/librdkafka, kafka-python,
# kafkajs, kcat).
#
# Meant for a fresh Debian machine as root (CI runs it through .ci/run). Installs what the tests
# need, idempotently: kcat (apt), a Python venv at .venv, node modules in tests/e2e/js, and the
# s3s-fs S3 test server (cargo install).
#
# Environment:
#   FERRY_BIN          broker binary for the e2e suites (default: target/debug/ferry, built here)
#   FERRY_SKIP_SETUP=1 skip the install steps (for quick reruns on a prepared machine)
#   FERRY_SKIP_CARGO=1 skip cargo fmt / clippy / test / build / bench --no-run (e2e only)
#   PYTEST_ARGS        extra arguments for pytest (e.g. "-k admin -x")
#   FERRY_SKIP_CLUSTER_E2E=1 skip the second e2e pass against three-broker clusters
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)

log() { printf '\n==> %s\n' "$*"; }

as_root() {
    if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi
}

setup_apt() {
    local missing=()
    command -v kcat >/dev/null 2>&1 || missing+=(kcat)
    # The TLS tests make their CA and certificates with the openssl CLI.
    command -v openssl >/dev/null 2>&1 || missing+=(openssl)
    if [ ${#missing[@]} -gt 0 ]; then
        log "apt-get install ${missing[*]}"
        export DEBIAN_FRONTEND=noninteractive
        as_root apt-get update -qq >/dev/null
        as_root apt-get install -y -qq "${missing[@]}" >/dev/null
    fi
}

setup_python() {
    local req=tests/e2e/requirements.txt stamp=.venv/.requirements.sha256 want
    want=$(sha256sum "$req" | cut -d' ' -f1)
    if [ ! -x .venv/bin/python ]; then
        log "creating .venv"
        python3 -m venv .venv
    fi
    if [ "$(cat "$stamp" 2>/dev/null || true)" != "$want" ]; then
        log "pip install -r $req"
        .venv/bin/python -m pip install -q --disable-pip-version-check -r "$req"
        echo "$want" >"$stamp"
    fi
}

setup_node() {
    local dir=tests/e2e/js want
    if ! command -v npm >/dev/null 2>&1; then
        log "apt-get install nodejs npm"
        export DEBIAN_FRONTEND=noninteractive
        as_root apt-get update -qq >/dev/null
        as_root apt-get install -y -qq nodejs npm >/dev/null
    fi
    if [ -f "$dir/package-lock.json" ]; then
        want=$(sha256sum "$dir/package-lock.json" | cut -d' ' -f1)
        if [ "$(cat "$dir/node_modules/.ferry-lock.sha256" 2>/dev/null || true)" != "$want" ]; then
            log "npm ci ($dir)"
            (cd "$dir" && npm ci --no-audit --no-fund --loglevel=error)
            echo "$want" >"$dir/node_modules/.ferry-lock.sha256"
        fi
    else
        log "npm install ($dir)"
        (cd "$dir" && npm install --no-audit --no-fund --loglevel=error)
    fi
}

if [ "${FERRY_SKIP_SETUP:-0}" != 1 ]; then
    setup_apt
    setup_python
    setup_node
    # The S3 API server the objstore crate's S3 backend tests start on loopback.
    log "scripts/install-s3s-fs.sh"
    "$ROOT/scripts/install-s3s-fs.sh"
fi
export PATH="${CARGO_HOME:-$HOME/.cargo}/bin:$PATH"

if [ "${FERRY_SKIP_CARGO:-0}" != 1 ]; then
    # Style and lints first: clippy.toml holds the clock seam (no raw system clock outside
    # ferry_common's Clock), so a violation fails the suite like a failing test.
    if ! cargo fmt --version >/dev/null 2>&1 || ! cargo clippy --version >/dev/null 2>&1; then
        log "rustup component add rustfmt clippy"
        rustup component add rustfmt clippy
    fi
    log "cargo fmt --all --check"
    cargo fmt --all --check
    log "cargo clippy --workspace --all-targets -- -D warnings"
    cargo clippy --workspace --all-targets -- -D warnings
    if cargo nextest --version >/dev/null 2>&1; then
        log "cargo nextest run --workspace"
        # --no-tests=pass: a crate without tests yet is not a failure of the suite.
        cargo nextest run --workspace --no-tests=pass
    else
        log "cargo test --workspace"
        cargo test --workspace
    fi
    log "cargo build --bin ferry"
    cargo build --bin ferry
    # The micro-benchmarks are not run here (timings on a shared machine are no test), only
    # built, so that they keep compiling.
    log "cargo bench -p ferry-benches --no-run"
    cargo bench -p ferry-benches --no-run
fi

export FERRY_BIN="${FERRY_BIN:-$ROOT/target/debug/ferry}"
case "$FERRY_BIN" in /*) ;; *) FERRY_BIN="$ROOT/$FERRY_BIN" ;; esac
[ -x "$FERRY_BIN" ] || { echo "FERRY_BIN=$FERRY_BIN is not an executable" >&2; exit 1; }

# Client suites that also run with the `broker` fixture as a three-broker cluster
# (FERRY_E2E_CLUSTER=3); tests marked single_node are skipped there.
CLUSTER_SUITES=(test_admin.py test_produce_consume.py test_offsets.py test_idempotence.py
                test_durability.py test_groups.py test_groups_kip848.py test_transactions.py)

run_pytest() {
    local rc
    set +e
    # shellcheck disable=SC2086
    .venv/bin/python -m pytest "$@" -q -ra --timeout=300 ${PYTEST_ARGS:-}
    rc=$?
    set -e
    if [ "$rc" -eq 5 ]; then
        echo "pytest collected no tests: treating as failure" >&2
        rc=1
    fi
    return "$rc"
}

log "pytest tests/e2e (FERRY_BIN=$FERRY_BIN)"
rc=0
run_pytest tests/e2e || rc=$?
if [ "${FERRY_SKIP_CLUSTER_E2E:-0}" != 1 ]; then
    log "pytest tests/e2e in cluster mode (FERRY_E2E_CLUSTER=3): ${CLUSTER_SUITES[*]}"
    cluster_rc=0
    FERRY_E2E_CLUSTER=3 run_pytest "${CLUSTER_SUITES[@]/#/tests/e2e/}" || cluster_rc=$?
    [ "$rc" -ne 0 ] || rc=$cluster_rc
fi
exit "$rc"

#!/usr/bin/env bash
# Installs `s3s-fs`, the S3 API server on a local directory that the objstore crate's S3 backend
# test (crates/objstore/tests/s3_conformance.rs) starts on 127.0.0.1. It checks SigV4 signatures
# and supports conditional writes (If-None-Match: *), which is what the S3 backend relies on.
#
# Idempotent: does nothing when `s3s-fs` is already on PATH (or in ~/.cargo/bin).
# A fresh install builds from crates.io and takes about 80 s on two cores.
#
# Environment:
#   S3S_FS_VERSION   version to install (default 0.14.1, the one the tests are written against)
set -euo pipefail

VERSION="${S3S_FS_VERSION:-0.14.1}"
CARGO_BIN="${CARGO_HOME:-$HOME/.cargo}/bin"

if command -v s3s-fs >/dev/null 2>&1; then
    echo "s3s-fs already installed: $(command -v s3s-fs)"
    exit 0
fi
if [ -x "$CARGO_BIN/s3s-fs" ]; then
    echo "s3s-fs already installed: $CARGO_BIN/s3s-fs (add $CARGO_BIN to PATH)"
    exit 0
fi

echo "==> cargo install s3s-fs --version $VERSION --locked --features binary"
cargo install s3s-fs --version "$VERSION" --locked --features binary
echo "s3s-fs installed: $CARGO_BIN/s3s-fs"

#!/usr/bin/env bash
# Regenerates the tables of docs/configuration.md from the code (`ferry config-reference`),
# keeping the hand-written introduction above "## Broker keys".
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build -q -p ferry
doc=docs/configuration.md
intro=$(sed '/^## Broker keys/,$d' "$doc")
{ printf '%s\n\n' "$intro"; target/debug/ferry config-reference; } >"$doc.tmp"
mv "$doc.tmp" "$doc"

#!/usr/bin/env bash
# The project's test command (README.md): formatting, lints, then every test of the workspace.
# GPU tests are #[ignore]d here; run them on a GPU machine with `cargo test --workspace -- --ignored`.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -x scripts/ci-deps.sh ]; then bash scripts/ci-deps.sh; fi
cargo fmt --all -- --check
cargo clippy --workspace --all-targets --locked -- -D warnings
cargo test --workspace --locked

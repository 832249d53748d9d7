#!/usr/bin/env bash
# The project's test command (README.md): formatting, lints, then every test of the workspace.
# GPU tests are #[ignore]d here; run them on a GPU machine with `cargo test --workspace -- --ignored`.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -x scripts/ci-deps.sh ]; then bash scripts/ci-deps.sh; fi
# NVRTC, cuobjdump and nvdisasm (scripts/fetch-cuda-tools.sh, run by ci-deps): with them the GPU crate's CPU tests
# compile every CUDA kernel (spills) and read its SASS (loads against griddepcontrol.wait); without, they skip.
TOOLS="${ROOFLINE_CUDA_TOOLS:-$HOME/.cache/roofline/cuda-tools}"
if [ -d "$TOOLS" ]; then
  export LD_LIBRARY_PATH="$TOOLS/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export PATH="$TOOLS/bin:$PATH"
fi
cargo fmt --all -- --check
cargo clippy --workspace --all-targets --locked -- -D warnings
cargo test --workspace --locked

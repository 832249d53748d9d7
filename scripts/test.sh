#!/usr/bin/env bash
# The project's test command (README.md): formatting, lints, the API docs, then every test of the workspace.
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
# The API docs build without broken or private intra-doc links (public items only, as docs.rs would build them).
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --locked
cargo test --workspace --locked
# The spill tests again under NVRTC 13.0 (the CUDA 13 toolkit's: the GPU machine's and many users'), which allocates
# registers otherwise than 12.9 (scripts/fetch-cuda-tools.sh). Each would print "SKIPPED <its name>" and pass were
# NVRTC 13.0 not loaded; that is a failure here.
if [ -e "$TOOLS/nvrtc13/lib/libnvrtc.so" ]; then
  echo "test.sh: the spill tests under NVRTC 13.0" >&2
  LOG="$(mktemp)"
  LD_LIBRARY_PATH="$TOOLS/nvrtc13/lib:$LD_LIBRARY_PATH" cargo test -p roofline-gpu --locked --lib without_spills \
    -- --nocapture 2>&1 | tee "$LOG"
  if grep -qE "SKIPPED [a-z_]+without_spills" "$LOG"; then
    echo "test.sh: NVRTC 13.0 at $TOOLS/nvrtc13/lib did not load (a spill test skipped)" >&2
    exit 1
  fi
  rm -f "$LOG"
fi

#!/usr/bin/env bash
# Builds what the device runs into .gpu/ (ignored by git; pass it in the device tool's `carry`): the release
# CLI (.gpu/roofline) and the GPU test binaries (weight_only_gpu, ring_gpu, ffn_gpu, model_bench_gpu, spill_fallback_gpu,
# server_api, and gpu_lib: roofline-gpu's unit tests, the read stream's among them; ring_trace, the ring GEMV's
# timeline from inside the kernel), all from the working
# tree as it is now. The kernels are compiled into the binaries, so a
# kernel edit needs this again before a device run: the script prints the CUDA sources' hash the binaries
# carry (`roofline --version`, and every weight-only measurement's kernel line, say it too).
# `bench/build-gpu.sh base`: the CLI only, as .gpu/roofline-base (an A/B baseline: check out the base commit
# first, build, then come back).
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .gpu
if [[ "${1:-}" == base ]]; then
    cargo build --release --locked -p roofline-cli
    cp target/release/roofline .gpu/roofline-base
    .gpu/roofline-base --version
    exit 0
fi
cargo build --release --locked -p roofline-cli
cp target/release/roofline .gpu/roofline
# The newest executable of each test target (cargo prints their paths).
copy_tests() {
    local pkg=$1 args=$2 line name path
    cargo test --release --locked -p "$pkg" $args --no-run --message-format=json 2>/dev/null \
        | grep '"executable":"' | grep '"test":true' \
        | sed -E 's/.*"name":"([^"]+)".*"executable":"([^"]+)".*/\1 \2/' | while read -r name path; do
            case $name in
            weight_only_gpu | ring_gpu | ffn_gpu | model_bench_gpu | spill_fallback_gpu) cp "$path" ".gpu/$name" ;;
            api) cp "$path" .gpu/server_api ;;
            roofline_gpu) cp "$path" .gpu/gpu_lib ;;
            esac
        done
}
copy_tests roofline-gpu "--tests"
# The ring GEMV's in-kernel timeline (examples/ring_trace.rs).
cargo build --release --locked -p roofline-gpu --example ring_trace
cp target/release/examples/ring_trace .gpu/ring_trace
copy_tests roofline-server "--test api"
ls -la .gpu
.gpu/roofline --version

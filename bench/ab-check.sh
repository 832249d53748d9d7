#!/usr/bin/env bash
# A/B device check of the weight-only kernels (sessions 22 and 23): GPU tests of some formats, then tables
# printed by the new binary and a baseline binary (built from the commit before) on the same warm GPU. Run
# from the repository root on the GPU machine with the binaries in .gpu/ (roofline, roofline-base and the
# test binaries weight_only_gpu, ring_gpu, ffn_gpu, model_bench_gpu); logs to $OUT.
# Parts (first argument, comma-separated; default tests,compare):
#   tests    weight-only set for $FORMATS (catalog names, default MXFP4,NVFP4), ring, fused FFN, model bench
#   compare  M = 1 at 14336x4096, 4096x14336, 4096x4096, 128256x4096, the decode table's formats
#   ring     M = 1 at 14336x4096 and 28672x4096 with --gemv ring=true (the ring GEMV forced)
#   m16      M = 16 at 14336x4096, 28672x4096, 4096x14336
#   xh       MXFP4 / NVFP4 with x in f16x2 or not (x-in-registers kernel forced)
#   model    Llama-3.1-8B model-bench, batch 1 and 16, schemes $SCHEMES (default fp16,int4,nf4,mxfp4,nvfp4)
set -uo pipefail
out=${OUT:-/tmp/ab-check}
mkdir -p "$out"
parts=${1:-tests,compare}
formats=${FORMATS:-MXFP4,NVFP4}
schemes=${SCHEMES:-fp16,int4,nf4,mxfp4,nvfp4}
hw=bench/results/h100-measured.toml
has() { [[ ",$parts," == *",$1,"* ]]; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv | tee "$out/gpu.txt"
if has tests; then
    ROOFLINE_TEST_FORMATS=$formats .gpu/weight_only_gpu --ignored --nocapture every_format variants every_m fused_norm 2>&1 \
        | grep -v '^\s*$' | tail -40 | tee "$out/tests.txt"
    .gpu/ring_gpu --ignored --nocapture 2>&1 | tail -15 | tee -a "$out/tests.txt"
    .gpu/ffn_gpu --ignored --nocapture 2>&1 | grep -E "fused FFN|test result|FAILED|panicked" | tee -a "$out/tests.txt"
    .gpu/model_bench_gpu --ignored 2>&1 | grep -E "test result|FAILED|panicked" | tee -a "$out/tests.txt"
fi
# $1: log name, $2: what, then the compare arguments; both binaries.
ab() {
    local log=$1 what=$2
    shift 2
    for bin in roofline-base roofline; do
        echo "=== $bin $what" | tee -a "$out/$log.txt"
        .gpu/$bin compare --weight-only --hw $hw "$@" 2>&1 | tee -a "$out/$log.txt"
    done
}
if has compare; then
    for nk in 14336x4096 4096x14336 4096x4096 128256x4096; do
        ab compare "M=1 N=${nk%x*} K=${nk#*x}" --m 1 --n "${nk%x*}" --k "${nk#*x}"
    done
fi
if has ring; then
    for nk in 14336x4096 28672x4096; do
        ab ring "M=1 N=${nk%x*} K=${nk#*x} ring=true" --m 1 --n "${nk%x*}" --k "${nk#*x}" --gemv ring=true
    done
fi
if has m16; then
    for nk in 14336x4096 28672x4096 4096x14336; do
        ab m16 "M=16 N=${nk%x*} K=${nk#*x}" --m 16 --n "${nk%x*}" --k "${nk#*x}" -p fp16 -p int4_g128 -p mxfp4 -p nvfp4
    done
fi
if has xh; then
    for nk in 14336x4096 4096x4096; do
        for xh in true false; do
            ab xh "M=1 N=${nk%x*} K=${nk#*x} xh=$xh" --m 1 --n "${nk%x*}" --k "${nk#*x}" -p mxfp4 -p nvfp4 \
                --gemv variant=xreg,ring=false,xh=$xh
        done
    done
fi
if has model; then
    for batch in 1 16; do
        for bin in roofline-base roofline; do
            echo "=== $bin model-bench llama-3.1-8b batch $batch" | tee -a "$out/model.txt"
            .gpu/$bin model-bench --config llama-3.1-8b --batch $batch --schemes "$schemes" --hw $hw 2>&1 \
                | tee -a "$out/model.txt"
        done
    done
fi

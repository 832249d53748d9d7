#!/usr/bin/env bash
# Session 22's device check of the E2M1 CUDA-core layout (MXFP4 / NVFP4 decoded in 9 instructions a word):
# GPU tests of the two formats, then the M = 1 tables of the shapes with the new binary and the
# baseline binary (built from the commit before) on the same warm GPU. Run from the repository root on the
# GPU machine with the binaries in .gpu/ (roofline, roofline-base, weight_only_gpu, ring_gpu); logs to $OUT.
# Parts: tests, compare (M = 1), m16 (M = 16), xh (MXFP4 / NVFP4 with x in f16x2 or not), model (Llama-3.1-8B
# batch 1 and 16).
set -uo pipefail
out=${OUT:-/tmp/e2m1-check}
mkdir -p "$out"
parts=${1:-tests,compare}
hw=bench/results/h100-measured.toml
has() { [[ ",$parts," == *",$1,"* ]]; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv | tee "$out/gpu.txt"
if has tests; then
    ROOFLINE_TEST_FORMATS=MXFP4,NVFP4 .gpu/weight_only_gpu --ignored --nocapture every_format variants every_m fused_norm 2>&1 | grep -v '^\s*$' | tail -40 | tee "$out/tests.txt"
    .gpu/ring_gpu --ignored --nocapture 2>&1 | tail -15 | tee -a "$out/tests.txt"
fi
if has compare; then
    for nk in 14336x4096 4096x14336 4096x4096 128256x4096; do
        n=${nk%x*} k=${nk#*x}
        for bin in roofline-base roofline; do
            echo "=== $bin M=1 N=$n K=$k" | tee -a "$out/compare.txt"
            .gpu/$bin compare --weight-only --m 1 --n "$n" --k "$k" --hw $hw 2>&1 | tee -a "$out/compare.txt"
        done
    done
fi
if has m16; then
    for nk in 14336x4096 28672x4096 4096x14336; do
        n=${nk%x*} k=${nk#*x}
        for bin in roofline-base roofline; do
            echo "=== $bin M=16 N=$n K=$k" | tee -a "$out/m16.txt"
            .gpu/$bin compare --weight-only --m 16 --n "$n" --k "$k" -p fp16 -p int4_g128 -p mxfp4 -p nvfp4 --hw $hw 2>&1 \
                | tee -a "$out/m16.txt"
        done
    done
fi
if has xh; then
    for nk in 14336x4096 4096x4096; do
        n=${nk%x*} k=${nk#*x}
        for xh in true false; do
            for bin in roofline-base roofline; do
                echo "=== $bin M=1 N=$n K=$k xh=$xh" | tee -a "$out/xh.txt"
                .gpu/$bin compare --weight-only --m 1 --n "$n" --k "$k" -p mxfp4 -p nvfp4 --hw $hw \
                    --gemv variant=xreg,ring=false,xh=$xh 2>&1 | tee -a "$out/xh.txt"
            done
        done
    done
fi
if has model; then
    for batch in 1 16; do
        for bin in roofline-base roofline; do
            echo "=== $bin model-bench llama-3.1-8b batch $batch" | tee -a "$out/model.txt"
            .gpu/$bin model-bench --config llama-3.1-8b --batch $batch --schemes fp16,int4,mxfp4,nvfp4 --hw $hw 2>&1 \
                | tee -a "$out/model.txt"
        done
    done
fi

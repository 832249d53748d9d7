#!/usr/bin/env bash
# Session 27 device probes. Run from the repository root on the GPU machine with .gpu/ built
# (bench/build-gpu.sh); logs to $OUT. Parts (first argument, comma-separated):
#   msweep  the batch sweep of the weight-only GEMVs: `compare` at M = 1, 2, 3, 4, 6, 8, 12, 16 for every
#           format at 14336x4096 and 4096x14336 (default plans), then M = 2, 4, 8 with x staged in shared
#           memory and the weights through bulk rings (`--gemv variant=xmma,x_smem=true`, the M > 8 kernel) beside them
. "$(dirname "$0")/probe-lib.sh"
probe_start exp-session27 "${1:-msweep}"
fmts=(-p fp8_e4m3 -p int8 -p nvfp4 -p int4_g128 -p mxfp4 -p nf4)
if has msweep; then
    for nk in 14336x4096 4096x14336; do
        for m in 1 2 3 4 6 8 12 16; do wo_compare msweep default $m $nk "${fmts[@]}"; done
        for m in 2 4 8; do wo_compare msweep x_smem $m $nk "${fmts[@]}" --gemv variant=xmma,x_smem=true; done
    done
fi
#   mshape  the same at the other shapes of a Llama-3 decode step (gate_up 28672x4096, qkv 6144x4096, o_proj
#           4096x4096, the LM head 128256x4096, GQA's k / v 1024x4096) for M = 2, 3, 4, 6, 8, and x in shared
#           memory at M = 3 and 6 for 14336x4096 and 4096x14336: default and x in shared memory side by side
if has mshape; then
    for nk in 28672x4096 6144x4096 4096x4096 128256x4096 1024x4096 14336x4096 4096x14336; do
        case $nk in 14336x4096 | 4096x14336) ms="3 6" sets="x_smem" ;; *) ms="2 3 4 6 8" sets="default x_smem" ;; esac
        for m in $ms; do
            for set in $sets; do
                g=()
                [[ $set == x_smem ]] && g=(--gemv variant=xmma,x_smem=true)
                wo_compare mshape $set $m $nk "${fmts[@]}" "${g[@]}"
            done
        done
    done
fi
#   m2      8-bit weights at M = 2 on the x-stationary tensor-core kernel (`--gemv variant=xmma,
#           x_smem=false`) against the default (split-K on CUDA cores) at the decode step's shapes
if has m2; then
    for nk in 1024x4096 4096x4096 6144x4096 14336x4096 4096x14336 28672x4096 128256x4096; do
        for g in "" "variant=xmma,x_smem=false"; do
            wo_compare m2 "[$g]" 2 $nk -p fp8_e4m3 -p int8 ${g:+--gemv $g}
        done
    done
fi
#   mb      model-bench Llama-3.1-8B at batch 2, 4 and 8 ($BATCHES), every weight-only scheme ($SCHEMES), the
#           base build (.gpu/roofline-base) and this one ($BINS to pick)
if has mb; then
    for b in ${BATCHES:-2 4 8}; do
        for bin in ${BINS:-roofline-base roofline}; do
            echo "=== $bin model-bench llama-3.1-8b batch $b" | tee -a "$out/mb.txt"
            timeout 200 .gpu/$bin model-bench --config llama-3.1-8b --batch $b --hw $hw \
                --schemes ${SCHEMES:-fp16,fp8_e4m3,int8,int4_g128,nf4,mxfp4,nvfp4} 2>&1 | tee -a "$out/mb.txt" | tail -12
        done
    done
fi
#   tests   the weight-only GPU tests that take the default plans at every M (the reference checks), and
#           model-bench's GPU tests
if has tests; then
    timeout 400 .gpu/weight_only_gpu --ignored every_m every_format fused_norm variants_and 2>&1 \
        | grep -E "^test |test result|FAILED|panicked" | tee "$out/tests.txt"
    timeout 200 .gpu/model_bench_gpu --ignored 2>&1 | grep -E "^test |test result|FAILED|panicked" | tee -a "$out/tests.txt"
fi
# Left for the next session (no device time was left to run them):
#   tune8   the bulk ring's own settings at M <= 8 (its slots, tiles a slot and K splits were tuned at M = 16,
#           where x takes twice the shared memory): tune_table rows of every bulk-ring configuration for INT4
#           and NF4 at 8x14336x4096, 4x14336x4096, 8x4096x14336 and 8x28672x4096
if has tune8; then
    ROOFLINE_TUNE_SET=xreg ROOFLINE_TUNE_SHAPES=8x14336x4096,4x14336x4096,8x4096x14336,8x28672x4096 \
        ROOFLINE_TUNE_FORMATS=INT4_G128,NF4 ROOFLINE_TUNE_ONLY="XSM+XB" \
        timeout 580 .gpu/weight_only_gpu --ignored tune_table --nocapture 2>&1 | grep -E "^TT |rror" | tee "$out/tune8.txt"
fi
#   mbcheck model-bench's GPU tests and one Llama-3.1-8B run per batch 1 / 8 on a build of the branch
#           model-bench-linear-checks (qkv / o_proj / LM head checked against the CPU; check it out and run
#           bench/build-gpu.sh first): the new errors must print and stay below 1e-2
if has mbcheck; then
    timeout 200 .gpu/model_bench_gpu --ignored --nocapture 2>&1 | grep -E "^test |test result|FAILED|panicked|lm_head" \
        | tee "$out/mbcheck.txt"
    for b in 1 8; do
        timeout 150 .gpu/roofline model-bench --config llama-3.1-8b --batch $b --hw $hw --schemes fp16,int4_g128,nf4 \
            2>&1 | grep -E "^step|rel. error|tok/s" | tee -a "$out/mbcheck.txt"
    done
fi

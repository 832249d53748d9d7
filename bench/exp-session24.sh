#!/usr/bin/env bash
# Session 24 device probes. Run from the repository root on the GPU machine with .gpu/ built (see
# bench/ab-check.sh); logs to $OUT. Parts (first argument, comma-separated):
#   verify  GPU tests of session 23's un-run changes: fused FFN, ring, model-bench (FFN check), weight-only NF4/MXFP4
#   ncu     Nsight Compute on the ring GEMV at 1x14336x4096, NF4 beside INT4 (one launch each, after warm-up)
#   nf4     NF4's wide pair table (one byte permute a lookup): GPU tests of the NF4 kernels, then A/B tables
#           (.gpu/roofline-base beside .gpu/roofline) at M = 1 and Llama-3.1-8B batch 1, and ring row groups
#   k14     1x4096x14336 (down_proj), where every low-bit format sits below 85% of the copy bandwidth: the
#           x-in-registers plans for 8-bit (unroll 2 = one CTA over all of K in 14 warps, splits) and 4-bit
#   final   8-bit two-chunk plan checked (GPU tests of FP8 / INT8, A/B at 1x4096x14336 and 1x14336x4096),
#           Llama-3.1-8B batch 1 (FP8, INT8) and batch 16 (every scheme) on the new binary
#   down8   8-bit down_proj on the x-in-registers engine (Variant::best_for): model-bench GPU tests, A/B at
#           1x4096x14336, Llama-3.1-8B batch 1 FP8 / INT8 (base and new)
#   graph   CUDA-graph replay timings (`--graph`): the GPU test, then compare --weight-only --graph at M = 1
#           for the issue's four shapes and at 16x14336x4096
#   nf4xh   NF4 x-in-registers at N <= 6144 with the f16x2 pair-table path (xh) against the FP32 default
#   m16x    batch-16 bulk ring with x in coarser chunks (-DXCT=32, 64 tiles: 2 or 1 chunks at K = 4096)
#   m16     batch-16 bulk ring with x in finer chunks (-DXCT=4, 8 tiles); session 24's run (r3) also tried
#           the chunks in a rotated order per CTA (-DXSTAGGER=1, since removed: no gain)
. "$(dirname "$0")/probe-lib.sh"
probe_start exp-session24 "${1:-verify}"
if has verify; then
    .gpu/ffn_gpu --ignored --nocapture 2>&1 | grep -E "fused FFN|test result|FAILED|panicked" | tee "$out/verify.txt"
    .gpu/ring_gpu --ignored 2>&1 | grep -E "test |test result|FAILED|panicked" | tee -a "$out/verify.txt"
    .gpu/model_bench_gpu --ignored --nocapture 2>&1 | grep -E "ffn|FFN|test result|FAILED|panicked|error" | tail -40 \
        | tee -a "$out/verify.txt"
    ROOFLINE_TEST_FORMATS=NF4,MXFP4,NVFP4 .gpu/weight_only_gpu --ignored every_format variants fused_norm 2>&1 \
        | grep -E "test result|FAILED|panicked" | tee -a "$out/verify.txt"
fi
if has ncu; then
    for f in nf4 int4_g128; do
        ncu --launch-skip 30 --launch-count 1 -k regex:wo_ring \
            --section SpeedOfLight --section SchedulerStats --section WarpStateStats --section InstructionStats \
            --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis --section Occupancy \
            .gpu/roofline measure --m 1 --n 14336 --k 4096 --weights $f --gemv ring=true --hw $hw \
            >"$out/ncu-$f.txt" 2>&1
        grep -E "Duration|Throughput|Issued|Eligible|Active Warps|No Eligible|Stall|Registers|Pipe|Executed Ipc" \
            "$out/ncu-$f.txt" | head -40
    done
fi
if has nf4; then
    ROOFLINE_TEST_FORMATS=NF4 .gpu/weight_only_gpu --ignored every_format variants fused_norm 2>&1 \
        | grep -E "test result|FAILED|panicked" | tee "$out/nf4-tests.txt"
    .gpu/ring_gpu --ignored 2>&1 | grep -E "test result|FAILED|panicked" | tee -a "$out/nf4-tests.txt"
    .gpu/ffn_gpu --ignored --nocapture 2>&1 | grep -E "Nf4|test result|FAILED|panicked" | tee -a "$out/nf4-tests.txt"
    for rep in 1 2; do
        for bin in roofline-base roofline; do
            for nk in 14336x4096 28672x4096 4096x14336 128256x4096; do
                echo "=== $bin rep $rep 1x$nk" | tee -a "$out/nf4-compare.txt"
                .gpu/$bin compare --weight-only --hw $hw --m 1 --n ${nk%x*} --k ${nk#*x} -p fp16 -p int4_g128 -p nf4 2>&1 \
                    | grep -E "W:|FP16 " | tee -a "$out/nf4-compare.txt"
            done
        done
    done
    for g in 2 4; do
        for nk in 14336x4096 28672x4096; do
            echo "=== groups $g 1x$nk" | tee -a "$out/nf4-compare.txt"
            ROOFLINE_RING_GROUPS=$g .gpu/roofline compare --weight-only --hw $hw --m 1 --n ${nk%x*} --k ${nk#*x} -p nf4 2>&1 \
                | grep -E "W:" | tee -a "$out/nf4-compare.txt"
        done
    done
    for bin in roofline-base roofline; do
        echo "=== $bin model-bench llama-3.1-8b batch 1" | tee -a "$out/nf4-model.txt"
        .gpu/$bin model-bench --config llama-3.1-8b --batch 1 --schemes int4,nf4 --hw $hw 2>&1 \
            | grep -E "^(step|tokens|│ (qkv|o_proj|gate_up|down|lm_head))" | tee -a "$out/nf4-model.txt"
    done
fi
# $1: log name, $2: shapes (NxK) at M = 16, then one NVRTC extra option set per table.
m16_probe() {
    local log=$1 shapes=$2 extra nk
    shift 2
    for extra in "$@"; do
        for nk in $shapes; do
            echo "=== [$extra] 16x$nk" | tee -a "$out/$log.txt"
            ROOFLINE_NVRTC_EXTRA="$extra" .gpu/roofline compare --weight-only --hw $hw --m 16 --n ${nk%x*} --k ${nk#*x} \
                -p int4_g128 -p mxfp4 -p nvfp4 -p nf4 2>&1 | grep -E "W:|rror" | tee -a "$out/$log.txt"
        done
    done
}
if has m16; then
    m16_probe m16 "14336x4096 28672x4096 4096x14336" "" "-DXCT=4" "-DXCT=8"
fi
if has m16x; then
    m16_probe m16x "14336x4096 28672x4096 4096x14336 4096x4096" "" "-DXCT=32" "-DXCT=64"
fi
if has k14; then
    for g in "" "unroll=2" "unroll=2,split_k=2" "split_k=2" "split_k=8" "unroll=4"; do
        for nk in 4096x14336 14336x4096; do
            echo "=== [$g] 1x$nk" | tee -a "$out/k14.txt"
            .gpu/roofline compare --weight-only --hw $hw --m 1 --n ${nk%x*} --k ${nk#*x} -p fp8_e4m3 -p int8 \
                ${g:+--gemv variant=xreg,$g} 2>&1 | grep -E "W:|rror" | tee -a "$out/k14.txt"
        done
    done
    for g in "" "split_k=2" "rows=8" "rows=8,split_k=2" "ring=true" "unroll=2"; do
        echo "=== [$g] 1x4096x14336" | tee -a "$out/k14.txt"
        .gpu/roofline compare --weight-only --hw $hw --m 1 --n 4096 --k 14336 -p int4_g128 -p nf4 -p mxfp4 -p nvfp4 \
            ${g:+--gemv variant=xreg,$g} 2>&1 | grep -E "W:|rror" | tee -a "$out/k14.txt"
    done
fi
if has final; then
    ROOFLINE_TEST_FORMATS=FP8_E4M3,INT8 .gpu/weight_only_gpu --ignored --nocapture every_format variants every_m fused_norm \
        2>&1 | grep -E "x14336|test result|FAILED|panicked" | tee "$out/final-tests.txt"
    for bin in roofline-base roofline; do
        for nk in 4096x14336 14336x4096; do
            echo "=== $bin 1x$nk" | tee -a "$out/final-compare.txt"
            .gpu/$bin compare --weight-only --hw $hw --m 1 --n ${nk%x*} --k ${nk#*x} -p fp16 -p fp8_e4m3 -p int8 2>&1 \
                | grep -E "W:|FP16 " | tee -a "$out/final-compare.txt"
        done
    done
    .gpu/roofline model-bench --config llama-3.1-8b --batch 1 --schemes fp8,int8 --hw $hw >"$out/final-model-b1.txt" 2>&1
    grep -E "^step|^tokens|FP8_E4M3 |INT8 " "$out/final-model-b1.txt" | tail -6
    timeout 300 .gpu/roofline model-bench --config llama-3.1-8b --batch 16 --schemes fp16,fp8,int4,nf4,mxfp4,nvfp4 --hw $hw \
        >"$out/final-model-b16.txt" 2>&1
    grep -E "^step|^tokens|FP16 |FP8_E4M3 |INT4_G128 |NF4 |MXFP4 |NVFP4 " "$out/final-model-b16.txt" | tail -8
fi
if has down8; then
    .gpu/model_bench_gpu --ignored --nocapture 2>&1 | grep -E "Fp8|Int8|test result|FAILED|panicked" | tee "$out/down8-tests.txt"
    for bin in roofline-base roofline; do
        echo "=== $bin 1x4096x14336" | tee -a "$out/down8-compare.txt"
        .gpu/$bin compare --weight-only --hw $hw --m 1 --n 4096 --k 14336 -p fp16 -p fp8_e4m3 -p int8 2>&1 \
            | grep -E "W:|FP16 " | tee -a "$out/down8-compare.txt"
        echo "=== $bin model-bench llama-3.1-8b batch 1" | tee -a "$out/down8-model.txt"
        .gpu/$bin model-bench --config llama-3.1-8b --batch 1 --schemes fp8,int8 --hw $hw 2>&1 \
            | grep -E "^(step|tokens|│ (qkv|o_proj|gate_up|silu|down|lm_head))" | tee -a "$out/down8-model.txt"
    done
fi
if has graph; then
    .gpu/weight_only_gpu --ignored --nocapture graph_replay 2>&1 | grep -E "graph|test result|FAILED|panicked" \
        | tee "$out/graph-tests.txt"
    for mnk in 1x4096x4096 1x14336x4096 1x4096x14336 1x128256x4096 16x14336x4096; do
        IFS=x read -r m n k <<<"$mnk"
        echo "=== $mnk --graph" | tee -a "$out/graph-compare.txt"
        .gpu/roofline compare --weight-only --graph --hw $hw --m $m --n $n --k $k 2>&1 | grep -E "W:|FP16 |Graph" \
            | tee -a "$out/graph-compare.txt"
    done
fi
if has nf4xh; then
    for nk in 4096x4096 6144x4096; do
        for g in "" "xh=true" "xh=true,rows_per_cta=32" "xh=true,rows_per_cta=64" "xh=true,rows_per_cta=128" "xh=true,warps=8"; do
            echo "=== [$g] 1x$nk" | tee -a "$out/nf4xh.txt"
            .gpu/roofline compare --weight-only --hw $hw --m 1 --n ${nk%x*} --k ${nk#*x} -p nf4 \
                ${g:+--gemv variant=xreg,$g} 2>&1 | grep -E "W:|rror" | tee -a "$out/nf4xh.txt"
        done
    done
fi

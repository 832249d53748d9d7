#!/usr/bin/env bash
# Session 23's device check: NF4 through the pair table in the ring GEMV and the fused FFN, NVFP4's chunk
# widened once. GPU tests of NF4 and NVFP4 (weight-only set, ring, fused FFN, model bench), then A/B tables against
# .gpu/roofline-base on the same GPU. Run from the repository root on the GPU machine with the binaries in
# .gpu/; logs to $OUT. Parts: tests, m1, model (Llama-3.1-8B batch 1, fused FFN).
set -uo pipefail
out=${OUT:-/tmp/session23-check}
mkdir -p "$out"
parts=${1:-tests,m1}
hw=bench/results/h100-measured.toml
has() { [[ ",$parts," == *",$1,"* ]]; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv | tee "$out/gpu.txt"
if has tests; then
    ROOFLINE_TEST_FORMATS=NF4,NVFP4 .gpu/weight_only_gpu --ignored --nocapture every_format variants fused_norm 2>&1 \
        | grep -E "NF4|NVFP4|test result|FAILED|panicked" | tail -40 | tee "$out/tests.txt"
    .gpu/ring_gpu --ignored --nocapture 2>&1 | grep -E "Nf4|Nvfp4|NF4|NVFP4|test result|FAILED|panicked" | tail -30 | tee -a "$out/tests.txt"
    .gpu/ffn_gpu --ignored --nocapture 2>&1 | grep -E "Nf4|NF4|test result|FAILED|panicked" | tee -a "$out/tests.txt"
    .gpu/model_bench_gpu --ignored 2>&1 | grep -E "test result|FAILED|panicked" | tee -a "$out/tests.txt"
fi
if has m1; then
    for nk in 14336x4096 28672x4096 4096x14336 4096x4096; do
        n=${nk%x*} k=${nk#*x}
        for bin in roofline-base roofline; do
            for ring in auto true; do
                [[ $ring == true && $nk == 4096x* ]] && continue
                g=(); [[ $ring == true ]] && g=(--gemv ring=true)
                echo "=== $bin M=1 N=$n K=$k ring=$ring" | tee -a "$out/m1.txt"
                .gpu/$bin compare --weight-only --m 1 --n "$n" --k "$k" -p fp16 -p int4_g128 -p nf4 -p mxfp4 -p nvfp4 \
                    --hw $hw "${g[@]}" 2>&1 | grep -E "W:|FP16 " | tee -a "$out/m1.txt"
            done
        done
    done
fi
if has model; then
    for bin in roofline-base roofline; do
        echo "=== $bin model-bench llama-3.1-8b batch 1" | tee -a "$out/model.txt"
        .gpu/$bin model-bench --config llama-3.1-8b --schemes fp16,int4,nf4,mxfp4,nvfp4 --hw $hw 2>&1 | tee -a "$out/model.txt"
    done
fi

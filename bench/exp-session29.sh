#!/usr/bin/env bash
# Session 29 device probes. Run from the repository root on the GPU machine with .gpu/ built
# (bench/build-gpu.sh, and `bench/build-gpu.sh base` from the kernels before session 28's fix for `ab`);
# logs to $OUT. Parts (first argument, comma-separated):
#   ab      what session 28's fix (x through ld_dep, no const __restrict__ on what earlier kernels write) costs
#           where it changed the code that runs: M = 1, 2 and 4 at the decode step's shapes, every
#           weight-only format, .gpu/roofline-base (sources 47c7a97a) and .gpu/roofline alternately
. "$(dirname "$0")/probe-lib.sh"
probe_start exp-session29 "${1:-ab}"
fmts=(-p fp8_e4m3 -p int8 -p nvfp4 -p int4_g128 -p mxfp4 -p nf4)
if has ab; then
    .gpu/roofline-base --version | tee -a "$out/ab.txt"
    .gpu/roofline --version | tee -a "$out/ab.txt"
    for nk in 4096x4096 1024x4096 14336x4096 4096x14336; do
        for m in 1 2 4; do
            for bin in roofline-base roofline; do BIN=$bin wo_compare ab $bin $m $nk "${fmts[@]}"; done
        done
    done
fi
#   m1alt   M = 1 after the fix (x read after griddepcontrol.wait): the default plans against the ring GEMV
#           (`ring=true`) and the x-in-registers kernel with 2-4 steps in flight through cp.async (`stages=`)
#           at 1x4096x4096, 1x4096x14336 and 1x6144x4096, where the default is the x-in-registers kernel
if has m1alt; then
    f4=(-p nvfp4 -p int4_g128 -p mxfp4 -p nf4)
    for nk in 4096x14336 4096x4096 6144x4096; do
        wo_compare m1alt default 1 $nk "${f4[@]}" -p fp8_e4m3 -p int8
        wo_compare m1alt ring=true 1 $nk "${f4[@]}" --gemv ring=true
        for s in 2 3 4; do wo_compare m1alt stages=$s 1 $nk "${f4[@]}" -p fp8_e4m3 -p int8 --gemv variant=xreg,stages=$s; done
        wo_compare m1alt default-again 1 $nk "${f4[@]}" -p fp8_e4m3 -p int8
    done
fi
#   m1b     from m1alt: 8-bit weights at M = 1 on the x-in-registers kernel with 2-4 steps in flight through
#           cp.async against the default (split-K; one wide CTA at K = 14336), and NF4 on the ring GEMV against
#           its default, at every shape of a Llama-3 decode step, the defaults timed twice
if has m1b; then
    for nk in 1024x4096 4096x4096 6144x4096 14336x4096 28672x4096 128256x4096 4096x14336; do
        wo_compare m1b default 1 $nk -p fp8_e4m3 -p int8 -p nf4
        for s in 2 3 4; do wo_compare m1b stages=$s 1 $nk -p fp8_e4m3 -p int8 --gemv variant=xreg,stages=$s; done
        wo_compare m1b ring=true 1 $nk -p nf4 --gemv ring=true
        wo_compare m1b default-again 1 $nk -p fp8_e4m3 -p int8 -p nf4
    done
fi
#   verify  the new M = 1 defaults (8-bit weights on the x-in-registers kernel with three cp.async stages up to
#           16384 rows, NF4 on the ring GEMV at small N) against the f64 reference: the weight-only tests at the
#           issue shapes and of the fused norm / residual add / SwiGLU, the ring GEMV's and model-bench's tests
if has verify; then
    timeout 300 .gpu/weight_only_gpu --ignored --nocapture every_format_matches fused_norm >"$out/verify-wo.txt" 2>&1
    grep -E "^test |test result|panicked" "$out/verify-wo.txt"
    timeout 120 .gpu/ring_gpu --ignored >"$out/verify-ring.txt" 2>&1
    grep -E "^test |test result|panicked" "$out/verify-ring.txt"
    timeout 240 .gpu/model_bench_gpu --ignored >"$out/verify-mb.txt" 2>&1
    grep -E "^test |test result|panicked" "$out/verify-mb.txt"
fi
#   perf    the new M = 1 defaults against the base build (.gpu/roofline-base, main before them), alternately:
#           FP8, INT8 and NF4 at every shape of a Llama-3 decode step, then model-bench Llama-3.1-8B at batch 1
if has perf; then
    for nk in 1024x4096 4096x4096 6144x4096 14336x4096 28672x4096 128256x4096 4096x14336; do
        for bin in roofline-base roofline; do BIN=$bin wo_compare perf $bin 1 $nk -p fp8_e4m3 -p int8 -p nf4; done
    done
fi
#   mb      model-bench Llama-3.1-8B at batch 1 in FP8, NF4 and INT8, the base build and this one (the base's
#           o_proj check fails INT8: run 6, the stream's rounding; this build checks o_proj on a zeroed stream),
#           then model-bench's GPU tests
if has mb; then
    for bin in ${BINS:-roofline-base roofline}; do
        echo "=== $bin model-bench llama-3.1-8b batch 1" | tee -a "$out/perf-mb.txt"
        timeout 150 .gpu/$bin model-bench --config llama-3.1-8b --batch 1 --hw $hw --schemes fp8_e4m3,nf4,int8 2>&1 \
            | tee -a "$out/perf-mb.txt" | grep -E "tokens/s|^step|error" | tail -12
    done
    timeout 240 .gpu/model_bench_gpu --ignored >"$out/mb-tests.txt" 2>&1
    grep -E "^test |test result|panicked" "$out/mb-tests.txt"
fi
#   mbab    model-bench Llama-3.1-8B at batch 1 in $SCHEME (default fp8_e4m3), base and this build alternately,
#           twice (the CUDA-graph step against the per-op sum: run 7's FP8 step was slower than session 24's
#           while every op was faster)
if has mbab; then
    for i in 1 2; do
        for bin in ${BINS:-roofline-base roofline}; do
            echo "=== $bin model-bench llama-3.1-8b batch 1 ${SCHEME:-fp8_e4m3} ($i)" | tee -a "$out/mbab.txt"
            timeout 100 .gpu/$bin model-bench --config llama-3.1-8b --batch 1 --hw $hw --scheme ${SCHEME:-fp8_e4m3} 2>&1 \
                | tee -a "$out/mbab.txt" | grep -E "tokens/s|^step|error|│ (qkv|o_proj|down)" | cut -c1-150
        done
    done
fi
#   table   issue 11's table on the final build: `compare --weight-only` (every format, FP16 beside them) at the
#           issue's shapes at M = 1 and at 16x14336x4096, then model-bench's GPU tests
if has table; then
    issue_table table
    timeout 240 .gpu/model_bench_gpu --ignored >"$out/table-mb-tests.txt" 2>&1
    grep -E "^test |test result|panicked" "$out/table-mb-tests.txt"
fi
#   wide    4-bit weights at 1x4096x14336 (down_proj; 1.5-2 us slower than 1x14336x4096 of the same bytes): the
#           wide x-in-registers plan (one CTA over K, 14 warps, 4 rows a step, one step's loads in flight)
#           against it with the next step's loads issued first (`pipeline=true`), 2 rows a step, 2 K splits
if has wide; then
    f4=(-p nvfp4 -p int4_g128 -p mxfp4 -p nf4)
    for g in "" variant=xreg,pipeline=true variant=xreg,split_k=2 variant=xreg,split_k=2,pipeline=true \
        variant=xreg,rows=2 variant=xreg,rows=2,pipeline=true ""; do
        wo_compare wide "[$g]" 1 4096x14336 "${f4[@]}" ${g:+--gemv $g}
    done
fi
#   hyb     NF4 at M = 16 on the bulk ring with its decode split between the shared-memory table and byte
#           permutes in registers (`-DNF4_HYB=h`: every h-th word of a tile through the permutes), h = 4 and 2,
#           against the table alone, at the Llama-3 shapes (needs the kernels with
#           bench/results/h100-2026-11-27-session29/nf4-hyb.patch applied: the split lost and was reverted)
if has hyb; then
    m16_compare hyb "14336x4096 28672x4096 4096x14336 4096x4096" nf4 "|" "-DNF4_HYB=4|" "-DNF4_HYB=2|" "-DNF4_HYB=4|" "|"
fi
#   instep  model-bench Llama-3.1-8B at batch 1 with each layer op's time in the step (the graph without it,
#           `In step us`) in FP8, INT4, NF4, and at batch 16 in INT4; then model-bench's GPU tests
if has instep; then
    for run in "1 fp8_e4m3,int4_g128,nf4" "16 int4_g128"; do
        read -r b sch <<<"$run"
        echo "=== model-bench llama-3.1-8b batch $b $sch" | tee -a "$out/instep.txt"
        timeout 200 .gpu/roofline model-bench --config llama-3.1-8b --batch $b --hw $hw --schemes $sch 2>&1 \
            | tee -a "$out/instep.txt" | grep -E "tokens/s|^step|error|│ (Op|qkv|attention|o_proj|gate_up|silu|down)" | cut -c1-170
    done
    timeout 240 .gpu/model_bench_gpu --ignored >"$out/instep-mb-tests.txt" 2>&1
    grep -E "^test |test result|panicked" "$out/instep-mb-tests.txt"
fi
#   attn    INT4 Llama-3.1-8B batch 1: the attention's share of the step (`In step us`) with the default cluster
#           kernel, with the qkv projection inside it (`--qkv fused`) and with the split kernel (`--attention splits`)
if has attn; then
    for extra in "" "--qkv fused" "--attention splits"; do
        echo "=== model-bench llama-3.1-8b batch 1 int4 [$extra]" | tee -a "$out/attn.txt"
        timeout 100 .gpu/roofline model-bench --config llama-3.1-8b --batch 1 --hw $hw --scheme int4_g128 $extra 2>&1 \
            | tee -a "$out/attn.txt" | grep -E "tokens/s|^step|error|│ (qkv|attention|o_proj|gate_up)" | cut -c1-170
    done
fi
#   minb    INT4 Llama-3.1-8B batch 1 with the x-in-registers GEMVs' register cap at 4 CTAs per SM (default at
#           N <= 4096: qkv, o_proj), 2 and 1 (`--gemv min_blocks=`): does the cap keep the attention's CTAs from
#           sitting beside the qkv GEMV's (the attention's share of the step 10.2 us against 7.99 alone)?
if has minb; then
    for extra in "" "--gemv min_blocks=2" "--gemv min_blocks=1" ""; do
        echo "=== model-bench llama-3.1-8b batch 1 int4 [$extra]" | tee -a "$out/minb.txt"
        timeout 100 .gpu/roofline model-bench --config llama-3.1-8b --batch 1 --hw $hw --scheme int4_g128 $extra 2>&1 \
            | tee -a "$out/minb.txt" | grep -E "tokens/s|^step|error|│ (qkv|attention|o_proj|gate_up)" | cut -c1-170
    done
fi

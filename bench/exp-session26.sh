#!/usr/bin/env bash
# Session 26 device probes. Run from the repository root on the GPU machine with .gpu/ built
# (bench/build-gpu.sh); logs to $OUT. Parts (first argument, comma-separated):
#   m16p    where the batch-16 bulk ring's time goes beyond the loads (tune_table, INT4 16x14336x4096 and
#           16x28672x4096, wrong-result probes): x's fragments read from shared memory for every 2nd / 4th
#           tile only (EXP_XREUSE), the MMAs dropped (EXP_NOMMA), the loads alone (EXP_LOADONLY), x cut to
#           one row (EXP_XROWS), and combinations; the M = 1 GEMVs beside them
#   ncu     Nsight Compute on the bulk ring (INT4 16x14336x4096) and the ring GEMV (INT4 and NF4
#           1x14336x4096): pipe utilization, warp stalls, shared-memory wavefronts
. "$(dirname "$0")/probe-lib.sh"
probe_start exp-session26 "${1:-m16p}"
if has m16p; then
    bulk_tune m16p weight_only_gpu 16x14336x4096,16x28672x4096 "" "-DEXP_XREUSE=2" "-DEXP_XREUSE=4" \
        "-DEXP_NOMMA=1" "-DEXP_NOMMA=1 -DEXP_XREUSE=4" "-DEXP_LOADONLY=1" "-DEXP_LOADONLY=1 -DEXP_XREUSE=4" \
        "-DEXP_XROWS=1" "-DEXP_XROWS=1 -DEXP_XREUSE=4" "-DEXP_NOMMA=1 -DEXP_XROWS=1 -DEXP_XREUSE=4" ""
    for nk in 14336x4096 28672x4096; do
        timeout 120 .gpu/roofline compare --weight-only --hw $hw --m 1 --n ${nk%x*} --k ${nk#*x} -p int4_g128 -p nf4 \
            2>&1 | grep -E "W:|rror" | tee -a "$out/m16p.txt"
    done
fi
if has ncu; then
    metrics=sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active
    metrics+=,l1tex__data_pipe_lsu_wavefronts_mem_shared.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum
    metrics+=,smsp__inst_executed.sum,sm__inst_executed_pipe_lsu.avg.pct_of_peak_sustained_active
    metrics+=,sm__pipe_alu_cycles_active.avg.pct_of_peak_sustained_active,sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active
    metrics+=,l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum,l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum
    for spec in "16|int4_g128|wo_mma_xb" "1|int4_g128|wo_ring" "1|nf4|wo_ring"; do
        IFS='|' read -r m fmt kern <<<"$spec"
        log="$out/ncu-m$m-$fmt.txt"
        ncu --launch-skip 30 --launch-count 1 -k regex:$kern --section SpeedOfLight --section ComputeWorkloadAnalysis \
            --section WarpStateStats --section InstructionStats --section MemoryWorkloadAnalysis_Tables \
            --metrics $metrics .gpu/roofline measure --m $m --n 14336 --k 4096 --weights $fmt --hw $hw >"$log" 2>&1
        echo "=== ncu M=$m $fmt ($kern)"
        grep -E "Duration|Throughput|Busy|Issue|Stall|stall|pipe|wavefronts|bank|inst_executed|Executed Ipc|Warp Cycles" "$log" | head -60
    done
fi
#   early   the bulk ring handing each slot back once its words are in registers (XB_EARLY, the default now)
#           against after its MMAs (-DXB_EARLY=0): tune_table rows twice each, then `compare` at M = 16
if has early; then
    bulk_tune early weight_only_gpu 16x14336x4096,16x28672x4096 "-DXB_EARLY=0" "" "-DXB_EARLY=0" ""
    m16_compare early "14336x4096 28672x4096 4096x14336 4096x4096" "int4_g128 nf4 mxfp4 nvfp4" "-DXB_EARLY=0|" "|"
fi
#   nf4fill NF4's pair table filled without bank conflicts (this build) against the base (.gpu/roofline-base):
#           `compare` at M = 1, NF4 with INT4 as the control, base / new twice; the ring and FFN GPU tests
if has nf4fill; then
    for rep in 1 2; do
        for bin in roofline-base roofline; do
            for nk in 14336x4096 4096x14336 4096x4096 128256x4096; do
                echo "=== $bin rep $rep 1x$nk" | tee -a "$out/nf4fill.txt"
                timeout 120 .gpu/$bin compare --weight-only --hw $hw --m 1 --n ${nk%x*} --k ${nk#*x} -p nf4 -p int4_g128 \
                    2>&1 | grep -E "W:|rror" | tee -a "$out/nf4fill.txt"
            done
        done
    done
    for t in ring_gpu ffn_gpu; do
        timeout 200 .gpu/$t --ignored 2>&1 | grep -E "test result|FAILED|panicked" | tee -a "$out/nf4fill-tests.txt"
    done
fi
#   nf4tab  NF4 on the bulk ring through a shared-memory table of code pairs (NF4_TAB; default 16 copies at
#           the issue's shapes) against the byte-permute decode (nf4_table=0), 8 copies, and slots of 2 tiles
#           (32 copies fit), `compare` at M = 16 with INT4 as the control
if has nf4tab; then
    m16_compare nf4tab "14336x4096 28672x4096 4096x14336 4096x4096" "nf4 int4_g128" "|nf4_table=0" "|" \
        "|nf4_table=8" "|unroll=2" "|unroll=2,nf4_table=0" "|nf4_table=0" "|"
fi
#   ftests  the weight-only GPU tests on this build (every format, variant and M; ~450 s)
if has ftests; then
    timeout 570 .gpu/weight_only_gpu --ignored 2>&1 | grep -E "^test |test result|FAILED|panicked" | tee "$out/ftests.txt"
fi
#   fperf   NF4 at M = 16 (default plan: the code-pair table) against the base (.gpu/roofline-base, byte
#           permutes), `compare` at the issue's shapes, then model-bench Llama-3.1-8B batch 16 and 1
if has fperf; then
    for bin in roofline-base roofline; do
        for nk in 14336x4096 28672x4096 4096x14336 4096x4096 6144x4096; do
            echo "=== $bin 16x$nk" | tee -a "$out/fperf.txt"
            timeout 120 .gpu/$bin compare --weight-only --hw $hw --m 16 --n ${nk%x*} --k ${nk#*x} -p nf4 2>&1 \
                | grep -E "W:|rror" | tee -a "$out/fperf.txt"
        done
    done
    for b in 16 1; do
        for bin in roofline-base roofline; do
            echo "=== $bin model-bench llama-3.1-8b batch $b" | tee -a "$out/fperf.txt"
            .gpu/$bin model-bench --config llama-3.1-8b --batch $b --schemes nf4 --hw $hw 2>&1 \
                | grep -E "^(step|tokens|│ (qkv|o_proj|gate_up|down|lm_head))" | tee -a "$out/fperf.txt"
        done
    done
fi
#   chains  (needs the XB_CHAINS switch, in the build of r8 only) the INT4 bulk ring's MMAs in 1 / 2 / 4
#           independent accumulator chains a group, twice
if has chains; then
    bulk_tune chains weight_only_gpu 16x14336x4096,16x28672x4096 "" "-DXB_CHAINS=2" "-DXB_CHAINS=4" "" "-DXB_CHAINS=2" \
        "-DXB_CHAINS=4"
fi
#   table   the issue's decode table on the final build: `compare --weight-only` at 1x14336x4096 (every format
#           beside FP16), at 16x14336x4096 and 1x128256x4096
if has table; then
    for mnk in 1x14336x4096 16x14336x4096 1x128256x4096; do
        IFS=x read -r m n k <<<"$mnk"
        echo "=== $mnk" | tee -a "$out/table.txt"
        timeout 200 .gpu/roofline compare --weight-only --hw $hw --m $m --n $n --k $k 2>&1 | tee -a "$out/table.txt" | grep -E "W:|rror"
    done
fi
#   verify  model-bench's GPU tests and the server's GPU test on the final build
if has verify; then
    .gpu/model_bench_gpu --ignored 2>&1 | grep -E "test result|FAILED|panicked" | tee "$out/verify.txt"
    .gpu/server_api --ignored 2>&1 | grep -E "test result|FAILED|panicked" | tee -a "$out/verify.txt"
fi

#!/usr/bin/env bash
# Session 28 device probes. Run from the repository root on the GPU machine with .gpu/ built
# (bench/build-gpu.sh); logs to $OUT. Parts (first argument, comma-separated):
#   mbcheck model-bench's GPU tests (the branch model-bench-linear-checks: the last layer's qkv / o_proj and the
#           LM head checked against f64 CPU references on sampled rows), whole output kept; $MB_REPEAT times
#   mbcli   Llama-3.1-8B model-bench at batch $MB_BATCHES (default 1 8) in $MB_SCHEMES (default fp16 int4_g128
#           nf4), each run's full stdout and stderr kept
#   ckpt    only the checkpoint test of model_bench_gpu, whole output
#   tune8   the bulk ring's own settings at M <= 8 (its slots, tiles a slot and K splits were tuned at M = 16,
#           where x takes twice the shared memory): tune_table rows of every bulk-ring configuration for INT4
#           and NF4 at $TUNE8_SHAPES (default 8x14336x4096,4x14336x4096)
. "$(dirname "$0")/probe-lib.sh"
probe_start exp-session28 "${1:-mbcheck}"
if has mbcheck; then
    for i in $(seq ${MB_REPEAT:-1}); do
        timeout 200 .gpu/model_bench_gpu --ignored --nocapture >"$out/mbcheck-tests-$i.txt" 2>&1
        grep -E -A3 "^test |test result|panicked|Incorrect|error" "$out/mbcheck-tests-$i.txt" | grep -vE "^(Fp|Bf|Int|Nf|Mx|Nv)"
    done
fi
if has mbcli; then
    for b in ${MB_BATCHES:-1 8}; do
        for s in ${MB_SCHEMES:-fp16 int4_g128 nf4}; do
            log="$out/mb-b$b-$s.txt"
            timeout 100 .gpu/roofline model-bench --config llama-3.1-8b --batch $b --hw $hw --scheme $s >"$log" 2>&1
            echo "=== batch $b $s: rc=$?"
            grep -E "^step|tokens/s|rel. error|rror" "$log"
        done
    done
fi
if has ckpt; then
    timeout 100 .gpu/model_bench_gpu --ignored --nocapture checkpoint 2>&1 | tee "$out/ckpt.txt" | tail -n 30
fi
if has tune8; then
    ROOFLINE_TUNE_SET=xreg ROOFLINE_TUNE_SHAPES=${TUNE8_SHAPES:-8x14336x4096,4x14336x4096} \
        ROOFLINE_TUNE_FORMATS=INT4_G128,NF4 ROOFLINE_TUNE_ONLY="XSM+XB" \
        timeout ${TUNE8_S:-400} .gpu/weight_only_gpu --ignored tune_table --nocapture 2>&1 | grep -E "^TT |rror" | tee "$out/tune8.txt" | tail -n 40
fi
#   stress  model-bench steps in 6 threads at once (checks_hold_under_concurrent_steps), once per --gemv setting
#           in $STRESS_GEMV (space-separated; "-" is the default plan): where the checked LM head goes wrong
if has stress; then
    for g in ${STRESS_GEMV:--}; do
        [[ $g == - ]] && g=""
        echo "=== gemv [$g]" | tee -a "$out/stress.txt"
        ROOFLINE_STRESS_GEMV=$g timeout 150 .gpu/model_bench_gpu --ignored --nocapture checks_hold_under_concurrent \
            2>&1 | grep -E "lm_head|round|test result|failed" | tee -a "$out/stress.txt" | tail -n 12
    done
fi
#   serial  model_bench_gpu's tests one at a time (--test-threads=1): does the LM head check fail without
#           other tests' steps beside it?
if has serial; then
    timeout 300 .gpu/model_bench_gpu --ignored --nocapture --test-threads=1 >"$out/serial.txt" 2>&1
    grep -E "^test |test result|PROBE" "$out/serial.txt"
fi
#   lmfirst the LM head's first launch (session 28: wrong after bad_configs_are_errors_not_panics ran first,
#           right when launched again): bad_configs then checkpoint_weights, one thread, $LM_REPEAT times per
#           --gemv setting in $LM_GEMV ("-" the default); then checkpoint_weights alone, $LM_ALONE times
if has lmfirst; then
    for g in ${LM_GEMV:--}; do
        [[ $g == - ]] && g=""
        for i in $(seq ${LM_REPEAT:-2}); do
            echo "=== [$g] $i: after bad_configs" | tee -a "$out/lmfirst.txt"
            ROOFLINE_TEST_GEMV=$g timeout 60 .gpu/model_bench_gpu --ignored --nocapture --test-threads=1 bad_configs \
                checkpoint_weights 2>&1 | grep -E "^test |PROBE" | cut -c1-400 | tee -a "$out/lmfirst.txt"
        done
    done
    for i in $(seq ${LM_ALONE:-1}); do
        echo "=== alone $i" | tee -a "$out/lmfirst.txt"
        timeout 60 .gpu/model_bench_gpu --ignored --nocapture checkpoint_weights 2>&1 | grep -E "^test |PROBE" \
            | cut -c1-1500 | tee -a "$out/lmfirst.txt"
    done
fi
#   sass    the x-in-registers LM head kernel of the tiny checkpoint test (INT4, M = 1, 8 rows a step, one
#           warp, XH) disassembled: where its loads sit against griddepcontrol.wait
if has sass; then
    ROOFLINE_DUMP_CUBIN=$out/cubins timeout 60 .gpu/model_bench_gpu --ignored checkpoint_weights >/dev/null 2>&1
    for t in $(grep -l -- "-DR=8 -DU=1 -DWARPS=1" "$out"/cubins/weight_only_xreg-*.txt); do
        grep -q -- "-DXH=1" "$t" || continue
        c=${t%.txt}.cubin
        echo "=== $(head -2 "$t" | tail -1)"
        cuobjdump -sass "$c" >"${c%.cubin}.sass" 2>&1
        grep -nE "LDG|DEP|ACQ|CCTL|ERRBAR|MEMBAR|ELECT|PREEXIT|griddep|BAR|EXIT" "${c%.cubin}.sass" | head -40
    done
fi
#   fixcheck the loads of earlier kernels' outputs kept after griddepcontrol.wait (`ld_dep`, no __restrict__ on
#           those parameters): every kernel the checkpoint test builds disassembled, the coherent loads (LDG
#           without .CONSTANT) counted before ACQBULK (must be none); model_bench_gpu's tests; Llama-3.1-8B
#           INT4 batch 1 and weight-only GEMVs at 1x14336x4096 against the build before ($BIN_BASE)
if has fixcheck; then
    ROOFLINE_DUMP_CUBIN=$out/cubins timeout 60 .gpu/model_bench_gpu --ignored checkpoint_weights >/dev/null 2>&1
    pdl_sass fixcheck-sass "$out/cubins"
    timeout 200 .gpu/model_bench_gpu --ignored --nocapture >"$out/fixcheck-tests.txt" 2>&1
    grep -E "^test |test result|panicked" "$out/fixcheck-tests.txt"
    for b in ${BIN_BASE:-roofline-base} roofline; do
        echo "=== $b" | tee -a "$out/fixcheck-perf.txt"
        timeout 100 .gpu/$b model-bench --config llama-3.1-8b --batch 1 --hw $hw --scheme int4_g128 2>&1 \
            | grep -E "^step|tokens/s|rel. error" | tee -a "$out/fixcheck-perf.txt"
        BIN=$b wo_compare fixcheck-perf $b 1 14336x4096 -p fp16 -p fp8_e4m3 -p int4_g128 -p nf4 -p nvfp4
    done
fi
#   wosuite (for session 29) the weight-only GPU tests that check the default plans at every M against the f64
#           reference, on the new sources, every kernel they build dumped and its loads before ACQBULK counted
#           (`pdl_sass`: coherent loads there must be 0 in every weight-only kernel)
if has wosuite; then
    ROOFLINE_DUMP_CUBIN=$out/cubins timeout 420 .gpu/weight_only_gpu --ignored --nocapture every_m_and_tiny_odd_shapes \
        every_format_matches_the_reference_at_the_issue_shapes fused_norm_and_residual_add variants_and_bf16 \
        >"$out/wosuite-tests.txt" 2>&1
    grep -E "^test |test result|panicked" "$out/wosuite-tests.txt"
    pdl_sass wosuite-sass "$out/cubins" | awk '$NF == "loads" && $(NF-2) != 0' | head -20
fi

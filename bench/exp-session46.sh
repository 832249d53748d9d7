#!/usr/bin/env bash
# Session 46 probes (H200): why three of roofline-gpu's GPU unit tests (bulk_stream_is_checked,
# read_stream_is_checked_and_faster_than_nothing, gemm_is_correct_and_timed) never ended since session 42's gated
# samples.
# Parts (comma-separated):
#   hang    each of the three alone (--test-threads=1), gated; then the three in parallel, gated and with
#           ROOFLINE_TIMING_GATE=0; each run killed after HANG_TIMEOUT s (default 60), into $out/hang-*.txt (the
#           timing engine prints a warning for every measurement whose gates timed out)
#   fix     the new test gpus_timed_in_parallel_threads_do_not_wait_out_their_gates from .gpu/gpu_lib_old (the
#           legacy default stream shared by every Gpu, built from session 45's code) and from .gpu/gpu_lib (a stream
#           a Gpu); then the three tests above in parallel, gated, from .gpu/gpu_lib
#   ab      `measure` from .gpu/roofline-base (the shared default stream) and .gpu/roofline (a stream a Gpu),
#           alternately, twice (`bin_ab`), at AB_PAIRS; then model-bench Llama-3.1-8B batch 1 (AB_SCHEMES, default
#           int4_g128 fp16) from each (`mb_ab`)
#   all     every GPU unit test of roofline-gpu (.gpu/gpu_lib --ignored, in parallel threads) but the read-stream and
#           bulk-copy sweeps and the NVRTC spill check (CI runs it), killed after 420 s: the three above among them
#   gpulib  roofline-gpu's GPU unit tests (.gpu/gpu_lib --ignored --nocapture) without its measurement probes
#           (GPULIB_SKIP, default the read-stream and bulk-copy sweeps), killed after GPULIB_TIMEOUT s (default 480)
# $HW: the profile (bench/results/h200-measured.toml on an H200). Logs: $OUT (the device's), else /tmp/exp-session46.
. "$(dirname "$0")/probe-lib.sh"
probe_start exp-session46 "${1:-hang}"
three=(bulk_stream::tests::bulk_stream_is_checked stream::tests::read_stream_is_checked_and_faster_than_nothing
    tests::gemm_is_correct_and_timed)
if has hang; then
    for t in "${three[@]}"; do
        SECONDS=0
        test_bin "hang-alone-${t##*::}" "${HANG_TIMEOUT:-60}" gpu_lib --ignored --nocapture --exact --test-threads=1 "$t"
        echo "  $SECONDS s" | tee -a "$out/hang-alone-${t##*::}.txt"
    done
    for g in 0 1; do
        SECONDS=0
        ROOFLINE_TIMING_GATE=$g test_bin "hang-parallel-gate$g" "${HANG_TIMEOUT:-60}" gpu_lib --ignored --nocapture \
            --exact "${three[@]}"
        echo "  $SECONDS s" | tee -a "$out/hang-parallel-gate$g.txt"
        grep -c "gates timed out" "$out/hang-parallel-gate$g.txt"
    done
fi
if has fix; then
    new=tests::gpus_timed_in_parallel_threads_do_not_wait_out_their_gates
    for b in gpu_lib_old gpu_lib; do
        SECONDS=0
        test_bin "fix-$b" "${HANG_TIMEOUT:-60}" $b --ignored --nocapture --exact "$new"
        echo "  $SECONDS s" | tee -a "$out/fix-$b.txt"
    done
    SECONDS=0
    test_bin fix-three 120 gpu_lib --ignored --nocapture --exact "${three[@]}"
    echo "  $SECONDS s" | tee -a "$out/fix-three.txt"
fi
if has ab; then
    bin_ab ab "${AB_PAIRS:-int4_g128:1x14336x4096 fp16:1x14336x4096 int4_g128:1x4096x4096 nvfp4:1x4096x4096 fp8_e4m3:1x14336x4096}"
    mb_ab ab-mb llama-3.1-8b "" "${AB_SCHEMES:-int4_g128 fp16}"
fi
if has all; then
    SECONDS=0
    GPULIB_TIMEOUT=420 GPULIB_SKIP="bulk_stream_sweep read_stream_at_sizes read_stream_pdl_ab kernels_compile_without_spills" \
        gpu_lib_tests all
    echo "  $SECONDS s" | tee -a "$out/all.txt"
    grep -E "timed again|warning" "$out/all.txt" | sort | uniq -c | sort -rn | head -20
fi
if has gpulib; then
    gpu_lib_tests gpu-lib
fi

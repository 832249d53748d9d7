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
#   mcurve  `measure` (the engine's default kernels) of MC_FORMATS (default int4_g128 nvfp4 nf4 fp8_e4m3 fp16) at
#           MxMC_SHAPE (default 14336x4096) for each M of MC_M (default 1 2 3 4 8 12 16), into $out/mcurve.txt
#   m2      `measure` of M2_FORMATS (default fp16 bf16) at M = 2 on M2_SHAPES under the engine's default (split-K for
#           16-bit weights at M = 2), the x-stationary tensor-core kernel (--gemv variant=xmma) and the same with x
#           in shared memory (variant=xmma,x_smem=true), into $out/m2.txt
#   bf16mma BF16 weights with BF16 x on the tensor cores (new): the weight-only reference tests of BF16 and FP16
#           (variants_and_bf16_activations_match_the_reference, fused_norm_and_residual_add_match_the_reference,
#           ROOFLINE_TEST_FORMATS=BF16,FP16), then `measure` of BF16 weights with BF16 x at BM_SHAPES under the
#           default (tensor cores from M = 2) and split-K (before), and FP16 at M = 2 by default, into
#           $out/bf16mma.txt
#   verify  the GPU tests that open GPUs in several threads or streams (a stream a Gpu since this session): all of
#           .gpu/model_bench_gpu (concurrent steps, captures), .gpu/ring_gpu (captures beside context work in other
#           threads, the ring's reference test) and .gpu/ffn_gpu
#   bf16f16 BF16 weights with FP16 x on the tensor cores (converted to f16 as decoded; new): the weight-only variants
#           test for BF16 (ROOFLINE_TEST_FORMATS=BF16), `measure` of BF16 weights (FP16 x) at BF_SHAPES, default vs
#           split-K, and model-bench Llama-3.1-8B BF16 at batch 16 (8 layers), default vs --gemv variant=splitk,
#           into $out/bf16f16.txt
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
if has mcurve; then
    for f in ${MC_FORMATS:-int4_g128 nvfp4 nf4 fp8_e4m3 fp16}; do
        for m in ${MC_M:-1 2 3 4 8 12 16}; do
            MEAS_TIMEOUT=40 meas mcurve default "$f" "${m}x${MC_SHAPE:-14336x4096}" ""
        done
    done
fi
if has m2; then
    for s in ${M2_SHAPES:-2x14336x4096 2x4096x4096 2x4096x14336 2x1024x4096 2x28672x4096 2x128256x4096 2x6144x4096}; do
        for f in ${M2_FORMATS:-fp16 bf16}; do
            for g in "" variant=xmma variant=xmma,x_smem=true; do
                MEAS_TIMEOUT=40 meas m2 "${g:-default}" "$f" "$s" "$g"
            done
        done
    done
fi
if has bf16mma; then
    ROOFLINE_TEST_FORMATS=BF16,FP16 test_bin bf16mma-tests 300 weight_only_gpu --ignored --nocapture \
        variants_and_bf16_activations_match_the_reference fused_norm_and_residual_add_match_the_reference
    for s in ${BM_SHAPES:-2x14336x4096 4x14336x4096 8x14336x4096 16x14336x4096 16x4096x4096 16x4096x14336 4x128256x4096}; do
        for g in "" variant=splitk; do
            MEAS_X=bf16 MEAS_TIMEOUT=40 meas bf16mma "${g:-default}" bf16 "$s" "$g"
        done
    done
    for s in 2x14336x4096 2x4096x4096; do
        MEAS_TIMEOUT=40 meas bf16mma default fp16 "$s" ""
    done
fi
if has verify; then
    test_bin verify-mb 240 model_bench_gpu --ignored
    test_bin verify-ring 180 ring_gpu --ignored
    test_bin verify-ffn 60 ffn_gpu --ignored
fi
if has bf16f16; then
    ROOFLINE_TEST_FORMATS=BF16 test_bin bf16f16-tests 150 weight_only_gpu --ignored --nocapture \
        variants_and_bf16_activations_match_the_reference
    for s in ${BF_SHAPES:-16x14336x4096 2x4096x4096 16x4096x14336}; do
        for g in "" variant=splitk; do
            MEAS_TIMEOUT=30 meas bf16f16 "${g:-default}" bf16 "$s" "$g"
        done
    done
    for g in "" variant=splitk; do
        MB_TIMEOUT=60 mb bf16f16-mb "${g:-default} llama-3.1-8b 8 layers batch 16 bf16" roofline --config llama-3.1-8b \
            --layers 8 --batch 16 --scheme bf16 ${g:+--gemv $g}
    done
fi
if has gpulib; then
    gpu_lib_tests gpu-lib
fi

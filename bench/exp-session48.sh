#!/usr/bin/env bash
# Session 48 probes (H200 through the device tool). Parts (comma-separated):
#   ringbf  the ring GEMV's GPU test (.gpu/ring_gpu) with BF16 x for every format (new: the f16x2 row steps take
#           BF16 x scaled into [-1, 1) and packed as f16), ROOFLINE_TEST_X (default bf16), RB_FORMATS (default all),
#           into $out/ringbf.txt (each case's relative error)
#   m1      M = 1 with BF16 x at M1_SHAPES for M1_FORMATS: the engine's default (now the ring) against the x-in-registers
#           kernel's FP32 products (--gemv ring=false, the default before), and FP16 x's default beside them, into
#           $out/m1.txt
#   table   `compare --weight-only --activations bf16` (every format, BF16 weights as the 16-bit base) at TB_SHAPES,
#           into $out/table.txt
#   nf4bf   NF4 with BF16 x on the tensor cores through the bulk ring's table (session 47's patch: hi then lo pair
#           copies, two passes): `measure` with BF16 x at NB_SHAPES under --gemv NB_GEMVS (nf4_table=0: the byte
#           permutes, the default before), FP16 x's default beside them, into $out/nf4bf.txt; NB_TESTS=1 first runs
#           the weight-only reference tests for NF4 with BF16 x
#   before  M = 1 with BF16 x for FP8, INT8 and FP16 weights on split-K (their default before the ring took BF16 x)
#           at M1_SHAPES, into $out/before.txt
#   verify  the full spill matrix (.gpu/gpu_lib kernels_compile_without_spills_nvrtc_required), then the ring GEMV's GPU
#           test with both activation types (VERIFY_RING=1), into $out/verify-*.txt
#   xf16    BF16 x rewritten in shared memory as scaled f16 on the bulk ring (`--gemv xf16=true`, new, opt-in) for
#           XF_FORMATS at XF_SHAPES (M >= 2; `XF_GEMV` more plan keys, default x_smem=true,bulk=true), each checked
#           against the f64 reference then timed, beside the default; into $out/xf16.txt
# $HW: the profile (bench/results/h200-measured.toml on an H200). Logs: $OUT (the device's), else /tmp/exp-session48.
. "$(dirname "$0")/probe-lib.sh"
probe_start exp-session48 "${1:-ringbf}"
if has ringbf; then
    ROOFLINE_TEST_X=${ROOFLINE_TEST_X:-bf16} ROOFLINE_TEST_FORMATS=${RB_FORMATS:-} \
        test_bin ringbf ${RB_TIMEOUT:-400} ring_gpu --ignored --nocapture ring_gemv_matches_the_reference
    grep -E "^ring GEMV" "$out/ringbf.txt" | sed -E 's/, [0-9]+ CTAs.*registers//' | sort -t' ' -k2,2 | cut -c1-160
fi
if has m1; then
    for s in ${M1_SHAPES:-1x14336x4096 1x4096x14336 1x4096x4096}; do
        for f in ${M1_FORMATS:-INT4_G128 NF4 MXFP4 NVFP4 FP8_E4M3 INT8 FP16}; do
            for g in "" ring=false; do
                MEAS_X=bf16 MEAS_TIMEOUT=40 meas m1 "bf16 ${g:-default}" "$f" "$s" "$g"
            done
            MEAS_TIMEOUT=40 meas m1 "fp16 default" "$f" "$s" ""
        done
    done
fi
if has table; then
    for s in ${TB_SHAPES:-1x14336x4096 1x4096x14336 1x4096x4096 16x14336x4096}; do
        IFS=x read -r m n k <<<"$s"
        echo "=== table bf16 $s" | tee -a "$out/table.txt"
        timeout 150 .gpu/roofline compare --weight-only --activations bf16 --hw $hw --m $m --n $n --k $k 2>&1 \
            | tee -a "$out/table.txt" | grep -E "W:|rror"
    done
fi
if has nf4bf; then
    [[ ${NB_TESTS:-0} == 1 ]] && ROOFLINE_TEST_X=bf16 ROOFLINE_TEST_FORMATS=NF4 \
        test_bin nf4bf-tests ${NB_TEST_TIMEOUT:-300} weight_only_gpu --ignored --nocapture \
        variants_and_bf16_activations_match_the_reference fused_norm_and_residual_add_match_the_reference
    for s in ${NB_SHAPES:-2x14336x4096 8x14336x4096 16x14336x4096 16x4096x14336}; do
        for g in ${NB_GEMVS:-nf4_table=0 default unroll=2 unroll=3 warps=8}; do
            MEAS_X=bf16 MEAS_TIMEOUT=40 meas nf4bf "bf16 $g" NF4 "$s" "${g#default}"
        done
        MEAS_TIMEOUT=40 meas nf4bf "fp16 default" NF4 "$s" ""
    done
fi
if has before; then
    for s in ${M1_SHAPES:-1x14336x4096 1x4096x14336 1x4096x4096}; do
        for f in FP8_E4M3 INT8 FP16; do
            MEAS_X=bf16 MEAS_TIMEOUT=40 meas before "bf16 split-K" "$f" "$s" variant=splitk
        done
    done
fi
if has verify; then
    test_bin verify-spills 300 gpu_lib --ignored --exact weight_only::tests::kernels_compile_without_spills_nvrtc_required
    [[ ${VERIFY_RING:-0} == 1 ]] && test_bin verify-ring ${VERIFY_RING_TIMEOUT:-500} ring_gpu --ignored --nocapture ring_gemv_matches_the_reference
fi
if has xf16; then
    for s in ${XF_SHAPES:-16x14336x4096 16x4096x14336 8x14336x4096 3x4096x4096}; do
        for f in ${XF_FORMATS:-NF4 FP8_E4M3 MXFP4 NVFP4 INT4_G128 INT8}; do
            for g in "xf16=true,${XF_GEMV:-x_smem=true,bulk=true}" ${XF_BASE:-default}; do
                MEAS_X=bf16 MEAS_TIMEOUT=40 meas xf16 "bf16 $g" "$f" "$s" "${g#default}"
            done
        done
    done
fi

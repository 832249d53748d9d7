#!/usr/bin/env bash
# Session 47 probes (H200 through the device tool). Parts (comma-separated):
#   bf16x   FP8, INT8, INT4, MXFP4 and NVFP4 weights with BF16 x on the tensor cores (new: decoded to BF16): the
#           weight-only reference tests of those formats (variants_and_bf16_activations_match_the_reference,
#           fused_norm_and_residual_add_match_the_reference), then `measure` with BF16 x at BX_SHAPES under the
#           default (tensor cores from M = 2) and split-K (before), and with FP16 x (default) beside them, into
#           $out/bf16x.txt (BX_TESTS=0: no tests; ROOFLINE_TEST_X, default bf16: the activations the tests run)
#   mcurve  `measure` with BF16 x (the engine's defaults) at Mx14336x4096, M in MC_MS (default 1 2 4 8 16), for
#           MC_FORMATS (default INT4_G128 FP8_E4M3 NVFP4), into $out/mcurve.txt
#   m1      M = 1 with BF16 x: the engine's default (x in registers, FP32 products) against the tensor cores
#           (--gemv variant=xmma) at M1_SHAPES for M1_FORMATS, into $out/m1.txt
#   verify  the GPU tests of the ring and the fused FFN (.gpu/ring_gpu, .gpu/ffn_gpu) after session 46's stream change
# $HW: the profile (bench/results/h200-measured.toml on an H200). Logs: $OUT (the device's), else /tmp/exp-session47.
. "$(dirname "$0")/probe-lib.sh"
probe_start exp-session47 "${1:-bf16x}"
BX_FORMATS=${BX_FORMATS:-INT4_G128 FP8_E4M3 INT8 MXFP4 NVFP4}
if has bf16x; then
    [[ ${BX_TESTS:-1} == 1 ]] && ROOFLINE_TEST_X=${ROOFLINE_TEST_X:-bf16} ROOFLINE_TEST_FORMATS=${BX_FORMATS// /,} \
        test_bin bf16x-tests ${BX_TEST_TIMEOUT:-360} weight_only_gpu --ignored --nocapture \
        variants_and_bf16_activations_match_the_reference fused_norm_and_residual_add_match_the_reference
    for f in $BX_FORMATS; do
        for s in ${BX_SHAPES:-2x14336x4096 16x14336x4096 16x4096x14336}; do
            for g in "" variant=splitk; do
                MEAS_X=bf16 MEAS_TIMEOUT=40 meas bf16x "${g:-default}" "$f" "$s" "$g"
            done
            MEAS_TIMEOUT=40 meas bf16x default "$f" "$s" ""
        done
    done
fi
if has mcurve; then
    for f in ${MC_FORMATS:-INT4_G128 FP8_E4M3 NVFP4}; do
        for m in ${MC_MS:-1 2 4 8 16}; do
            MEAS_X=bf16 MEAS_TIMEOUT=40 meas mcurve default "$f" "${m}x14336x4096" ""
        done
    done
fi
if has m1; then
    for s in ${M1_SHAPES:-1x14336x4096 1x4096x14336 1x4096x4096 1x128256x4096}; do
        for f in ${M1_FORMATS:-INT4_G128 FP8_E4M3 INT8 MXFP4 NVFP4}; do
            for g in "" variant=xmma; do
                MEAS_X=bf16 MEAS_TIMEOUT=40 meas m1 "${g:-default}" "$f" "$s" "$g"
            done
        done
    done
fi
if has verify; then
    test_bin verify-ring ${VERIFY_RING_TIMEOUT:-420} ring_gpu --ignored
    test_bin verify-ffn 120 ffn_gpu --ignored
fi

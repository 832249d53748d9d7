#!/usr/bin/env bash
# Session 49 probes (H200 through the device tool). Parts (comma-separated):
#   slots    the bulk ring (tensor cores, M = 2-16) with deeper or wider per-warp rings on the H200: the tuning
#            table (each configuration checked against the f64 reference, then timed) for SL_FORMATS at SL_SHAPES
#            over the slot shapes SL_ONLY (tiles a slot U x slots NST, 16 warps; default and one K split), into
#            $out/slots.txt; the defaults were tuned on the H100 at M = 16 (session 18: 4 tiles x 2 slots)
#   loadonly the bulk ring's loads alone (EXP_LOADONLY) and its loads and decode without the MMAs (EXP_NOMMA=2),
#            wrong results by design, beside the real kernel, for INT4 at LO_SHAPES in LO_ONLY's slot shapes,
#            into $out/loadonly.txt
#   xrtest   the producer-warp bulk ring's GPU tests (new, `wo_mma_xr`): producer_ring_matches_the_reference, then the
#            fused norm / residual-add test (which runs it too), XT_FORMATS (default all), into $out/xrtest*.txt
#   xr       the producer-warp bulk ring against the per-warp rings: the tuning table at XR_SHAPES for XR_FORMATS,
#            first the default per-warp row, then XR_ONLY's slot shapes with ROOFLINE_TUNE_PRODUCER=1 (each checked
#            against the f64 reference, then timed), into $out/xr.txt; then its loads alone (EXP_LOADONLY) for INT4
#            at LO_SHAPES into $out/xr-loadonly.txt
#   xrdepth  the producer-warp bulk ring's units in flight (XR_AHEAD, an NVRTC define: XD_AHEADS, default 0 2 4; 0: as
#            the slots free up) x slots (XD_ONLY) for XD_FORMATS at XD_SHAPES, each checked and timed, into $out/xrdepth.txt
#   xrparts  where the producer-warp bulk ring's streaming goes: its loads alone (EXP_LOADONLY) as built, without the
#            units' scale copies (EXP_XR_NOSCALES), with XR_AHEAD=0, and with units of 32 and 64 KB (U=4, 8), for INT4 at
#            XP_SHAPES, into $out/xrparts.txt (r7 also ran EXP_XR_NORED, removed after: its non-finite sums are refused)
#   xr8      the producer-warp bulk ring for 8-bit weights (where r5 found it faster: K split 8 ways on the per-warp
#            rings) at X8_SHAPES for X8_FORMATS: `measure` (checked, then timed) with the default plan and with
#            --gemv producer=true (and X8_GEMV, default also producer=true,unroll=2), into $out/xr8.txt
#   bulk8    8-bit weights at M = 6-16 on shapes of at most 4096 x 4096 weights (the per-warp bulk rings' default takes
#            8-bit weights only above, from H100 tuning): `measure` with the default plan and with
#            --gemv x_smem=true,bulk=true at B8_SHAPES for B8_FORMATS, into $out/bulk8.txt
#   final    the 8-bit weight-only reference tests with FP16 x (the H200's new default: bulk rings from M = 8), then
#            `measure` of FP8 / INT8 at FN_SHAPES with the new default, into $out/final*.txt
# $HW: the profile (bench/results/h200-measured.toml on an H200). Logs: $OUT (the device's), else /tmp/exp-session49.
. "$(dirname "$0")/probe-lib.sh"
probe_start exp-session49 "${1:-slots}"
if has slots; then
    only=${SL_ONLY:-XSM+XB NST=2 U=4 W=16|XSM+XB NST=3 U=4 W=16|XSM+XB NST=4 U=4 W=16|XSM+XB NST=2 U=8 W=16|XSM+XB NST=4 U=2 W=16|XSM+XB NST=3 U=8 W=16}
    ROOFLINE_TUNE_SET=xreg ROOFLINE_TUNE_SHAPES=${SL_SHAPES:-2x14336x4096,8x14336x4096,16x14336x4096,4x4096x14336} \
        ROOFLINE_TUNE_FORMATS=${SL_FORMATS:-INT4_G128,MXFP4} ROOFLINE_TUNE_ONLY="$only" \
        timeout ${SL_TIMEOUT:-400} .gpu/weight_only_gpu --ignored tune_table --nocapture 2>&1 | grep -E "^TT|panicked|rror" \
        | tee -a "$out/slots.txt"
fi
if has loadonly; then
    TUNE_BIN=weight_only_gpu tune_fmt loadonly INT4_G128 "${LO_ONLY:-XSM+XB NST=2 U=4 W=16|XSM+XB NST=4 U=4 W=16}" \
        "${LO_SHAPES:-2x14336x4096,16x14336x4096}" "" "-DEXP_LOADONLY=1" "-DEXP_NOMMA=2"
fi
if has xrtest; then
    ROOFLINE_TEST_FORMATS=${XT_FORMATS:-} test_bin xrtest ${XT_TIMEOUT:-300} weight_only_gpu --ignored --nocapture \
        producer_ring_matches_the_reference
    ROOFLINE_TEST_FORMATS=${XT_FORMATS:-} test_bin xrtest-fused ${XT_TIMEOUT:-300} weight_only_gpu --ignored --nocapture \
        fused_norm_and_residual_add_match_the_reference
fi
if has xr; then
    shapes=${XR_SHAPES:-2x14336x4096,4x14336x4096,8x14336x4096,16x14336x4096,2x4096x14336,4x4096x14336,16x4096x4096}
    for p in 0 1; do
        [[ $p == 0 ]] && only="XSM+XB NST=2 U=4 W=16 PF" || only=${XR_ONLY:-XSM+XB NST=4 U=2 W=16 PF|XSM+XB NST=3 U=2 W=16 PF|XSM+XB NST=3 U=4 W=16 PF}
        ROOFLINE_TUNE_PRODUCER=$p ROOFLINE_TUNE_SET=xreg ROOFLINE_TUNE_SHAPES=$shapes \
            ROOFLINE_TUNE_FORMATS=${XR_FORMATS:-INT4_G128,MXFP4,NVFP4,NF4,FP8_E4M3,INT8} ROOFLINE_TUNE_ONLY="$only" \
            timeout ${XR_TIMEOUT:-300} .gpu/weight_only_gpu --ignored tune_table --nocapture 2>&1 \
            | grep -E "^TT |panicked|rror" | grep -v " S=1" | tee -a "$out/xr.txt"
    done
    ROOFLINE_TUNE_PRODUCER=1 TUNE_BIN=weight_only_gpu tune_fmt xr-loadonly INT4_G128 "XSM+XB NST=4 U=2 W=16 PF" \
        "${LO_SHAPES:-2x14336x4096,16x14336x4096}" "" "-DEXP_LOADONLY=1"
fi
if has xrdepth; then
    for a in ${XD_AHEADS:-0 2 4}; do
        echo "=== XR_AHEAD=$a" | tee -a "$out/xrdepth.txt"
        ROOFLINE_NVRTC_EXTRA="-DXR_AHEAD=$a" ROOFLINE_TUNE_PRODUCER=1 ROOFLINE_TUNE_SET=xreg \
            ROOFLINE_TUNE_SHAPES=${XD_SHAPES:-2x14336x4096,8x14336x4096,16x14336x4096,4x4096x14336} \
            ROOFLINE_TUNE_FORMATS=${XD_FORMATS:-INT4_G128,MXFP4,FP8_E4M3} \
            ROOFLINE_TUNE_ONLY="${XD_ONLY:-XSM+XB NST=4 U=2 W=16 PF|XSM+XB NST=6 U=2 W=16 PF|XSM+XB NST=6 U=1 W=16 PF}" \
            timeout ${XD_TIMEOUT:-200} .gpu/weight_only_gpu --ignored tune_table --nocapture 2>&1 \
            | grep -E "^TT |panicked|rror" | grep -v " S=1" | tee -a "$out/xrdepth.txt"
    done
fi
if has xrparts; then
    for u in 2 4 8; do
        ROOFLINE_TUNE_PRODUCER=1 TUNE_BIN=weight_only_gpu tune_fmt xrparts INT4_G128 "XSM+XB NST=4 U=$u W=16 PF" \
            "${XP_SHAPES:-2x14336x4096,16x14336x4096}" "" "-DEXP_LOADONLY=1" "-DEXP_LOADONLY=1 -DEXP_XR_NOSCALES=1" \
            "-DEXP_LOADONLY=1 -DXR_AHEAD=0"
    done
fi
if has xr8; then
    for s in ${X8_SHAPES:-2x4096x14336 3x4096x14336 4x4096x14336 8x4096x14336 2x4096x8192 4x4096x8192 2x2048x8192 4x1024x4096 16x4096x4096 16x1024x4096}; do
        for f in ${X8_FORMATS:-FP8_E4M3 INT8}; do
            for g in default producer=true ${X8_GEMV:-producer=true,unroll=2}; do
                MEAS_TIMEOUT=40 meas xr8 "$g" "$f" "$s" "${g#default}"
            done
        done
    done
fi
if has bulk8; then
    for s in ${B8_SHAPES:-16x4096x4096 16x2048x4096 16x1024x4096 16x4096x2048 16x4096x3072 12x4096x4096 9x4096x4096 8x4096x4096 6x4096x4096 4x4096x4096}; do
        for f in ${B8_FORMATS:-FP8_E4M3 INT8}; do
            for g in default x_smem=true,bulk=true; do
                MEAS_TIMEOUT=40 meas bulk8 "$g" "$f" "$s" "${g#default}"
            done
        done
    done
fi
if has final; then
    ROOFLINE_TEST_FORMATS=FP8_E4M3,INT8 ROOFLINE_TEST_X=fp16 test_bin final-tests ${FN_TIMEOUT:-200} weight_only_gpu --ignored \
        --nocapture variants_and_bf16_activations_match_the_reference every_m_and_tiny_odd_shapes_through_the_raw_api \
        fused_norm_and_residual_add_match_the_reference
    for s in ${FN_SHAPES:-16x4096x4096 16x1024x4096 8x4096x4096 6x4096x4096}; do
        for f in FP8_E4M3 INT8; do MEAS_TIMEOUT=40 meas final default "$f" "$s" ""; done
    done
fi

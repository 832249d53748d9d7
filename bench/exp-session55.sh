#!/usr/bin/env bash
# Session 55 probes (H200 through the device tool). Parts (comma-separated):
#   bf       BF16 x on the tensor-core ring for NF4, MXFP4 and NVFP4 (converted to f16 by a power of two a row,
#            `RW_MMA_XF16`): the ring test's tensor-core cases (9-16 rows, BF16 x, also x near 8e6), then `measure` with
#            BF16 x of the tensor-core ring (now the default) against the bulk ring (variant=xmma, the default before)
#            at BF_SHAPES, twice, and the tensor-core ring with FP16 x beside, once, per format of BF_FORMATS, into
#            $out/bf*.txt (BF_M: the test's rows of x; BF_GEMVS: the --gemv settings with BF16 x)
#   i4x      INT4 with BF16 x on the tensor-core ring: bf16 products (the default) against x converted to f16
#            (ROOFLINE_RING_MMA_XF16=1), the ring test's tensor-core cases with the conversion, then `env_ab` at
#            BF_SHAPES, into $out/i4x*.txt
#   xfp      what BF16 x's conversion costs (probes, wrong results accepted): tune_table's tensor-core ring ("XReg
#            RING") for MXFP4 with BF16 x at XFP_SHAPES with EXP_XF16 = 0 (the build), 1 (no conversion), 2 (no row
#            maxima), and with FP16 x, into $out/xfp.txt
#   mb       model-bench Llama-3.1-8B (8 layers) per scheme of MB_SCHEMES (default nf4) at MB_BATCHES (default 16 9),
#            into $out/mb.txt
#   fin      the committed build's BF16 default: `measure` without --gemv with BF16 x (NF4, MXFP4, NVFP4) at FIN_SHAPES,
#            the engine's variants test with BF16 x for those formats, and NF4 (the build NVRTC 13.0 spills) and INT4
#            (a unit a pass since session 55) with FP16 x at 16x1024x4096, into $out/fin*.txt
#   final    the committed build: weight_only_gpu's every-M test (INT4), model-bench's GPU tests, model-bench
#            Llama-3.1-8B INT4 (8 layers) at FI_BATCHES (default 16 12 9), issue 11's table, into $out/final*.txt
# $HW: the profile (bench/results/h200-measured.toml on an H200). Logs: $OUT (the device's), else /tmp/exp-session55.
. "$(dirname "$0")/probe-lib.sh"
probe_start exp-session55 "${1:-bf}"
bf_shapes=${BF_SHAPES:-16x14336x4096 9x14336x4096 16x4096x4096 16x28672x4096 12x10240x4096 16x1024x4096}
if has bf; then
    ROOFLINE_TEST_M=${BF_M:-9,10,11,12,13,16} ROOFLINE_TEST_FORMATS=NF4,MXFP4,NVFP4 ROOFLINE_TEST_X=bf16 \
        test_bin bf-rtest 300 ring_gpu --ignored --nocapture ring_gemv_matches_the_reference
    for f in ${BF_FORMATS:-NF4 MXFP4 NVFP4}; do
        for s in $bf_shapes; do
            for rep in 1 2; do
                for g in ${BF_GEMVS:-variant=xreg,ring=true variant=xmma}; do
                    MEAS_X=bf16 MEAS_TIMEOUT=40 meas bf "bf16 $g" "$f" "$s" "$g"
                done
            done
            MEAS_TIMEOUT=40 meas bf "fp16 ring" "$f" "$s" variant=xreg,ring=true
        done
    done
fi
if has i4x; then
    ROOFLINE_RING_MMA_XF16=1 ROOFLINE_TEST_M=${BF_M:-9,10,11,12,13,16} ROOFLINE_TEST_FORMATS=INT4_G128 ROOFLINE_TEST_X=bf16 \
        test_bin i4x-rtest 150 ring_gpu --ignored --nocapture ring_gemv_matches_the_reference
    MEAS_X=bf16 env_ab i4x XF16 ROOFLINE_RING_MMA_XF16 "default 1" "$bf_shapes" INT4_G128 variant=xreg,ring=true
fi
if has mb; then
    for scheme in ${MB_SCHEMES:-nf4}; do
        for b in ${MB_BATCHES:-16 9}; do
            MB_TIMEOUT=200 mb mb "$scheme batch $b" roofline --config llama-3.1-8b --schemes "$scheme" --batch "$b" \
                --layers 8
        done
    done
fi
if has fin; then
    for f in NF4 MXFP4 NVFP4; do
        for s in ${FIN_SHAPES:-16x14336x4096 12x4096x4096}; do MEAS_X=bf16 MEAS_TIMEOUT=40 meas fin "default" "$f" "$s" ""; done
    done
    MEAS_TIMEOUT=40 meas fin "default" NF4 16x1024x4096 ""
    MEAS_TIMEOUT=40 meas fin "default" INT4_G128 16x1024x4096 ""
    ROOFLINE_TEST_FORMATS=NF4,MXFP4,NVFP4 ROOFLINE_TEST_X=bf16 test_bin fin-variants 200 weight_only_gpu --ignored \
        --nocapture variants_and_bf16_activations_match_the_reference
fi
if has final; then
    final_checks default
fi
if has xfp; then
    # What BF16 x's conversion costs: EXP_XF16=1 (no conversion), 2 (no row maxima), against the build; FP16 x beside.
    for e in 0 1 2 f16; do
        echo "=== EXP_XF16=$e" | tee -a "$out/xfp.txt"
        x=bf16; extra=-DEXP_XF16=$e
        [[ $e == f16 ]] && x=fp16 extra=
        ROOFLINE_NVRTC_EXTRA="$extra" ROOFLINE_TUNE_X=$x ROOFLINE_TUNE_SET=xreg ROOFLINE_TUNE_TOLERANCE=1e30 \
            ROOFLINE_TUNE_SHAPES=${XFP_SHAPES:-16x1024x4096,16x14336x4096} ROOFLINE_TUNE_FORMATS=MXFP4 \
            ROOFLINE_TUNE_ONLY="XReg RING" timeout 150 .gpu/weight_only_gpu --ignored tune_table --nocapture 2>&1 \
            | grep -E "^TT |panicked|error" | cut -c1-200 | tee -a "$out/xfp.txt"
    done
fi

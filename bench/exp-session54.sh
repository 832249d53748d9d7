#!/usr/bin/env bash
# Session 54 probes (H200 through the device tool). Parts (comma-separated):
#   mxfp4    MXFP4 on the tensor-core ring: the ring test's tensor-core cases (9-16 rows, FP16 x) and its scale-window
#            test, then `measure` of the ring forced against the bulk ring (variant=xmma) at MX_SHAPES, twice, and the
#            default at M = 1 of 14336x4096 (issue 11's ratio), into $out/mxfp4*.txt
#   nf4      NF4 on the tensor-core ring (its wide pair table): the ring test's tensor-core cases (9-16 rows, FP16 x),
#            then `measure` of the ring forced against the bulk ring (variant=xmma) at MX_SHAPES, twice, and the
#            default at M = 1 of 14336x4096, into $out/nf4*.txt
#   nf4x     what binds NF4 on the tensor-core ring: NF4 with -DEXP_MMA_NF4REG=1 (register decode) and INT4 with its ring
#            cut to NF4's 7 slots (ROOFLINE_RING_KB=112) against their defaults, at NX_SHAPES, the ring forced, twice,
#            into $out/nf4x.txt
#   pad      the tensor-core ring's rows padded (ROOFLINE_RING_MMA_PAD=32: a slot's rows off each other's banks): the
#            ring test's tensor-core cases at 9 and 16 rows (INT4 and NF4, FP16 x) with it, then `env_ab` of the pad
#            (default, PAD_VALUES) at PAD_SHAPES for PAD_FORMATS, the ring forced, into $out/pad*.txt
#   tcall    the ring test's tensor-core cases (TA_M rows, default 9,12,16) for INT4, NF4, MXFP4 and NVFP4 with FP16 x
#            and INT4 with BF16 x (the committed defaults), into $out/tcall.txt
#   nvs      MXFP4 / NVFP4 on the tensor-core ring with their scales streamed: the ring test's tensor-core cases at
#            NVS_M rows (default 12,16; with 28672x4096, streamed for NVFP4 on fast memory), again with
#            ROOFLINE_RING_STREAM_SCALES=1 (every shape streamed) at 9 and 16, then `measure` of the default against the
#            bulk ring (variant=xmma) at NVS_SHAPES, twice, into $out/nvs*.txt
#   nf4u     NF4's tensor-core ring a unit a pass (the committed build): its ring test's tensor-core cases at 9 and 16
#            rows, `measure` of it at NX_SHAPES once, into $out/nf4u*.txt
#   mb       model-bench Llama-3.1-8B (8 layers) per scheme of MB_SCHEMES (default nvfp4 mxfp4) at MB_BATCHES (default
#            16 12 9) with the committed defaults (the tensor-core ring for qkv, o_proj, gate_up from batch 9), into
#            $out/mb.txt
#   final    the committed build: weight_only_gpu's every-M test (INT4), model-bench's GPU tests, model-bench
#            Llama-3.1-8B INT4 (8 layers) at FI_BATCHES (default 16 12 9), issue 11's table, into $out/final*.txt
# $HW: the profile (bench/results/h200-measured.toml on an H200). Logs: $OUT (the device's), else /tmp/exp-session54.
. "$(dirname "$0")/probe-lib.sh"
probe_start exp-session54 "${1:-mxfp4}"
tc_shapes=${MX_SHAPES:-16x14336x4096 9x14336x4096 16x4096x4096 16x28672x4096 12x10240x4096}
if has mxfp4; then
    test_bin mxfp4-window 100 ring_gpu --ignored --nocapture mxfp4_outside_the_scale_window_leaves_the_tensor_cores
    tc_ab mxfp4 MXFP4 "$tc_shapes"
fi
if has nf4; then
    tc_ab nf4 NF4 "$tc_shapes"
fi
if has nf4x; then
    for s in ${NX_SHAPES:-16x14336x4096 16x4096x4096}; do
        for rep in 1 2; do
            (export MEAS_TIMEOUT=40
             meas nf4x "nf4 default" NF4 "$s" variant=xreg,ring=true
             ROOFLINE_NVRTC_EXTRA=-DEXP_MMA_NF4REG=1 meas nf4x "nf4 register decode" NF4 "$s" variant=xreg,ring=true
             meas nf4x "int4 default" INT4_G128 "$s" variant=xreg,ring=true
             ROOFLINE_RING_KB=112 meas nf4x "int4 7 slots" INT4_G128 "$s" variant=xreg,ring=true)
        done
    done
fi
if has pad; then
    ROOFLINE_RING_MMA_PAD=${PAD_TEST:-32} ROOFLINE_TEST_M=9,16 ROOFLINE_TEST_FORMATS=INT4_G128,NF4,NVFP4 \
        ROOFLINE_TEST_X=fp16 test_bin pad-rtest 200 ring_gpu --ignored --nocapture ring_gemv_matches_the_reference
    env_ab pad PAD ROOFLINE_RING_MMA_PAD "default ${PAD_VALUES:-32}" \
        "${PAD_SHAPES:-16x14336x4096 9x14336x4096 16x4096x4096 16x28672x4096}" "${PAD_FORMATS:-INT4_G128 NF4 NVFP4}" \
        variant=xreg,ring=true
fi
if has tcall; then
    ROOFLINE_TEST_M=${TA_M:-9,12,16} ROOFLINE_TEST_FORMATS=INT4_G128,NF4,MXFP4,NVFP4 ROOFLINE_TEST_X=fp16 \
        test_bin tcall 250 ring_gpu --ignored --nocapture ring_gemv_matches_the_reference
    ROOFLINE_TEST_M=${TA_M:-9,12,16} ROOFLINE_TEST_FORMATS=INT4_G128 ROOFLINE_TEST_X=bf16 \
        test_bin tcall 100 ring_gpu --ignored --nocapture ring_gemv_matches_the_reference
fi
if has nvs; then
    ROOFLINE_TEST_M=${NVS_M:-12,16} ROOFLINE_TEST_FORMATS=MXFP4,NVFP4 ROOFLINE_TEST_X=fp16 \
        test_bin nvs-rtest 200 ring_gpu --ignored --nocapture ring_gemv_matches_the_reference
    ROOFLINE_RING_STREAM_SCALES=1 ROOFLINE_TEST_M=9,16 ROOFLINE_TEST_FORMATS=MXFP4,NVFP4 ROOFLINE_TEST_X=fp16 \
        test_bin nvs-rtest-stream 200 ring_gpu --ignored --nocapture ring_gemv_matches_the_reference
    for s in ${NVS_SHAPES:-16x28672x4096 9x28672x4096 12x28672x4096 16x57344x4096}; do
        for rep in 1 2; do
            for g in "" variant=xmma; do MEAS_TIMEOUT=40 meas nvs "${g:-default}" NVFP4 "$s" "$g"; done
        done
    done
fi
if has nf4u; then
    ROOFLINE_TEST_M=9,16 ROOFLINE_TEST_FORMATS=NF4 ROOFLINE_TEST_X=fp16 \
        test_bin nf4u-rtest 120 ring_gpu --ignored --nocapture ring_gemv_matches_the_reference
    for s in ${NX_SHAPES:-16x14336x4096 9x14336x4096 16x4096x4096 16x28672x4096}; do
        MEAS_TIMEOUT=40 meas nf4u "ring" NF4 "$s" variant=xreg,ring=true
    done
fi
if has mb; then
    for scheme in ${MB_SCHEMES:-nvfp4 mxfp4}; do
        for b in ${MB_BATCHES:-16 12 9}; do
            MB_TIMEOUT=200 mb mb "$scheme batch $b" roofline --config llama-3.1-8b --schemes "$scheme" --batch "$b" \
                --layers 8
        done
    done
fi
if has final; then
    final_checks default
fi

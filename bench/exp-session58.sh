#!/usr/bin/env bash
# Session 58 probes (H200 through the device tool). Parts (comma-separated):
#   tests    the GPU tests after the kernel sources left out the entries their builds never launch (`XREG_NO_KERNEL`
#            in the ring, FFN and attention builds; `wo_mma` under `#if !XS`): model_bench_gpu whole (its MoE test
#            with session 57's 2-8-row defaults among them), weight_only_gpu's variants test for INT4 and NF4 (the
#            tensor-core entries, plain and x-stationary), ffn_gpu, and the ring test at M = 1, 4 and 16, into
#            $out/t-*.txt
#   steps    the tensor-core ring at 4 and 8 rows of x and 16-27 row steps a CTA of K = 4096 (session 57 measured 14
#            and 20 only): `measure` default (the bulk ring past 14 steps) against ROOFLINE_RING_MMA_MAX_STEPS=28,
#            INT4, MXFP4 and NVFP4, twice each, into $out/steps.txt
#   bf       BF16 x at 15-24 row steps of K = 4096 (4 and 8 rows): the default since r2 (the tensor-core ring up to 24 steps)
#            against ROOFLINE_RING_MMA_MAX_STEPS=14 (the default before), INT4, MXFP4 and NVFP4, twice each, into $out/bf.txt
#   bf2      BF16 x past 24 steps (8 rows; 28, 42 and 56 steps): the default (the bulk ring there) against
#            ROOFLINE_RING_MMA_MAX_STEPS=56, INT4, MXFP4 and NVFP4, twice each, into $out/bf2.txt
#   lm       the LM head (8x and 16x128256x4096: 122 row steps a CTA, past the default's 56): the default (the bulk ring)
#            against ROOFLINE_RING_MMA_MAX_STEPS=128 (the tensor-core ring), FP16 then BF16 x, INT4, MXFP4 and NVFP4,
#            twice each, into $out/lm.txt
#   lm2      the LM head at 9, 12 and 16 rows, FP16 x, INT4 and NF4: the default against ROOFLINE_RING_MMA_MAX_STEPS=128,
#            twice each, into $out/lm2.txt
#   mb       model-bench Llama-3.1-8B (8 layers) at batch 16, INT4 and MXFP4, the default (the LM head on the tensor-core
#            ring since r6) against ROOFLINE_RING_MMA_MAX_STEPS=56 (the default before), then `measure` 16x128256x4096 INT4 and 9x NVFP4 (default), into $out/mb.txt
#   refuse   the kernel line's reason where the ring leaves a call (`WeightOnlyGemv::ring_refusal`): ring_gpu's MXFP4
#            scale-window test and spill_fallback_gpu (every ring build forced to spill), into $out/t-*.txt
#   shortk   K = 2048 and 3072 at 10-12 row steps a CTA (past the default's 7 and 10 there): the default (the bulk ring)
#            against ROOFLINE_RING_MMA_MAX_STEPS=24, INT4, MXFP4 and NVFP4, twice each, into $out/shortk.txt
#   def      FP16 x, the default as committed (no variable) at 4x16896x4096, 8x21120x4096 and 8x25344x4096 (the
#            tensor-core ring) and 8x28512x4096 (the bulk ring), INT4, MXFP4 and NVFP4, into $out/def.txt
#   ffn      ffn_gpu alone (its determinism check reads near-zero outputs by the output's RMS since r1), into $out/t-ffn.txt
# $HW: the profile (bench/results/h200-measured.toml on an H200). Logs: $OUT (the device's), else /tmp/exp-session58.
. "$(dirname "$0")/probe-lib.sh"
probe_start exp-session58 "${1:-tests}"
if has tests; then
    test_bin t-mb 300 model_bench_gpu --ignored --nocapture
    ROOFLINE_TEST_FORMATS=INT4_G128,NF4 test_bin t-var 150 weight_only_gpu --ignored --nocapture \
        variants_and_bf16_activations_match_the_reference
    test_bin t-ffn 60 ffn_gpu --ignored --nocapture
    ROOFLINE_TEST_M=1,4,16 test_bin t-ring 150 ring_gpu --ignored --nocapture ring_gemv_matches_the_reference
fi
if has bf; then
    MEAS_X=bf16 env_ab bf max ROOFLINE_RING_MMA_MAX_STEPS "default 14" "8x16896x4096 8x25344x4096 4x21120x4096" \
        "INT4_G128 MXFP4 NVFP4"
fi
if has bf2; then
    MEAS_X=bf16 env_ab bf2 max ROOFLINE_RING_MMA_MAX_STEPS "default 56" "8x28672x4096 8x44352x4096 8x59136x4096" \
        "INT4_G128 MXFP4 NVFP4"
fi
if has lm; then
    for x in fp16 bf16; do
        MEAS_X=$x env_ab lm "max x=$x" ROOFLINE_RING_MMA_MAX_STEPS "default 128" "8x128256x4096 16x128256x4096" \
            "INT4_G128 MXFP4 NVFP4"
    done
fi
if has lm2; then
    env_ab lm2 max ROOFLINE_RING_MMA_MAX_STEPS "default 128" "9x128256x4096 12x128256x4096 16x128256x4096" "INT4_G128 NF4"
fi
if has mb; then
    for s in int4 mxfp4; do
        for v in default 56; do
            (export ROOFLINE_RING_MMA_MAX_STEPS=${v#default}
                MB_TIMEOUT=200 mb mb "$s batch 16 max=$v" roofline --config llama-3.1-8b --schemes $s --batch 16 --layers 8)
        done
    done
    MEAS_TIMEOUT=60 meas mb default INT4_G128 16x128256x4096 ""
    MEAS_TIMEOUT=60 meas mb default NVFP4 9x128256x4096 ""
fi
if has refuse; then
    test_bin t-window 120 ring_gpu --ignored --nocapture mxfp4_outside_the_scale_window_leaves_the_tensor_cores
    test_bin t-fb 200 spill_fallback_gpu --ignored --nocapture --test-threads 1
fi
if has shortk; then
    env_ab shortk max ROOFLINE_RING_MMA_MAX_STEPS "default 24" "8x10560x2048 8x12672x2048 8x12672x3072 4x12672x3072" \
        "INT4_G128 MXFP4 NVFP4"
fi
if has def; then
    for s in 4x16896x4096 8x21120x4096 8x25344x4096 8x28512x4096; do
        for f in INT4_G128 MXFP4 NVFP4; do
            MEAS_TIMEOUT=60 meas def default "$f" "$s" ""
        done
    done
fi
if has ffn; then
    test_bin t-ffn 60 ffn_gpu --ignored --nocapture
fi
if has steps; then
    # 16, 20, 24 and 27 row steps of 8 rows a CTA on 132 SMs.
    env_ab steps max ROOFLINE_RING_MMA_MAX_STEPS "default 28" \
        "${STEP_SHAPES:-8x16896x4096 8x21120x4096 8x25344x4096 8x28512x4096 4x16896x4096 4x25344x4096}" \
        "${STEP_FORMATS:-INT4_G128 MXFP4 NVFP4}"
fi

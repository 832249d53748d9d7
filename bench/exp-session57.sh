#!/usr/bin/env bash
# Session 57 probes (H200 through the device tool). Parts (comma-separated):
#   fb       spill_fallback_gpu: `measure` (a277f45's `ring_spills`, not re-run since) and model-bench's linears at batch
#            16 (each linear whose tensor-core ring build spills takes the bulk ring; `ring=true` makes it the error),
#            every ring build forced to spill (`-DRW_MINB=3`), into $out/fb.txt
#   mb       model-bench Llama-3.1-8B (8 layers) at batch 16, INT4 and NF4, the default (the spill probe's builds reused
#            by the step's linears), into $out/mb.txt
#   mbt      model_bench_gpu's step test (every format; batch 1, 3 and 16), into $out/mbt.txt
#   lowm     the tensor-core ring at 2-8 rows of x (its builds no longer spill there): `measure` default against
#            ROOFLINE_RING_MMA=1 with variant=xreg,ring=true, LOWM_SHAPES for LOWM_FORMATS (FP16 x; MEAS_X for BF16),
#            into $out/lowm.txt
#   lowm2    `lowm` at more shapes: M = 2 and 3 (4096, 6144, 14336 rows), 4 (1024, 10240, 28672), 8 (1024, 10240), and
#            BF16 x at 8x4096x4096 and 8x14336x4096, into $out/lowm.txt
#   rt       the ring test's 2-8-row cases (tensor cores where planned) for the 4-bit formats, FP16 x then BF16 x, into
#            $out/rt-*.txt
#   def      the committed default at 2-8 rows: `measure` without --gemv at DEF_SHAPES for the 4-bit formats, into
#            $out/def.txt
#   mb48     model-bench Llama-3.1-8B (8 layers) at batch 4 and 8, INT4 and NF4: the default against
#            ROOFLINE_RING_MMA_MAX_STEPS=0 (no tensor-core ring by default: the default before), into $out/mb48.txt
#   bf       BF16 x at 2-4 rows: `measure` default against ROOFLINE_RING_MMA_MAX_STEPS=0 (the default before) at BF_SHAPES
#            for the 4-bit formats; NF4 at 2x28672x4096 (28 steps a CTA, the CUDA-core ring by default) against the
#            tensor-core ring forced (ROOFLINE_RING_MMA=1, variant=xreg,ring=true), both x types, into $out/bf.txt
#   mid      the tensor-core ring forced against the default at 16-20 row steps a CTA (Llama-3.2-3B's and -1B's gate_up:
#            16384 rows of 3072 and 2048; 20480x4096), 4 and 8 rows, INT4, MXFP4, NVFP4; then model-bench Llama-3.1-8B (8
#            layers) at batch 2 and 3, INT4 and NF4, default against ROOFLINE_RING_MMA_MAX_STEPS=0, into $out/mid.txt
# $HW: the profile (bench/results/h200-measured.toml on an H200). Logs: $OUT (the device's), else /tmp/exp-session57.
. "$(dirname "$0")/probe-lib.sh"
probe_start exp-session57 "${1:-fb}"
if has fb; then
    test_bin fb 300 spill_fallback_gpu --ignored --nocapture --test-threads 1
fi
if has mb; then
    for s in int4 nf4; do
        MB_TIMEOUT=200 mb mb "$s batch 16" roofline --config llama-3.1-8b --schemes $s --batch 16 --layers 8
    done
fi
if has mbt; then
    test_bin mbt 300 model_bench_gpu --ignored --nocapture small_llama_step_runs_in_every_format_and_checks_attention
fi
if has lowm; then
    for f in ${LOWM_FORMATS:-INT4_G128 NF4 MXFP4 NVFP4}; do
        for s in ${LOWM_SHAPES:-4x4096x4096 8x4096x4096 4x6144x4096 8x6144x4096 4x14336x4096 8x14336x4096 8x28672x4096}; do
            MEAS_TIMEOUT=60 meas lowm default "$f" "$s" ""
            ROOFLINE_RING_MMA=1 MEAS_TIMEOUT=60 meas lowm "mma" "$f" "$s" variant=xreg,ring=true
        done
    done
fi
if has lowm2; then
    LOWM_SHAPES="2x4096x4096 2x6144x4096 2x14336x4096 3x4096x4096 3x14336x4096 4x1024x4096 4x10240x4096 4x28672x4096 \
8x1024x4096 8x10240x4096" bash "$0" lowm
    MEAS_X=bf16 LOWM_SHAPES="8x4096x4096 8x14336x4096" bash "$0" lowm
fi
if has rt; then
    for x in fp16 bf16; do
        ROOFLINE_TEST_X=$x ROOFLINE_TEST_M=2,3,5,6,8 ROOFLINE_TEST_FORMATS=INT4_G128,NF4,MXFP4,NVFP4 \
            test_bin rt-$x 280 ring_gpu --ignored --nocapture ring_gemv_matches_the_reference
    done
fi
if has def; then
    for f in INT4_G128 NF4 MXFP4 NVFP4; do
        for s in ${DEF_SHAPES:-2x6144x4096 3x14336x4096 4x4096x4096 8x6144x4096 8x28672x4096}; do
            MEAS_TIMEOUT=60 meas def default "$f" "$s" ""
        done
    done
fi
if has mb48; then
    for s in int4 nf4; do
        for b in 4 8; do
            for v in default 0; do
                (export ROOFLINE_RING_MMA_MAX_STEPS=${v#default}; MB_TIMEOUT=200 mb mb48 "$s batch $b max_steps=$v" \
                    roofline --config llama-3.1-8b --schemes $s --batch $b --layers 8)
            done
        done
    done
fi
if has bf; then
    for f in INT4_G128 NF4 MXFP4 NVFP4; do
        for s in ${BF_SHAPES:-2x4096x4096 2x6144x4096 4x4096x4096 3x14336x4096 4x14336x4096}; do
            for v in default 0; do
                (export ROOFLINE_RING_MMA_MAX_STEPS=${v#default}; MEAS_X=bf16 MEAS_TIMEOUT=60 meas bf "max_steps=$v" "$f" "$s" "")
            done
        done
    done
    for x in fp16 bf16; do
        MEAS_X=$x MEAS_TIMEOUT=60 meas bf default NF4 2x28672x4096 ""
        ROOFLINE_RING_MMA=1 MEAS_X=$x MEAS_TIMEOUT=60 meas bf mma NF4 2x28672x4096 variant=xreg,ring=true
    done
fi
if has mid; then
    LOWM_FORMATS="INT4_G128 MXFP4 NVFP4" LOWM_SHAPES="4x16384x3072 8x16384x3072 8x16384x2048 8x20480x4096" bash "$0" lowm
    for s in int4 nf4; do
        for b in 2 3; do
            for v in default 0; do
                (export ROOFLINE_RING_MMA_MAX_STEPS=${v#default}; MB_TIMEOUT=200 mb mid "$s batch $b max_steps=$v" \
                    roofline --config llama-3.1-8b --schemes $s --batch $b --layers 8)
            done
        done
    done
fi

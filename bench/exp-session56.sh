#!/usr/bin/env bash
# Session 56 probes (H200 through the device tool). Parts (comma-separated):
#   fix      the spill fallback and the one-step build: spill_fallback_gpu (a ring build forced to spill runs on the
#            other kernels by default, is the error when asked for), the ring test's 16- and 10-row cases (one row
#            step a CTA at K = 1024 and 4096 among them) for the 4-bit formats with both x types, into $out/fix*.txt
#   one      one row step a CTA (16x1024x4096, 9x1024x4096): the straight-code build against session 55's loop
#            (`-DEXP_ONESTEP_LOOP=1`), `measure` with the default plan, FP16 and BF16 x, per 4-bit format, into $out/one.txt
#   xr       what an XReg engine runs at 9-16 rows where the ring does not: `measure` with variant=xreg,ring=false at 16
#            and 8 rows, and the default at 8 rows, NVFP4 and INT4 at 14336x4096, into $out/xr.txt
#   ch       row steps a sums buffer of the tensor-core ring (`ROOFLINE_RING_MMA_CHUNK`, default 2) against 3 and 4, at
#            CH_SHAPES (4 to 28 row steps a CTA) for CH_FORMATS with FP16 x and MXFP4 with BF16 x, into $out/ch.txt
#   fb       spill_fallback_gpu again (the kernel line says why the ring did not run), into $out/fb.txt
#   fin      the committed build: the ring test's 16- and 12-row cases for the 4-bit formats (both x types; 4 row steps a
#            sums buffer at 14 and 28 steps a CTA), `measure` with the default against ROOFLINE_RING_MMA_CHUNK=2 at
#            16x14336x4096 and 16x28672x4096 (NF4 FP16 x, MXFP4 BF16 x), model-bench Llama-3.1-8B INT4 (8 layers) batch 16
#            with the default against chunk 2, into $out/fin*.txt
#   ch2      `ch` at the row steps a CTA the rule leaves unmeasured (5-7, 42), default (2) against 4,
#            CH2_SHAPES for CH_FORMATS with FP16 x and MXFP4 with BF16 x, into $out/ch2.txt
#   rt12     the ring test's 12-row cases for NF4, MXFP4 and NVFP4 (r3's run stopped before them at 12x28672x4096),
#            into $out/rt12.txt
#   last     the last commit: the ring test's 12-row cases for NF4 (its count's bar), `measure` default at 16x43008x4096
#            (INT4, NF4) and 16x14336x4096 (INT4), into $out/last*.txt
#   early    BF16 x's row maxima (EXP_XF16_EARLY=1) and its conversion too (=2) before the consumers' barrier, against
#            the build, NF4 and MXFP4 at 16x1024x4096 and 16x14336x4096, FP16 x beside, into $out/early.txt (the probe
#            was reverted: apply bench/results/h200-2026-11-30-session56/xf16-early-attempt.patch first)
# $HW: the profile (bench/results/h200-measured.toml on an H200). Logs: $OUT (the device's), else /tmp/exp-session56.
. "$(dirname "$0")/probe-lib.sh"
probe_start exp-session56 "${1:-fix}"
if has fix; then
    test_bin fix-spill 200 spill_fallback_gpu --ignored --nocapture
    ROOFLINE_TEST_M=16,10 ROOFLINE_TEST_FORMATS=INT4_G128,NF4,MXFP4,NVFP4 \
        test_bin fix-rtest 300 ring_gpu --ignored --nocapture ring_gemv_matches_the_reference
fi
if has one; then
    for x in fp16 bf16; do
        MEAS_X=$x env_ab one "x $x" ROOFLINE_NVRTC_EXTRA "default -DEXP_ONESTEP_LOOP=1" \
            "${ONE_SHAPES:-16x1024x4096 9x1024x4096}" "${ONE_FORMATS:-INT4_G128 NF4 MXFP4 NVFP4}"
    done
fi
if has xr; then
    for f in NVFP4 INT4_G128; do
        MEAS_TIMEOUT=60 meas xr "xreg no ring" $f 16x14336x4096 variant=xreg,ring=false
        MEAS_TIMEOUT=60 meas xr "xreg no ring" $f 8x14336x4096 variant=xreg,ring=false
        MEAS_TIMEOUT=60 meas xr "default" $f 8x14336x4096 ""
        MEAS_TIMEOUT=60 meas xr "default" $f 16x14336x4096 ""
    done
fi
if has ch; then
    ch_shapes=${CH_SHAPES:-16x14336x4096 9x14336x4096 16x28672x4096 12x10240x4096 16x6144x4096 16x4096x4096}
    env_ab ch "chunk" ROOFLINE_RING_MMA_CHUNK "default 3 4" "$ch_shapes" "${CH_FORMATS:-INT4_G128 NF4 MXFP4}"
    MEAS_X=bf16 env_ab ch "chunk bf16" ROOFLINE_RING_MMA_CHUNK "default 3 4" "$ch_shapes" MXFP4
fi
if has fb; then
    test_bin fb 200 spill_fallback_gpu --ignored --nocapture
fi
if has fin; then
    ROOFLINE_TEST_M=16,12 ROOFLINE_TEST_FORMATS=INT4_G128,NF4,MXFP4,NVFP4 \
        test_bin fin-rtest 300 ring_gpu --ignored --nocapture ring_gemv_matches_the_reference
    env_ab fin "chunk" ROOFLINE_RING_MMA_CHUNK "default 2" "16x14336x4096 16x28672x4096" NF4
    MEAS_X=bf16 env_ab fin "chunk bf16" ROOFLINE_RING_MMA_CHUNK "default 2" "16x14336x4096 16x28672x4096" MXFP4
    for v in default 2; do
        (export ROOFLINE_RING_MMA_CHUNK=${v#default}; MB_TIMEOUT=150 mb fin-mb "chunk=$v INT4 batch 16" roofline \
            --config llama-3.1-8b --schemes int4 --batch 16 --layers 8)
    done
fi
if has rt12; then
    ROOFLINE_TEST_M=12 ROOFLINE_TEST_FORMATS=NF4,MXFP4,NVFP4 \
        test_bin rt12 200 ring_gpu --ignored --nocapture ring_gemv_matches_the_reference
fi
if has ch2; then
    ch2_shapes=${CH2_SHAPES:-16x5120x4096 16x6144x4096 12x6144x4096 16x7168x4096 16x43008x4096}
    env_ab ch2 "chunk" ROOFLINE_RING_MMA_CHUNK "default 4" "$ch2_shapes" "${CH_FORMATS:-INT4_G128 NF4}"
    MEAS_X=bf16 env_ab ch2 "chunk bf16" ROOFLINE_RING_MMA_CHUNK "default 4" "$ch2_shapes" MXFP4
fi
if has last; then
    ROOFLINE_TEST_M=12 ROOFLINE_TEST_FORMATS=NF4 test_bin last-rt 200 ring_gpu --ignored --nocapture \
        ring_gemv_matches_the_reference
    for f in INT4_G128 NF4; do MEAS_TIMEOUT=60 meas last "default" $f 16x43008x4096 ""; done
    MEAS_TIMEOUT=60 meas last "default" INT4_G128 16x14336x4096 ""
fi
if has early; then
    MEAS_X=bf16 env_ab early "x bf16" ROOFLINE_NVRTC_EXTRA "default -DEXP_XF16_EARLY=1 -DEXP_XF16_EARLY=2" \
        "16x1024x4096 16x14336x4096" "NF4 MXFP4"
    for f in NF4 MXFP4; do for s in 16x1024x4096 16x14336x4096; do MEAS_TIMEOUT=40 meas early "fp16" $f $s ""; done; done
fi

#!/usr/bin/env bash
# Session 53 probes (H200 through the device tool). Parts (comma-separated):
#   rtest    the ring GEMV's GPU reference test at RT_M rows of x (default 9,10,11,12,13,16: the tensor-core ring),
#            INT4, RT_X x (default fp16; "fp16,bf16" both), with ROOFLINE_NVRTC_EXTRA=$RT_EXTRA, into
#            $out/rtest.txt; then weight_only_gpu's issue-shape test for INT4 (16x14336x4096 on the tensor-core ring)
#   ab3      .gpu/roofline-base, .gpu/roofline and .gpu/roofline with AB3_EXTRA (default -DRW_MMA_CHAINS=1; "skip":
#            none), alternately, twice, INT4 (AB_X x, default FP16) at AB_SHAPES, the tensor-core ring forced, into
#            $out/ab3.txt
#   dalone   the tensor-core ring forced (tune_table "XReg RING"): whole, decode alone (EXP_FFN_NOLOAD), loads alone
#            (EXP_FFN_LOADONLY) per NVRTC option set of DA_SETS (space-separated LABEL:OPTIONS, "LABEL:" none;
#            default the build's own, -DRW_MMA_CHAINS=1 and -DEXP_MMA_NOX=1: x's prologue loads left out) at
#            DA_SHAPES, into $out/dalone.txt (wrong results accepted: the probes compute them)
#   bf16     INT4 with BF16 x at BF_SHAPES: the default (the bulk ring) against the tensor-core ring forced
#            (variant=xreg,ring=true), twice, then FP16 x on the tensor-core ring beside, into $out/bf16.txt
#   chunk    the tensor-core ring's row steps a sums buffer (ROOFLINE_RING_MMA_CHUNK: default 2, CH_VALUES) at
#            CH_SHAPES (INT4, FP16 x, the ring forced), `env_ab`, into $out/chunk.txt; first the ring test's
#            tensor-core cases at 9 and 16 rows with ROOFLINE_RING_MMA_CHUNK=4
#   nvfp4    NVFP4 on the tensor-core ring: the ring test's tensor-core cases (9-16 rows, FP16 x), then `measure` of
#            the ring forced against the bulk ring (variant=xmma) at NV_SHAPES, twice, into $out/nvfp4*.txt
#   final    the committed build: weight_only_gpu's every-M test (INT4), model-bench's GPU tests, model-bench
#            Llama-3.1-8B INT4 (8 layers) at FI_BATCHES (default 16 12 9), issue 11's table, into $out/final*.txt
# $HW: the profile (bench/results/h200-measured.toml on an H200). Logs: $OUT (the device's), else /tmp/exp-session53.
. "$(dirname "$0")/probe-lib.sh"
probe_start exp-session53 "${1:-rtest}"
ab_shapes=${AB_SHAPES:-16x14336x4096 9x14336x4096 16x28672x4096 16x4096x4096 12x10240x4096 16x1024x4096}
if has rtest; then
    ROOFLINE_NVRTC_EXTRA=${RT_EXTRA:-} ROOFLINE_TEST_M=${RT_M:-9,10,11,12,13,16} ROOFLINE_TEST_FORMATS=INT4_G128 \
        ROOFLINE_TEST_X=${RT_X:-fp16} test_bin rtest ${RT_TIMEOUT:-200} ring_gpu --ignored --nocapture \
        ring_gemv_matches_the_reference
    grep -iE "rel|err" "$out/rtest.txt" | head -20
    ROOFLINE_NVRTC_EXTRA=${RT_EXTRA:-} ROOFLINE_TEST_FORMATS=INT4_G128 test_bin issue 200 weight_only_gpu --ignored \
        --nocapture every_format_matches_the_reference_at_the_issue_shapes
fi
if has ab3; then
    for s in $ab_shapes; do
        for rep in 1 2; do
            for v in base new extra; do
                [[ $v == extra && ${AB3_EXTRA:-} == skip ]] && continue
                bin=roofline extra=
                [[ $v == base ]] && bin=roofline-base
                [[ $v == extra ]] && extra=${AB3_EXTRA:--DRW_MMA_CHAINS=1}
                (export BIN=$bin MEAS_TIMEOUT=40 ROOFLINE_NVRTC_EXTRA="$extra" MEAS_X=${AB_X:-}
                 meas ab3 "$v $extra" INT4_G128 "$s" "${AB_GEMV-variant=xreg,ring=true}")
            done
        done
    done
fi
if has dalone; then
    for set in ${DA_SETS:-new: chains1:-DRW_MMA_CHAINS=1 nox:-DEXP_MMA_NOX=1}; do
        for e in "" "-DEXP_FFN_NOLOAD=1" "-DEXP_FFN_LOADONLY=1"; do
            echo "=== ${set%%:*} [${set#*:} $e]" | tee -a "$out/dalone.txt"
            ROOFLINE_NVRTC_EXTRA="${set#*:} $e" ROOFLINE_TUNE_SET=xreg ROOFLINE_TUNE_TOLERANCE=1e30 \
                ROOFLINE_TUNE_SHAPES=${DA_SHAPES:-16x14336x4096,16x28672x4096,16x4096x4096} \
                ROOFLINE_TUNE_FORMATS=INT4_G128 ROOFLINE_TUNE_ONLY="XReg RING" timeout 150 .gpu/weight_only_gpu \
                --ignored tune_table --nocapture 2>&1 | grep -E "^TT |panicked|error" | cut -c1-200 \
                | tee -a "$out/dalone.txt"
        done
    done
fi
if has bf16; then
    for s in ${BF_SHAPES:-16x14336x4096 9x14336x4096 12x14336x4096 16x28672x4096 16x4096x4096 16x1024x4096 16x57344x4096 16x128256x4096}; do
        for rep in 1 2; do
            for g in "" variant=xreg,ring=true; do MEAS_X=bf16 MEAS_TIMEOUT=40 meas bf16 "bf16 ${g:-default}" INT4_G128 "$s" "$g"; done
        done
        MEAS_TIMEOUT=40 meas bf16 "fp16 ring" INT4_G128 "$s" variant=xreg,ring=true
    done
fi
if has chunk; then
    ROOFLINE_RING_MMA_CHUNK=4 ROOFLINE_TEST_M=9,16 ROOFLINE_TEST_FORMATS=INT4_G128 ROOFLINE_TEST_X=fp16 \
        test_bin chunk-rtest 200 ring_gpu --ignored --nocapture ring_gemv_matches_the_reference
    env_ab chunk CH ROOFLINE_RING_MMA_CHUNK "default ${CH_VALUES:-4 1}" \
        "${CH_SHAPES:-16x14336x4096 9x14336x4096 16x28672x4096 12x10240x4096 16x4096x4096}" INT4_G128 \
        variant=xreg,ring=true
fi
if has nvfp4; then
    ROOFLINE_TEST_M=9,10,11,12,13,16 ROOFLINE_TEST_FORMATS=NVFP4 ROOFLINE_TEST_X=fp16 \
        test_bin nvfp4-rtest 200 ring_gpu --ignored --nocapture ring_gemv_matches_the_reference
    for s in ${NV_SHAPES:-16x14336x4096 9x14336x4096 16x4096x4096 16x28672x4096 12x10240x4096}; do
        for rep in 1 2; do
            for g in variant=xreg,ring=true variant=xmma; do MEAS_TIMEOUT=40 meas nvfp4 "$g" NVFP4 "$s" "$g"; done
        done
    done
fi
if has final; then
    final_checks default
fi

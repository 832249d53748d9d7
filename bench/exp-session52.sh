#!/usr/bin/env bash
# Session 52 probes (H200 through the device tool). Parts (comma-separated):
#   rtest    the ring GEMV's GPU reference test at RT_M rows of x (default 9,10,11,12,13,16: the tensor-core ring),
#            INT4, FP16 x, with ROOFLINE_NVRTC_EXTRA=$RT_EXTRA (default empty: the build's own defines), into
#            $out/rtest.txt; then weight_only_gpu's issue-shape test for INT4 (16x14336x4096 on the tensor-core ring)
#   off      the tensor-core ring's offset decode (`RW_MMA_OFF`, the default with the patch
#            bench/results/h200-2026-11-29-session52/r1/offset-decode.patch applied on 956e716) against the q - z decode
#            (-DRW_MMA_OFF=0) for INT4 at OFF_SHAPES, the ring forced (`--gemv variant=xreg,ring=true`), `env_ab`
#            over ROOFLINE_NVRTC_EXTRA, into $out/off.txt; then the bulk ring (--gemv variant=xmma) at the same shapes
#   def      `measure`'s default (INT4) at DEF_SHAPES, into $out/def.txt
#   dalone   the tensor-core ring forced (tune_table "XReg RING"): whole, decode alone, loads alone, per test binary of
#            DA_BINS and NVRTC option set of DA_BASES (the default's -DRW_MMA_OFF=0 set needs the r1 patch)
#   ncusrc   ncu source page (stall samples per SASS instruction) of the tensor-core ring, offset and q - z decode
#   ab       .gpu/roofline-base against .gpu/roofline (INT4, the tensor-core ring forced) at AB_SHAPES
#   steps    the tensor-core ring forced against the bulk ring at ST_SHAPES (many row steps a CTA)
#   mbsteps  model-bench INT4 with the default bound of tensor-core ring steps and ROOFLINE_RING_MMA_MAX_STEPS=$MBS_STEPS
#   final    the committed build: every-M test (INT4), model-bench GPU tests and INT4 batches, issue 11 table
#   ab3      .gpu/roofline-base, .gpu/roofline and .gpu/roofline with AB3_EXTRA (INT4, the tensor-core ring forced)
# $HW: the profile (bench/results/h200-measured.toml on an H200). Logs: $OUT (the device's), else /tmp/exp-session52.
. "$(dirname "$0")/probe-lib.sh"
probe_start exp-session52 "${1:-rtest}"
if has rtest; then
    ROOFLINE_NVRTC_EXTRA=${RT_EXTRA:-} ROOFLINE_TEST_M=${RT_M:-9,10,11,12,13,16} ROOFLINE_TEST_FORMATS=INT4_G128 \
        ROOFLINE_TEST_X=fp16 test_bin rtest ${RT_TIMEOUT:-200} ring_gpu --ignored --nocapture \
        ring_gemv_matches_the_reference
    grep -iE "rel|err" "$out/rtest.txt" | head -20
    ROOFLINE_NVRTC_EXTRA=${RT_EXTRA:-} ROOFLINE_TEST_FORMATS=INT4_G128 test_bin issue 200 weight_only_gpu --ignored \
        --nocapture every_format_matches_the_reference_at_the_issue_shapes
fi
if has off; then
    env_ab off EXTRA ROOFLINE_NVRTC_EXTRA "default -DRW_MMA_OFF=0" \
        "${OFF_SHAPES:-16x14336x4096 9x14336x4096 16x28672x4096 16x4096x4096 12x10240x4096}" INT4_G128 \
        variant=xreg,ring=true
    for s in ${OFF_SHAPES:-16x14336x4096 9x14336x4096 16x28672x4096 16x4096x4096 12x10240x4096}; do
        MEAS_TIMEOUT=40 meas off bulk INT4_G128 "$s" variant=xmma
    done
fi
if has def; then
    for s in ${DEF_SHAPES:-16x14336x4096 12x14336x4096 9x14336x4096 16x4096x4096 16x28672x4096 16x1024x4096}; do
        MEAS_TIMEOUT=40 meas def default INT4_G128 "$s" ""
    done
fi
if has dalone; then
    # The tensor-core ring forced (tune_table's "XReg RING" row) at DA_SHAPES: whole, its decode alone
    # (EXP_FFN_NOLOAD: no copies, no waits) and its loads alone (EXP_FFN_LOADONLY), with the offset decode and
    # with -DRW_MMA_OFF=0; wrong results accepted for the probes.
    # DA_BINS: the test binaries in .gpu/ (default weight_only_gpu), DA_BASES the NVRTC option sets (default the offset
    # decode and -DRW_MMA_OFF=0, session 52's r2; "-" none).
    for bin in ${DA_BINS:-weight_only_gpu}; do
    for base in ${DA_BASES:-"-" "-DRW_MMA_OFF=0"}; do
        base=${base#-}
        [[ $base == DRW* ]] && base=-$base
        for e in "" "-DEXP_FFN_NOLOAD=1" "-DEXP_FFN_LOADONLY=1"; do
            echo "=== $bin [$base $e]" | tee -a "$out/dalone.txt"
            ROOFLINE_NVRTC_EXTRA="$base $e" ROOFLINE_TUNE_SET=xreg ROOFLINE_TUNE_TOLERANCE=1e30 \
                ROOFLINE_TUNE_SHAPES=${DA_SHAPES:-16x14336x4096,16x28672x4096,16x4096x4096} \
                ROOFLINE_TUNE_FORMATS=INT4_G128 ROOFLINE_TUNE_ONLY="XReg RING" timeout 150 .gpu/$bin \
                --ignored tune_table --nocapture 2>&1 | grep -E "^TT |panicked|error" | cut -c1-200 \
                | tee -a "$out/dalone.txt"
        done
    done
    done
fi
if has ncusrc; then
    # ncu's source page (warp-stall samples per SASS instruction) of one launch of the tensor-core ring at NCU_SHAPE
    # (default 16x14336x4096), per NVRTC option set of NCU_SETS (space-separated LABEL:OPTIONS, "LABEL:" none),
    # into $out/ncusrc-LABEL.csv and $out/ncusrc-LABEL-details.txt.
    ncu=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
    IFS=x read -r m n k <<<"${NCU_SHAPE:-16x14336x4096}"
    for set in ${NCU_SETS:-off: q:-DRW_MMA_OFF=0}; do
        l=${set%%:*}
        ROOFLINE_NVRTC_EXTRA="${set#*:}" timeout 300 "$ncu" --clock-control none --kernel-name regex:wo_ring \
            --launch-skip 30 --launch-count 1 --section WarpStateStats --section SourceCounters \
            --section SchedulerStats --section ComputeWorkloadAnalysis --import-source no -f -o /tmp/src-$l \
            .gpu/roofline measure --hw $hw --weights INT4_G128 --m $m --n $n --k $k --gemv variant=xreg,ring=true \
            >"$out/ncusrc-$l-log.txt" 2>&1
        "$ncu" -i /tmp/src-$l.ncu-rep --page source --csv --print-source sass >"$out/ncusrc-$l.csv" 2>&1
        "$ncu" -i /tmp/src-$l.ncu-rep --page details --print-details all >"$out/ncusrc-$l-details.txt" 2>&1
        grep -E "Stall|Issued|Eligible|Active Warps|Pipe|Busy" "$out/ncusrc-$l-details.txt" | head -40
    done
fi
if has ab; then
    # .gpu/roofline-base (built from the commit before) against .gpu/roofline, alternately, twice, INT4 at AB_SHAPES
    # with --gemv $AB_GEMV (default: the tensor-core ring forced), into $out/ab.txt.
    for s in ${AB_SHAPES:-16x14336x4096 9x14336x4096 16x28672x4096 16x4096x4096 12x10240x4096 16x1024x4096}; do
        for rep in 1 2; do
            for bin in roofline-base roofline; do
                (export BIN=$bin MEAS_TIMEOUT=40; meas ab "$bin" INT4_G128 "$s" "${AB_GEMV-variant=xreg,ring=true}")
            done
        done
    done
fi
if has steps; then
    # The tensor-core ring forced against the bulk ring (--gemv variant=xmma) at ST_SHAPES (many row steps a CTA),
    # twice, INT4, into $out/steps.txt.
    for s in ${ST_SHAPES:-16x28672x4096 9x28672x4096 12x28672x4096 16x128256x4096 9x128256x4096 16x57344x4096}; do
        for rep in 1 2; do
            for g in variant=xreg,ring=true variant=xmma; do MEAS_TIMEOUT=40 meas steps "$g" INT4_G128 "$s" "$g"; done
        done
    done
fi
if has mbsteps; then
    # model-bench Llama-3.1-8B INT4 (MB_LAYERS, default 8) at MB_BATCHES (default 16) with the tensor-core ring's
    # default bound of row steps a CTA and with ROOFLINE_RING_MMA_MAX_STEPS=$MBS_STEPS (default 1000: gate_up's 28
    # steps too), twice, into $out/mbsteps.txt.
    for rep in 1 2; do
        for b in ${MB_BATCHES:-16}; do
            for st in default ${MBS_STEPS:-1000}; do
                (export ROOFLINE_RING_MMA_MAX_STEPS=${st#default}
                 MB_TIMEOUT=200 mb mbsteps "steps=$st batch $b" roofline --config llama-3.1-8b --schemes int4 \
                     --batch "$b" --layers ${MB_LAYERS:-8})
            done
        done
    done
fi
if has final; then
    # The committed build's checks (`final_checks`), model-bench by default and with --gemv ring=false.
    final_checks "default ring=false"
fi
if has ab3; then
    # .gpu/roofline-base, .gpu/roofline and .gpu/roofline with ROOFLINE_NVRTC_EXTRA=$AB3_EXTRA (default
    # -DRW_MMA_CHAINS=2), alternately, twice, INT4 at AB_SHAPES, the tensor-core ring forced, into $out/ab3.txt.
    for s in ${AB_SHAPES:-16x14336x4096 9x14336x4096 16x28672x4096 16x4096x4096 12x10240x4096 16x1024x4096}; do
        for rep in 1 2; do
            for v in base new extra; do
                bin=roofline extra=
                [[ $v == base ]] && bin=roofline-base
                [[ $v == extra ]] && extra=${AB3_EXTRA:--DRW_MMA_CHAINS=2}
                (export BIN=$bin MEAS_TIMEOUT=40 ROOFLINE_NVRTC_EXTRA="$extra"
                 meas ab3 "$v $extra" INT4_G128 "$s" "${AB_GEMV-variant=xreg,ring=true}")
            done
        done
    done
fi

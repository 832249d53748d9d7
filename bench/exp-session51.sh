#!/usr/bin/env bash
# Session 51 probes (H200 through the device tool). Parts (comma-separated):
#   rh       the ring GEMV's row halves (`ROOFLINE_RING_RH=2`: two warps a K slice of a row step, 4 rows each) against
#            the default (a warp takes all 8 rows): tune_table's ring row ("XReg U=0 W=0", checked against the f64
#            reference at 1e-3, then timed) for RH_FORMATS at RH_SHAPES, one process per setting of RH_SETS
#            (space-separated LABEL:VAR=VALUE+VAR=VALUE..., "LABEL:" the defaults), all settings in turn, RH_REPS passes
#            (default 2), into $out/rh.txt
#   dalone   the decode alone (EXP_FFN_NOLOAD=1: no loads, wrong results by design) and the loads alone
#            (EXP_FFN_LOADONLY=1) of INT4 at DA_SHAPES, by RH_SETS, into $out/dalone.txt
#   rtest    the ring GEMV's GPU reference test (every epilogue, odd shapes) with ROOFLINE_RING_RH=$RT_RH (default 2; r1's
#            row halves, since reverted), RT_M rows of x (default 1), RT_FORMATS (default all), ROOFLINE_TEST_X=$RT_X,
#            into $out/rtest.txt
#   mma      the ring on the tensor cores (INT4, 4-16 rows of x, `--gemv variant=xreg,ring=true`) against the default
#            (the bulk ring): `measure` (checked, then timed) for MM_MS x MM_SHAPES (N x K), MM_REPS passes, into
#            $out/mma.txt
#   mahead   the tensor-core ring's units in flight: `ROOFLINE_RING_AHEAD` MA_VALUES (default "default 0 3 4") at MA_SHAPES,
#            `env_ab`, into $out/mahead.txt
#   ncu      Nsight Compute on one launch of the tensor-core ring (`measure --gemv variant=xreg,ring=true`) at NCU_SHAPE
#            (default 4x14336x4096): scheduler, warp states, pipes, memory, into $out/ncu.txt
#   ncusrc   the same launch's SASS with warp-stall samples per instruction (ncu's source page as CSV) at NCU_SHAPE
#            (default 16x14336x4096), into $out/ncusrc.csv and $out/ncusrc-details.txt
#   mdef     the engine's default (the ring on the tensor cores where `ring::mma_auto` takes it) against the bulk ring
#            (--gemv variant=xmma, the default before) for INT4 at MD_SHAPES, into $out/mdef.txt; then weight_only_gpu's
#            every_m_and_tiny_odd_shapes_through_the_raw_api (every M through the engine's defaults) for INT4
#   final    the committed build: the ring GPU test's tensor-core cases, weight_only_gpu's issue-shape test (INT4:
#            16x14336x4096 on the tensor-core ring now) and `measure`'s default at FI_SHAPES, into $out/final*.txt
#   mb16     the tensor-core ring's epilogues in the ring test (RT cases as `rtest`), then model-bench Llama-3.1-8B INT4
#            (MB_LAYERS, default 8) at MB_BATCHES (default 16) by default (qkv, o_proj and gate_up on the tensor-core ring
#            where `mma_auto` takes them) and with `--gemv ring=false` (the kernels before), MB_REPS passes, into
#            $out/mb16.txt
#   meas     `measure` (checked, then timed) per setting of RH_SETS for MS_FORMATS at MS_SHAPES, into $out/meas.txt
# $HW: the profile (bench/results/h200-measured.toml on an H200). Logs: $OUT (the device's), else /tmp/exp-session51.
. "$(dirname "$0")/probe-lib.sh"
probe_start exp-session51 "${1:-rh}"
sets=${RH_SETS:-"rh1: rh2:ROOFLINE_RING_RH=2"}
# `with_set SPEC CMD...`: CMD with the environment of setting SPEC (LABEL:VAR=VALUE+VAR=VALUE...).
with_set() {
    local spec=$1 kv
    shift
    (
        for kv in $(tr '+' ' ' <<<"${spec#*:}"); do export "${kv?}"; done
        "$@"
    )
}
# `ring_tt LOG LABEL FORMAT SHAPES [EXTRA]`: tune_table's ring row for FORMAT at SHAPES (MxNxK, comma-separated),
# checked at 1e-3 unless ROOFLINE_TUNE_TOLERANCE says otherwise, NVRTC options EXTRA, into $out/LOG.txt.
ring_tt() {
    local log=$1 label=$2 fmt=$3 shapes=$4 extra=${5:-}
    echo "=== $label $fmt [$extra]" | tee -a "$out/$log.txt"
    ROOFLINE_NVRTC_EXTRA="$extra" ROOFLINE_TUNE_SET=xreg ROOFLINE_TUNE_SHAPES=$shapes ROOFLINE_TUNE_FORMATS=$fmt \
        ROOFLINE_TUNE_ONLY="XReg U=0 W=0" timeout ${TT_TIMEOUT:-150} .gpu/weight_only_gpu --ignored tune_table \
        --nocapture 2>&1 | grep -E "^TT |panicked|error" | cut -c1-200 | tee -a "$out/$log.txt"
}
if has rh; then
    for rep in $(seq ${RH_REPS:-2}); do
        for f in ${RH_FORMATS:-INT4_G128 MXFP4 NVFP4 NF4}; do
            for s in $sets; do
                with_set "$s" ring_tt rh "${s%%:*}" "$f" \
                    "${RH_SHAPES:-1x14336x4096,1x4096x14336,1x4096x4096,1x2048x4096,1x28672x4096,1x128256x4096}"
            done
        done
    done
fi
if has dalone; then
    for s in $sets; do
        for e in "-DEXP_FFN_NOLOAD=1" "-DEXP_FFN_LOADONLY=1"; do
            ROOFLINE_TUNE_TOLERANCE=1e30 with_set "$s" ring_tt dalone "${s%%:*}" INT4_G128 \
                "${DA_SHAPES:-1x14336x4096,1x4096x4096}" "$e"
        done
    done
fi
if has rtest; then
    ROOFLINE_RING_RH=${RT_RH:-2} ROOFLINE_TEST_M=${RT_M:-1} ROOFLINE_TEST_FORMATS=${RT_FORMATS:-} ROOFLINE_TEST_X=${RT_X:-} test_bin rtest ${RT_TIMEOUT:-300} \
        ring_gpu --ignored --nocapture ring_gemv_matches_the_reference
fi
if has mma; then
    for rep in $(seq ${MM_REPS:-1}); do
        for nk in ${MM_SHAPES:-14336x4096 4096x4096 28672x4096}; do
            for m in ${MM_MS:-16 8 4}; do
                for g in default variant=xreg,ring=true; do
                    MEAS_TIMEOUT=60 meas mma "$g" INT4_G128 "${m}x$nk" "${g#default}"
                done
            done
        done
    done
fi
if has mahead; then
    env_ab mahead AHEAD ROOFLINE_RING_AHEAD "${MA_VALUES:-default 0 3 4}" \
        "${MA_SHAPES:-16x14336x4096 4x14336x4096 16x4096x4096}" INT4_G128 variant=xreg,ring=true
fi
if has ncu; then
    ncu=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
    IFS=x read -r m n k <<<"${NCU_SHAPE:-4x14336x4096}"
    echo "=== ncu ${NCU_SHAPE:-4x14336x4096} ($ncu)" | tee -a "$out/ncu.txt"
    timeout 200 "$ncu" --clock-control none --kernel-name regex:wo_ring --launch-skip 30 --launch-count 1 \
        --section SchedulerStats --section WarpStateStats --section ComputeWorkloadAnalysis --section LaunchStats \
        --section MemoryWorkloadAnalysis --section SpeedOfLight --print-details all \
        .gpu/roofline measure --hw $hw --weights INT4_G128 --m $m --n $n --k $k --gemv variant=xreg,ring=true \
        >>"$out/ncu.txt" 2>&1
    grep -E "Stall|Warp Cycles|Issued|Eligible|Active Warps|Duration|Throughput|Pipe|Busy" "$out/ncu.txt" | head -60
fi
if has ncusrc; then
    # The same launch's SASS with each instruction's warp-stall samples (source page, CSV), into $out/ncusrc.csv.
    ncu=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
    IFS=x read -r m n k <<<"${NCU_SHAPE:-16x14336x4096}"
    timeout 300 "$ncu" --clock-control none --kernel-name regex:wo_ring --launch-skip 30 --launch-count 1 \
        --section WarpStateStats --section SourceCounters --section SchedulerStats --import-source no -f -o /tmp/src \
        .gpu/roofline measure --hw $hw --weights INT4_G128 --m $m --n $n --k $k --gemv variant=xreg,ring=true \
        >"$out/ncusrc-log.txt" 2>&1
    "$ncu" -i /tmp/src.ncu-rep --page source --csv --print-source sass >"$out/ncusrc.csv" 2>&1
    "$ncu" -i /tmp/src.ncu-rep --page details --print-details all >"$out/ncusrc-details.txt" 2>&1
    head -3 "$out/ncusrc.csv" | cut -c1-400; wc -l "$out/ncusrc.csv"
fi
if has mdef; then
    for sh in ${MD_SHAPES:-16x8192x4096 16x1024x4096 12x4096x2048 16x4096x3072 9x6144x4096 16x14336x4096}; do
        for g in default variant=xmma; do MEAS_TIMEOUT=60 meas mdef "$g" INT4_G128 "$sh" "${g#default}"; done
    done
    ROOFLINE_TEST_FORMATS=INT4_G128 test_bin mdef-test ${MD_TIMEOUT:-200} weight_only_gpu --ignored --nocapture \
        every_m_and_tiny_odd_shapes_through_the_raw_api
fi
if has final; then
    ROOFLINE_RING_RH= ROOFLINE_TEST_M=9,10,11,12,13,16 ROOFLINE_TEST_FORMATS=INT4_G128 ROOFLINE_TEST_X=fp16 \
        test_bin final-rtest 150 ring_gpu --ignored --nocapture ring_gemv_matches_the_reference
    ROOFLINE_TEST_FORMATS=INT4_G128 test_bin final-issue 200 weight_only_gpu --ignored --nocapture \
        every_format_matches_the_reference_at_the_issue_shapes
    for sh in ${FI_SHAPES:-16x14336x4096 12x14336x4096 16x4096x4096 16x28672x4096}; do
        MEAS_TIMEOUT=60 meas final default INT4_G128 "$sh" ""
    done
fi
if has mb16; then
    ROOFLINE_TEST_M=9,10,11,12,13,16 ROOFLINE_TEST_FORMATS=INT4_G128 ROOFLINE_TEST_X=fp16 \
        test_bin mb16-rtest 150 ring_gpu --ignored --nocapture ring_gemv_matches_the_reference
    for rep in $(seq ${MB_REPS:-1}); do
        for b in ${MB_BATCHES:-16}; do
            for g in default ring=false; do
                extra=()
                [[ $g == default ]] || extra=(--gemv "$g")
                MB_TIMEOUT=200 mb mb16 "$g batch $b" roofline --config llama-3.1-8b --schemes int4 --batch "$b" \
                    --layers ${MB_LAYERS:-8} "${extra[@]}"
            done
        done
    done
fi
if has meas; then
    for sh in ${MS_SHAPES:-1x14336x4096}; do
        for f in ${MS_FORMATS:-INT4_G128}; do
            for s in $sets; do MEAS_TIMEOUT=40 with_set "$s" meas meas "${s%%:*}" "$f" "$sh" ""; done
        done
    done
fi

#!/usr/bin/env bash
# Session 62 probes (H200 through the device tool). Parts (comma-separated):
#   t1     ring_gpu's reference test with -DRW_HALVES=1 (each unit streamed in two halves, rows 0-3 and 4-7, on
#          `full` barriers of their own: wo_ring.cu) for every format at 1-2 rows of x, then INT4 at 1-2 rows with the
#          build's default (its tensor-core sums now pair rows 2i, 2i + 1), into $out/t-halves.txt, $out/t-int4.txt
#   halves tune_table's ring row (`tune_fmt`, no reference check) with the default build against -DRW_HALVES=1, and
#          with halves at 4 units in flight, INT4, MXFP4, NVFP4, NF4, FP8 and FP16 at issue 11's M = 1 shapes and
#          more, into $out/halves.txt
#   hab    `measure` (checked against the reference, then timed) the default against -DRW_HALVES=1, INT4, MXFP4 and
#          NVFP4 at issue 11's M = 1 shapes and 2x14336x4096, twice each, into $out/hab.txt
#   (r1: -DRW_HALVES=1 came from bench/results/h200-2026-12-01-session62/r1/halves-attempt.patch, since reverted)
#   t2     ring_gpu's reference test with -DRW_TAIL2=1 (the CTA's last row step split between two row groups: wo_ring.cu)
#          for INT4, MXFP4 and NVFP4 at 1-2 rows of x, into $out/t-tail2.txt
#   tail2  tune_table's ring row (`tune_fmt`) with the default build against -DRW_TAIL2=1, INT4, MXFP4 and NVFP4 at
#          M = 1-2 shapes of 3 row groups, into $out/tail2.txt; then `measure` (checked, then timed) the same A/B for
#          INT4 at issue 11's M = 1 shapes, twice each, into $out/tail2-meas.txt
#   (r2, r3: -DRW_TAIL2=1 came from r3/tail2-in-loop-attempt.patch and r2's run from its first form, since reverted)
#   trace  .gpu/ring_trace (examples/ring_trace.rs: the ring GEMV's timeline from inside the kernel, EXP_RING_TRACE) for
#          INT4 at 1x14336x4096 (also its loads alone, -DEXP_FFN_LOADONLY=1), 1x4096x4096, 1x28672x4096 and the LM head,
#          and MXFP4 and NF4 at 1x14336x4096, into $out/trace.txt (r4 and r5 ran a first version that timed each warp
#          from its own start: the producer's and the consumers' times there are up to ~0.1-0.2 us apart)
#   early  RW_EARLY (the producer warp starts its copies before the scale tables' are issued): ring_trace for INT4 at
#          1x14336x4096 and the LM head and MXFP4 at 1x14336x4096, the default against -DRW_EARLY=1, into $out/early-trace.txt;
#          tune_table's ring row, the default against -DRW_EARLY=1, INT4, MXFP4, NVFP4, NF4 and FP8 at M = 1 shapes and
#          INT4 at 2 rows, into $out/early.txt; ring_gpu's reference test with -DRW_EARLY=1 for INT4 and MXFP4 at 1-2
#          rows of x, into $out/t-early.txt
#   dyn    (r6, an attempt since reverted: its patch is r6/dyn-attempt.patch) the loads alone (-DEXP_FFN_LOADONLY=1) with
#          the row steps split evenly (the default) against claimed at run time from a global counter (-DEXP_RING_DYN=3
#          and 8), tune_table's ring row, INT4 at M = 1 shapes, twice, into $out/dyn.txt
# $HW: the profile (bench/results/h200-measured.toml on an H200). Logs: $OUT (the device's), else /tmp/exp-session62.
. "$(dirname "$0")/probe-lib.sh"
probe_start exp-session62 "${1:-t1}"
if has t1; then
    ROOFLINE_NVRTC_EXTRA=-DRW_HALVES=1 ROOFLINE_TEST_M=${T1_M:-1,2} test_bin t-halves 420 ring_gpu --ignored \
        --nocapture ring_gemv_matches_the_reference
    ROOFLINE_TEST_FORMATS=INT4_G128 ROOFLINE_TEST_M=1,2 test_bin t-int4 200 ring_gpu --ignored --nocapture \
        ring_gemv_matches_the_reference
fi
if has halves; then
    for f in ${HALVES_FORMATS:-INT4_G128 MXFP4 NVFP4 NF4 FP8_E4M3 FP16}; do
        tune_fmt halves "$f" "XReg U=0 W=0" "${HALVES_SHAPES:-1x14336x4096,1x4096x14336,1x4096x4096,1x28672x4096,2x14336x4096}" \
            "" "-DRW_HALVES=1"
        echo "=== ahead 4" >>"$out/halves.txt"
        ROOFLINE_RING_AHEAD=4 tune_fmt halves "$f" "XReg U=0 W=0" "1x14336x4096,1x4096x14336" "-DRW_HALVES=1"
    done
fi
if has hab; then
    env_ab hab extra ROOFLINE_NVRTC_EXTRA "default -DRW_HALVES=1" "1x14336x4096 1x4096x14336 1x4096x4096 2x14336x4096" \
        "INT4_G128 MXFP4 NVFP4"
fi
if has t2; then
    ROOFLINE_NVRTC_EXTRA=-DRW_TAIL2=1 ROOFLINE_TEST_FORMATS=${T2_FORMATS:-INT4_G128,MXFP4,NVFP4} ROOFLINE_TEST_M=1,2 \
        test_bin t-tail2 300 ring_gpu --ignored --nocapture ring_gemv_matches_the_reference
fi
if has tail2; then
    for f in ${TAIL2_FORMATS:-INT4_G128 MXFP4 NVFP4}; do
        tune_fmt tail2 "$f" "XReg U=0 W=0" \
            "${TAIL2_SHAPES:-1x14336x4096,1x4096x4096,1x6144x4096,1x28672x4096,1x128256x4096,2x14336x4096}" "" "-DRW_TAIL2=1" ""
    done
    env_ab tail2-meas extra ROOFLINE_NVRTC_EXTRA "default -DRW_TAIL2=1" "1x14336x4096 1x4096x4096 1x28672x4096" "INT4_G128"
fi
if has trace; then
    for v in "INT4_G128 14336 4096" "INT4_G128 14336 4096 -DEXP_FFN_LOADONLY=1" "INT4_G128 4096 4096" \
        "INT4_G128 28672 4096" "INT4_G128 128256 4096" "MXFP4 14336 4096" "NF4 14336 4096"; do
        set -- $v
        echo "=== $v" | tee -a "$out/trace.txt"
        ROOFLINE_NVRTC_EXTRA=${4:-} timeout 60 .gpu/ring_trace "$1" "$2" "$3" 40 \
            --json "$out/trace-$1-$2x$3${4:+-loads}.json" 2>&1 | tee -a "$out/trace.txt"
    done
fi
if has early; then
    for v in "INT4_G128 14336 4096" "INT4_G128 128256 4096" "MXFP4 14336 4096"; do
        for e in "" -DRW_EARLY=1; do
            set -- $v
            echo "=== $v [$e]" | tee -a "$out/early-trace.txt"
            ROOFLINE_NVRTC_EXTRA=$e timeout 60 .gpu/ring_trace "$1" "$2" "$3" 2>&1 | grep -v "^ *[0-9]" | tee -a "$out/early-trace.txt"
        done
    done
    for f in INT4_G128 MXFP4 NVFP4 NF4 FP8_E4M3; do
        tune_fmt early "$f" "XReg U=0 W=0" "1x14336x4096,1x4096x14336,1x4096x4096,1x28672x4096,1x128256x4096" \
            "" "-DRW_EARLY=1" "" "-DRW_EARLY=1"
    done
    ROOFLINE_NVRTC_EXTRA=-DRW_EARLY=1 ROOFLINE_TEST_FORMATS=INT4_G128,MXFP4 ROOFLINE_TEST_M=1,2 test_bin t-early 300 \
        ring_gpu --ignored --nocapture ring_gemv_matches_the_reference
fi
if has dyn; then
    tune_fmt dyn INT4_G128 "XReg U=0 W=0" "1x14336x4096,1x28672x4096,1x4096x4096,1x4096x14336,1x128256x4096" "" \
        -DEXP_FFN_LOADONLY=1 "-DEXP_FFN_LOADONLY=1 -DEXP_RING_DYN=3" "-DEXP_FFN_LOADONLY=1 -DEXP_RING_DYN=8" \
        -DEXP_FFN_LOADONLY=1 "-DEXP_FFN_LOADONLY=1 -DEXP_RING_DYN=3" "-DEXP_FFN_LOADONLY=1 -DEXP_RING_DYN=8"
fi

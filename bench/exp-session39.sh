#!/usr/bin/env bash
# Session 39 probes (H200): where the 4-bit ring GEMV's stream loses to a bare read. At 1x14336x4096 INT4 its
# weights stream through the ring, decode dropped, in 8.5 us; read_stream.cu reads the same bytes in 7.3.
# Parts (comma-separated):
#   bulk   the bulk-copy read stream (src/bulk_stream.rs): its GPU check, then the sweep at BULK_BYTES (default
#          INT4 1x14336x4096's codes) of units x units in flight x CTAs (BULK_UNITS, BULK_AHEAD, BULK_CTAS, BULK_RING,
#          BULK_CONSUMERS), beside the read stream grid-stride and in per-CTA shares
#   inter  the ring GEMV with its CTAs' row steps interleaved (-DRW_INTERLEAVE=1) against contiguous runs, each
#          checked by `measure`, INTER_SHAPES x INTER_FORMATS, twice
#   loads  the ring's loads alone (EXP_FFN_LOADONLY) at LOAD_SHAPES x LOAD_FORMATS, contiguous and interleaved
#   tail   tune_table's ring row at TAIL_SHAPES (comma-separated) x TAIL_FORMATS: the kernel, its decode alone
#          (EXP_FFN_NOLOAD: no copies, no waits), the kernel with its last 1 / 3 units undecoded
#          (EXP_RING_SKIPLAST), its loads alone (EXP_FFN_LOADONLY)
#   ncu    Nsight Compute on one ring launch per NCU_FORMATS at NCU_SHAPE: warp states, scheduler, source counters
#          (the stall reasons by instruction)
#   ab     tune_table's ring row, .gpu/weight_only_gpu-base (the build before this session's decode change) and
#          .gpu/weight_only_gpu alternately, twice, AB_SHAPES (comma-separated) x AB_FORMATS; then the new build's
#          decode alone (EXP_FFN_NOLOAD) in ROOFLINE_RING_GROUPS 3 and 4
#   half   the INT4 ring with half its decode (EXP_RING_HALFDECODE) against the whole, at HALF_SHAPES, with
#          HALF_AHEAD units in flight (ROOFLINE_RING_AHEAD; "default": the build's), twice; and its decode alone
#   (r6's `mma` part, the INT4 ring with its products on the tensor cores, went with that rejected variant:
#   results/h200-2026-11-28-session39/ring-mma-attempt.patch)
#   pipes  Nsight Compute's pipe utilization and instruction mix (ComputeWorkloadAnalysis, InstructionStats,
#          WarpStateStats) of one INT4 ring launch at NCU_SHAPE, the kernel and its decode alone (EXP_FFN_NOLOAD)
#   mbab   model-bench MB_MODEL (default llama-3.1-8b) INT4 at batch 1, .gpu/roofline-base (the build before this
#          session's INT4 decode) and .gpu/roofline alternately, twice
#   table  issue 11's table
# $HW: the profile (bench/results/h200-measured.toml on an H200). Logs: $OUT (the device's), else /tmp/exp-session39.
. "$(dirname "$0")/probe-lib.sh"
probe_start exp-session39 "${1:-bulk,inter,loads}"
if has bulk; then
    timeout 420 .gpu/gpu_lib --ignored --nocapture bulk_stream 2>&1 | tee "$out/bulk.txt" | grep -E "^BULK|^test |test result|panicked"
fi
if has inter; then
    env_ab inter inter ROOFLINE_NVRTC_EXTRA "default -DRW_INTERLEAVE=1" "${INTER_SHAPES:-1x14336x4096 1x4096x14336 1x128256x4096}" \
        "${INTER_FORMATS:-int4_g128 mxfp4}"
fi
if has loads; then
    for s in ${LOAD_SHAPES:-1x14336x4096}; do
        for f in ${LOAD_FORMATS:-INT4_G128}; do
            tune_fmt loads "$f" "XReg U=0 W=0" "$s" "-DEXP_FFN_LOADONLY=1" "-DEXP_FFN_LOADONLY=1 -DRW_INTERLEAVE=1" "" "-DRW_INTERLEAVE=1"
        done
    done
fi
if has tail; then
    for f in ${TAIL_FORMATS:-INT4_G128}; do
        tune_fmt tail "$f" "XReg U=0 W=0" "${TAIL_SHAPES:-1x14336x4096,1x4096x14336}" "" "-DEXP_FFN_NOLOAD=1" \
            "-DEXP_RING_SKIPLAST=1" "-DEXP_RING_SKIPLAST=3" "-DEXP_FFN_LOADONLY=1"
    done
fi
if has ncu; then
    ncu=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
    IFS=x read -r m n k <<<"${NCU_SHAPE:-1x14336x4096}"
    for f in ${NCU_FORMATS:-int4_g128}; do
        echo "=== ncu $f ${NCU_SHAPE:-1x14336x4096} ($ncu)" | tee -a "$out/ncu.txt"
        timeout 200 "$ncu" --clock-control none --kernel-name regex:wo_ring --launch-skip 30 --launch-count 1 \
            --section WarpStateStats --section SchedulerStats --section SourceCounters --section LaunchStats \
            --section Occupancy .gpu/roofline measure --hw $hw --weights $f --m $m --n $n --k $k >>"$out/ncu.txt" 2>&1
        grep -E "Stall|Warp Cycles|Issued|Eligible|Active Warps|No Eligible|Duration" "$out/ncu.txt" | tail -30
    done
fi
if has ab; then
    for rep in 1 2; do
        for bin in weight_only_gpu-base weight_only_gpu; do
            echo "=== build $bin" >>"$out/ab.txt"
            for f in ${AB_FORMATS:-INT4_G128 MXFP4 NF4}; do
                TUNE_BIN=$bin tune_fmt "ab" "$f" "XReg U=0 W=0" "${AB_SHAPES:-1x14336x4096,1x4096x14336}" ""
            done
        done
    done
    for g in 3 4; do
        ROOFLINE_RING_GROUPS=$g tune_fmt "ab" INT4_G128 "XReg U=0 W=0" 1x14336x4096 "-DEXP_FFN_NOLOAD=1"
        ROOFLINE_RING_GROUPS=$g tune_fmt "ab" INT4_G128 "XReg U=0 W=0" 1x14336x4096 ""
    done
fi
if has half; then
    for rep in 1 2; do
        for a in ${HALF_AHEAD:-default 3 4}; do
            echo "=== ahead $a" >>"$out/half.txt"
            ROOFLINE_RING_AHEAD=${a#default} tune_fmt half INT4_G128 "XReg U=0 W=0" "${HALF_SHAPES:-1x14336x4096,1x4096x14336}" \
                "" "-DEXP_RING_HALFDECODE=1"
        done
    done
    tune_fmt half INT4_G128 "XReg U=0 W=0" "${HALF_SHAPES:-1x14336x4096,1x4096x14336}" "-DEXP_FFN_NOLOAD=1" \
        "-DEXP_FFN_NOLOAD=1 -DEXP_RING_HALFDECODE=1"
fi
if has pipes; then
    ncu=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
    for extra in "" "-DEXP_FFN_NOLOAD=1"; do
        echo "=== pipes int4_g128 ${NCU_SHAPE:-1x14336x4096} [$extra]" | tee -a "$out/pipes.txt"
        ROOFLINE_NVRTC_EXTRA="$extra" ROOFLINE_TUNE_SET=xreg ROOFLINE_TUNE_TOLERANCE=1e30 \
            ROOFLINE_TUNE_SHAPES=${NCU_SHAPE:-1x14336x4096} ROOFLINE_TUNE_FORMATS=INT4_G128 ROOFLINE_TUNE_ONLY="XReg U=0 W=0" \
            timeout 200 "$ncu" --clock-control none --kernel-name regex:wo_ring --launch-skip 30 --launch-count 1 \
            --section ComputeWorkloadAnalysis --section InstructionStats --section WarpStateStats --print-details all \
            .gpu/weight_only_gpu --ignored tune_table --nocapture >>"$out/pipes.txt" 2>&1
    done
    grep -E "===|Pipe|pipe|Issue Slot|Executed Ipc|Stall|Warp Cycles" "$out/pipes.txt" | head -80
fi
if has mbab; then
    for rep in 1 2; do
        for bin in roofline-base roofline; do
            mb mbab "$bin model-bench ${MB_MODEL:-llama-3.1-8b} batch 1 int4" "$bin" --config "${MB_MODEL:-llama-3.1-8b}" \
                --batch 1 --scheme int4
        done
    done
fi
if has table; then
    issue_table table
fi

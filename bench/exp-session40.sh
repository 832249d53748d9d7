#!/usr/bin/env bash
# Session 40 probes (H200): INT4's ring GEMV in lanes of two 16-byte chunks (RW_LW 2: a lane takes 64 values of
# each row under one g128 scale; ROOFLINE_RING_WIDE) against one chunk a lane. Rejected: the parts wide, groups,
# ncu and ldfirst need results/h200-2026-11-28-session40/ring-wide-attempt.patch applied (its RW_LW, EXP_RW_NOSWZ and
# EXP_RW_LDFIRST), verify its ROOFLINE_RING_WIDE; tverify and tail need ring-tail-attempt.patch (the last row step
# shared by the row groups, ROOFLINE_RING_TAIL; also rejected). sscales, final and table run on main.
# Parts (comma-separated):
#   verify the ring's reference test (.gpu/ring_gpu) with ROOFLINE_RING_WIDE=1 (two chunks a lane wherever INT4 fits)
#   wide   tune_table's INT4 ring row at WIDE_SHAPES (comma-separated) with ROOFLINE_RING_WIDE 0 and 1 alternately,
#          twice; then each one's decode alone (EXP_FFN_NOLOAD)
#   groups the wide build in ROOFLINE_RING_GROUPS of RING_GROUPS (default 4 6 8) x ROOFLINE_RING_AHEAD of AHEADS (default
#          "default 3"), at WIDE_SHAPES
#   table  issue 11's table
#   ncu    Nsight Compute on one INT4 ring launch at NCU_SHAPE, one chunk a lane and two (and two unswizzled), and their
#          decode alone: warp states, instructions, shared-memory wavefronts and bank conflicts
#   ldfirst every row's chunk loaded before the decode (EXP_RW_LDFIRST) against the default, one and two chunks a lane
#   tverify the ring's reference test with ROOFLINE_RING_TAIL=1 (the last row step shared by the row groups)
#   tail   `measure` (checked, then timed) with ROOFLINE_RING_TAIL 0 and 1 alternately, twice, TAIL_SHAPES x
#          TAIL_FORMATS
#   sscales the scales streamed with the weights (ROOFLINE_RING_STREAM_SCALES=1) against the default, SS_SHAPES x SS_FORMATS;
#          with SS_RING (shapes) MXFP4 and NF4 there on the ring with streamed scales (--gemv ring=true)
#   final  the committed build: reference tests, then the shapes whose scales now stream on fast memory
# $HW: the profile (bench/results/h200-measured.toml on an H200). Logs: $OUT (the device's), else /tmp/exp-session40.
. "$(dirname "$0")/probe-lib.sh"
probe_start exp-session40 "${1:-verify,wide}"
shapes=${WIDE_SHAPES:-1x14336x4096,1x4096x4096,1x28672x4096,1x128256x4096}
if has verify; then
    ring_verify wide ROOFLINE_RING_WIDE "1"
fi
if has wide; then
    for rep in 1 2; do
        for w in 0 1; do
            echo "=== wide $w" >>"$out/wide.txt"
            ROOFLINE_RING_WIDE=$w tune_fmt wide INT4_G128 "XReg U=0 W=0" "$shapes" ""
        done
    done
    for w in 0 1; do
        echo "=== decode alone, wide $w" >>"$out/wide.txt"
        ROOFLINE_RING_WIDE=$w tune_fmt wide INT4_G128 "XReg U=0 W=0" "$shapes" "-DEXP_FFN_NOLOAD=1"
    done
fi
if has groups; then
    for g in ${RING_GROUPS:-4 6 8}; do
        for a in ${AHEADS:-default 3}; do
            echo "=== wide groups $g ahead $a" >>"$out/groups.txt"
            ROOFLINE_RING_WIDE=1 ROOFLINE_RING_GROUPS=$g ROOFLINE_RING_AHEAD=${a#default} \
                tune_fmt groups INT4_G128 "XReg U=0 W=0" "$shapes" ""
        done
    done
fi
if has table; then
    issue_table table
fi
if has ncu; then
    # Nsight Compute on one INT4 ring launch at NCU_SHAPE, one chunk a lane and two (two also unswizzled), the
    # kernel and its decode alone: warp states, instructions, shared-memory wavefronts and bank conflicts.
    ncu=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
    for cfg in "0|" "1|" "1|-DEXP_RW_NOSWZ=1" "0|-DEXP_FFN_NOLOAD=1" "1|-DEXP_FFN_NOLOAD=1"; do
        w=${cfg%%|*} extra=${cfg#*|}
        echo "=== ncu wide $w [$extra] ${NCU_SHAPE:-1x14336x4096}" | tee -a "$out/ncu.txt"
        ROOFLINE_RING_WIDE=$w ROOFLINE_NVRTC_EXTRA="$extra" ROOFLINE_TUNE_SET=xreg ROOFLINE_TUNE_TOLERANCE=1e30 \
            ROOFLINE_TUNE_SHAPES=${NCU_SHAPE:-1x14336x4096} ROOFLINE_TUNE_FORMATS=INT4_G128 ROOFLINE_TUNE_ONLY="XReg U=0 W=0" \
            timeout 200 "$ncu" --clock-control none --kernel-name regex:wo_ring --launch-skip 30 --launch-count 1 \
            --section WarpStateStats --section SchedulerStats --section InstructionStats \
            --metrics l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum,l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum,smsp__inst_executed.sum,gpu__time_duration.sum \
            .gpu/weight_only_gpu --ignored tune_table --nocapture >>"$out/ncu.txt" 2>&1
    done
    grep -E "===|Stall|Warp Cycles|Issued|Eligible|bank_conflicts|wavefronts|inst_executed|duration" "$out/ncu.txt" | head -120
fi
if has ldfirst; then
    # Every row's chunk loaded before the decode (EXP_RW_LDFIRST) against the default schedule, one and two chunks a
    # lane (two in 4 row groups), the kernel and its decode alone, twice.
    for rep in 1 2; do
        for cfg in "0|default" "1|4"; do
            w=${cfg%%|*} g=${cfg#*|}
            echo "=== wide $w groups $g" >>"$out/ldfirst.txt"
            ROOFLINE_RING_WIDE=$w ROOFLINE_RING_GROUPS=${g#default} tune_fmt ldfirst INT4_G128 "XReg U=0 W=0" \
                "$shapes" "" "-DEXP_RW_LDFIRST=1" "-DEXP_FFN_NOLOAD=1" "-DEXP_FFN_NOLOAD=1 -DEXP_RW_LDFIRST=1"
        done
    done
fi
if has tverify; then
    ring_verify tail ROOFLINE_RING_TAIL "1"
fi
if has tail; then
    env_ab tail tail ROOFLINE_RING_TAIL "0 1" "${TAIL_SHAPES:-1x14336x4096 1x28672x4096 1x128256x4096}" \
        "${TAIL_FORMATS:-int4_g128 mxfp4 nvfp4 nf4}"
fi
if has sscales; then
    # The scales streamed with the weights beside each slot (ROOFLINE_RING_STREAM_SCALES=1) against the default
    # (staged ahead of the weights), checked by `measure`, twice.
    env_ab sscales sscales ROOFLINE_RING_STREAM_SCALES "default 1" "${SS_SHAPES:-1x14336x4096 1x28672x4096}" \
        "${SS_FORMATS:-int4_g128 mxfp4 nvfp4}"
    # The LM heads whose ring the default leaves to the x-in-registers kernel (2-3 staged slots), on the ring with
    # streamed scales.
    [[ -n "${SS_RING:-}" ]] && env_ab sscales ring-sscales ROOFLINE_RING_STREAM_SCALES "1" "$SS_RING" "mxfp4 nf4" "ring=true"
fi
if has final; then
    # The committed build: the ring's reference test and the weight-only engine's at the issue shapes, then the
    # shapes whose scales now stream on fast memory through `measure`'s default (checked, then timed), twice.
    ring_verify final ROOFLINE_RING_STREAM_SCALES "default"
    timeout 400 .gpu/weight_only_gpu --ignored --nocapture every_format_matches >"$out/wo-every.txt" 2>&1
    grep -E "^test |test result|panicked" "$out/wo-every.txt"
    for rep in 1 2; do
        for sf in 1x128256x4096:mxfp4 1x128256x4096:nf4 1x28672x4096:nvfp4 1x28672x8192:nvfp4 1x57344x8192:mxfp4; do
            meas final "default" "${sf#*:}" "${sf%:*}" ""
        done
    done
fi

#!/usr/bin/env bash
# Session 40 probes (H200): INT4's ring GEMV in lanes of two 16-byte chunks (RW_LW 2: a lane takes 64 values of
# each row under one g128 scale; ROOFLINE_RING_WIDE) against one chunk a lane. Rejected: the parts wide, groups,
# ncu and ldfirst need results/h200-2026-11-28-session40/ring-wide-attempt.patch applied (its RW_LW, EXP_RW_NOSWZ and
# EXP_RW_LDFIRST); verify and table run on main.
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

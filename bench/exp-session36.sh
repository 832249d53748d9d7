#!/usr/bin/env bash
# Session 36 probes (H200, the first session on one): the ring GEMV's units in flight (ROOFLINE_RING_AHEAD n:
# the producer issues unit u only once unit u - n has landed; 0: as many as the ring has free slots, the H100's
# default; on fast memory since this session, ring::units_in_flight: 2 where the copies are 3.5 KB or more and
# a CTA's units fill its ring at most four times; r4 ran a first rule, at most twice, any copy) and what its
# loads alone cost (EXP_FFN_LOADONLY, wrong results by design, through tune_table). The first runs (r2, r3) set
# RW_AHEAD through ROOFLINE_NVRTC_EXTRA on a build whose host passed none; since, use ROOFLINE_RING_AHEAD.
# Parts (comma-separated):
#   verify   the ring's reference test on the default build and with each of VERIFY_AHEAD (default "2")
#            units in flight; killed after VERIFY_TIMEOUT s (default 300: a barrier bug hangs)
#   loads    tune_table's default x-in-registers row (the ring at these shapes), with LOAD_AHEAD units in flight
#            (each of "default 2"), against its loads alone, per LOAD_SHAPES x LOAD_FORMATS
#   ahead    AHEAD_SHAPES x SS_FORMATS in each of AHEAD (units in flight, or "default"), alternately, twice
#   mbahead  model-bench MB_MODEL (default llama-3.1-8b) at batch 1 per scheme of MB_SCHEMES, units in flight
#            0 / the default, alternately, twice
#   groups   GROUP_SHAPES x GROUP_FORMATS in each of RING_GROUPS row groups (ROOFLINE_RING_GROUPS; bash's own
#            GROUPS is taken) with GROUP_AHEAD units in flight (empty: the default), alternately, twice
#   ncu      Nsight Compute on one ring launch per NCU_FORMATS at NCU_SHAPE (speed of light, warp states,
#            scheduler, memory workload), clocks left alone
#   table    issue 11's table
#   tests    the weight-only and model-bench GPU tests
# $HW: the profile (default the H100's; bench/results/h200-measured.toml on an H200).
# Logs: $OUT (the device's), else /tmp/exp-session36.
. "$(dirname "$0")/probe-lib.sh"
probe_start exp-session36 "${1:-verify}"
if has verify; then
    ring_verify ahead ROOFLINE_RING_AHEAD "default ${VERIFY_AHEAD:-2}"
fi
if has loads; then
    for s in ${LOAD_SHAPES:-1x14336x4096 1x4096x14336}; do
        for f in ${LOAD_FORMATS:-INT4_G128 MXFP4}; do
            for a in ${LOAD_AHEAD:-default 2}; do
                echo "=== ahead $a" >>"$out/loads.txt"
                ROOFLINE_RING_AHEAD=${a#default} tune_fmt loads "$f" "XReg U=0 W=0" "$s" "" "-DEXP_FFN_LOADONLY=1"
            done
        done
    done
fi
if has ahead; then
    env_ab ahead ahead ROOFLINE_RING_AHEAD "${AHEAD:-default 2 4}" "${AHEAD_SHAPES:-1x14336x4096 1x4096x14336}" \
        "${SS_FORMATS:-int4_g128 mxfp4}"
fi
if has mbahead; then
    for scheme in ${MB_SCHEMES:-int4 nvfp4}; do
        for rep in 1 2; do
            for a in 0 default; do
                ROOFLINE_RING_AHEAD=${a#default} mb mbahead "ahead=$a model-bench ${MB_MODEL:-llama-3.1-8b} batch 1 $scheme" \
                    roofline --config ${MB_MODEL:-llama-3.1-8b} --batch 1 --scheme $scheme
            done
        done
    done
fi
if has groups; then
    ROOFLINE_RING_AHEAD=${GROUP_AHEAD:-} env_ab groups "ahead=${GROUP_AHEAD:-default} groups" ROOFLINE_RING_GROUPS \
        "${RING_GROUPS:-2 3 4}" "${GROUP_SHAPES:-1x14336x4096}" "${GROUP_FORMATS:-int4_g128 mxfp4 nvfp4 nf4}"
fi
if has ncu; then
    ncu=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
    IFS=x read -r m n k <<<"${NCU_SHAPE:-1x14336x4096}"
    for f in ${NCU_FORMATS:-int4_g128 mxfp4}; do
        echo "=== ncu $f ${NCU_SHAPE:-1x14336x4096} ($ncu)" | tee -a "$out/ncu.txt"
        timeout 150 "$ncu" --clock-control none --kernel-name regex:wo_ring --launch-skip 30 --launch-count 1 \
            --section SpeedOfLight --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis \
            --section LaunchStats .gpu/roofline measure --hw $hw --weights $f --m $m --n $n --k $k >>"$out/ncu.txt" 2>&1
        echo "exit $?" | tee -a "$out/ncu.txt"
    done
fi
if has table; then
    issue_table table
fi
if has tests; then
    gpu_tests
fi

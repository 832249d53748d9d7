#!/usr/bin/env bash
# Session 63 probes (H200 through the device tool). Parts (comma-separated):
#   spread .gpu/ring_trace --repeat 20 (examples/ring_trace.rs: 20 traced launches, each the last of 3 back-to-back,
#          and how the CTAs' lateness repeats over them: by block index, by SM, by start, by units a CTA: trace::Spread)
#          for INT4 at 1x14336x4096 (also its loads alone, -DEXP_FFN_LOADONLY=1), 1x4096x14336, 1x28672x4096 and
#          1x4096x4096, and MXFP4 and NF4 at 1x14336x4096, into $out/spread.txt (JSON per shape beside it)
#   early  `measure` (checked against the reference, then timed) the default against -DRW_EARLY=1 (wo_ring.cu: the
#          producer warp's copies before the scale tables'), NF4 and INT4 at issue 11's M = 1 shapes and
#          1x28672x4096, twice each, into $out/early.txt
# $HW: the profile (bench/results/h200-measured.toml on an H200). Logs: $OUT (the device's), else /tmp/exp-session63.
. "$(dirname "$0")/probe-lib.sh"
probe_start exp-session63 "${1:-spread}"
if has spread; then
    for v in "INT4_G128 14336 4096" "INT4_G128 14336 4096 -DEXP_FFN_LOADONLY=1" "INT4_G128 4096 14336" \
        "INT4_G128 28672 4096" "INT4_G128 4096 4096" "MXFP4 14336 4096" "NF4 14336 4096"; do
        set -- $v
        echo "=== $v" | tee -a "$out/spread.txt"
        ROOFLINE_NVRTC_EXTRA=${4:-} timeout 90 .gpu/ring_trace "$1" "$2" "$3" 40 --repeat ${SPREAD_REPEAT:-20} \
            --json "$out/spread-$1-$2x$3${4:+-loads}.json" 2>&1 | grep -v "^ *[0-9]" | tee -a "$out/spread.txt"
    done
fi
if has early; then
    env_ab early extra ROOFLINE_NVRTC_EXTRA "default -DRW_EARLY=1" \
        "${EARLY_SHAPES:-1x14336x4096 1x4096x14336 1x4096x4096 1x28672x4096}" "${EARLY_FORMATS:-NF4 INT4_G128}"
fi

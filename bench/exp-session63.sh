#!/usr/bin/env bash
# Session 63 probes (H200 through the device tool). Parts (comma-separated):
#   spread .gpu/ring_trace --repeat 20 (examples/ring_trace.rs: 20 traced launches, each the last of 3 back-to-back,
#          and how the CTAs' lateness repeats over them: by block index, by SM, by start, by units a CTA, by GPC:
#          trace::Spread, --gpcs: sm_map.rs)
#          for INT4 at 1x14336x4096 and the LM head 1x128256x4096 (both also their loads alone, -DEXP_FFN_LOADONLY=1),
#          1x4096x14336, 1x28672x4096 and 1x4096x4096, and MXFP4 and NF4 at 1x14336x4096, into $out/spread.txt (JSON per
#          shape beside it)
#   early  `measure` (checked against the reference, then timed) the default against -DRW_EARLY=1 (wo_ring.cu: the
#          producer warp's copies before the scale tables'), NF4 and INT4 at issue 11's M = 1 shapes and
#          1x28672x4096, twice each, into $out/early.txt
#   balance the CTAs' shares of the row steps from their measured rates (ROOFLINE_RING_SPLIT, ring/plan.rs
#          `split_override`; `ring_trace --balance`, trace::balanced_shares): per shape of BALANCE_SHAPES (FORMAT N K;
#          default INT4 at 1x14336x4096 and the LM head, MXFP4 at 1x14336x4096), ring_trace --repeat 20 --balance from
#          the default grid and from an even split over all $SMS SMs (default 132), ring_trace again with each balanced
#          table (did the ends even out?), into $out/balance.txt; then `measure` (checked against the reference, then
#          timed) with the default, the even split over every SM and both balanced tables, twice, into $out/balance-meas.txt
#   gpcs   `roofline gpu gpcs` (the SMs of each GPC, sm_map.rs) and its GPU test (gpu_lib's every_sm_falls_in_a_gpc),
#          into $out/gpcs.txt
# $HW: the profile (bench/results/h200-measured.toml on an H200). Logs: $OUT (the device's), else /tmp/exp-session63.
. "$(dirname "$0")/probe-lib.sh"
probe_start exp-session63 "${1:-spread}"
if has gpcs; then
    timeout 60 .gpu/roofline gpu gpcs 2>&1 | tee -a "$out/gpcs.txt"
    timeout 120 .gpu/gpu_lib --ignored --nocapture every_sm_falls_in_a_gpc 2>&1 | grep -E "GPCs|test result|panicked" \
        | tee -a "$out/gpcs.txt"
fi
if has spread; then
    for v in "INT4_G128 14336 4096" "INT4_G128 14336 4096 -DEXP_FFN_LOADONLY=1" "INT4_G128 4096 14336" \
        "INT4_G128 28672 4096" "INT4_G128 4096 4096" "INT4_G128 128256 4096" \
        "INT4_G128 128256 4096 -DEXP_FFN_LOADONLY=1" "MXFP4 14336 4096" "NF4 14336 4096"; do
        set -- $v
        echo "=== $v" | tee -a "$out/spread.txt"
        ROOFLINE_NVRTC_EXTRA=${4:-} timeout 90 .gpu/ring_trace "$1" "$2" "$3" 40 --repeat ${SPREAD_REPEAT:-20} --gpcs \
            --json "$out/spread-$1-$2x$3${4:+-loads}.json" 2>&1 | grep -v "^ *[0-9]" | tee -a "$out/spread.txt"
    done
fi
if has early; then
    env_ab early extra ROOFLINE_NVRTC_EXTRA "default -DRW_EARLY=1" \
        "${EARLY_SHAPES:-1x14336x4096 1x4096x14336 1x4096x4096 1x28672x4096}" "${EARLY_FORMATS:-NF4 INT4_G128}"
fi
# `even_split STEPS CTAS`: ROOFLINE_RING_SPLIT's form of an even split (the kernel's default shares).
even_split() {
    local c t=""
    for ((c = 0; c < $2; c++)); do t+="$(((c + 1) * $1 / $2 - c * $1 / $2)),"; done
    echo "${t%,}"
}
if has balance; then
    while read -r f n k; do
        [[ -z "$f" ]] && continue
        even=$(even_split $((n / 8)) "${SMS:-132}")
        echo "=== $f $n $k: default grid, balanced" | tee -a "$out/balance.txt"
        bal=$(timeout 120 .gpu/ring_trace "$f" "$n" "$k" 40 --repeat 20 --balance 2>&1 | grep -v "^ *[0-9]" \
            | tee -a "$out/balance.txt" | sed -n 's/^ROOFLINE_RING_SPLIT=//p')
        echo "=== $f $n $k: even over every SM, balanced" | tee -a "$out/balance.txt"
        bal_all=$(ROOFLINE_RING_SPLIT=$even timeout 120 .gpu/ring_trace "$f" "$n" "$k" 40 --repeat 20 --balance 2>&1 \
            | grep -v "^ *[0-9]" | tee -a "$out/balance.txt" | sed -n 's/^ROOFLINE_RING_SPLIT=//p')
        for t in "$bal" "$bal_all"; do
            [[ -z "$t" ]] && continue
            echo "=== $f $n $k: with the balanced table $t" | tee -a "$out/balance.txt"
            ROOFLINE_RING_SPLIT=$t timeout 120 .gpu/ring_trace "$f" "$n" "$k" 40 --repeat 20 2>&1 | grep -v "^ *[0-9]" \
                | tee -a "$out/balance.txt"
        done
        for rep in 1 2; do
            (export MEAS_TIMEOUT=60; meas balance-meas default "$f" "1x${n}x$k" "")
            (export MEAS_TIMEOUT=60 ROOFLINE_RING_SPLIT=$even; meas balance-meas "even over every SM" "$f" "1x${n}x$k" "")
            [[ -n "$bal" ]] && (export MEAS_TIMEOUT=60 ROOFLINE_RING_SPLIT=$bal; meas balance-meas balanced "$f" "1x${n}x$k" "")
            [[ -n "$bal_all" ]] && (export MEAS_TIMEOUT=60 ROOFLINE_RING_SPLIT=$bal_all
                meas balance-meas "balanced over every SM" "$f" "1x${n}x$k" "")
        done
    done <<<"${BALANCE_SHAPES:-INT4_G128 14336 4096
INT4_G128 128256 4096
MXFP4 14336 4096}"
fi

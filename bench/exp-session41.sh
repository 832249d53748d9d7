#!/usr/bin/env bash
# Session 41 probes (H200): two ring CTAs a SM (ROOFLINE_RING_CTAS_PER_SM=2: twice the producers and units in
# flight a SM, half the ring each), the long-K plan in two row groups, x multicast at M = 16 (never measured on
# the H200), and a sweep of the shapes session 40's streamed-scales rule moved without a measurement.
# Parts (comma-separated):
#   cps     `measure` (checked, then timed) with ROOFLINE_RING_CTAS_PER_SM default / 2, and 2 in CPS_GROUPS row
#           groups (default 2), the last two with --gemv ring=true (the engine's own choice leaves the ring where a
#           CTA takes under 8 row steps: run 1 timed the x-in-registers kernel there), at CPS_SHAPES x CPS_FORMATS,
#           twice
#   kh      1x4096x14336 in the long-K plan's default (1 group, 2 K parts) against 2 row groups in 2 K parts
#   mc      16x14336x4096 with x multicast to CTA pairs (--gemv multicast=true) against the default
#   sscales the (format, shape) pairs of SS_PAIRS (fmt:MxNxK, space-separated) with the default (streamed since
#           session 40) against ROOFLINE_RING_STREAM_SCALES=0 (staged: the old default), twice
#   xr      the (format, shape) pairs of XR_PAIRS (fmt:MxNxK) that the engine leaves to the x-in-registers kernel on the
#           H200: its default against the ring (--gemv ring=true), staged and with ROOFLINE_RING_STREAM_SCALES=1, twice
#   final   the committed build: the weight-only engine's reference test at the issue shapes, then `measure`'s
#           default (checked, then timed) from .gpu/roofline-base (session 40's HEAD, 4a99aed) and .gpu/roofline
#           alternately, twice, at FINAL_PAIRS: the shapes session 41's rule moves (and one it leaves)
#   check   the committed build: the ring's reference test, issue 11's table, and NF4 at K = 14336 (the rule's
#           moves there, 4 -> 5 slots in 2 K parts) from .gpu/roofline-base and .gpu/roofline alternately, twice
#   small   the x-in-registers default against the ring (--gemv ring=true) at SMALL_SHAPES for INT4, MXFP4 and
#           NVFP4, alternately, three times (session 41's r3 saw the default vary by 30% between passes there)
#   mbring  model-bench Llama-3.1-8B at batch 1, INT4, the default against --gemv ring=true (qkv and o_proj on
#           the ring too), alternately, twice
#   mbstep  model-bench MB_MODEL (default llama-3.1-8b; MB_LAYERS: its first layers only) at batch 1 from
#           .gpu/roofline-base (session 40's HEAD) then .gpu/roofline (the 4-bit step's GEMVs on the ring,
#           ring::in_step), per scheme of MB_SCHEMES
# $HW: the profile (bench/results/h200-measured.toml on an H200). Logs: $OUT (the device's), else /tmp/exp-session41.
. "$(dirname "$0")/probe-lib.sh"
probe_start exp-session41 "${1:-cps}"
if has cps; then
    for s in ${CPS_SHAPES:-1x14336x4096 1x28672x4096 1x128256x4096}; do
        for f in ${CPS_FORMATS:-int4_g128 mxfp4 nvfp4 nf4}; do
            for rep in 1 2; do
                (export MEAS_TIMEOUT=40; meas cps "cps=1" "$f" "$s" "")
                (export ROOFLINE_RING_CTAS_PER_SM=2 MEAS_TIMEOUT=40; meas cps "cps=2" "$f" "$s" "ring=true")
                (export ROOFLINE_RING_CTAS_PER_SM=2 ROOFLINE_RING_GROUPS=${CPS_GROUPS:-2} MEAS_TIMEOUT=40
                 meas cps "cps=2 groups=${CPS_GROUPS:-2}" "$f" "$s" "ring=true")
            done
        done
    done
fi
if has kh; then
    for f in int4_g128 mxfp4 nvfp4 nf4; do
        for rep in 1 2; do
            (export MEAS_TIMEOUT=40; meas kh "default" "$f" 1x4096x14336 "")
            (export ROOFLINE_RING_GROUPS=2 ROOFLINE_RING_KH=2 MEAS_TIMEOUT=40; meas kh "groups=2 kh=2" "$f" 1x4096x14336 "")
        done
    done
fi
if has mc; then
    for f in int4_g128 mxfp4 nvfp4; do
        for rep in 1 2; do
            meas mc "default" "$f" 16x14336x4096 ""
            meas mc "multicast" "$f" 16x14336x4096 "multicast=true"
        done
    done
fi
if has sscales; then
    for p in ${SS_PAIRS:-nf4:1x14336x6144 nf4:1x28672x6144 nf4:1x32000x5120 nf4:1x57344x5120 nf4:1x65536x4096 \
        nf4:1x128256x3072 nf4:1x152064x3072 mxfp4:1x14336x14336 mxfp4:1x28672x5120 mxfp4:1x57344x4096 \
        mxfp4:1x128256x3072 nvfp4:1x8192x14336 nvfp4:1x27648x4096 nvfp4:1x55296x4096 nvfp4:1x65536x3072 \
        nvfp4:1x152064x2048}; do
        for rep in 1 2; do
            (export MEAS_TIMEOUT=40; meas sscales "default (streamed)" "${p%%:*}" "${p#*:}" "")
            (export ROOFLINE_RING_STREAM_SCALES=0 MEAS_TIMEOUT=40; meas sscales "staged" "${p%%:*}" "${p#*:}" "")
        done
    done
fi
if has xr; then
    for p in ${XR_PAIRS:-int4_g128:1x4096x4096 mxfp4:1x4096x4096 nvfp4:1x4096x4096 int4_g128:1x6144x4096 \
        nf4:1x49152x6144 nvfp4:1x32000x5120 nvfp4:1x27648x6144 int4_g128:1x152064x5120 int4_g128:1x151936x4096 \
        mxfp4:1x57344x6144 int4_g128:1x57344x6144}; do
        for rep in 1 2; do
            (export MEAS_TIMEOUT=40; meas xr "default" "${p%%:*}" "${p#*:}" "")
            (export MEAS_TIMEOUT=40; meas xr "ring" "${p%%:*}" "${p#*:}" "ring=true")
            (export ROOFLINE_RING_STREAM_SCALES=1 MEAS_TIMEOUT=40; meas xr "ring streamed" "${p%%:*}" "${p#*:}" "ring=true")
        done
    done
fi
if has final; then
    timeout 400 .gpu/weight_only_gpu --ignored --nocapture every_format_matches >"$out/wo-every.txt" 2>&1
    grep -E "^test |test result|panicked" "$out/wo-every.txt"
    bin_ab final "${FINAL_PAIRS:-int4_g128:1x152064x5120 int4_g128:1x151936x4096 int4_g128:1x57344x6144 \
        int4_g128:1x128256x5120 nf4:1x49152x6144 nf4:1x128256x6144 nvfp4:1x32000x5120 nvfp4:1x18944x6144 \
        nvfp4:1x8192x14336 mxfp4:1x57344x6144 mxfp4:1x65536x5120 mxfp4:1x14336x14336 int4_g128:1x14336x4096}"
fi
if has check; then
    ring_verify check ROOFLINE_RING_STREAM_SCALES "default"
    issue_table table
    bin_ab check "nf4:1x8192x14336 nf4:1x11008x14336 nf4:1x6144x14336"
fi
if has small; then
    for rep in 1 2 3; do
        for s in ${SMALL_SHAPES:-1x6144x4096 1x4096x4096 1x1024x4096}; do
            for f in int4_g128 mxfp4 nvfp4; do
                (export MEAS_TIMEOUT=40; meas small "default" "$f" "$s" "")
                (export MEAS_TIMEOUT=40; meas small "ring" "$f" "$s" "ring=true")
            done
        done
    done
fi
if has mbring; then
    for rep in 1 2; do
        mb mbring "default" roofline --config llama-3.1-8b --batch 1 --scheme int4
        mb mbring "ring=true" roofline --config llama-3.1-8b --batch 1 --scheme int4 --gemv ring=true
    done
fi
if has mbstep; then
    mb_ab mbstep "${MB_MODEL:-llama-3.1-8b}" "${MB_LAYERS:-}" "${MB_SCHEMES:-int4 mxfp4 nvfp4 nf4}"
fi

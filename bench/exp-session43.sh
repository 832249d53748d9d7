#!/usr/bin/env bash
# Session 43 probes (H200): why the 4-bit ring runs slower at K = 5120 than at K = 6144 for the same N (session
# 42: MXFP4 1x2048x5120 5.61 us against 1x2048x6144 4.59), and the GPU tests session 42 left unrun or unexplained.
# Parts (comma-separated):
#   k5120   `measure` (checked, then timed) of the ring (--gemv ring=true) at K5_SHAPES x K5_FORMATS with each of
#           K5_SETTINGS in turn ("VAR=value", "default": the build's own choice; ROOFLINE_RING_GROUPS row groups,
#           ROOFLINE_RING_AHEAD units in flight, ROOFLINE_RING_CTAS_PER_SM; "gemv:OPTS": --gemv OPTS instead,
#           e.g. gemv:ring=false for the x-in-registers kernel), once (gated samples repeat within 0.5% between
#           passes), into $out/$K5_LOG.txt (default k5120.txt)
#   server  the server's GPU tests (.gpu/server_api --ignored: /api/measure's JSON, host_us among it)
#   gpulib  roofline-gpu's GPU unit tests (.gpu/gpu_lib --ignored --nocapture, all in parallel as cargo runs them;
#           session 42's r5 saw the full-matrix NVRTC test FAILED there without its message), killed after
#           GPULIB_TIMEOUT s (default 480)
#   rule    `measure`'s default at RULE_PAIRS (fmt:MxNxK), once
#   step    model-bench Llama-3.1-8B at batch 1 (MB_SCHEMES, default int4 mxfp4) under each of STEP_SETTINGS ("VAR=value"
#           or "default"; default: the ring alone on its SM, then ROOFLINE_RING_ALONE=0)
#   verify  the ring GEMV's reference test (.gpu/ring_gpu) and the weight-only engine's at the issue shapes
# $HW: the profile (bench/results/h200-measured.toml on an H200). Logs: $OUT (the device's), else /tmp/exp-session43.
. "$(dirname "$0")/probe-lib.sh"
probe_start exp-session43 "${1:-k5120}"
if has k5120; then
    for s in ${K5_SHAPES:-1x2048x5120 1x13824x5120 1x2048x6144}; do
        for f in ${K5_FORMATS:-int4_g128 mxfp4}; do
            for v in ${K5_SETTINGS:-default ROOFLINE_RING_GROUPS=1 ROOFLINE_RING_GROUPS=2 ROOFLINE_RING_GROUPS=4 \
                ROOFLINE_RING_AHEAD=3 ROOFLINE_RING_AHEAD=0 ROOFLINE_RING_CTAS_PER_SM=2}; do
                (
                    gemv=ring=true
                    case $v in
                    default) ;;
                    gemv:*) gemv=${v#gemv:} ;;
                    *) export "${v?}" ;;
                    esac
                    export MEAS_TIMEOUT=40
                    meas "${K5_LOG:-k5120}" "$v" "$f" "$s" "$gemv"
                )
            done
        done
    done
fi
if has server; then
    test_bin server 300 server_api --ignored
fi
if has gpulib; then
    test_bin gpu-lib "${GPULIB_TIMEOUT:-480}" gpu_lib --ignored --nocapture
fi
if has rule; then
    for p in ${RULE_PAIRS:-int4_g128:1x2048x5120 mxfp4:1x2048x5120}; do
        (export MEAS_TIMEOUT=40; meas rule default "${p%%:*}" "${p#*:}" "")
    done
fi
if has step; then
    for scheme in ${MB_SCHEMES:-int4 mxfp4}; do
        for v in ${STEP_SETTINGS:-default ROOFLINE_RING_ALONE=0}; do
            (
                [[ $v == default ]] || export "${v?}"
                mb step "$v llama-3.1-8b batch 1 $scheme" roofline --config llama-3.1-8b --batch 1 --scheme $scheme
            )
        done
    done
fi
if has verify; then
    test_bin verify-ring 300 ring_gpu --ignored --nocapture ring_gemv_matches_the_reference
    test_bin verify-wo 300 weight_only_gpu --ignored --nocapture every_format_matches
fi

#!/usr/bin/env bash
# Session 34 probes (H100): the ring GEMV's streamed scales from step-major tables (`pack::ring_step_tables`:
# each slot's scales one bulk copy on its barrier, instead of session 33's 16-byte cp.async pieces a DRAM page
# apart), against staged tables and the base build.
# Parts (comma-separated): verify (the ring's reference test by default and with
# ROOFLINE_RING_STREAM_SCALES=1), ss (per shape and format, each of SS_LABELS: base = .gpu/roofline-base,
# default, staged = forced staged, streamed = forced streamed), mb (model-bench, base vs new: Llama-3.1-70B
# --layers 4 for MB_SCHEMES, Llama-3.1-8B NVFP4), table (issue 11's table), tests (the weight-only and
# model-bench GPU tests; runs r4 and r5 ran them as parts `wo` and `mbt`). Logs: $OUT (the device's), else
# /tmp/exp-session34. Run r6's parts `any` / `anymb` (ring slots of any count) moved to bench/exp-session35.sh
# with the design that landed.
. "$(dirname "$0")/probe-lib.sh"
probe_start exp-session34 "${1:-verify}"
if has verify; then
    # VERIFY_SS: the settings of ROOFLINE_RING_STREAM_SCALES to run it under (`default`: unset).
    for g in ${VERIFY_SS:-default 1}; do
        echo "=== ROOFLINE_RING_STREAM_SCALES=$g" | tee -a "$out/verify.txt"
        ROOFLINE_RING_STREAM_SCALES=${g#default} timeout 500 .gpu/ring_gpu --ignored --nocapture \
            >"$out/verify-ring-$g.txt" 2>&1
        grep -E "test result|panicked" "$out/verify-ring-$g.txt" | cut -c1-220 | tee -a "$out/verify.txt"
    done
fi
if has ss; then
    for s in ${SS_SHAPES:-1x57344x8192 1x128256x4096}; do
        for f in ${SS_FORMATS:-nvfp4 mxfp4 int4_g128 nf4}; do
            for l in ${SS_LABELS:-base staged streamed}; do
                case $l in
                base) BIN=roofline-base meas ss base $f $s "" ;;
                default) meas ss default $f $s "" ;;
                staged) ROOFLINE_RING_STREAM_SCALES=0 meas ss staged $f $s ring=true ;;
                streamed) ROOFLINE_RING_STREAM_SCALES=1 meas ss streamed $f $s ring=true ;;
                esac
            done
        done
    done
fi
if has mb; then
    mb_ab mb llama-3.1-70b 4 "${MB_SCHEMES:-nvfp4 mxfp4 nf4 int4}"
    [[ -z ${MB_NO_8B:-} ]] && mb_ab mb llama-3.1-8b "" nvfp4
fi
if has table; then
    issue_table table
fi
if has tests; then
    gpu_tests
fi

#!/usr/bin/env bash
# Session 34 probes (H100): the ring GEMV's streamed scales from step-major tables (`pack::ring_step_tables`:
# each slot's scales one bulk copy on its barrier, instead of session 33's 16-byte cp.async pieces a DRAM page
# apart), against staged tables and the base build.
# Parts (comma-separated): verify (the ring's reference test by default and with
# ROOFLINE_RING_STREAM_SCALES=1), ss (per shape and format, each of SS_LABELS: base = .gpu/roofline-base,
# default, staged = forced staged, streamed = forced streamed), mb (model-bench, base vs new: Llama-3.1-70B
# --layers 4 for MB_SCHEMES, Llama-3.1-8B NVFP4), table (issue 11's table), any (ring slots of any count vs
# multiples, ROOFLINE_RING_ANY_SLOTS, ANY_SHAPES), anymb (the same in model-bench, ANY_MB), tests (the weight-only and
# model-bench GPU tests; runs r4 and r5 ran them as parts `wo` and `mbt`). Logs: $OUT (the device's), else /tmp/exp-session34.
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
if has any; then
    # Ring slots of any count (ROOFLINE_RING_ANY_SLOTS=1, a `full` barrier per slot and class where a slot serves
    # several classes) against multiples of the consumer classes, alternately. Needs
    # bench/results/h100-2026-11-28-session34/r6/any-slots-v2.patch applied (not on main; run 6 ran the first
    # patch, any-slots.patch, whose kernels hang), and `verify` with ROOFLINE_RING_ANY_SLOTS=1 first.
    for s in ${ANY_SHAPES:-1x8192x28672 1x57344x8192 1x28672x8192}; do
        for f in ${SS_FORMATS:-nvfp4 mxfp4 int4_g128 nf4}; do
            for a in 0 1 0 1; do
                ROOFLINE_RING_ANY_SLOTS=$a meas any "any=$a" $f $s ""
            done
        done
    done
fi
if has anymb; then
    for a in 0 1; do
        ROOFLINE_RING_ANY_SLOTS=$a mb anymb "any=$a model-bench llama-3.1-70b --layers 4 batch 1 ${ANY_MB:-int4}" roofline \
            --config llama-3.1-70b --layers 4 --batch 1 --scheme ${ANY_MB:-int4}
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

#!/usr/bin/env bash
# Session 35 probes (H100): ring slots of any count (ROOFLINE_RING_ANY_SLOTS=1: where the slots are no multiple
# of the consumer classes, row groups x K parts, a `full` barrier per slot and class; the default since: in one
# row group) and CUDA-graph captures beside context-wide work in another thread.
# Parts (comma-separated):
#   verify   the ring's reference test with ROOFLINE_RING_ANY_SLOTS set to each of VERIFY_ANY (default "1 default",
#            default: unset); killed after VERIFY_TIMEOUT s (default 300: a barrier bug hangs)
#   capture  the ring test binary's capture stress test, one process per kind of work beside (CAPTURE_KINDS)
#   any      ANY_SHAPES x SS_FORMATS, any=0 / 1 alternately, twice; each killed after MEAS_TIMEOUT s (default 40)
#   kh       K parts (ROOFLINE_RING_KH): the default against each of KH_PARTS per KH_SHAPES x SS_FORMATS
#   anymb    model-bench Llama-3.1-70B --layers 4 at batch 1, any=0 / 1, per scheme of ANY_MB
#   mb       the same on the default, per scheme of MB_SCHEMES
#   table    issue 11's table
#   tests    the weight-only and model-bench GPU tests
# Logs: $OUT (the device's), else /tmp/exp-session35.
. "$(dirname "$0")/probe-lib.sh"
probe_start exp-session35 "${1:-verify}"
if has verify; then
    ring_verify any ROOFLINE_RING_ANY_SLOTS "${VERIFY_ANY:-1 default}"
fi
if has capture; then
    # Each kind of context-wide work in a process of its own (CAPTURE_KINDS).
    for kind in ${CAPTURE_KINDS:-module graph GPU}; do
        ROOFLINE_CAPTURE_KINDS=$kind timeout 120 .gpu/ring_gpu --ignored --nocapture captures_survive_context \
            >"$out/capture-$kind.txt" 2>&1
        echo "$kind: exit $?"
        grep -E "captures beside|test result|panicked" "$out/capture-$kind.txt" | cut -c1-220
        tail -2 "$out/capture-$kind.txt"
    done
fi
if has any; then
    env_ab any any ROOFLINE_RING_ANY_SLOTS "0 1" "${ANY_SHAPES:-1x8192x28672 1x57344x8192 1x28672x8192}" \
        "${SS_FORMATS:-nvfp4 mxfp4 int4_g128 nf4}"
fi
if has kh; then
    # K parts (ROOFLINE_RING_KH) per KH_SHAPES x SS_FORMATS: the default against each of KH_PARTS, alternately,
    # twice; with any slot count in one row group the finer parts get as many slots as fit.
    env_ab kh kh ROOFLINE_RING_KH "default ${KH_PARTS:-7}" "${KH_SHAPES:-1x4096x14336 1x8192x28672}" \
        "${SS_FORMATS:-int4_g128 mxfp4}"
fi
if has anymb; then
    for scheme in ${ANY_MB:-nvfp4 int4}; do
        for a in 0 1; do
            ROOFLINE_RING_ANY_SLOTS=$a mb anymb "any=$a model-bench llama-3.1-70b --layers 4 batch 1 $scheme" roofline \
                --config llama-3.1-70b --layers 4 --batch 1 --scheme $scheme
        done
    done
fi
if has mb; then
    # model-bench Llama-3.1-70B (4 layers) at batch 1 on the default, per scheme of MB_SCHEMES.
    for scheme in ${MB_SCHEMES:-nvfp4 mxfp4 int4 nf4}; do
        mb mb "model-bench llama-3.1-70b --layers 4 batch 1 $scheme" roofline --config llama-3.1-70b --layers 4 \
            --batch 1 --scheme $scheme
    done
fi
if has table; then
    issue_table table
fi
if has tests; then
    gpu_tests
fi

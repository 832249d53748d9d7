#!/usr/bin/env bash
# Session 33 probes (H100): the ring GEMV with its scales streamed with the weights beside each ring slot
# (`RW_SSTREAM`, ring.rs `wants_streamed_scales`) where the staged tables leave the ring few slots or none.
# Parts (comma-separated): verify (the ring's reference test by default and with
# ROOFLINE_RING_STREAM_SCALES=1), ss (A/B per shape: .gpu/roofline-base, the new default, forced staged,
# forced streamed),
# mb (model-bench Llama-3.1-70B --layers 4 NVFP4/MXFP4/NF4/INT4 and 8B NVFP4, base vs new), table (issue
# 11's table), wo or mbt (the weight-only and model-bench GPU tests). Logs: $OUT (the device's), else /tmp/exp-session33.
. "$(dirname "$0")/probe-lib.sh"
probe_start exp-session33 "${1:-verify}"
if has verify; then
    for g in ${VERIFY_SS:-"" 1}; do
        echo "=== ROOFLINE_RING_STREAM_SCALES=$g" | tee -a "$out/verify.txt"
        ROOFLINE_RING_STREAM_SCALES=$g timeout 500 .gpu/ring_gpu --ignored --nocapture >"$out/verify-ring-$g.txt" 2>&1
        grep -E "28672|test result|panicked|scales streamed" "$out/verify-ring-$g.txt" | cut -c1-220 \
            | tee -a "$out/verify.txt" | tail -${VERIFY_TAIL:-12}
    done
fi
if has ss; then
    # The shapes whose staged tables leave few slots (70B gate_up / down_proj / LM heads), and two where
    # they leave many (the default keeps them staged).
    for s in ${SS_SHAPES:-1x57344x8192 1x8192x28672 1x128256x8192 1x128256x4096 1x28672x8192 1x14336x4096}; do
        for f in ${SS_FORMATS:-nvfp4 mxfp4 int4_g128 nf4}; do
            BIN=roofline-base meas ss base $f $s ""
            meas ss default $f $s ""
            [[ -z ${SS_QUICK:-} ]] && ROOFLINE_RING_STREAM_SCALES=0 meas ss staged $f $s ring=true
            [[ -z ${SS_QUICK:-} ]] && ROOFLINE_RING_STREAM_SCALES=1 meas ss streamed $f $s ring=true
        done
    done
fi
if has mb; then
    mb_ab mb llama-3.1-70b 4 "${MB_SCHEMES:-nvfp4 mxfp4 nf4 int4}"
    mb_ab mb llama-3.1-8b "" nvfp4
fi
if has table; then
    issue_table table
fi
if has wo || has mbt; then
    gpu_tests
fi

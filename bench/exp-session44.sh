#!/usr/bin/env bash
# Session 44 probes (H200): FP16 weights on the ring GEMV (new this session) against the split-K kernel that ran
# every FP16 GEMV at M = 1 before, and the GPU tests session 43 left unrun.
# Parts (comma-separated):
#   fp16    `measure` (checked, then timed) of FP16 at F16_SHAPES (MxNxK) under each of F16_SETTINGS in turn:
#           "splitk" (--gemv variant=splitk: the kernel before this session), "default" (the engine's choice),
#           "ring" (--gemv variant=xreg,ring=true) and "VAR=value" (the ring with that environment variable:
#           ROOFLINE_RING_AHEAD units in flight, ROOFLINE_RING_KH K parts, ROOFLINE_RING_GROUPS row groups), once
#           each (gated samples repeat within 0.5%), into $out/$F16_LOG.txt (default fp16.txt)
#   verify  the ring GEMV's reference test (.gpu/ring_gpu, FP16 among its formats now) and the weight-only
#           engine's at the issue shapes
#   gpulib  roofline-gpu's GPU unit tests (.gpu/gpu_lib --ignored --nocapture) without its measurement probes
#           (GPULIB_SKIP, default the read-stream and bulk-copy sweeps: with them the run passed 430 s in r3),
#           killed after GPULIB_TIMEOUT s (default 480)
#   table   issue 11's table (`probe-lib.sh`'s issue_table: `compare --weight-only` at its five shapes)
#   step    model-bench Llama-3.1-8B at batch 1 (MB_SCHEMES, default fp16) under each of STEP_SETTINGS ("VAR=value"
#           or "default")
# $HW: the profile (bench/results/h200-measured.toml on an H200). Logs: $OUT (the device's), else /tmp/exp-session44.
. "$(dirname "$0")/probe-lib.sh"
probe_start exp-session44 "${1:-fp16}"
if has fp16; then
    for s in ${F16_SHAPES:-1x14336x4096 1x4096x4096 1x28672x4096 1x128256x4096 1x6144x4096 1x2048x4096 1x1024x4096 1x4096x8192}; do
        for v in ${F16_SETTINGS:-splitk default ROOFLINE_RING_AHEAD=0 ROOFLINE_RING_AHEAD=2 ROOFLINE_RING_KH=4}; do
            meas_setting "${F16_LOG:-fp16}" "$v" fp16 "$s"
        done
    done
fi
if has verify; then
    test_bin verify-ring 300 ring_gpu --ignored --nocapture ring_gemv_matches_the_reference
    test_bin verify-wo 300 weight_only_gpu --ignored --nocapture every_format_matches
fi
if has gpulib; then
    gpu_lib_tests gpu-lib
fi
if has table; then
    issue_table table
fi
if has step; then
    step_8b step
fi

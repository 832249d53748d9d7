#!/usr/bin/env bash
# Session 38 probes (H200): the read-stream calibration. A decode GEMV only reads; `calibrate`'s copy bandwidth
# (reads + writes) under-states its roof, so FP8 / INT8 ran 12-14% faster than the calibrated profile predicted.
# Parts (comma-separated):
#   cal    `roofline calibrate` (copy, launch overhead, latency, the read stream's builds and fit, GEMM peaks) into
#          $out/h200-read.toml, its progress into $out/cal.txt
#   stream the read-stream kernel's GPU test (every build, sizes with remainders; each result checked)
#   nopdl  the read stream without programmatic dependent launch, fitted (CAL_THREADS x CAL_UNROLL, default 512 x 8),
#          against the same build with it: does PDL change the intercept?
#   sizes  the read stream (512 x 4, PDL) at the weight bytes of issue 11's GEMVs (READ_SIZES, bytes), twice
#   table  issue 11's table on the new profile ($out/h200-read.toml if `cal` ran, else $HW)
#   mb     model-bench MB_MODEL (default llama-3.1-8b) at batch 1, MB_SCHEMES (default fp16,fp8_e4m3,int4) compared,
#          on the new profile
# $HW: the profile (bench/results/h200-measured.toml on an H200). Logs: $OUT (the device's), else /tmp/exp-session38.
. "$(dirname "$0")/probe-lib.sh"
probe_start exp-session38 "${1:-cal,stream,table}"
if has cal; then
    timeout 300 .gpu/roofline calibrate -o "$out/h200-read.toml" 2>&1 | tee "$out/cal.txt" | grep -E "read stream|wrote|rror"
    cat "$out/h200-read.toml"
fi
[[ -f $out/h200-read.toml ]] && hw=$out/h200-read.toml
if has stream; then
    timeout 200 .gpu/gpu_lib --ignored --nocapture read_stream 2>&1 | tee "$out/stream.txt" | grep -E "^test |test result|panicked"
fi
if has nopdl; then
    timeout 200 .gpu/gpu_lib --ignored --nocapture read_stream_pdl_ab 2>&1 | tee "$out/nopdl.txt" | grep -E "^AB|test result|panicked"
fi
if has sizes; then
    timeout 200 .gpu/gpu_lib --ignored --nocapture read_stream_at_sizes 2>&1 | tee "$out/sizes.txt" | grep -E "^AT|test result|panicked"
fi
if has table; then
    issue_table table
fi
if has mb; then
    mb mb "model-bench ${MB_MODEL:-llama-3.1-8b} batch 1 ${MB_SCHEMES:-fp16,fp8_e4m3,int4}" roofline \
        --config "${MB_MODEL:-llama-3.1-8b}" --batch 1 --schemes "${MB_SCHEMES:-fp16,fp8_e4m3,int4}"
fi

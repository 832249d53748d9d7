#!/usr/bin/env bash
# Session 34 probes (H100): the ring GEMV's streamed scales from step-major tables (`pack::ring_step_tables`:
# each slot's scales one bulk copy on its barrier, instead of session 33's 16-byte cp.async pieces a DRAM page
# apart), against staged tables and the base build.
# Parts (comma-separated): verify (the ring's reference test by default and with
# ROOFLINE_RING_STREAM_SCALES=1), ss (per shape and format, each of SS_LABELS: base = .gpu/roofline-base,
# default, staged = forced staged, streamed = forced streamed), mb (model-bench, base vs new: Llama-3.1-70B
# --layers 4 for MB_SCHEMES, Llama-3.1-8B NVFP4), table (issue 11's table), wo (the weight-only GPU tests),
# mbt (model-bench's GPU tests). Logs: $OUT (the device's), else /tmp/exp-session34.
. "$(dirname "$0")/probe-lib.sh"
probe_start exp-session34 "${1:-verify}"
if has verify; then
    for g in ${VERIFY_SS:-"" 1}; do
        echo "=== ROOFLINE_RING_STREAM_SCALES=$g" | tee -a "$out/verify.txt"
        ROOFLINE_RING_STREAM_SCALES=$g timeout 500 .gpu/ring_gpu --ignored --nocapture >"$out/verify-ring-$g.txt" 2>&1
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
    for scheme in ${MB_SCHEMES:-nvfp4 mxfp4 nf4 int4}; do
        for bin in roofline-base roofline; do
            mb mb "$bin model-bench llama-3.1-70b --layers 4 batch 1 $scheme" $bin --config llama-3.1-70b \
                --layers 4 --batch 1 --scheme $scheme
        done
    done
    if [[ -z ${MB_NO_8B:-} ]]; then
        for bin in roofline-base roofline; do
            mb mb "$bin model-bench llama-3.1-8b batch 1 nvfp4" $bin --config llama-3.1-8b --batch 1 --scheme nvfp4
        done
    fi
fi
if has table; then
    issue_table table
fi
if has wo; then
    for t in every_format_matches fused_norm; do
        timeout 400 .gpu/weight_only_gpu --ignored --nocapture $t >"$out/wo-$t.txt" 2>&1
        grep -E "^test |test result|panicked" "$out/wo-$t.txt"
    done
fi
if has mbt; then
    timeout 300 .gpu/model_bench_gpu --ignored >"$out/mbt.txt" 2>&1
    grep -E "^test |test result|panicked" "$out/mbt.txt"
fi

#!/usr/bin/env bash
# Session 57 probes (H200 through the device tool). Parts (comma-separated):
#   fb       spill_fallback_gpu: `measure` (a277f45's `ring_spills`, not re-run since) and model-bench's linears at batch
#            16 (each linear whose tensor-core ring build spills takes the bulk ring; `ring=true` makes it the error),
#            every ring build forced to spill (`-DRW_MINB=3`), into $out/fb.txt
#   mb       model-bench Llama-3.1-8B (8 layers) at batch 16, INT4 and NF4, the default (the spill probe's builds reused
#            by the step's linears), into $out/mb.txt
#   mbt      model_bench_gpu's step test (every format; batch 1, 3 and 16), into $out/mbt.txt
# $HW: the profile (bench/results/h200-measured.toml on an H200). Logs: $OUT (the device's), else /tmp/exp-session57.
. "$(dirname "$0")/probe-lib.sh"
probe_start exp-session57 "${1:-fb}"
if has fb; then
    test_bin fb 300 spill_fallback_gpu --ignored --nocapture --test-threads 1
fi
if has mb; then
    for s in int4 nf4; do
        MB_TIMEOUT=200 mb mb "$s batch 16" roofline --config llama-3.1-8b --schemes $s --batch 16 --layers 8
    done
fi
if has mbt; then
    test_bin mbt 300 model_bench_gpu --ignored --nocapture small_llama_step_runs_in_every_format_and_checks_attention
fi

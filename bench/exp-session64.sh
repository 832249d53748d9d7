#!/usr/bin/env bash
# Session 64 checks (H200 through the device tool) of the new default: the producer warp's first copies before the
# scale tables' (`RW_EARLY`, ring/plan.rs `early_copies`) for INT4 g128 and NF4 at one row of x, y = W x, where a CTA
# streams more units than its ring holds. Parts (comma-separated):
#   tests  ring_gpu's reference test for INT4 and NF4 (one to three rows of x: the early builds at one) and
#          weight_only_gpu's every-M test for both (the engine's defaults), into $out/t-ring.txt and $out/t-every-m.txt
#   ab     `measure` (checked against the reference, then timed) INT4 and NF4 with .gpu/roofline-base (the commit
#          before, `bench/build-gpu.sh base`) against .gpu/roofline, at issue 11's M = 1 shapes and 1x28672x4096,
#          interleaved, twice each, into $out/ab.txt
#   table  issue 11's table (`compare --weight-only`, every format) with the new binary into $out/table.txt
# $HW: the profile (bench/results/h200-measured.toml on an H200). Logs: $OUT (the device's), else /tmp/exp-session64.
. "$(dirname "$0")/probe-lib.sh"
probe_start exp-session64 "${1:-tests}"
if has tests; then
    ROOFLINE_TEST_FORMATS=INT4_G128,NF4 test_bin t-ring 300 ring_gpu --ignored --nocapture ring_gemv_matches_the_reference
    ROOFLINE_TEST_FORMATS=INT4_G128,NF4 test_bin t-every-m 300 weight_only_gpu --ignored --nocapture every_m
fi
if has ab; then
    for s in ${AB_SHAPES:-1x14336x4096 1x4096x14336 1x4096x4096 1x28672x4096 1x128256x4096}; do
        for f in ${AB_FORMATS:-INT4_G128 NF4}; do
            for rep in 1 2; do
                for bin in roofline-base roofline; do
                    (export BIN=$bin MEAS_TIMEOUT=60; meas ab "$bin" "$f" "$s" "")
                done
            done
        done
    done
fi
if has table; then
    issue_table table
fi

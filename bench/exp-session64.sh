#!/usr/bin/env bash
# Session 64 checks (H200 through the device tool) of the new default: the producer warp's first copies before the
# scale tables' (`RW_EARLY`, ring/plan.rs `early_copies`) for INT4 g128 and NF4 at one row of x, y = W x, where a CTA
# streams more units than its ring holds. Parts (comma-separated):
#   tests  ring_gpu's reference test for INT4 and NF4 (one to three rows of x: the early builds at one) and
#          weight_only_gpu's every-M test for both (the engine's defaults), into $out/t-ring.txt and $out/t-every-m.txt
#   ab     `measure` (checked against the reference, then timed) INT4 and NF4 with ROOFLINE_RING_EARLY=0 (the build
#          before) against the default, at issue 11's M = 1 shapes and 1x28672x4096, twice each, into $out/ab.txt
#   mb     model-bench Llama-3.1-8B (8 layers) batch 1, INT4 and NF4, with ROOFLINE_RING_EARLY=0 (none early), the default
#          (plain GEMVs only: the LM head here) and =1 (every CUDA-core ring build at one row of x early: the fused
#          qkv with its norm, o_proj and down_proj with their adds, gate_up), twice, into $out/mb.txt: does early help
#          the fused epilogues too?
#   t1     after `mb` the default takes the residual add early too: ring_gpu's reference test at one row of x (INT4 and
#          NF4, every epilogue) into $out/t1-ring.txt
#   mb2    model-bench as `mb`, ROOFLINE_RING_EARLY=0 against the new default, twice, into $out/mb2.txt
#   table  issue 11's table (`compare --weight-only`, every format) with the new binary into $out/table.txt
# $HW: the profile (bench/results/h200-measured.toml on an H200). Logs: $OUT (the device's), else /tmp/exp-session64.
. "$(dirname "$0")/probe-lib.sh"
probe_start exp-session64 "${1:-tests}"
if has tests; then
    ROOFLINE_TEST_FORMATS=INT4_G128,NF4 test_bin t-ring 300 ring_gpu --ignored --nocapture ring_gemv_matches_the_reference
    ROOFLINE_TEST_FORMATS=INT4_G128,NF4 test_bin t-every-m 300 weight_only_gpu --ignored --nocapture every_m
fi
if has ab; then
    env_ab ab early ROOFLINE_RING_EARLY "0 default" "${AB_SHAPES:-1x14336x4096 1x4096x14336 1x4096x4096 1x28672x4096 \
1x128256x4096}" "${AB_FORMATS:-INT4_G128 NF4}"
fi
if has mb; then
    for rep in 1 2; do
        for f in int4 nf4; do
            for v in 0 default 1; do
                (export ROOFLINE_RING_EARLY=${v#default}; MB_TIMEOUT=120 mb mb "early=$v $f" roofline \
                    --config llama-3.1-8b --schemes $f --layers 8)
            done
        done
    done
fi
if has t1; then
    ROOFLINE_TEST_M=1 ROOFLINE_TEST_FORMATS=INT4_G128,NF4 test_bin t1-ring 300 ring_gpu --ignored --nocapture \
        ring_gemv_matches_the_reference
fi
if has mb2; then
    for rep in 1 2; do
        for f in int4 nf4; do
            for v in 0 default; do
                (export ROOFLINE_RING_EARLY=${v#default}; MB_TIMEOUT=120 mb mb2 "early=$v $f" roofline \
                    --config llama-3.1-8b --schemes $f --layers 8)
            done
        done
    done
fi
if has table; then
    issue_table table
fi

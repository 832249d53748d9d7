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
#   groups the ring's row groups re-measured on the current build (`ROOFLINE_RING_GROUPS`; session 43 found NF4 in 3
#          groups 1-7% faster at large N alone but slower in the 8B step, a large-N-only rule left open): NF4 default
#          (2) / 3 / 4 at 1x14336x4096, 1x28672x4096 and the LM head; MXFP4 and NVFP4 default (3) / 4 at 1x14336x4096
#          and 1x28672x4096; twice each, into $out/groups.txt
#   g4     after `groups`, NF4 at one row takes 4 row groups where a CTA takes 14-32 row steps on fast memory
#          (`ring::one_row_groups`): ring_gpu's NF4 cases at one row of x (the 1x14336x4096 store among them) and
#          weight_only_gpu's every-M test for NF4, then `measure` ROOFLINE_RING_GROUPS=2 against the default at
#          1x14336x4096, 1x28672x4096 and 1x20480x4096, twice each, into $out/t-g4.txt, $out/t-g4-every-m.txt, $out/g4.txt
#          (G4_NO_TESTS=1: the timings only)
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
# `mb_early LOG VALUES`: model-bench Llama-3.1-8B (8 layers) batch 1, INT4 and NF4, with ROOFLINE_RING_EARLY set to
# each of VALUES ("default": empty), twice, into $out/LOG.txt.
mb_early() {
    local log=$1 values=$2 rep f v
    for rep in 1 2; do
        for f in int4 nf4; do
            for v in $values; do
                (export ROOFLINE_RING_EARLY=${v#default}; MB_TIMEOUT=120 mb "$log" "early=$v $f" roofline \
                    --config llama-3.1-8b --schemes $f --layers 8)
            done
        done
    done
}
if has mb; then
    mb_early mb "0 default 1"
fi
if has t1; then
    ROOFLINE_TEST_M=1 ROOFLINE_TEST_FORMATS=INT4_G128,NF4 test_bin t1-ring 300 ring_gpu --ignored --nocapture \
        ring_gemv_matches_the_reference
fi
if has mb2; then
    mb_early mb2 "0 default"
fi
if has groups; then
    env_ab groups groups ROOFLINE_RING_GROUPS "default 3 4" "1x14336x4096 1x28672x4096 1x128256x4096" "NF4"
    env_ab groups groups ROOFLINE_RING_GROUPS "default 4" "1x14336x4096 1x28672x4096" "MXFP4 NVFP4"
fi
if has g4; then
    if [[ -z "${G4_NO_TESTS:-}" ]]; then
        ROOFLINE_TEST_M=1 ROOFLINE_TEST_FORMATS=NF4 test_bin t-g4 300 ring_gpu --ignored --nocapture \
            ring_gemv_matches_the_reference
        ROOFLINE_TEST_FORMATS=NF4 test_bin t-g4-every-m 300 weight_only_gpu --ignored --nocapture every_m
    fi
    env_ab g4 groups ROOFLINE_RING_GROUPS "2 default" "1x14336x4096 1x28672x4096 1x20480x4096" "NF4"
fi
if has table; then
    issue_table table
fi

#!/usr/bin/env bash
# Session 65 checks (H200 through the device tool) of NF4's tensor-core sums on the CUDA-core ring (`NF4_TC`,
# wo_stream.cuh `row_step_nf4tc`, ring/plan.rs `nf4_tensor_sums`: one to three rows of x where the tensor-core ring
# does not take them). Parts (comma-separated):
#   tests  ring_gpu's reference test for NF4 at one to three rows of x (either x type, every epilogue) and
#          weight_only_gpu's every-M test for NF4 (the engine's defaults), into $out/t-ring.txt and $out/t-every-m.txt
#   ab     `measure` (checked against the reference, then timed) NF4 with ROOFLINE_RING_NF4TC=0 (hsum4 and the
#          butterfly: the build before) against the default, at issue 11's M = 1 shapes, 1x28672x4096 and two rows of
#          x on the CUDA-core ring (K = 14336, the LM head), twice each, into $out/ab.txt
#   ahead  NF4 at one row with three units in flight (ROOFLINE_RING_AHEAD=3; `three_in_flight` leaves NF4 at two): does
#          the cheaper sum let a third pay, as it does for INT4, MXFP4 and NVFP4? Default / 3 at 1x14336x4096,
#          1x20480x4096, 1x28672x4096, twice each, into $out/ahead.txt
#   mb     model-bench Llama-3.1-8B (8 layers) NF4 at batch 1 and 2, ROOFLINE_RING_NF4TC=0 against the default,
#          twice, into $out/mb.txt
#   table  issue 11's table (`compare --weight-only`, every format) into $out/table.txt
# $HW: the profile (bench/results/h200-measured.toml on an H200). Logs: $OUT (the device's), else /tmp/exp-session65.
. "$(dirname "$0")/probe-lib.sh"
probe_start exp-session65 "${1:-tests}"
if has tests; then
    ROOFLINE_TEST_M=1,2,3 ROOFLINE_TEST_FORMATS=NF4 test_bin t-ring 300 ring_gpu --ignored --nocapture \
        ring_gemv_matches_the_reference
    ROOFLINE_TEST_FORMATS=NF4 test_bin t-every-m 300 weight_only_gpu --ignored --nocapture every_m
fi
if has ab; then
    env_ab ab nf4tc ROOFLINE_RING_NF4TC "0 default" "${AB_SHAPES:-1x14336x4096 1x4096x14336 1x28672x4096 \
1x128256x4096 1x4096x4096 2x4096x14336 2x128256x4096}" NF4
fi
if has ahead; then
    env_ab ahead ahead ROOFLINE_RING_AHEAD "default 3" "1x14336x4096 1x20480x4096 1x28672x4096" NF4
fi
if has mb; then
    for rep in 1 2; do
        for b in 1 2; do
            for v in 0 default; do
                (export ROOFLINE_RING_NF4TC=${v#default}; MB_TIMEOUT=120 mb mb "nf4tc=$v batch $b" roofline \
                    --config llama-3.1-8b --schemes nf4 --layers 8 --batch $b)
            done
        done
    done
fi
if has table; then
    issue_table table
fi

#!/usr/bin/env bash
# Session 60 probes (H200 through the device tool). Parts (comma-separated):
#   t1       ring_gpu's reference test for INT4 at 1-3 rows of x (the CUDA-core ring's row step; $T1_M: other rows) with
#            ROOFLINE_NVRTC_EXTRA=-DRW_SUBN=0, 1 and 2 (the codes as f16 subnormals, wo_stream.cuh `dot8subn`, widened
#            every 2 words, or 4 with 2), into $out/t-subn{0,1,2}.txt, the errors side by side (0, 1, 2)
#   ab       `measure` INT4 at issue 11's M = 1 shapes and more, the build's default against -DRW_SUBN=1 and 2, twice each,
#            into $out/ab.txt
#   t2       ring_gpu's reference test for INT4 at 1 and 2 rows with the engine's default (RW_SUBN=1 from ring.rs since
#            r3), into $out/t-default.txt
#   tune     the ring's units in flight (ROOFLINE_RING_AHEAD: default 2, 3, 0 = all) and row groups (ROOFLINE_RING_GROUPS:
#            default 3, 2, 4) for INT4 at M = 1 with the subnormal decode, twice each, into $out/tune.txt
#   table    issue 11's table (`compare --weight-only`, every format) into $out/table.txt
#   mb1      model-bench Llama-3.1-8B (8 layers) INT4 at batch 1 and 2, ROOFLINE_RING_SUBN=0 against the default,
#            into $out/mb1.txt
#   ffn      ffn_gpu's reference test (every format; INT4's phase A on the subnormal decode since r4) with
#            ROOFLINE_RING_SUBN=0 and the default, into $out/t-ffn{0,1}.txt
#   tune2    ROOFLINE_RING_AHEAD default / 3 for INT4 at M = 1 where a CTA takes 20-56 row steps of K = 4096, twice each,
#            into $out/tune2.txt
#   a3       since r5 INT4's subnormal decode keeps 3 units in flight from more units than slots up to 7 fills (16 KB
#            copies): ring_gpu's INT4 test at 1 and 2 rows, then `measure` the default against ROOFLINE_RING_AHEAD=2 at
#            1x and 2x14336x4096 and 28672x4096, twice each, then model-bench Llama-3.1-8B INT4 at batch 2, into
#            $out/t-a3.txt, $out/a3.txt and $out/mb2.txt
#   kp       INT4 at 1x4096x14336 (K in parts) with the subnormal decode: ROOFLINE_RING_KH (default 2, 1, 7),
#            ROOFLINE_RING_AHEAD (default 2, 3, 4, 0) and ROOFLINE_RING_GROUPS (default 1, 2), twice each, into $out/kp.txt
#   final    the committed build's checks: ring_gpu's INT4 test at 1 and 2 rows, ffn_gpu's test, weight_only_gpu's every-M
#            test (INT4), then issue 11's table, into $out/final-*.txt and $out/final-table.txt
#   mbt      after attn_qkv took the subnormal decode too: model_bench_gpu's tests (the fused qkv + attention among
#            them), then model-bench Llama-3.1-8B INT4 (8 layers) batch 1 with --qkv fused, ROOFLINE_RING_SUBN=0 against
#            the default, into $out/t-mb.txt and $out/mbq.txt
# $HW: the profile (bench/results/h200-measured.toml on an H200). Logs: $OUT (the device's), else /tmp/exp-session60.
. "$(dirname "$0")/probe-lib.sh"
probe_start exp-session60 "${1:-t1}"
if has t1; then
    for v in 0 1 2; do
        ROOFLINE_NVRTC_EXTRA=-DRW_SUBN=$v ROOFLINE_TEST_FORMATS=INT4_G128 ROOFLINE_TEST_M=${T1_M:-1,2,3} test_bin t-subn$v 400 \
            ring_gpu --ignored --nocapture ring_gemv_matches_the_reference
        grep -E "rel. error" "$out/t-subn$v.txt" | grep -v "tensor cores" | sed -E 's/.*Int4G128 x ([A-Za-z0-9]+) ([0-9x]+) row ([0-9]+) ([A-Za-z]+) .*rel. error ([0-9.e-]+) \(of W x ([0-9.e-]+)\)/\1 \2 r\3 \4 \5 \6/' \
            | sort -u >"$out/err-subn$v.txt"
    done
    paste "$out/err-subn0.txt" "$out/err-subn1.txt" "$out/err-subn2.txt" | awk '{print $1, $2, $3, $4, $5, $11, $17}' | head -60
fi
if has ab; then
    env_ab ab subn ROOFLINE_NVRTC_EXTRA "default -DRW_SUBN=1 -DRW_SUBN=2" \
        "1x14336x4096 1x4096x14336 1x4096x4096 1x128256x4096 1x28672x4096 2x14336x4096" "INT4_G128"
fi
if has t2; then
    ROOFLINE_TEST_FORMATS=INT4_G128 ROOFLINE_TEST_M=1,2 test_bin t-default 400 ring_gpu --ignored --nocapture \
        ring_gemv_matches_the_reference
fi
if has tune; then
    env_ab tune ahead ROOFLINE_RING_AHEAD "default 3 0" "1x14336x4096 1x4096x14336 1x28672x4096 1x128256x4096" "INT4_G128"
    env_ab tune groups ROOFLINE_RING_GROUPS "default 2 4" "1x14336x4096 1x28672x4096 1x128256x4096" "INT4_G128"
fi
if has table; then
    issue_table table
fi
if has mb1; then
    for b in 1 2; do
        for v in 0 default; do
            (export ROOFLINE_RING_SUBN=${v#default}; MB_TIMEOUT=200 mb mb1 "subn=$v batch $b" roofline --config llama-3.1-8b \
                --schemes int4 --batch $b --layers 8)
        done
    done
fi
if has ffn; then
    for v in 0 1; do
        ROOFLINE_RING_SUBN=$v test_bin t-ffn$v 300 ffn_gpu --ignored --nocapture fused_ffn_matches_the_reference
        grep -E "Int4G128" "$out/t-ffn$v.txt"
    done
fi
if has tune2; then
    env_ab tune2 ahead ROOFLINE_RING_AHEAD "default 3" "1x20480x4096 1x24576x4096 1x36864x4096 1x57344x4096" "INT4_G128"
fi
if has a3; then
    ROOFLINE_TEST_FORMATS=INT4_G128 ROOFLINE_TEST_M=1,2 test_bin t-a3 400 ring_gpu --ignored --nocapture \
        ring_gemv_matches_the_reference
    env_ab a3 ahead ROOFLINE_RING_AHEAD "default 2" "1x14336x4096 1x28672x4096 2x14336x4096 2x28672x4096" "INT4_G128"
    for v in 2 default; do
        (export ROOFLINE_RING_AHEAD=${v#default}; MB_TIMEOUT=200 mb mb2 "ahead=$v batch 2" roofline --config llama-3.1-8b \
            --schemes int4 --batch 2 --layers 8)
    done
fi
if has kp; then
    env_ab kp kh ROOFLINE_RING_KH "default 1 7" "1x4096x14336" "INT4_G128"
    env_ab kp ahead ROOFLINE_RING_AHEAD "default 3 4 0" "1x4096x14336 1x8192x8192" "INT4_G128"
    env_ab kp groups ROOFLINE_RING_GROUPS "default 2" "1x4096x14336" "INT4_G128"
fi
if has final; then
    ROOFLINE_TEST_FORMATS=INT4_G128 ROOFLINE_TEST_M=1,2 test_bin final-ring 400 ring_gpu --ignored --nocapture \
        ring_gemv_matches_the_reference
    test_bin final-ffn 300 ffn_gpu --ignored --nocapture fused_ffn_matches_the_reference
    ROOFLINE_TEST_FORMATS=INT4_G128 test_bin final-everym 250 weight_only_gpu --ignored --nocapture \
        every_m_and_tiny_odd_shapes_through_the_raw_api
    issue_table final-table
fi
if has mbt; then
    test_bin t-mb 330 model_bench_gpu --ignored
    for v in 0 default; do
        (export ROOFLINE_RING_SUBN=${v#default}; MB_TIMEOUT=150 mb mbq "subn=$v batch 1 qkv fused" roofline \
            --config llama-3.1-8b --schemes int4 --batch 1 --layers 8 --qkv fused)
    done
fi

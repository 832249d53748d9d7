#!/usr/bin/env bash
# Session 61 probes (H200 through the device tool). Parts (comma-separated):
#   t1     ring_gpu's reference test for INT4 at 1-3 rows of x with ROOFLINE_NVRTC_EXTRA empty (the build's default since
#          session 61: the subnormal decode's sums widened and added by the tensor cores, wo_stream.cuh `row_step_subn`,
#          every 2 words), -DSUBN_MMA=0 (session 60's conversions and butterfly), -DSUBN_WORDS=1 and -DSUBN_WORDS=4, into
#          $out/t-{mma,old,w1,w4}.txt, the errors side by side (mma, old, w1, w4)
#   ab     `measure` INT4 at issue 11's M = 1 shapes and more, the default against -DSUBN_MMA=0 and -DSUBN_WORDS=1, twice
#          each, into $out/ab.txt (BF16 x at 1x14336x4096 too)
#   ffn    ffn_gpu's reference test (every format; INT4's phase A on the subnormal decode) into $out/t-ffn.txt
#   mbt    model_bench_gpu's tests (attn_qkv's ring among them) into $out/t-mb.txt
#   mb1    model-bench Llama-3.1-8B (8 layers) INT4 at batch 1 and 2, -DSUBN_MMA=0 against the default, into $out/mb1.txt
#   tune   with the tensor-core sums: the ring's units in flight (ROOFLINE_RING_AHEAD) and row groups (ROOFLINE_RING_GROUPS)
#          re-swept for INT4 at 1-2 rows, and ROOFLINE_RING_MMA_MAX_STEPS=0 (2-3 rows on the CUDA-core ring instead of the
#          tensor-core one) where the default takes the tensor cores, twice each, into $out/tune.txt
#   nv     (r3, an attempt since reverted: its patch is bench/results/h200-2026-11-30-session61/r3/nv-mma-attempt.patch; on
#          later builds -DNV_MMA changes nothing) NVFP4's CUDA-core row step on the tensor-core sums too (`row_step_nv`, each
#          segment's f16 sums times its E4M3 scale in f16 first): ring_gpu's NVFP4 cases at 1-2 rows
#          with the default and -DNV_MMA=0 (errors side by side), then `measure` NVFP4 at issue 11's M = 1 shapes and more,
#          the default against -DNV_MMA=0, twice each (BF16 x at 1x14336x4096 too), into $out/t-nv{1,0}.txt, $out/nv.txt
#   final  the committed build's checks: ring_gpu's INT4 cases at 1-2 rows, weight_only_gpu's every-M test (INT4, the
#          engine's defaults), then issue 11's table, into $out/final-*.txt and $out/final-table.txt
#   m23    2-3 rows of x where the default takes the tensor-core ring (at 2 rows up to 7 row steps a CTA, at 3 always):
#          `measure` the default against the CUDA-core ring (ROOFLINE_RING_MMA_MAX_STEPS=0 with --gemv ring=true), twice
#          each, into $out/m23.txt; then ring_gpu's INT4 cases at 3 rows on the CUDA-core ring, into $out/t-m3.txt
#   m2     2 rows of x at 2-7 row steps a CTA (where the default takes the tensor-core ring): `measure` the default
#          against the CUDA-core ring (ROOFLINE_RING_MMA_M2_STEPS=0, and --gemv ring=true), INT4, FP16 and BF16 x, twice
#          each, into $out/m2.txt; then model-bench Llama-3.1-8B INT4 (8 layers) batch 2 with ROOFLINE_RING_MMA_M2_STEPS
#          default / 0 (the CUDA-core ring where the default would take it: its qkv and o_proj), into $out/mb2.txt
#   loads  where the M = 1 time goes on the tensor-core sums: tune_table's ring row (the default build), its loads alone
#          (-DEXP_FFN_LOADONLY=1) and its decode alone (-DEXP_FFN_NOLOAD=1; wrong results by design), INT4 and MXFP4 at
#          1x14336x4096 and 1x4096x14336, with the default units in flight and 4, into $out/loads.txt
#   tail   the last units' decode (-DEXP_RING_SKIPLAST=1 and 3: a CTA's last units released undecoded, wrong results by
#          design) for INT4 at 1x14336x4096 and 1x4096x14336, and 3 units in flight (ROOFLINE_RING_AHEAD=3) against the
#          default 2 for MXFP4, NVFP4 and NF4 at 1x14336x4096 and 1x28672x4096 (tune_table rows), into $out/tail.txt
#   a3     since r9 MXFP4 and NVFP4 keep 3 units in flight at one row of x as INT4 does (`ring::three_in_flight`): `measure`
#          the default against ROOFLINE_RING_AHEAD=2 at 1x14336x4096 to 1x36864x4096, twice each, into $out/a3.txt; then
#          ring_gpu's MXFP4 and NVFP4 cases at one row, into $out/t-a3.txt
#   table  issue 11's table (`compare --weight-only`, every format) into $out/table.txt
# $HW: the profile (bench/results/h200-measured.toml on an H200). Logs: $OUT (the device's), else /tmp/exp-session61.
. "$(dirname "$0")/probe-lib.sh"
probe_start exp-session61 "${1:-t1}"
if has t1; then
    for v in mma: old:-DSUBN_MMA=0 w1:-DSUBN_WORDS=1 w4:-DSUBN_WORDS=4; do
        ROOFLINE_NVRTC_EXTRA=${v#*:} ROOFLINE_TEST_FORMATS=INT4_G128 ROOFLINE_TEST_M=${T1_M:-1,2,3} test_bin "t-${v%%:*}" 400 \
            ring_gpu --ignored --nocapture ring_gemv_matches_the_reference
        grep -E "rel. error" "$out/t-${v%%:*}.txt" | grep -v "tensor cores" | sed -E 's/.*Int4G128 x ([A-Za-z0-9]+) ([0-9x]+) row ([0-9]+) ([A-Za-z]+) .*rel. error ([0-9.e-]+) \(of W x ([0-9.e-]+)\)/\1 \2 r\3 \4 \5 \6/' \
            | sort -u >"$out/err-${v%%:*}.txt"
    done
    paste "$out/err-mma.txt" "$out/err-old.txt" "$out/err-w1.txt" "$out/err-w4.txt" \
        | awk '{print $1, $2, $3, $4, $5, $11, $17, $23}' | head -80
fi
if has ab; then
    env_ab ab extra ROOFLINE_NVRTC_EXTRA "default -DSUBN_MMA=0 -DSUBN_WORDS=1" \
        "1x14336x4096 1x4096x14336 1x4096x4096 1x128256x4096 1x28672x4096 2x14336x4096" "INT4_G128"
    MEAS_X=bf16 env_ab ab extra ROOFLINE_NVRTC_EXTRA "default -DSUBN_MMA=0" "1x14336x4096" "INT4_G128"
fi
if has ffn; then
    test_bin t-ffn 300 ffn_gpu --ignored --nocapture fused_ffn_matches_the_reference
    grep -E "Int4G128" "$out/t-ffn.txt"
fi
if has mbt; then
    test_bin t-mb 330 model_bench_gpu --ignored
fi
if has mb1; then
    for b in 1 2; do
        for v in -DSUBN_MMA=0 default; do
            (export ROOFLINE_NVRTC_EXTRA=${v#default}; MB_TIMEOUT=200 mb mb1 "extra=$v batch $b" roofline \
                --config llama-3.1-8b --schemes int4 --batch $b --layers 8)
        done
    done
fi
if has tune; then
    env_ab tune ahead ROOFLINE_RING_AHEAD "default 2 4 0" "1x14336x4096 1x4096x14336" "INT4_G128"
    env_ab tune ahead ROOFLINE_RING_AHEAD "default 3" "2x14336x4096 2x28672x4096" "INT4_G128"
    env_ab tune groups ROOFLINE_RING_GROUPS "default 2 4" "1x14336x4096 2x14336x4096" "INT4_G128"
    env_ab tune mmasteps ROOFLINE_RING_MMA_MAX_STEPS "default 0" "2x4096x4096 2x6144x4096 3x4096x4096 3x14336x4096" \
        "INT4_G128"
fi
if has nv; then
    for v in 1 0; do
        ROOFLINE_NVRTC_EXTRA=-DNV_MMA=$v ROOFLINE_TEST_FORMATS=NVFP4 ROOFLINE_TEST_M=1,2 test_bin "t-nv$v" 400 \
            ring_gpu --ignored --nocapture ring_gemv_matches_the_reference
        grep -E "rel. error" "$out/t-nv$v.txt" | grep -v "tensor cores" | sed -E 's/.*Nvfp4 x ([A-Za-z0-9]+) ([0-9x]+) row ([0-9]+) ([A-Za-z]+) .*rel. error ([0-9.e-]+) \(of W x ([0-9.e-]+)\)/\1 \2 r\3 \4 \5 \6/' \
            | sort -u >"$out/err-nv$v.txt"
    done
    paste "$out/err-nv1.txt" "$out/err-nv0.txt" | awk '{print $1, $2, $3, $4, $5, $11}' | sort -k5 -g | tail -8
    env_ab nv extra ROOFLINE_NVRTC_EXTRA "default -DNV_MMA=0" \
        "1x14336x4096 1x4096x14336 1x4096x4096 1x128256x4096 2x14336x4096" "NVFP4"
    MEAS_X=bf16 env_ab nv extra ROOFLINE_NVRTC_EXTRA "default -DNV_MMA=0" "1x14336x4096" "NVFP4"
fi
if has final; then
    ROOFLINE_TEST_FORMATS=INT4_G128 ROOFLINE_TEST_M=1,2 test_bin final-ring 400 ring_gpu --ignored --nocapture \
        ring_gemv_matches_the_reference
    ROOFLINE_TEST_FORMATS=INT4_G128 test_bin final-everym 250 weight_only_gpu --ignored --nocapture \
        every_m_and_tiny_odd_shapes_through_the_raw_api
    issue_table final-table
fi
if has m23; then
    for sh in 2x4096x4096 2x6144x4096 2x2048x4096 3x4096x4096 3x6144x4096 3x14336x4096 3x28672x4096; do
        for rep in 1 2; do
            MEAS_TIMEOUT=40 meas m23 default INT4_G128 $sh ""
            (export ROOFLINE_RING_MMA_MAX_STEPS=0; MEAS_TIMEOUT=40 meas m23 cuda-core INT4_G128 $sh ring=true)
        done
    done
    ROOFLINE_RING_MMA_MAX_STEPS=0 ROOFLINE_TEST_FORMATS=INT4_G128 ROOFLINE_TEST_M=3 test_bin t-m3 300 ring_gpu --ignored \
        --nocapture ring_gemv_matches_the_reference
fi
if has m2; then
    for x in "" bf16; do
        for sh in 2x1024x4096 2x2048x4096 2x4096x4096 2x6144x4096 2x7168x4096; do
            for rep in 1 2; do
                MEAS_X=$x MEAS_TIMEOUT=40 meas m2 default INT4_G128 $sh ""
                (export ROOFLINE_RING_MMA_M2_STEPS=0; MEAS_X=$x MEAS_TIMEOUT=40 meas m2 cuda-core INT4_G128 $sh ring=true)
            done
        done
    done
    for v in default 0; do
        (export ROOFLINE_RING_MMA_M2_STEPS=${v#default}; MB_TIMEOUT=200 mb mb2 "m2steps=$v batch 2" roofline \
            --config llama-3.1-8b --schemes int4 --batch 2 --layers 8)
    done
fi
if has loads; then
    for s in 1x14336x4096 1x4096x14336; do
        for f in INT4_G128 MXFP4; do
            for a in default 4; do
                echo "=== ahead $a" >>"$out/loads.txt"
                ROOFLINE_RING_AHEAD=${a#default} tune_fmt loads "$f" "XReg U=0 W=0" "$s" "" "-DEXP_FFN_LOADONLY=1" \
                    "-DEXP_FFN_NOLOAD=1"
            done
        done
    done
fi
if has tail; then
    tune_fmt tail INT4_G128 "XReg U=0 W=0" "1x14336x4096,1x4096x14336" "" "-DEXP_RING_SKIPLAST=1" "-DEXP_RING_SKIPLAST=3"
    for f in MXFP4 NVFP4 NF4; do
        for a in default 3; do
            echo "=== ahead $a" >>"$out/tail.txt"
            ROOFLINE_RING_AHEAD=${a#default} tune_fmt tail "$f" "XReg U=0 W=0" "1x14336x4096,1x28672x4096" ""
        done
    done
fi
if has a3; then
    env_ab a3 ahead ROOFLINE_RING_AHEAD "default 2" "1x14336x4096 1x20480x4096 1x28672x4096 1x36864x4096" "MXFP4 NVFP4"
    ROOFLINE_TEST_FORMATS=MXFP4,NVFP4 ROOFLINE_TEST_M=1 test_bin t-a3 300 ring_gpu --ignored --nocapture \
        ring_gemv_matches_the_reference
fi
if has table; then
    issue_table table
fi

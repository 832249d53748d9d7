#!/usr/bin/env bash
# Session 59 probes (H200 through the device tool). Parts (comma-separated):
#   split    ring_gpu's reference test at 4, 9, 12 and 16 rows of x, K = 8192, 14336 and 16384, with
#            ROOFLINE_RING_MMA_SPLIT=1: the tensor-core ring past K = 4096 in K splits, a cluster's CTAs (wo_ring.cu
#            `RW_SPLITS`; 16x4096x14336 in 4 splits, 12x1000x8192 with the norm in 2, 9x2056x16384 in 4, 4x4096x14336),
#            each case launched twice (the same bits), into $out/t-split.txt
#   ab       `measure` with ROOFLINE_RING_MMA_SPLIT unset (the default: the bulk ring past K = 4096) and =1 (the
#            tensor-core ring in K splits), twice each, at Llama-3.1-8B's down_proj (16x and 9x4096x14336) and Llama-3-70B's
#            16x8192x8192 and 16x28672x8192, INT4 and NVFP4, into $out/ab.txt
#   ab2      as ab for MXFP4 and NF4 at 16x4096x14336 and 16x8192x8192, and INT4 at 4x and 8x4096x14336 and 16x1024x8192,
#            into $out/ab2.txt
#   t2       ring_gpu's reference test for K = 8192 (the default's 2 K splits since r4) at 4, 9, 12 and 16 rows, then for
#            K = 14336 and 16384 with ROOFLINE_RING_MMA_SPLIT=1 (4 splits), into $out/t-k8192.txt and $out/t-k4.txt
#   ab3      the default (2 K splits on the tensor cores since r4) against ROOFLINE_RING_MMA_SPLIT=0 (the bulk ring, the
#            default before), twice each: 16x8192x8192 MXFP4 and NF4, 12x8192x8192 NVFP4 and NF4, 4x8192x8192 INT4,
#            16x10240x8192 INT4 and NVFP4 (Llama-3-70B's qkv), 16x57344x8192 INT4 (its gate_up), 16x5120x5120 INT4 and
#            NVFP4, 9x13824x5120 INT4, and BF16 x 16x8192x8192 INT4 and NVFP4, into $out/ab3.txt
#   mb       model-bench Llama-3.1-70B (4 layers) at batch 16, NF4 and INT4: the default (qkv and o_proj in 2 K splits
#            on the tensor cores since r5) against ROOFLINE_RING_MMA_SPLIT=0, into $out/mb.txt
#   ab4      4 K splits (`ROOFLINE_RING_MMA_SPLIT=1`) with the grid bounded by the clusters of 4 the device holds at once
#            (`RingGemv::build` asks the driver, since r6) against the default (the bulk ring) at 16x and 9x4096x14336, INT4,
#            NVFP4, NF4 and MXFP4, twice each, into $out/ab4.txt
#   nf4      the ring test at K = 14336 for NF4 (its default's 4 K splits since r7) at 4, 9 and 16 rows, then model-bench
#            Llama-3.1-8B (8 layers) NF4 at batch 16, the default against ROOFLINE_RING_MMA_SPLIT=0, into $out/t-nf4.txt and
#            $out/mb8.txt
#   final    after the review's mend (the cluster's end in one loop, no unroll dimension): the ring test at 16 rows of
#            K = 8192 and 14336 (the default's splits), then `measure` NF4 16x4096x14336 and 12x8192x8192 and INT4
#            16x28672x8192, into $out/t-final.txt and $out/final.txt
# $HW: the profile (bench/results/h200-measured.toml on an H200). Logs: $OUT (the device's), else /tmp/exp-session59.
. "$(dirname "$0")/probe-lib.sh"
probe_start exp-session59 "${1:-split}"
if has split; then
    ROOFLINE_RING_MMA_SPLIT=1 ROOFLINE_TEST_M=4,9,12,16 ROOFLINE_TEST_K=8192,14336,16384 test_bin t-split 300 ring_gpu --ignored --nocapture \
        ring_gemv_matches_the_reference
fi
if has ab; then
    env_ab ab split ROOFLINE_RING_MMA_SPLIT "default 1" "16x4096x14336 9x4096x14336 16x8192x8192 16x28672x8192" \
        "INT4_G128 NVFP4"
fi
if has ab2; then
    env_ab ab2 split ROOFLINE_RING_MMA_SPLIT "default 1" "16x4096x14336 16x8192x8192" "MXFP4 NF4"
    env_ab ab2 split ROOFLINE_RING_MMA_SPLIT "default 1" "4x4096x14336 8x4096x14336 16x1024x8192" "INT4_G128"
fi
if has t2; then
    ROOFLINE_TEST_M=4,9,12,16 ROOFLINE_TEST_K=8192 test_bin t-k8192 200 ring_gpu --ignored --nocapture \
        ring_gemv_matches_the_reference
    ROOFLINE_RING_MMA_SPLIT=1 ROOFLINE_TEST_M=4,9,16 ROOFLINE_TEST_K=14336,16384 test_bin t-k4 200 ring_gpu --ignored \
        --nocapture ring_gemv_matches_the_reference
fi
if has ab3; then
    v="default 0"
    env_ab ab3 split ROOFLINE_RING_MMA_SPLIT "$v" "16x8192x8192" "MXFP4 NF4"
    env_ab ab3 split ROOFLINE_RING_MMA_SPLIT "$v" "12x8192x8192" "NVFP4 NF4"
    env_ab ab3 split ROOFLINE_RING_MMA_SPLIT "$v" "4x8192x8192 16x57344x8192 9x13824x5120" "INT4_G128"
    env_ab ab3 split ROOFLINE_RING_MMA_SPLIT "$v" "16x10240x8192 16x5120x5120" "INT4_G128 NVFP4"
    MEAS_X=bf16 env_ab ab3 split ROOFLINE_RING_MMA_SPLIT "$v" "16x8192x8192" "INT4_G128 NVFP4"
fi
if has mb; then
    for s in nf4 int4; do
        for v in default 0; do
            (export ROOFLINE_RING_MMA_SPLIT=${v#default}
                MB_TIMEOUT=140 mb mb "$s batch 16 split=$v" roofline --config llama-3.1-70b --schemes $s --batch 16 --layers 4)
        done
    done
fi
if has ab4; then
    # 4 K splits with the grid bounded by the clusters the device holds at once (since r6).
    env_ab ab4 split ROOFLINE_RING_MMA_SPLIT "default 1" "16x4096x14336 9x4096x14336" "INT4_G128 NVFP4 NF4 MXFP4"
fi
if has nf4; then
    ROOFLINE_TEST_FORMATS=NF4 ROOFLINE_TEST_M=4,9,16 ROOFLINE_TEST_K=14336 test_bin t-nf4 120 ring_gpu --ignored --nocapture \
        ring_gemv_matches_the_reference
    for v in default 0; do
        (export ROOFLINE_RING_MMA_SPLIT=${v#default}
            MB_TIMEOUT=150 mb mb8 "nf4 batch 16 split=$v" roofline --config llama-3.1-8b --schemes nf4 --batch 16 --layers 8)
    done
fi
if has final; then
    ROOFLINE_TEST_M=16 ROOFLINE_TEST_K=8192,14336 test_bin t-final 200 ring_gpu --ignored --nocapture \
        ring_gemv_matches_the_reference
    meas final default NF4 16x4096x14336 ""
    meas final default NF4 12x8192x8192 ""
    meas final default INT4_G128 16x28672x8192 ""
fi

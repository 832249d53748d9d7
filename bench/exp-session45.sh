#!/usr/bin/env bash
# Session 45 probes (H200): BF16 weights on the ring GEMV (new this session; FP32 products, FP16 or BF16 x) against
# the split-K kernel that ran every BF16 GEMV at M = 1 before.
# Parts (comma-separated):
#   bf16    `measure` (checked, then timed) of the weights of B16_FORMATS (default bf16) at B16_SHAPES (MxNxK) with
#           each activation type of B16_X (default "fp16 bf16") under each of B16_SETTINGS in turn: "splitk" (--gemv
#           variant=splitk: BF16's kernel before this session), "xreg" (--gemv variant=xreg,ring=false: the
#           x-in-registers kernel), "default" (the engine's choice), "ring" (--gemv variant=xreg,ring=true) and
#           "VAR=value" (the ring with that environment variable), once each (gated samples repeat within 0.5%),
#           into $out/bf16.txt
#   verify  the ring GEMV's reference test (.gpu/ring_gpu: BF16 among its formats, with FP16 and BF16 x) and the
#           weight-only engine's fused-norm / residual-add / SwiGLU test (BF16 weights at 304 rows: the ring)
#   gpulib  roofline-gpu's GPU unit tests (.gpu/gpu_lib --ignored --nocapture) without its measurement probes
#           (GPULIB_SKIP, default the read-stream and bulk-copy sweeps), killed after GPULIB_TIMEOUT s (default 480)
#   table   `compare --weight-only -p bf16 -p fp16` at issue 11's M = 1 shapes (predicted vs measured, the error),
#           then `compare --weight-only` (every format) at 1x4096x14336 (FP16's shape that moved to the ring)
#   step    model-bench Llama-3.1-8B at batch 1 (MB_SCHEMES, default fp16), STEP_SETTINGS ("VAR=value" or "default")
# $HW: the profile (bench/results/h200-measured.toml on an H200). Logs: $OUT (the device's), else /tmp/exp-session45.
. "$(dirname "$0")/probe-lib.sh"
probe_start exp-session45 "${1:-bf16}"
if has bf16; then
    for s in ${B16_SHAPES:-1x14336x4096 1x4096x4096 1x128256x4096 1x28672x4096 1x1024x4096 1x6144x4096 1x4096x8192}; do
        for x in ${B16_X:-fp16 bf16}; do
          for f in ${B16_FORMATS:-bf16}; do
            for v in ${B16_SETTINGS:-splitk default}; do
                MEAS_X=$x meas_setting bf16 "$v" "$f" "$s"
            done
          done
        done
    done
fi
if has verify; then
    test_bin verify-ring 420 ring_gpu --ignored --nocapture ring_gemv_matches_the_reference
    test_bin verify-fused 300 weight_only_gpu --ignored --nocapture fused_norm_and_residual_add_match_the_reference
fi
if has gpulib; then
    gpu_lib_tests gpu-lib
fi
if has table; then
    for s in 1x14336x4096 1x4096x14336 1x128256x4096 1x4096x4096; do
        IFS=x read -r m n k <<<"$s"
        echo "=== table $s" | tee -a "$out/table.txt"
        timeout 120 .gpu/roofline compare --weight-only -p bf16 -p fp16 --hw $hw --m $m --n $n --k $k 2>&1 \
            | tee -a "$out/table.txt" | grep -E "W:|rror"
    done
    echo "=== issue table 1x4096x14336" | tee -a "$out/table.txt"
    timeout 150 .gpu/roofline compare --weight-only --hw $hw --m 1 --n 4096 --k 14336 2>&1 | tee -a "$out/table.txt" \
        | grep -E "W:|rror"
fi
if has step; then
    step_8b step
fi

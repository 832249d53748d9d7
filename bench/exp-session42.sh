#!/usr/bin/env bash
# Session 42 probes (H200): the timing harness's gate (each sample's launches all enqueued before the GPU runs
# them; `ROOFLINE_TIMING_GATE=0` turns it off) against the ungated samples that session 41 saw vary by 30%
# between passes at small N, the small-N ring decision measured again with it, and a MoE decode step with
# session 41's in-step ring default.
# Parts (comma-separated):
#   gate    `measure` (checked, then timed) with the gate (default) and without (ROOFLINE_TIMING_GATE=0),
#           alternately, twice, at GATE_SHAPES x GATE_FORMATS; each kernel line says the host's enqueue time
#           per launch
#   cublas  cuBLASLt FP16 / FP8 GEMV (`measure -p`) at 1x4096x4096 and 1x14336x4096, gated and ungated, twice
#   small   the x-in-registers default against the ring (--gemv ring=true) at SMALL_SHAPES for the 4-bit
#           formats, gated, alternately, three times (session 41's `small`, which was ungated)
#   moe     model-bench MB_MODEL (default mixtral-8x7b) with MB_LAYERS layers (default 8) at batch 1 from
#           .gpu/roofline-base (session 40's HEAD) then .gpu/roofline (session 41's in-step ring), per scheme
#           of MB_SCHEMES (default int4 nvfp4)
#   int4small INT4's x-in-registers default against the ring (--gemv ring=true) at INT4S_SHAPES (small N: 1-6 row
#           steps a CTA), alternately, twice
#   table   issue 11's table (`compare --weight-only` at its shapes, gated), then 1x4096x4096 with --graph
#   grid    the engine's default against the ring (--gemv ring=true) at GRID_SHAPES x GRID_FORMATS, once (gated
#           samples repeat within 1% between passes)
#   calib   `roofline calibrate` with the gate, to $out/calib.toml (against the ungated h200-measured.toml)
#   final   the committed build: the weight-only engine's reference test at the issue shapes and roofline-gpu's GPU
#           unit tests (the gated harness), `measure`'s default at FINAL_PAIRS (fmt:MxNxK; the shapes the new rule
#           moves and two it leaves), and model-bench Llama-3.1-8B at batch 1 (INT4)
#   check   the committed rule at shapes it was not made from: the default against the x-in-registers kernel
#           (--gemv ring=false) at CHECK_SHAPES x CHECK_FORMATS, once
#   ctas    the x-in-registers kernel (--gemv ring=false; CTAS_A to ask another, e.g. CTAS_A= for the default)
#           against the ring (--gemv ring=true) at CTAS_SHAPES for INT4, MXFP4 and NVFP4, once (r7 ran it with the
#           default at 1x1536x7168 1x512x8192 1x768x5120 1x1024x6144, r8 with ring=false at 1x1024x6144
#           1x2048x5120 1x3072x5120)
#   rule    `measure`'s default at RULE_PAIRS (fmt:MxNxK): the committed rule's choices, once
# $HW: the profile (bench/results/h200-measured.toml on an H200). Logs: $OUT (the device's), else /tmp/exp-session42.
. "$(dirname "$0")/probe-lib.sh"
probe_start exp-session42 "${1:-gate}"
if has gate; then
    env_ab gate gate ROOFLINE_TIMING_GATE "default 0" "${GATE_SHAPES:-1x4096x4096 1x6144x4096 1x14336x4096}" \
        "${GATE_FORMATS:-int4_g128 mxfp4 fp16}"
fi
if has cublas; then
    for s in 1x4096x4096 1x14336x4096; do
        IFS=x read -r m n k <<<"$s"
        for p in fp16 fp8_e4m3; do
            for rep in 1 2; do
                for v in default 0; do
                    echo "=== gate=$v cublas $p $s" | tee -a "$out/cublas.txt"
                    ROOFLINE_TIMING_GATE=${v#default} timeout 60 .gpu/roofline measure --hw $hw -p $p --m $m --n $n \
                        --k $k 2>&1 | grep -E "kernel:|measured|rror" | tee -a "$out/cublas.txt"
                done
            done
        done
    done
fi
if has small; then
    ring_ab small default "" "${SMALL_SHAPES:-1x4096x4096 1x6144x4096}" "int4_g128 mxfp4 nvfp4 nf4" 3
fi
if has moe; then
    MB_TIMEOUT=${MB_TIMEOUT:-300} mb_ab moe "${MB_MODEL:-mixtral-8x7b}" "${MB_LAYERS:-8}" "${MB_SCHEMES:-int4 nvfp4}"
fi
if has int4small; then
    ring_ab int4small default "" \
        "${INT4S_SHAPES:-1x1024x4096 1x2048x4096 1x3072x4096 1x4096x4096 1x5120x5120 1x2048x8192 1x4096x8192}" int4_g128 2
fi
if has table; then
    issue_table table
    echo "=== graph 1x4096x4096" | tee -a "$out/table.txt"
    timeout 180 .gpu/roofline compare --weight-only --graph --hw $hw --m 1 --n 4096 --k 4096 2>&1 | tee -a "$out/table.txt" \
        | grep -E "W:|rror"
fi
if has calib; then
    timeout 400 .gpu/roofline calibrate --output "$out/calib.toml" 2>&1 | tee "$out/calib.txt" | tail -20
fi
if has grid; then
    ring_ab grid default "" "${GRID_SHAPES:-1x1024x4096 1x3072x4096 1x5120x5120 1x2048x8192 1x4096x3072}" \
        "${GRID_FORMATS:-mxfp4 nvfp4 nf4}"
fi
if has final; then
    for t in every_format_matches; do
        timeout 400 .gpu/weight_only_gpu --ignored --nocapture $t >"$out/wo-$t.txt" 2>&1
        grep -E "^test |test result|panicked" "$out/wo-$t.txt" | tee -a "$out/final.txt"
    done
    timeout 400 .gpu/gpu_lib --ignored >"$out/gpu-lib.txt" 2>&1
    grep -E "^test |test result|panicked" "$out/gpu-lib.txt" | tee -a "$out/final.txt"
    for p in ${FINAL_PAIRS:-int4_g128:1x5120x5120 mxfp4:1x5120x5120 nvfp4:1x5120x5120 int4_g128:1x2048x8192 \
        mxfp4:1x2048x8192 int4_g128:1x1024x8192 int4_g128:1x4096x4096 int4_g128:1x1024x4096 mxfp4:1x3072x4096 \
        int4_g128:1x512x4096}; do
        (export MEAS_TIMEOUT=40; meas final "default" "${p%%:*}" "${p#*:}" "")
    done
    mb final "roofline model-bench llama-3.1-8b batch 1 int4" roofline --config llama-3.1-8b --batch 1 --scheme int4
fi
if has check; then
    for s in ${CHECK_SHAPES:-1x1024x8192 1x6144x5120 1x2048x6144 1x1536x7168 1x1024x5120}; do
        for f in ${CHECK_FORMATS:-int4_g128 mxfp4 nvfp4 nf4}; do
            (export MEAS_TIMEOUT=40; meas check "default" "$f" "$s" "")
            (export MEAS_TIMEOUT=40; meas check "xreg" "$f" "$s" "ring=false")
        done
    done
fi
if has ctas; then
    a=${CTAS_A-ring=false}
    ring_ab ctas "${a:-default}" "$a" \
        "${CTAS_SHAPES:-1x1536x7168 1x512x8192 1x768x5120 1x1024x6144 1x2048x5120 1x3072x5120}" "int4_g128 mxfp4 nvfp4"
fi
if has rule; then
    for p in ${RULE_PAIRS:-mxfp4:1x2048x5120 nvfp4:1x3072x5120 mxfp4:1x5120x5120 mxfp4:1x1024x6144 int4_g128:1x768x5120 \
        int4_g128:1x1536x7168 nvfp4:1x512x8192 mxfp4:1x4096x4096 int4_g128:1x4096x4096 nf4:1x4096x4096}; do
        (export MEAS_TIMEOUT=40; meas rule default "${p%%:*}" "${p#*:}" "")
    done
fi

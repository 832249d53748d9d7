#!/usr/bin/env bash
# Session 37 probes (H200): where the kernels that miss issue 11's H200 figures lose time.
#   8-bit at M = 1 (FP8 / INT8 1.75-1.77x of FP16 at 1x14336x4096, 1.8x asked): the staged x-in-registers
#   kernel's cp.async stages (3 on the H100, where 2 and 4 were slower) and its rows a CTA, against split-K.
#   The 4-bit ring at M = 1 (3.15x, 3.2x asked): its depth (ROOFLINE_RING_KB) with 2 units in flight, and
#   K parts (ROOFLINE_RING_KH) with more in flight.
#   The batch-16 bulk ring (INT4 16x14336x4096 16.8 us, 1.71x of M = 1; within 15% asked): its slots, tiles a
#   slot, warps and rows a CTA, and its loads alone (EXP_LOADONLY, wrong results by design, through tune_table).
# Parts (comma-separated):
#   x8     X8_SHAPES x X8_FORMATS per --gemv setting of X8_GEMV ("default": none), alternately, twice
#   ring4  R4_FORMATS at R4_SHAPE per ring depth of R4_KB (ROOFLINE_RING_KB), then per units in flight of R4_KH_AHEAD
#          with 2 K parts (ROOFLINE_RING_KH=2), alternately, twice
#   m16    M16_FORMATS at M16_SHAPE per --gemv setting of M16_GEMV, alternately, twice; then INT4's default row
#          against its loads alone and its decode without MMAs (tune_table)
#   ring8  the 8-bit ring GEMV (this session): its reference test (every format), then R8_SHAPES x FP8 / INT8 on
#          the default kernel against the ring (--gemv ring=true), and on the ring its row groups (R8_GROUPS),
#          units in flight (R8_AHEAD) at 1x14336x4096 and K parts (R8_KH) at 1x4096x14336
#   r8more FP8 / INT8 at R8M_SHAPES on the engine's default against the other kernel (ring=false where the ring
#          is now the default; at 1x28672x4096 and the LM head, split-K's shapes, against variant=xreg,ring=true)
#   mb8    model-bench MB_MODEL (default llama-3.1-8b) at batch 1, FP8 and INT8, .gpu/roofline-base (the last
#          commit before the 8-bit ring) then .gpu/roofline, MB8_REPS times (default 2)
#   small8 FP8 / INT8 on the ring at 1x4096x4096 (4 row steps a CTA, all in the ring): units in flight (S8_AHEAD)
#          and row groups (S8_GROUPS)
#   table  issue 11's table
#   tests  the weight-only and model-bench GPU tests
# $HW: the profile (bench/results/h200-measured.toml on an H200). Logs: $OUT (the device's), else /tmp/exp-session37.
. "$(dirname "$0")/probe-lib.sh"
probe_start exp-session37 "${1:-x8}"
# `gemv_ab LOG SHAPES FORMATS SETTINGS`: `meas` per shape, format and --gemv setting of SETTINGS (space-separated;
# "default": the engine's own plan), the settings alternately, twice over.
gemv_ab() {
    local log=$1 shapes=$2 fmts=$3 settings=$4 s f rep g
    for s in $shapes; do
        for f in $fmts; do
            for rep in 1 2; do
                for g in $settings; do
                    MEAS_TIMEOUT=${MEAS_TIMEOUT:-40} meas "$log" "gemv=$g" "$f" "$s" "${g#default}"
                done
            done
        done
    done
}
if has x8; then
    gemv_ab x8 "${X8_SHAPES:-1x14336x4096 1x4096x14336}" "${X8_FORMATS:-fp8_e4m3 int8}" \
        "${X8_GEMV:-default stages=2 stages=4 stages=5 variant=splitk}"
fi
if has ring4; then
    env_ab ring4 kb ROOFLINE_RING_KB "${R4_KB:-default 64 96 128}" "${R4_SHAPE:-1x14336x4096}" \
        "${R4_FORMATS:-int4_g128 mxfp4 nf4}"
    ROOFLINE_RING_KH=2 env_ab ring4 "kh=2 ahead" ROOFLINE_RING_AHEAD "${R4_KH_AHEAD:-2 4 6}" \
        "${R4_SHAPE:-1x14336x4096}" "${R4_FORMATS:-int4_g128 mxfp4 nf4}"
fi
if has m16; then
    gemv_ab m16 "${M16_SHAPE:-16x14336x4096}" "${M16_FORMATS:-int4_g128 mxfp4}" \
        "${M16_GEMV:-default stages=3 stages=4 unroll=2 warps=8 split_k=2}"
    tune_fmt m16loads INT4_G128 "XSM+XB NST=2 U=4 W=16" "${M16_SHAPE:-16x14336x4096}" "" "-DEXP_LOADONLY=1" \
        "-DEXP_NOMMA=2"
fi
if has ring8; then
    ring_verify ring8 ROOFLINE_RING_AHEAD default
    gemv_ab ring8 "${R8_SHAPES:-1x14336x4096 1x4096x14336 1x4096x4096 1x28672x4096 1x128256x4096}" "fp8_e4m3 int8" \
        "default ring=true"
    env_ab ring8 groups ROOFLINE_RING_GROUPS "${R8_GROUPS:-1 2 3}" 1x14336x4096 "fp8_e4m3 int8" ring=true
    env_ab ring8 ahead ROOFLINE_RING_AHEAD "${R8_AHEAD:-0 2 3}" 1x14336x4096 "fp8_e4m3 int8" ring=true
    env_ab ring8 kh ROOFLINE_RING_KH "${R8_KH:-2 4 7}" 1x4096x14336 "fp8_e4m3 int8" ring=true
fi
if has r8more; then
    gemv_ab r8more "${R8M_SHAPES:-1x1024x4096 1x6144x4096 1x2048x8192}" "fp8_e4m3 int8" "default ring=false"
    gemv_ab r8more "1x28672x4096 1x128256x4096" "fp8_e4m3 int8" "default variant=xreg,ring=true"
fi
if has mb8; then
    for rep in $(seq ${MB8_REPS:-2}); do mb_ab mb8 "${MB_MODEL:-llama-3.1-8b}" "" "fp8_e4m3 int8"; done
fi
if has small8; then
    env_ab small8 ahead ROOFLINE_RING_AHEAD "${S8_AHEAD:-default 0 3}" 1x4096x4096 "fp8_e4m3 int8"
    env_ab small8 groups ROOFLINE_RING_GROUPS "${S8_GROUPS:-1 3}" 1x4096x4096 "fp8_e4m3 int8"
fi
if has table; then
    issue_table table
fi
if has tests; then
    gpu_tests
fi

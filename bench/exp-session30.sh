#!/usr/bin/env bash
# Session 30 device probes. Run from the repository root on the GPU machine with .gpu/ built
# (bench/build-gpu.sh); logs to $OUT. Parts (first argument, comma-separated):
#   ctas    the batch-16 bulk ring in CTAs of fewer warps, several per SM (`warps=8,min_blocks=2`,
#           `warps=4,min_blocks=4`), its K splits summed in clusters of 2-8: what each SM receives of x
#           falls with the splits (x per SM = CTAs a SM x x's columns of a split) while the rings stay; against
#           the default (one CTA of 16 warps a SM, one split) and 16-warp CTAs in 2 clustered splits
. "$(dirname "$0")/probe-lib.sh"
probe_start exp-session30 "${1:-ctas}"
if has ctas; then
    for s in 16x14336x4096 16x4096x14336 16x28672x4096 16x4096x4096; do
        for f in int4_g128 nf4; do
            meas ctas default $f $s ""
            meas ctas w16s2 $f $s "split_k=2"
            for sk in 1 2 4 8; do meas ctas w8s$sk $f $s "warps=8,min_blocks=2,split_k=$sk"; done
            for sk in 4 8; do meas ctas w4s$sk $f $s "warps=4,min_blocks=4,split_k=$sk"; done
            meas ctas default-again $f $s ""
        done
    done
fi
#   parts   where NF4's batch-16 time goes beside INT4's (21.7 against 17.2 us at 16x14336x4096): the
#           wrong-result probes (MMAs dropped, loads alone, one row of x, x's fragments read for every 2nd /
#           4th tile) on tune_table's rows of each format's default bulk-ring plan in one split
if has parts; then
    probes=("" "-DEXP_NOMMA=1" "-DEXP_LOADONLY=1" "-DEXP_XROWS=1" "-DEXP_XREUSE=2" "-DEXP_XREUSE=4" "-DEXP_XROWS=1 -DEXP_NOMMA=1")
    tune_fmt parts NF4 "XSM+XB NST=2 U=2 W=16" 16x14336x4096,16x28672x4096 "${probes[@]}"
    tune_fmt parts INT4_G128 "XSM+XB NST=2 U=4 W=16" 16x14336x4096,16x28672x4096 "${probes[@]}"
fi
#   nf4slots  NF4 at M = 16 with more of its weights in flight: its default plan has slots of 2 tiles (the
#           32-copy pair table leaves no room for 4), 2 KB of codes a warp against INT4's 4 KB, and `parts`
#           found its loads alone 1.4 us slower than INT4's; 3 or 4 slots of 2 tiles, 2 or 3 slots of 3
if has nf4slots; then
    for nk in 14336x4096 28672x4096 4096x14336 4096x4096 6144x4096 1024x4096; do
        for g in "" unroll=2,stages=3 unroll=2,stages=4 unroll=3,stages=2 unroll=3,stages=3 ""; do
            meas nf4slots "[$g]" nf4 16x$nk "$g"
        done
    done
fi
#   m16x8   FP8 / INT8 at M = 16, 1.17x / 1.18x of M = 1 at 14336x4096 (issue 11 asks 1.15x): tune_table's
#           bulk-ring rows (tiles a slot x slots x warps x splits in clusters or through the workspace) and
#           the default, at the FFN's shapes
if has m16x8; then
    for f in FP8_E4M3 INT8; do
        ROOFLINE_TUNE_SET=xreg ROOFLINE_TUNE_SHAPES=16x14336x4096,16x28672x4096,16x4096x14336 ROOFLINE_TUNE_FORMATS=$f \
            ROOFLINE_TUNE_ONLY="XSM" .gpu/weight_only_gpu --ignored tune_table --nocapture 2>&1 | grep -E "^TT |default" \
            | tee -a "$out/m16x8.txt"
        for s in 16x14336x4096 16x28672x4096 16x4096x14336 1x14336x4096; do meas m16x8 default $f $s ""; done
    done
fi
#   nf4s2   NF4 at M = 9-16 in two clustered K splits (x halved leaves room for slots of 4 tiles beside the
#           32-copy pair table) against one split (slots of 2 tiles), by rows a CTA (N / 16 / 132)
if has nf4s2; then
    for m in 16 12 9; do
        for n in 1024 4096 6144 8192 11008 14336 28672; do
            for g in "" split_k=2 "" split_k=2; do meas nf4s2 "[$g]" nf4 ${m}x${n}x4096 "$g"; done
        done
    done
fi
#   verify  NF4's two clustered splits at M = 9-16 (`NF4_TWO_SPLITS_ROWS`): the weight-only reference test at
#           the issue shapes (16x14336x4096 added), model-bench's GPU tests, and Llama-3.1-8B NF4 at batch 16
#           and 9, main before (.gpu/roofline-base) and this build alternately, twice
if has verify; then
    timeout 300 .gpu/weight_only_gpu --ignored --nocapture every_format_matches >"$out/verify-wo.txt" 2>&1
    grep -E "^test |test result|panicked|16x14336" "$out/verify-wo.txt"
    for b in 16 9; do
        for i in 1 2; do
            for bin in roofline-base roofline; do
                echo "=== $bin model-bench llama-3.1-8b batch $b nf4 ($i)" | tee -a "$out/verify-mb.txt"
                timeout 100 .gpu/$bin model-bench --config llama-3.1-8b --batch $b --hw $hw --scheme nf4 2>&1 \
                    | tee -a "$out/verify-mb.txt" | grep -E "tokens/s|^step|error|│ (qkv|o_proj|gate|down)" | cut -c1-150
            done
        done
    done
    timeout 300 .gpu/model_bench_gpu --ignored >"$out/verify-mbt.txt" 2>&1
    grep -E "^test |test result|panicked" "$out/verify-mbt.txt"
fi
#   nomma2  the batch-16 bulk ring's decode apart from its MMAs: EXP_NOMMA=1 (operands to an empty asm: ptxas
#           drops the decode too) against EXP_NOMMA=2 (operands XORed into the sums: the decode runs), every
#           4-bit format's default slots, one split, 16x14336x4096 and 16x28672x4096 ($FMTS: these formats
#           only, not NF4)
if has nomma2; then
    probes=("" "-DEXP_NOMMA=1" "-DEXP_NOMMA=2" "-DEXP_LOADONLY=1" "-DEXP_NOMMA=2 -DEXP_XROWS=1")
    [[ -n "${FMTS:-}" ]] || tune_fmt nomma2 NF4 "XSM+XB NST=2 U=2 W=16" 16x14336x4096,16x28672x4096 "${probes[@]}"
    for f in ${FMTS:-INT4_G128 MXFP4 NVFP4}; do
        tune_fmt nomma2 $f "XSM+XB NST=2 U=4 W=16" 16x14336x4096,16x28672x4096 "${probes[@]}"
    done
fi
#   nvfp4   NVFP4's E4M3 scale bytes gathered by one byte permute in mma_tile (was shifts and masks): this
#           build against .gpu/roofline-base (main before it) at M = 16 and 4, alternately twice
if has nvfp4; then
    for s in 16x14336x4096 16x28672x4096 16x4096x14336 16x4096x4096 4x14336x4096 4x4096x4096; do
        for i in 1 2; do
            for bin in roofline-base roofline; do BIN=$bin meas nvfp4 $bin nvfp4 $s ""; done
        done
    done
fi
#   final   the final build: the weight-only reference tests (issue shapes with 16x14336x4096; fused norm /
#           residual add / SwiGLU with split and clustered plans), issue 11's table (`table`), Llama-3.1-8B NVFP4
#           and NF4 at batch 16 against .gpu/roofline-base (main before the session)
if has final; then
    timeout 330 .gpu/weight_only_gpu --ignored --nocapture every_format_matches fused_norm >"$out/final-wo.txt" 2>&1
    grep -E "^test |test result|panicked" "$out/final-wo.txt"
    parts=$parts,table
fi
#   table   issue 11's table on the final build: `compare --weight-only` (every format, FP16 beside them) at the
#           issue's shapes at M = 1 and at 16x14336x4096
if has table; then
    issue_table table
fi
if has final; then
    for scheme in nvfp4 nf4; do
        for bin in roofline-base roofline; do
            echo "=== $bin model-bench llama-3.1-8b batch 16 $scheme" | tee -a "$out/final-mb.txt"
            timeout 100 .gpu/$bin model-bench --config llama-3.1-8b --batch 16 --hw $hw --scheme $scheme 2>&1 \
                | tee -a "$out/final-mb.txt" | grep -E "tokens/s|error|│ (qkv|o_proj|gate|down)" | cut -c1-150
        done
    done
fi
#   mbt     model-bench's GPU tests on the final build
if has mbt; then
    timeout 200 .gpu/model_bench_gpu --ignored >"$out/mbt.txt" 2>&1
    grep -E "^test |test result|panicked" "$out/mbt.txt"
fi
#   wotests the other two weight-only reference tests on the final build (every M 1-16 and tiny odd shapes through
#           every variant; the variants and BF16 x), after the NVFP4 change to `mma_tile`
if has wotests; then
    timeout 500 .gpu/weight_only_gpu --ignored --nocapture every_m_and_tiny variants_and_bf16 >"$out/wotests.txt" 2>&1
    grep -E "^test |test result|panicked" "$out/wotests.txt"
fi
#   trig    the attention's share of Llama-3.1-8B's batch-1 step (INT4: 8.0 us alone, 10.2 in the step, session
#           29): o_proj released at the attention's end (-DEXP_ATTN_TRIGGER=1) against its start (default),
#           INT4, NF4 and FP8, alternately twice
if has trig; then
    for scheme in int4 nf4 fp8_e4m3; do
        for i in 1 2; do
            for extra in "" "-DEXP_ATTN_TRIGGER=1"; do
                echo "=== [$extra] model-bench llama-3.1-8b batch 1 $scheme ($i)" | tee -a "$out/trig.txt"
                ROOFLINE_NVRTC_EXTRA="$extra" timeout 100 .gpu/roofline model-bench --config llama-3.1-8b --batch 1 \
                    --hw $hw --scheme $scheme 2>&1 | tee -a "$out/trig.txt" \
                    | grep -E "tokens/s|error:|│ (qkv|attention|o_proj|gate|down)" | cut -c1-160
            done
        done
    done
fi
#   pair    the bulk ring with slots of two row tiles decoded against one set of x's fragments
#           (-DXB_PAIR=1, an experiment the host does not plan for; needs
#           bench/results/h100-2026-11-27-session30/xb-pair.patch, reverted) against the default, NF4 / MXFP4 /
#           NVFP4 at M = 16 and 9 (odd row tiles a CTA included: 11008 in two splits, 1000), every row checked
if has pair; then
    for f in nf4 mxfp4 nvfp4; do
        for s in 16x14336x4096 16x28672x4096 16x11008x4096 16x4096x4096 16x1000x4096 16x4096x14336 9x14336x4096; do
            for i in 1 2; do
                for extra in "" "-DXB_PAIR=1"; do
                    ROOFLINE_NVRTC_EXTRA="$extra" meas pair "[$extra]" $f $s ""
                done
            done
        done
    done
fi
#   wocheck the weight-only reference tests at the issue shapes and of the fused norm / residual add / SwiGLU
if has wocheck; then
    timeout 330 .gpu/weight_only_gpu --ignored --nocapture every_format_matches fused_norm >"$out/wocheck.txt" 2>&1
    grep -E "^test |test result|panicked|NVFP4 16x14336" "$out/wocheck.txt"
fi
#   nf4t64  NF4's pair table in 64 copies (entries 256 bytes apart: one byte permute makes a lookup's offset)
#           against the default 32, where it fits: M = 16 and 9 in two splits, M = 8 and 4 in one, K = 14336
if has nf4t64; then
    for c in "16x14336x4096|split_k=2" "16x28672x4096|split_k=2" "16x11008x4096|split_k=2" "9x14336x4096|split_k=2" \
        "16x4096x14336|" "8x14336x4096|" "8x4096x4096|" "4x14336x4096|" "4x4096x4096|"; do
        s=${c%%|*} g=${c#*|}
        for i in 1 2; do
            meas nf4t64 "[default]" nf4 $s ""
            meas nf4t64 "[64]" nf4 $s "nf4_table=64${g:+,$g}"
        done
    done
fi
#   t64chk  the 64-copy default: the weight-only reference tests at the issue shapes and of the fusions, and
#           Llama-3.1-8B NF4 at batch 16 and 8 against .gpu/roofline-base (32 copies: built from fc78a12),
#           alternately (not run in session 30: its device time ran out)
if has t64chk; then
    timeout 330 .gpu/weight_only_gpu --ignored --nocapture every_format_matches fused_norm >"$out/t64chk-wo.txt" 2>&1
    grep -E "^test |test result|panicked|NF4 +16x14336" "$out/t64chk-wo.txt"
    for b in 16 8; do
        for bin in roofline-base roofline roofline-base roofline; do
            echo "=== $bin model-bench llama-3.1-8b batch $b nf4" | tee -a "$out/t64chk-mb.txt"
            timeout 100 .gpu/$bin model-bench --config llama-3.1-8b --batch $b --hw $hw --scheme nf4 2>&1 \
                | tee -a "$out/t64chk-mb.txt" | grep -E "tokens/s|error:" | cut -c1-120
        done
    done
fi

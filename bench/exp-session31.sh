#!/usr/bin/env bash
# Session 31 device runs. Run from the repository root on the GPU machine with .gpu/ built
# (bench/build-gpu.sh); logs to $OUT. Parts (first argument, comma-separated):
#   table   issue 11's table on the final build (NVFP4's scale pairs through operand selects, NF4's 64-copy
#           pair table), three times over, so that each figure is read as a range across runs rather than one
#           run's median: `compare --weight-only` (every format, FP16 beside them) at the issue's shapes
#   m1      the issue's M = 1 shape alone (1x14336x4096, every format), five runs: the 3.2x criterion sits
#           within a run's spread of INT4 and NF4
#   ctarows the batch-16 bulk ring on fewer CTAs than SMs (`rows_per_cta` above the one-wave default): every
#           CTA reads all of x (128 KB at K = 4096) from L2, so x's traffic falls with the CTA count while
#           each remaining SM streams more weights; INT4, MXFP4, NVFP4 at 16 x {14336, 28672, 11008} x 4096,
#           the default first and last, every row checked against the reference (`measure`)
. "$(dirname "$0")/probe-lib.sh"
probe_start exp-session31 "${1:-table}"
if has table; then
    for i in 1 2 3; do issue_table "table$i"; done
fi
if has m1; then
    for i in 1 2 3 4 5; do wo_compare m1 "run $i" 1 14336x4096; done
fi
if has ctarows; then
    for f in int4_g128 mxfp4 nvfp4; do
        for r in "14336 128 144 160 192" "28672 256 288 320" "11008 112 128 144"; do
            set -- $r
            n=$1
            shift
            meas ctarows default $f 16x${n}x4096 ""
            for rows in "$@"; do meas ctarows "rows=$rows" $f 16x${n}x4096 "rows_per_cta=$rows"; done
            meas ctarows default-again $f 16x${n}x4096 ""
        done
    done
fi
#   deep    the batch-16 bulk ring in two clustered K splits with deeper rings: `ctarows` found each SM's
#           time proportional to the bytes it receives at ~20 KB/us, as if bounded by the bytes in flight a SM
#           (16 warps x 2 slots x 4 tiles beside all of x); half of x a CTA leaves room for 3-4 slots or 8-tile
#           slots. INT4, MXFP4, NVFP4 at M = 16, the default first and last
if has deep; then
    for f in int4_g128 mxfp4 nvfp4; do
        for nk in 14336x4096 28672x4096 4096x14336; do
            for g in "" split_k=2 split_k=2,stages=3 split_k=2,stages=4 split_k=2,unroll=8 split_k=2,unroll=6 ""; do
                meas deep "[$g]" $f 16x$nk "$g"
            done
        done
    done
fi
#   rpcparts  what bounds a SM's rate at ~20 KB/us (`ctarows`, `deep`): the wrong-result probes (loads alone; the
#           decode without MMAs, `EXP_NOMMA=2`; one row of x) on the default CTAs and on fewer, larger ones
#           (ROOFLINE_TUNE_ROWS_PER_CTA 160 and 192 rows: 90 and 75 CTAs). If the loads alone keep the rate with
#           fewer CTAs, what caps it is a SM's intake, not its decode. INT4 and MXFP4 at 16x14336x4096
if has rpcparts; then
    for rpc in "" 160 192; do
        for f in INT4_G128 MXFP4; do
            ROOFLINE_TUNE_ROWS_PER_CTA=$rpc tune_fmt rpcparts "$f" "XSM+XB NST=2 U=4 W=16" 16x14336x4096 \
                "" "-DEXP_LOADONLY=1" "-DEXP_NOMMA=2" "-DEXP_XROWS=1" "-DEXP_LOADONLY=1 -DEXP_XROWS=1"
        done
    done
fi
#   tail    `rpcparts` found the kernel's time past its loads alone (INT4 17.35 against 15.86 us) to be decode
#           that the loads do not hide; a warp decodes its last slot (4 tiles, 16 warps at once) only after
#           its last bytes land. Probe XB_TAIL: the warp's last slots shorter (1: halved from 2U tiles left,
#           2: the last U tiles one a slot), against the default, alternately twice; every row checked.
#           Needs bench/results/h100-2026-11-27-session31/xb-tail.patch applied (reverted: slower everywhere);
#           TAIL_SHAPES (NxK) and TAIL_FMTS pick
if has tail; then
    for nk in ${TAIL_SHAPES:-14336x4096 4096x14336}; do
        for f in ${TAIL_FMTS:-int4_g128 mxfp4 nvfp4 nf4}; do
            for i in 1 2; do
                for t in 0 1 2; do
                    ROOFLINE_NVRTC_EXTRA="-DXB_TAIL=$t" meas tail "XB_TAIL=$t" $f 16x$nk ""
                done
            done
        done
    done
fi
#   s2parts the wrong-result probes in two clustered K splits (ROOFLINE_TUNE_SPLIT_K=2: half of x a CTA) beside
#           one: two splits ran INT4 18.4 us against 17.35 (`deep`) though x's traffic halves; whether their
#           loads alone fall as x's share says (one row of x: 15.86 -> 14.10 in one split), INT4 and NF4 at
#           16x14336x4096 (NF4 with its default slots of 2 tiles in one split, 4 in two)
if has s2parts; then
    for sk in 1 2; do
        ROOFLINE_TUNE_SPLIT_K=$sk tune_fmt s2parts INT4_G128 "XSM+XB NST=2 U=4 W=16" 16x14336x4096 \
            "" "-DEXP_LOADONLY=1" "-DEXP_NOMMA=2" "-DEXP_XROWS=1" "-DEXP_LOADONLY=1 -DEXP_XROWS=1"
    done
    ROOFLINE_TUNE_SPLIT_K=1 tune_fmt s2parts NF4 "XSM+XB NST=2 U=2 W=16" 16x14336x4096 \
        "" "-DEXP_LOADONLY=1" "-DEXP_NOMMA=2" "-DEXP_XROWS=1"
    ROOFLINE_TUNE_SPLIT_K=2 tune_fmt s2parts NF4 "XSM+XB NST=2 U=4 W=16" 16x14336x4096 \
        "" "-DEXP_LOADONLY=1" "-DEXP_NOMMA=2" "-DEXP_XROWS=1"
fi

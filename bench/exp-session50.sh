#!/usr/bin/env bash
# Session 50 probes (H200 through the device tool). Parts (comma-separated):
#   mring    what a ring GEMV taking M = 2-4 rows of x would cost: the M = 1 ring (tune_table's "XReg U=0 W=0" row at
#            1xNxK) with each decoded word also multiplied against M - 1 more x rows (EXP_RING_M, wrong results by
#            design; the probe is not in the tree: build 4676b9b with results/h200-2026-11-29-session50/r1/exp-ring-m.patch) for MR_FORMATS at MR_SHAPES, MR_MS (default 1 2 3 4), then INT4's decode alone (EXP_FFN_NOLOAD)
#            at M = 1 and 2, into $out/mring.txt
#   mdef     the engine's default at M = 2-4 (the tensor cores' bulk rings) at the same N x K: `measure` (checked, then
#            timed) for MR_FORMATS at MD_MS x MR_SHAPES' N x K, into $out/mdef.txt
#   mb8      model-bench Llama-3.1-8B FP8 / INT8 at batch MB8_BATCHES (default 8 16), .gpu/roofline-base (before
#            session 49's 8-bit bulk rule) and .gpu/roofline alternately, twice, into $out/mb8.txt
#   rtest    the ring GEMV's GPU tests with two and three rows of x (new): ring_gemv_matches_the_reference (RT_FORMATS,
#            default all; RT_M, e.g. 2,3: those rows of x only), then weight_only_gpu's every_format_matches_the_reference_at_the_issue_shapes (2x14336x4096
#            on the ring by default), into $out/rtest*.txt
#   m2       the ring at M = 2 (the new default on fast memory) against the tensor cores (--gemv variant=xmma, the old
#            default): `measure` (checked, then timed) for M2_FORMATS at M2_SHAPES, M2_REPS times (default 1), into $out/m2.txt; with
#            MEAS_X=bf16 for M2_BF16_FORMATS at the first two shapes
#   m2b      the M = 2 rule's checks after r3: the default against --gemv variant=xmma for MXFP4 / INT4 / NVFP4 at
#            2x128256x4096 (MXFP4's scales stream on fast memory, INT4's ring keeps 3 slots), FP8 / INT8 with BF16 x at
#            2x4096x4096 and 2x28672x4096, INT4 / NF4 at 2x4096x4096, into $out/m2b.txt
#   mb2      model-bench Llama-3.1-8B MB2_SCHEMES (default int4,nf4,mxfp4,nvfp4) at batch 2, .gpu/roofline-base (9ade832:
#            the tensor cores) and .gpu/roofline (the ring for two rows where `best_in_step_on` takes it), MB2_REPS
#            passes (default 1), into $out/mb2.txt
#   m3       three rows of x: the ring forced (--gemv variant=xreg,ring=true) against the default, M3_FORMATS at M3_SHAPES
# $HW: the profile (bench/results/h200-measured.toml on an H200). Logs: $OUT (the device's), else /tmp/exp-session50.
. "$(dirname "$0")/probe-lib.sh"
probe_start exp-session50 "${1:-mring,mdef}"
if has mring; then
    for f in ${MR_FORMATS:-INT4_G128 MXFP4 NVFP4 NF4 FP8_E4M3}; do
        extras=()
        for m in ${MR_MS:-1 2 3 4}; do extras+=("-DEXP_RING_M=$m"); done
        tune_fmt mring "$f" "XReg U=0 W=0" "${MR_SHAPES:-1x14336x4096,1x4096x14336}" "${extras[@]}"
    done
    tune_fmt mring INT4_G128 "XReg U=0 W=0" "${MR_SHAPES:-1x14336x4096,1x4096x14336}" "-DEXP_FFN_NOLOAD=1" \
        "-DEXP_FFN_NOLOAD=1 -DEXP_RING_M=2"
fi
if has mdef; then
    for nk in $(tr ',' ' ' <<<"${MR_SHAPES:-1x14336x4096,1x4096x14336}"); do
        IFS=x read -r _ n k <<<"$nk"
        for m in ${MD_MS:-2 3 4}; do
            for f in ${MR_FORMATS:-INT4_G128 MXFP4 NVFP4 NF4 FP8_E4M3}; do
                MEAS_TIMEOUT=40 meas mdef default "$f" "${m}x${n}x${k}" ""
            done
        done
    done
fi
if has mb8; then
    for rep in 1 2; do
        for bin in roofline-base roofline; do
            for b in ${MB8_BATCHES:-8 16}; do
                [[ $rep -gt ${MB8_REPS:-2} ]] && continue
                echo "=== $bin batch $b" | tee -a "$out/mb8.txt"
                timeout 200 .gpu/$bin model-bench --config llama-3.1-8b --schemes fp8,int8 --batch "$b" --layers ${MB8_LAYERS:-8} --hw $hw 2>&1 \
                    | tail -8 | tee -a "$out/mb8.txt"
            done
        done
    done
fi
if has rtest; then
    ROOFLINE_TEST_M=${RT_M:-} ROOFLINE_TEST_FORMATS=${RT_FORMATS:-} test_bin rtest ${RT_TIMEOUT:-300} ring_gpu --ignored \
        --nocapture ring_gemv_matches_the_reference
    ROOFLINE_TEST_FORMATS=${RT_FORMATS:-} test_bin rtest-issue ${RT_TIMEOUT:-200} weight_only_gpu --ignored --nocapture \
        every_format_matches_the_reference_at_the_issue_shapes
fi
if has m2; then
    for s in ${M2_SHAPES:-2x14336x4096 2x4096x14336 2x4096x4096 2x6144x4096 2x1024x4096 2x28672x4096 2x128256x4096}; do
        for f in ${M2_FORMATS:-INT4_G128 MXFP4 NVFP4 NF4 FP8_E4M3 INT8}; do
            for rep in $(seq ${M2_REPS:-1}); do
                for g in default variant=xmma; do MEAS_TIMEOUT=40 meas m2 "$g" "$f" "$s" "${g#default}"; done
            done
        done
    done
    for s in 2x14336x4096 2x4096x14336; do
        for f in ${M2_BF16_FORMATS:-INT4_G128 FP8_E4M3}; do
            for g in default variant=xmma; do MEAS_X=bf16 MEAS_TIMEOUT=40 meas m2 "$g" "$f" "$s" "${g#default}"; done
        done
    done
fi
if has m3; then
    for s in ${M3_SHAPES:-3x14336x4096 3x4096x14336 3x4096x4096}; do
        for f in ${M3_FORMATS:-INT4_G128 NF4 FP8_E4M3 INT8}; do
            for g in default variant=xreg,ring=true; do MEAS_TIMEOUT=40 meas m3 "$g" "$f" "$s" "${g#default}"; done
        done
    done
fi
if has m2b; then
    for p in MXFP4:2x128256x4096 INT4_G128:2x128256x4096 NVFP4:2x128256x4096 INT4_G128:2x4096x4096 NF4:2x4096x4096; do
        for g in default variant=xmma; do MEAS_TIMEOUT=60 meas m2b "$g" "${p%%:*}" "${p#*:}" "${g#default}"; done
    done
    for p in FP8_E4M3:2x4096x4096 INT8:2x4096x4096 FP8_E4M3:2x28672x4096 INT8:2x28672x4096; do
        for g in default variant=xmma; do MEAS_X=bf16 MEAS_TIMEOUT=60 meas m2b "$g" "${p%%:*}" "${p#*:}" "${g#default}"; done
    done
fi
if has mb2; then
    for rep in 1 2; do
        for bin in roofline-base roofline; do
            echo "=== $bin batch 2" | tee -a "$out/mb2.txt"
            timeout 200 .gpu/$bin model-bench --config llama-3.1-8b --schemes ${MB2_SCHEMES:-int4,nf4,mxfp4,nvfp4} --batch 2 \
                --layers ${MB2_LAYERS:-8} --hw $hw 2>&1 | tail -10 | tee -a "$out/mb2.txt"
            [[ $rep -ge ${MB2_REPS:-1} && $bin == roofline ]] && break 2
        done
    done
fi

#!/usr/bin/env bash
# Session 25 device probes. Run from the repository root on the GPU machine with .gpu/ built (see
# bench/ab-check.sh); logs to $OUT. Parts (first argument, comma-separated):
#   verify  GPU tests not reached by run 1 (model-bench, the server's GPU test)
# The ks* parts need the K-stream kernel (KS=1), which lives in commit 28976cd only (reverted after these
# probes: no gain); build .gpu/ from that commit to rerun them.
#   ks      the K-stream batch-16 kernel (KS=1: a producer warp streams x and the weights a K stage at a
#           time for all of a CTA's row tiles) against the bulk ring, 4-bit formats at M = 16, one split
. "$(dirname "$0")/probe-lib.sh"
probe_start exp-session25 "${1:-verify}"
if has verify; then
    .gpu/model_bench_gpu --ignored 2>&1 | grep -E "test result|FAILED|panicked" | tee "$out/verify.txt"
    .gpu/server_api --ignored 2>&1 | grep -E "test result|FAILED|panicked" | tee -a "$out/verify.txt"
fi
if has ks; then
    m16_compare ks "14336x4096 28672x4096" "int4_g128 mxfp4 nvfp4 nf4" \
        "|" "-DKS=1|split_k=1" "-DKS=1 -DKS_KW=4|split_k=1" "-DKS=1 -DKS_KW=1|split_k=1"
    m16_compare ks "4096x4096 6144x4096 4096x14336" "int4_g128 mxfp4" "|" "-DKS=1|split_k=1"
    m16_compare ks "14336x4096" "fp8_e4m3 int8" "|" "-DKS=1|split_k=1"
fi
#   ksexp   where the K stream's time goes (tune_table, INT4 16x14336x4096, the bulk ring's plan): the kernel,
#           x cut to 1 row (EXP_XROWS, wrong results), the loads alone (EXP_LOADONLY), both; the bulk ring too
if has ksexp; then
    for extra in "" "-DEXP_XROWS=1" "-DEXP_LOADONLY=1" "-DEXP_LOADONLY=1 -DEXP_XROWS=1" "-DEXP_XROWS=8"; do
        bulk_tune ksexp weight_only_gpu 16x14336x4096,16x28672x4096 "-DKS=0 $extra" "-DKS=1 $extra"
    done
fi
#   ks2     the K stream with x's copies shared by CTA pairs (multicast=true) and in 2 / 4 K splits summed in
#           clusters, against the bulk ring (default and with multicast)
if has ks2; then
    m16_compare ks2 "14336x4096 28672x4096" "int4_g128 mxfp4 nvfp4 nf4" \
        "|" "|multicast=true" "-DKS=1|multicast=true" "-DKS=1|split_k=2" "-DKS=1|split_k=4"
    m16_compare ks2 "4096x4096 4096x14336" "int4_g128 mxfp4" \
        "|" "-DKS=1|multicast=true" "-DKS=1|split_k=2" "-DKS=1|split_k=4" "-DKS=1|split_k=8"
fi
#   ks3     the K stream with x through cp.async (the load-store path) instead of bulk copies (KS_XLSU), and
#           with the loads alone / 1 row of x, against the bulk ring
if has ks3; then
    m16_compare ks3 "14336x4096 28672x4096" "int4_g128 mxfp4 nvfp4 nf4" "|" "-DKS=1 -DKS_XLSU=1|"
    bulk_tune ks3 weight_only_gpu 16x14336x4096 "-DKS=1 -DKS_XLSU=1" "-DKS=1 -DKS_XLSU=1 -DEXP_LOADONLY=1" \
        "-DKS=1 -DKS_XLSU=1 -DEXP_XROWS=1" "-DKS=1 -DKS_XLSU=1 -DEXP_LOADONLY=1 -DEXP_XROWS=1"
fi
#   ks4     the K stream in 2 K splits with wider stages (KS_KW / KS_G) and 4-tile units in one split; ncu
#           memory tables of the K stream at 16x14336x4096 and of the M = 1 GEMV
if has ks4; then
    m16_compare ks4 "14336x4096 28672x4096" "int4_g128 mxfp4" "|" "-DKS=1 -DKS_KW=2|split_k=2" \
        "-DKS=1 -DKS_G=4|split_k=2" "-DKS=1 -DKS_G=4|" "-DKS=1 -DKS_G=4 -DKS_KW=1|"
    for spec in "16|-DKS=1|wo_mma_xb" "16||wo_mma_xb" "1||wo_"; do
        m=${spec%%|*}; rest=${spec#*|}; extra=${rest%%|*}; kern=${rest#*|}
        ROOFLINE_NVRTC_EXTRA="$extra" ncu --launch-skip 30 --launch-count 1 -k regex:$kern \
            --section SpeedOfLight --section MemoryWorkloadAnalysis --section MemoryWorkloadAnalysis_Tables \
            --section Occupancy --metrics lts__t_sectors_srcunit_tex_op_read.sum,lts__t_sectors_srcunit_tex_op_read_lookup_hit.sum,dram__bytes_read.sum,l1tex__m_xbar2l1tex_read_bytes.sum \
            .gpu/roofline measure --m $m --n 14336 --k 4096 --weights int4_g128 --hw $hw > "$out/ncu-m$m${extra:+-ks}.txt" 2>&1
        echo "=== ncu M=$m [$extra]"; grep -E "Duration|Throughput|Bandwidth|Hit Rate|lts__|dram__bytes|xbar2l1tex|Busy|Max Bandwidth|Mem Pipes" "$out/ncu-m$m${extra:+-ks}.txt" | head -40
    done
fi
#   ks5     (BIN=roofline-ks, built from 28976cd with KS_NOMC) what a cluster pair costs the K stream without x
#           multicast (KS_NOMC), and 2 K splits through the workspace (cluster=false) instead of a cluster
if has ks5; then
    BIN=roofline-ks m16_compare ks5 "14336x4096 28672x4096" "int4_g128 mxfp4" "|" "-DKS=1|" "-DKS=1|multicast=true" \
        "-DKS=1 -DKS_NOMC=1|multicast=true" "-DKS=1|split_k=2,cluster=false" "|split_k=2,cluster=false" "|split_k=2"
fi
#   ks6     (BIN=roofline-ks: 28976cd + KS_ROT / KS_NS switches) the K stream with each CTA starting its walk
#           at another stage (KS_ROT) and with fewer slots (KS_NS), against the bulk ring
if has ks6; then
    BIN=roofline-ks m16_compare ks6 "14336x4096 28672x4096" "int4_g128 mxfp4" "|" "-DKS=1|" "-DKS=1 -DKS_ROT=1|" \
        "-DKS=1 -DKS_ROT=1 -DKS_NS=4|" "-DKS=1 -DKS_NS=3|" "-DKS=1 -DKS_ROT=1 -DKS_G=4|"
fi
#   ks7     (BIN=roofline-ks) the K stream's stage size: 4-, 8- and 16-tile units (KS_G) over 1 or 2 K parts
if has ks7; then
    BIN=roofline-ks m16_compare ks7 "14336x4096 28672x4096" "int4_g128 mxfp4" "-DKS=1 -DKS_G=4|" "-DKS=1 -DKS_G=4 -DKS_KW=1|" \
        "-DKS=1 -DKS_G=8|" "-DKS=1 -DKS_G=8 -DKS_KW=1|" "-DKS=1 -DKS_G=16 -DKS_KW=1|"
fi
#   ks8     (.gpu/weight_only_gpu-ks: 28976cd + the KS_ROT patch) the K stream with 4-tile units: 1 row of x
#           (EXP_XROWS), the loads alone (EXP_LOADONLY), both, against the bulk ring's same probes
if has ks8; then
    for ks in "-DKS=1 -DKS_G=4" "-DKS=0"; do
        bulk_tune ks8 weight_only_gpu-ks 16x14336x4096,16x28672x4096 "$ks" "$ks -DEXP_XROWS=1" "$ks -DEXP_LOADONLY=1" \
            "$ks -DEXP_LOADONLY=1 -DEXP_XROWS=1"
    done
fi
#   ks9     (.gpu/weight_only_gpu-ks) the K stream's x through cp.async (KS_XLSU, the load-store path) instead
#           of bulk copies: the kernel and the loads alone
if has ks9; then
    bulk_tune ks9 weight_only_gpu-ks 16x14336x4096,16x28672x4096 "-DKS=1 -DKS_G=4 -DKS_XLSU=1" \
        "-DKS=1 -DKS_G=4 -DKS_XLSU=1 -DEXP_LOADONLY=1" "-DKS=1 -DKS_G=8 -DKS_XLSU=1" "-DKS=1 -DKS_G=8 -DKS_XLSU=1 -DEXP_LOADONLY=1"
fi

#!/usr/bin/env bash
# Session 23 plan probes at 1x14336x4096 (NF4 through the x-in-registers kernel's pair table: how many warps
# and rows per CTA amortize its 32 KB fill). Run from the repository root on the GPU machine, .gpu/roofline built.
hw=bench/results/h100-measured.toml
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv
run() { echo "=== $*"; .gpu/roofline compare --weight-only --m 1 --n ${N:-14336} --k ${K:-4096} --hw $hw "$@" 2>&1 | grep -E "W:|rror:" | cut -c1-120; }
run -p nf4 -p int4_g128
for w in 8 16; do for r in 56 112 224; do run -p nf4 --gemv variant=xreg,xh=true,warps=$w,rows_per_cta=$r; done; done
for w in 8 16; do run -p nf4 --gemv variant=xreg,xh=true,warps=$w,rows_per_cta=112,rows=4; done
N=4096 K=14336 run -p nf4
N=4096 K=14336 run -p nf4 --gemv variant=xreg,xh=true,warps=16,rows_per_cta=32
N=28672 run -p nf4
N=28672 run -p nf4 --gemv variant=xreg,xh=true,warps=16,rows_per_cta=224
N=4096 run -p nf4
N=4096 run -p nf4 --gemv variant=xreg,xh=true,warps=16,rows_per_cta=32

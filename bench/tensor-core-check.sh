#!/usr/bin/env bash
# GPU check of the tensor-core weight-only kernels (Mma, XMma) for every format they take: correctness first,
# then the batch-decode tables that decide their defaults. Run on a GPU machine from the repository root after
# `cargo build --release` and `cargo test --release --no-run`, or with ROOFLINE / WO_TEST given:
#   1. the weight-only GPU tests: every format x variant x M = 1..16 on tiny odd shapes, the variants with BF16
#      activations and split-K, the fusions (RMSNorm, residual add, SwiGLU) for every kernel family,
#   2. the tuning table at M = 3, 8, 16 for FP16, FP8, INT4 and NF4: split-K on CUDA cores against the
#      K-walking (Mma) and x-stationary (XMma) tensor-core kernels, XMma also reducing after every row tile
#      (TRED: one wave at M = 16), with shared-memory atomics (ARED) and with x in shared memory (XSM: the
#      default above M = 8 for 4-bit weights); each configuration checked, then timed,
#   3. `roofline compare --weight-only` at M = 1, 3, 8 and 16 (the defaults): how far each M is from M = 1.
# Logs go to $OUT (default: a new temp dir). About 12 minutes on an H100 (the tests 7, the table 3-4): under a
# 10-minute limit run the parts separately, `bash bench/tensor-core-check.sh tests`, then `tune,compare`.
PARTS=${1:-tests,tune,compare}
. bench/check-env.sh
part() { [[ ",$PARTS," == *",$1,"* ]]; }
if part tests; then
echo "== weight-only GPU tests ($WO)"
$WO --ignored --nocapture --test-threads=1 every_m_and_tiny variants_and_bf16 fused_norm_and_residual > $OUT/wo-tests.txt 2>&1
grep -E "^test |test result|panicked" $OUT/wo-tests.txt
fi
if part tune; then
echo "== tuning table, M = 3 / 8 / 16"
ROOFLINE_TUNE_SET=xreg ROOFLINE_TUNE_ONLY="XMma U=1|XMma U=2|XMma U=4|XMma TRED|XMma ARED|XMma XSM U=8 W=16|XMma XSM U=4 W=16|Mma U=0|SplitK U=0" \
ROOFLINE_TUNE_FORMATS=FP16,FP8_E4M3,INT4_G128,NF4 ROOFLINE_TUNE_SHAPES=3x14336x4096,8x14336x4096,16x14336x4096,16x4096x14336 \
  $WO --ignored --nocapture --test-threads=1 tune_table > $OUT/tune-tensor-cores.txt 2>&1
grep -E "TT-BEST|panicked|test result" $OUT/tune-tensor-cores.txt
fi
if part compare; then
echo "== compare at M = 1, 3, 8 and 16 (defaults)"
for m in 1 3 8 16; do
  $B compare --weight-only --m $m --n 14336 --k 4096 -p fp16 -p fp8_e4m3 -p int8 -p int4_g128 -p nf4 -p mxfp4 -p nvfp4 --hw $HW > $OUT/compare-m$m.txt 2>&1
  tail -12 $OUT/compare-m$m.txt
done
fi
echo "logs: $OUT"

#!/usr/bin/env bash
# GPU check of the decode-step benchmark and the kernels under it (run on a GPU machine from the repository root
# after `cargo build --release` and `cargo test --release --no-run`, or with ROOFLINE / the test binaries given):
#   1. the fused GEMV test (RMSNorm, residual add, SwiGLU on load, every kernel family, K = 14336 no-split plan),
#   2. model_bench_gpu: every weight format, fused and unfused steps, both attention kernels with FP16 and FP8 KV,
#      a synthetic Hugging Face checkpoint (--checkpoint) and MoE steps (routing, experts, combine),
#   3. the headline table: Llama-3.1-8B B=1 S=1024 in every scheme, then FP16/INT4 with an FP8 KV cache,
#   4. Llama-3.1-8B at B = 16 (the tensor-core GEMVs) in FP16, FP8, INT4 and NF4 (4 layers built, scaled),
#   5. Mixtral-8x7B (16 of 32 layers built, scaled) in FP16 and INT4.
# Logs go to $OUT (default: a new temp dir). About 10 minutes on an H100: under a 10-minute limit run the parts
# separately (`bash bench/model-bench-check.sh tests,b1`, then `kv,b16,moe`).
PARTS=${1:-tests,b1,kv,b16,moe}
. bench/check-env.sh
part() { [[ ",$PARTS," == *",$1,"* ]]; }
if part tests; then
echo "== fused GEMV test ($WO)"
$WO --ignored --nocapture --test-threads=1 fused_norm_and_residual_add > $OUT/fused-gemv-test.txt 2>&1
grep -E "test result|panicked" $OUT/fused-gemv-test.txt
echo "== model_bench_gpu ($MB)"
$MB --ignored --nocapture --test-threads=1 > $OUT/model-bench-gpu-tests.txt 2>&1
grep -E "^test |test result|panicked" $OUT/model-bench-gpu-tests.txt
fi
if part b1; then
echo "== Llama-3.1-8B, every scheme"
$B model-bench --config llama-3.1-8b --schemes fp16,fp8,int8,int4,nvfp4,nf4,mxfp4 --hw $HW > $OUT/model-bench-all.txt 2>&1
tail -12 $OUT/model-bench-all.txt
fi
if part kv; then
echo "== Llama-3.1-8B, FP8 KV cache"
$B model-bench --config llama-3.1-8b --schemes fp16,int4 --kv fp8 --hw $HW > $OUT/model-bench-fp8-kv.txt 2>&1
tail -7 $OUT/model-bench-fp8-kv.txt
fi
if part b16; then
echo "== Llama-3.1-8B, B = 16 (tensor-core GEMVs), 4 layers built"
$B model-bench --config llama-3.1-8b --batch 16 --layers 4 --schemes fp16,fp8,int4,nf4 --hw $HW > $OUT/model-bench-b16.txt 2>&1
tail -7 $OUT/model-bench-b16.txt
fi
if part moe; then
echo "== Mixtral-8x7B (MoE), 16 layers built"
$B model-bench --config mixtral-8x7b --schemes fp16,int4 --layers 16 --hw $HW > $OUT/model-bench-mixtral.txt 2>&1
grep -E "^MoE" $OUT/model-bench-mixtral.txt
tail -7 $OUT/model-bench-mixtral.txt
fi
echo "logs: $OUT"

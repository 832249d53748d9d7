# Shared setup of the GPU check scripts (sourced, from the repository root): the release binary, the hardware
# profile, the log folder and the newest test binaries, each overridable from the environment
# (ROOFLINE, HW, OUT, WO_TEST, MB_TEST).
set -u
B=${ROOFLINE:-target/release/roofline}
HW=${HW:-bench/results/h100-measured.toml}
OUT=${OUT:-$(mktemp -d)}
newest() { ls -t target/release/deps/$1-* 2>/dev/null | grep -v '\.d$' | head -1; }
WO=${WO_TEST:-$(newest weight_only_gpu)}
MB=${MB_TEST:-$(newest model_bench_gpu)}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader

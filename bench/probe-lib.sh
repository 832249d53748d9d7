# Sourced by the bench/exp-session*.sh probe scripts: `probe_start NAME PARTS` sets $out (logs: $OUT, else
# /tmp/NAME), $parts (comma-separated, PARTS), $hw (the calibrated H100 profile) and `has PART`, and logs
# the GPU's clocks, temperature and power to $out/gpu.txt.
set -uo pipefail
probe_start() {
    out=${OUT:-/tmp/$1}
    mkdir -p "$out"
    parts=$2
    hw=bench/results/h100-measured.toml
    nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv | tee "$out/gpu.txt"
}
has() { [[ ",$parts," == *",$1,"* ]]; }

# Sourced by the bench/exp-session*.sh probe scripts: `probe_start NAME PARTS` sets $out (logs: $OUT, else
# /tmp/NAME), $parts (comma-separated, PARTS), $hw ($HW, else the calibrated H100 profile) and `has PART`, and logs
# the GPU's clocks, temperature and power to $out/gpu.txt; `tune_fmt` and `bulk_tune` (below) run wrong-result probes.
set -uo pipefail
probe_start() {
    out=${OUT:-/tmp/$1}
    mkdir -p "$out"
    parts=$2
    hw=${HW:-bench/results/h100-measured.toml}
    nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv | tee "$out/gpu.txt"
}
has() { [[ ",$parts," == *",$1,"* ]]; }
# `tune_fmt LOG FORMAT ONLY SHAPES EXTRA...`: tune_table's rows labelled ONLY (in one split, or in
# ROOFLINE_TUNE_SPLIT_K's) for FORMAT at SHAPES (MxNxK, comma-separated), any error accepted (the wrong-result
# probes), from the test binary .gpu/$TUNE_BIN (default weight_only_gpu), one table per NVRTC extra option set,
# to $out/LOG.txt.
tune_fmt() {
    local log=$1 fmt=$2 only=$3 shapes=$4 extra sk=${ROOFLINE_TUNE_SPLIT_K:-1}
    shift 4
    for extra in "$@"; do
        echo "=== $fmt [$extra]" | tee -a "$out/$log.txt"
        ROOFLINE_NVRTC_EXTRA="$extra" ROOFLINE_TUNE_SET=xreg ROOFLINE_TUNE_TOLERANCE=1e30 ROOFLINE_TUNE_SHAPES=$shapes \
            ROOFLINE_TUNE_FORMATS=$fmt ROOFLINE_TUNE_ONLY="$only" \
            .gpu/${TUNE_BIN:-weight_only_gpu} --ignored tune_table --nocapture 2>&1 | grep -E "^TT " \
            | grep -E "S=$sk|splits +$sk " | tee -a "$out/$log.txt"
    done
}
# `bulk_tune LOG BIN SHAPES EXTRA...`: tune_fmt for INT4's batch-16 bulk-ring plan (4-tile slots) from .gpu/BIN.
bulk_tune() {
    local log=$1 bin=$2 shapes=$3
    shift 3
    TUNE_BIN=$bin tune_fmt "$log" INT4_G128 "XSM+XB NST=2 U=4 W=16" "$shapes" "$@"
}
# `meas LOG LABEL FORMAT MxNxK GEMV`: `measure --weights FORMAT` (checked against the reference, then timed; killed
# after MEAS_TIMEOUT s, default 120) with --gemv GEMV from $BIN (default .gpu/roofline), its kernel line and time
# under "=== LABEL" in $out/LOG.txt; $MEAS_X (e.g. bf16): the activations (default FP16).
meas() {
    local log=$1 label=$2 f=$3 s=$4 gemv=$5 m n k
    IFS=x read -r m n k <<<"$s"
    echo "=== $label $f ${MEAS_X:+x $MEAS_X }${s} [$gemv]" | tee -a "$out/$log.txt"
    timeout ${MEAS_TIMEOUT:-120} .gpu/${BIN:-roofline} measure --hw $hw --weights "$f" ${MEAS_X:+--activations $MEAS_X} \
        --m $m --n $n --k $k ${gemv:+--gemv $gemv} 2>&1 \
        | grep -E "kernel:|measured|rror" | sed -E 's/, CUDA sources.*//' | tee -a "$out/$log.txt"
}
# `env_ab LOG NAME VAR VALUES SHAPES FORMATS [GEMV]`: `meas` per shape of SHAPES (MxNxK) and format of FORMATS,
# twice over, with the environment variable VAR set to each of VALUES in turn ("default": empty, the build's own
# choice), labelled NAME=value, each killed after MEAS_TIMEOUT s (default 40), with --gemv GEMV if given: an A/B
# within one binary.
env_ab() {
    local log=$1 name=$2 var=$3 values=$4 shapes=$5 fmts=$6 gemv=${7:-} s f rep v
    for s in $shapes; do
        for f in $fmts; do
            for rep in 1 2; do
                for v in $values; do
                    (export "$var=${v#default}" MEAS_TIMEOUT=${MEAS_TIMEOUT:-40}; meas "$log" "$name=$v" "$f" "$s" "$gemv")
                done
            done
        done
    done
}
# `bin_ab LOG PAIRS`: `meas` (checked, then timed, each killed after 60 s) from .gpu/roofline-base and .gpu/roofline
# alternately, twice, per FORMAT:MxNxK of PAIRS (space-separated), labelled by the binary, into $out/LOG.txt.
bin_ab() {
    local log=$1 pairs=$2 p rep bin
    for p in $pairs; do
        for rep in 1 2; do
            for bin in roofline-base roofline; do
                (export BIN=$bin MEAS_TIMEOUT=60; meas "$log" "$bin" "${p%%:*}" "${p#*:}" "")
            done
        done
    done
}
# `ring_ab LOG LABEL GEMV SHAPES FORMATS [REPS]`: `meas` with --gemv GEMV (empty: the engine's default), labelled
# LABEL, then with the ring forced (--gemv ring=true), labelled "ring", per shape of SHAPES (MxNxK) and format of
# FORMATS, REPS passes (default 1), each killed after 40 s, into $out/LOG.txt.
ring_ab() {
    local log=$1 label=$2 gemv=$3 shapes=$4 fmts=$5 reps=${6:-1} rep s f
    for ((rep = 0; rep < reps; rep++)); do
        for s in $shapes; do
            for f in $fmts; do
                (export MEAS_TIMEOUT=40; meas "$log" "$label" "$f" "$s" "$gemv")
                (export MEAS_TIMEOUT=40; meas "$log" ring "$f" "$s" "ring=true")
            done
        done
    done
}
# `ring_verify NAME VAR VALUES`: the ring GEMV's reference test (.gpu/ring_gpu) with the environment variable VAR
# set to each of VALUES ("default": empty), each killed after VERIFY_TIMEOUT s (default 300: a barrier bug
# hangs); its log in $out/verify-NAME-value.txt, its exit status and result in $out/verify.txt.
ring_verify() {
    local name=$1 var=$2 values=$3 v
    for v in $values; do
        echo "=== $var=$v" | tee -a "$out/verify.txt"
        (export "$var=${v#default}"; timeout ${VERIFY_TIMEOUT:-300} .gpu/ring_gpu --ignored --nocapture \
            ring_gemv_matches_the_reference >"$out/verify-$name-$v.txt" 2>&1)
        echo "exit $?" | tee -a "$out/verify.txt"
        grep -E "test result|panicked" "$out/verify-$name-$v.txt" | cut -c1-220 | tee -a "$out/verify.txt"
    done
}
# `wo_compare LOG LABEL M NxK ARGS...`: `compare --weight-only` at M x N x K with ARGS (formats, --gemv ...) from
# $BIN (default .gpu/roofline), its table rows under "=== LABEL MxNxK" in $out/LOG.txt.
wo_compare() {
    local log=$1 label=$2 m=$3 nk=$4
    shift 4
    echo "=== $label ${m}x$nk" | tee -a "$out/$log.txt"
    timeout 120 .gpu/${BIN:-roofline} compare --weight-only --hw $hw --m $m --n ${nk%x*} --k ${nk#*x} "$@" 2>&1 \
        | grep -E "W:|rror" | tee -a "$out/$log.txt"
}
# `m16_compare LOG SHAPES FORMATS SETTING...`: `compare --weight-only` at M = 16 for SHAPES (NxK, space-separated)
# and FORMATS, one table per SETTING "EXTRA|GEMV" (ROOFLINE_NVRTC_EXTRA options | --gemv options; $BIN picks
# another CLI build in .gpu/), to $out/LOG.txt.
m16_compare() {
    local log=$1 shapes=$2 fmts=$3 s extra gemv nk f args=()
    shift 3
    for f in $fmts; do args+=(-p "$f"); done
    for s in "$@"; do
        extra=${s%%|*}
        gemv=${s#*|}
        for nk in $shapes; do
            ROOFLINE_NVRTC_EXTRA="$extra" wo_compare "$log" "[$extra] [$gemv]" 16 "$nk" "${args[@]}" ${gemv:+--gemv $gemv}
        done
    done
}
# `pdl_sass LOG DIR`: every CUBIN in DIR (ROOFLINE_DUMP_CUBIN's) disassembled, and per function the loads it
# issues before ACQBULK (griddepcontrol.wait), read-only (`LDG...CONSTANT`: weights and their tables may, and
# the math library's tables, e.g. sincosf's for RoPE angles), coherent (`LDG`: what an earlier kernel writes
# must not: see ARCHITECTURE.md's roofline-gpu invariant) and async copies (`LDGSTS`, cp.async: the fused
# attention's cached K/V rows), to $out/LOG.txt; then DIR is removed (the CUBINs are many and large). Works
# with any cuobjdump (the device's, or pip's nvidia-cuda-cuobjdump). The same count as roofline-gpu's
# `nvrtc::loads_before_wait` (which CI runs on the kernels it compiles), for the CUBINs a device run dumps.
pdl_sass() {
    local log=$1 dir=$2 c
    for c in "$dir"/*.cubin; do
        cuobjdump -sass "$c" 2>/dev/null | awk -v f="$(basename "$c")" '
            /Function :/ { fn = $3; pre = 1; nc = 0; co = 0; as = 0 }
            /ACQBULK/ { if (pre) printf "%s %s: before ACQBULK %d async copies, %d read-only loads, %d coherent loads\n", f, fn, as, nc, co; pre = 0 }
            pre && /[ \t]LDGSTS/ { as++ }
            pre && /[ \t]LDG\./ { if (/CONSTANT/) nc++; else co++ }'
    done | tee "$out/$log.txt"
    rm -rf "$dir"
}
# `mb LOG LABEL BIN ARGS...`: `model-bench ARGS` (e.g. --config llama-3.1-8b --batch 1 --scheme nf4) from .gpu/BIN
# with the calibrated profile: its tokens/s, error and linear-op lines under "=== LABEL" in $out/LOG.txt, the
# whole output in $out/LOG-full.txt.
mb() {
    local log=$1 label=$2 bin=$3
    shift 3
    echo "=== $label" | tee -a "$out/$log.txt"
    timeout ${MB_TIMEOUT:-150} .gpu/$bin model-bench --hw $hw "$@" 2>&1 | tee -a "$out/$log-full.txt" \
        | grep -E "tokens/s|error|│ (qkv|o_proj|gate|down|lm_head)" | cut -c1-150 | tee -a "$out/$log.txt"
}
# `mb_ab LOG MODEL LAYERS SCHEMES`: `mb` for .gpu/roofline-base then .gpu/roofline, batch 1, per scheme of SCHEMES
# (space-separated), MODEL with --layers LAYERS (empty: all), into $out/LOG.txt.
mb_ab() {
    local log=$1 model=$2 layers=$3 schemes=$4 scheme bin
    for scheme in $schemes; do
        for bin in roofline-base roofline; do
            mb "$log" "$bin model-bench $model ${layers:+--layers $layers }batch 1 $scheme" $bin --config "$model" \
                ${layers:+--layers $layers} --batch 1 --scheme $scheme
        done
    done
}
# `gpu_tests`: the weight-only engine's reference tests at the issue shapes and with the fused norm / add
# ($out/wo-*.txt) and model-bench's GPU tests ($out/mbt.txt), their results echoed.
gpu_tests() {
    local t
    for t in every_format_matches fused_norm; do
        timeout 400 .gpu/weight_only_gpu --ignored --nocapture $t >"$out/wo-$t.txt" 2>&1
        grep -E "^test |test result|panicked" "$out/wo-$t.txt"
    done
    timeout 300 .gpu/model_bench_gpu --ignored >"$out/mbt.txt" 2>&1
    grep -E "^test |test result|panicked" "$out/mbt.txt"
}
# `test_bin LOG SECONDS BIN ARGS...`: the GPU test binary .gpu/BIN with ARGS (e.g. --ignored --nocapture NAME), killed
# after SECONDS, its output in $out/LOG.txt, then its exit status and its test lines, results, panics and failures
# echoed (400 characters of each line at most).
test_bin() {
    local log=$1 secs=$2 bin=$3
    shift 3
    timeout "$secs" .gpu/"$bin" "$@" >"$out/$log.txt" 2>&1
    echo "$bin exit $?" | tee -a "$out/$log.txt"
    grep -E "^test |test result|panicked|FAILED|^failures" "$out/$log.txt" | cut -c1-400
}
# `issue_table LOG`: issue 11's table, `compare --weight-only` (every format, FP16 beside them) at the issue's
# shapes at M = 1 and at 16x14336x4096, into $out/LOG.txt (the format rows echoed).
issue_table() {
    local log=$1 s m n k
    for s in 1x14336x4096 1x4096x14336 1x128256x4096 1x4096x4096 16x14336x4096; do
        IFS=x read -r m n k <<<"$s"
        echo "=== table $s" | tee -a "$out/$log.txt"
        timeout 120 .gpu/roofline compare --weight-only --hw $hw --m $m --n $n --k $k 2>&1 | tee -a "$out/$log.txt" \
            | grep -E "W:|rror"
    done
}
# `final_checks GEMVS`: the committed build's checks: weight_only_gpu's every-M test (INT4, every M through the engine's
# defaults), model-bench's GPU tests, model-bench Llama-3.1-8B INT4 (8 layers) at FI_BATCHES (default 16 12 9) with
# each --gemv of GEMVS (space-separated; "default": none), and issue 11's table, into $out/final*.txt.
final_checks() {
    local b g extra
    ROOFLINE_TEST_FORMATS=INT4_G128 test_bin final-everym 250 weight_only_gpu --ignored --nocapture \
        every_m_and_tiny_odd_shapes_through_the_raw_api
    test_bin final-mbt 300 model_bench_gpu --ignored
    for b in ${FI_BATCHES:-16 12 9}; do
        for g in ${1:-default}; do
            extra=()
            [[ $g == default ]] || extra=(--gemv "$g")
            MB_TIMEOUT=200 mb final-mb "$g batch $b" roofline --config llama-3.1-8b --schemes int4 --batch "$b" \
                --layers 8 "${extra[@]}"
        done
    done
    issue_table final-table
}
# `tc_ab LOG FORMAT SHAPES`: a format on the ring's tensor-core row step: the ring test's tensor-core cases at 9-16
# rows (FP16 x) into $out/LOG-rtest.txt, then `meas` of the tensor-core ring forced against the bulk ring
# (variant=xmma) at SHAPES (MxNxK, space-separated), twice, and the default at M = 1 of 14336x4096 (issue 11's
# ratio), into $out/LOG.txt.
tc_ab() {
    local log=$1 f=$2 shapes=$3 s rep g
    ROOFLINE_TEST_M=9,10,11,12,13,16 ROOFLINE_TEST_FORMATS=$f ROOFLINE_TEST_X=fp16 \
        test_bin "$log-rtest" 200 ring_gpu --ignored --nocapture ring_gemv_matches_the_reference
    for s in $shapes; do
        for rep in 1 2; do
            for g in variant=xreg,ring=true variant=xmma; do MEAS_TIMEOUT=40 meas "$log" "$g" "$f" "$s" "$g"; done
        done
    done
    MEAS_TIMEOUT=40 meas "$log" "default M=1" "$f" 1x14336x4096 ""
}
# `gpu_lib_tests LOG`: roofline-gpu's GPU unit tests (.gpu/gpu_lib --ignored --nocapture) without those named in
# GPULIB_SKIP (default the read-stream and bulk-copy sweeps, which outlast a device call), killed after GPULIB_TIMEOUT
# s (default 480), into $out/LOG.txt (`test_bin`).
gpu_lib_tests() {
    local skips=() t
    for t in ${GPULIB_SKIP-bulk_stream_sweep read_stream_at_sizes read_stream_pdl_ab}; do skips+=(--skip "$t"); done
    test_bin "$1" "${GPULIB_TIMEOUT:-480}" gpu_lib --ignored --nocapture "${skips[@]}"
}
# `step_8b LOG`: `mb` of model-bench Llama-3.1-8B at batch 1 per scheme of MB_SCHEMES (default fp16) under each of
# STEP_SETTINGS ("VAR=value", or "default": the environment as it is), into $out/LOG.txt.
step_8b() {
    local log=$1 scheme v
    for scheme in ${MB_SCHEMES:-fp16}; do
        for v in ${STEP_SETTINGS:-default}; do
            (
                [[ $v == default ]] || export "${v?}"
                mb "$log" "$v llama-3.1-8b batch 1 $scheme" roofline --config llama-3.1-8b --batch 1 --scheme $scheme
            )
        done
    done
}
# `meas_setting LOG SETTING FORMAT MxNxK`: `meas` (killed after 40 s) under SETTING, its label: "splitk" (--gemv
# variant=splitk), "xreg" (--gemv variant=xreg,ring=false: the x-in-registers kernel), "default" (the engine's
# choice), "ring" (--gemv variant=xreg,ring=true) or "VAR=value" (the ring with that environment variable).
meas_setting() {
    local log=$1 v=$2 f=$3 s=$4
    (
        gemv=variant=xreg,ring=true
        case $v in
        splitk) gemv=variant=splitk ;;
        xreg) gemv=variant=xreg,ring=false ;;
        default) gemv= ;;
        ring) ;;
        *) export "${v?}" ;;
        esac
        export MEAS_TIMEOUT=40
        meas "$log" "$v" "$f" "$s" "$gemv"
    )
}

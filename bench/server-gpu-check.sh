#!/usr/bin/env bash
# GPU check of the server (run on a GPU machine after `cargo build --release`): NVML status, /api/measure
# (cuBLASLt GEMMs and a weight-only GEMV with its CUDA-graph replay),
# the bounded measurement queue (--measure-queue 1: of 4 concurrent requests at most one waits while one runs; the others get 503),
# and a chart with the measured point. Outputs go to $OUT (default: a new temp dir).
set -u
B=${ROOFLINE:-target/release/roofline}
OUT=${OUT:-$(mktemp -d)}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
$B serve --addr 127.0.0.1:8300 --measure-queue 1 > $OUT/serve.log 2>&1 &
PID=$!
sleep 1
echo "== nvml"; curl -s -w ' %{http_code}\n' http://127.0.0.1:8300/api/nvml/status | head -c 1500; echo
echo "== measure FP16 4096^3"; curl -s -w ' %{http_code}\n' -X POST 'http://127.0.0.1:8300/api/measure?hardware_key=h100' -H 'content-type: application/json' -d '{"m":4096,"n":4096,"k":4096,"precision":"FP16"}' | tee $OUT/measure.json | head -c 2000; echo
echo "== measure FP8 GEMV"; curl -s -w ' %{http_code}\n' -X POST 'http://127.0.0.1:8300/api/measure?hardware_key=h100' -H 'content-type: application/json' -d '{"M":1,"N":4096,"K":4096,"precision":"FP8_E4M3"}' | head -c 1500; echo
echo "== measure INT4_G128 weight-only GEMV with its CUDA-graph replay"; curl -s -w ' %{http_code}\n' -X POST 'http://127.0.0.1:8300/api/measure?hardware_key=h100' -H 'content-type: application/json' -d '{"m":1,"n":14336,"k":4096,"weights":"INT4_G128","graph":true}' | head -c 2500; echo
echo "== weight-only with M = 17 (expect 422, field m)"; curl -s -w ' %{http_code}\n' -X POST 'http://127.0.0.1:8300/api/measure' -H 'content-type: application/json' -d '{"m":17,"n":4096,"k":4096,"weights":"NF4"}'; echo
echo "== 4 concurrent measures, queue 1 (expect 503s for the overflow)"
REQS=""
for i in 1 2 3 4; do curl -s -o /dev/null -w "req$i %{http_code} %{time_total}s\n" -X POST 'http://127.0.0.1:8300/api/measure' -H 'content-type: application/json' -d '{"m":8192,"n":8192,"k":8192,"precision":"BF16"}' & REQS="$REQS $!"; done
sleep 0.2; echo "== nvml while measuring"; curl -s http://127.0.0.1:8300/api/nvml/status | head -c 600; echo
wait $REQS  # the requests only: a bare `wait` would also wait for the server
echo "== plot with measurement"
python3 - <<'PY' > $OUT/plot-body.json
import json
d=json.loads(open(__import__('os').environ['OUT']+'/measure.json').read().rsplit(' ',1)[0])
print(json.dumps({"hardware_key":"h100","points":[{"label":d["label"],"gemm":d["gemm"],"measurement":d["measurement"]}]}))
PY
curl -s -X POST http://127.0.0.1:8300/api/plot.svg -H 'content-type: application/json' -d @$OUT/plot-body.json -o $OUT/measured.svg -w '%{http_code}\n'; grep -o 'class="measured"[^>]*' $OUT/measured.svg
kill $PID; wait $PID; echo "serve exit $?"; cat $OUT/serve.log

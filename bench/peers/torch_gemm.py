"""PyTorch side-by-side baseline for `roofline measure` / `compare`: times the same ops with CUDA events.

Timing method = roofline's (crates/roofline-gpu/src/timing.rs): warm-up, a probe sizes each sample so short
ops are launched back to back (up to 64 launches between one pair of events, ~200 us per sample), median of
>= 100 samples, inputs rotated over sets larger than twice the L2, random data.

Ops: torch.matmul FP16/BF16 (x @ W^T), torch._scaled_mm FP8 E4M3 (per-tensor scales, BF16 out),
torch._int_mm INT8 (INT32 out), torch._weight_int4pack_mm INT4 group-128 (BF16 activations), a 1 GiB copy.

Usage on a GPU machine:
  python3 torch_gemm.py [--ops fp16,bf16,fp8,int8,int4,copy] [--json out.jsonl] M N K [M N K ...]
"""
import argparse
import json
import math
import sys

import torch

L2 = torch.cuda.get_device_properties(0).L2_cache_size if torch.cuda.is_available() else 50_000_000


def median_us(fn, warmup=10, min_runs=100, budget_ms=2000.0):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    for _ in range(4):
        fn()
    e.record()
    e.synchronize()
    probe = s.elapsed_time(e) * 1e3 / 4
    inner = max(1, min(64, math.ceil(200.0 / probe))) if probe > 0 else 1
    times, spent = [], 0.0
    while len(times) < min_runs or (spent < budget_ms and len(times) < 1000):
        s.record()
        for _ in range(inner):
            fn()
        e.record()
        e.synchronize()
        ms = s.elapsed_time(e)
        spent += ms
        times.append(ms * 1e3 / inner)
    times.sort()
    return times[len(times) // 2]


def rotating(make, bytes_per_set):
    sets = max(1, (2 * L2) // max(1, bytes_per_set) + 1)
    data = [make() for _ in range(sets)]
    i = [0]

    def nxt():
        j = i[0] % sets
        i[0] += 1
        return data[j]

    return nxt


def op_fn(op, m, n, k):
    dev = "cuda"
    if op in ("fp16", "bf16"):
        dt = torch.float16 if op == "fp16" else torch.bfloat16
        nxt = rotating(lambda: ((torch.rand(m, k, device=dev, dtype=dt) * 2 - 1),
                                (torch.rand(n, k, device=dev, dtype=dt) * 2 - 1)), (m * k + n * k + m * n) * 2)
        return lambda: torch.matmul(*(lambda x, w: (x, w.t()))(*nxt())), "torch.matmul"
    if op == "fp8":
        f8 = torch.float8_e4m3fn
        sa = torch.tensor(0.25, device=dev)
        sb = torch.tensor(0.5, device=dev)
        # _scaled_mm wants a row-major A and a column-major B: W^T of a row-major W is exactly that.
        nxt = rotating(lambda: ((torch.rand(m, k, device=dev) * 2 - 1).to(f8),
                                (torch.rand(n, k, device=dev) * 2 - 1).to(f8)), m * k + n * k + m * n * 2)

        def run():
            x, w = nxt()
            return torch._scaled_mm(x, w.t(), scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16)
        return run, "torch._scaled_mm"
    if op == "int8":
        nxt = rotating(lambda: (torch.randint(-127, 128, (m, k), device=dev, dtype=torch.int8),
                                torch.randint(-127, 128, (n, k), device=dev, dtype=torch.int8)), m * k + n * k + m * n * 4)

        def run():
            x, w = nxt()
            return torch._int_mm(x, w.t())
        return run, "torch._int_mm"
    if op == "int4":
        g = 128

        def make():
            w = torch.randint(0, 16, (n, k), device=dev, dtype=torch.int32)
            packed_u8 = (w[:, ::2] << 4 | w[:, 1::2]).to(torch.uint8)
            try:
                packed = torch.ops.aten._convert_weight_to_int4pack(packed_u8, 8)
            except Exception:
                packed = torch.ops.aten._convert_weight_to_int4pack(w, 8)
            sz = (torch.rand(k // g, n, 2, device=dev, dtype=torch.bfloat16) + 0.5)
            x = torch.rand(m, k, device=dev, dtype=torch.bfloat16) * 2 - 1
            return x, packed, sz
        nxt = rotating(make, n * k // 2 + (k // g) * n * 4 + m * k * 2 + m * n * 2)

        def run():
            x, packed, sz = nxt()
            return torch.ops.aten._weight_int4pack_mm(x, packed, g, sz)
        return run, "torch._weight_int4pack_mm (g128)"
    raise ValueError(op)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ops", default="fp16,bf16,fp8,int8,copy")
    ap.add_argument("--json", default=None)
    ap.add_argument("dims", nargs="*", type=int)
    a = ap.parse_args()
    shapes = [tuple(a.dims[i:i + 3]) for i in range(0, len(a.dims), 3)] or [(1, 4096, 4096), (4096, 4096, 4096)]
    out = open(a.json, "w") if a.json else None
    rows = []
    print(f"torch {torch.__version__} on {torch.cuda.get_device_name(0)}, L2 {L2 / 1e6:.0f} MB", flush=True)
    for op in a.ops.split(","):
        if op == "copy":
            n = (1 << 30) // 4
            src = torch.rand(n, device="cuda") * 2 - 1
            dst = torch.empty_like(src)
            us = median_us(lambda: dst.copy_(src), min_runs=50)
            rec = {"op": "copy", "bytes": 2 * n * 4, "time_us": us, "gb_s": 2 * n * 4 / us / 1e3}
            rows.append(f"copy 1 GiB: {rec['gb_s']:.1f} GB/s (read + write), {us:.1f} us")
            print(rows[-1], flush=True)
            if out:
                out.write(json.dumps(rec) + "\n")
        else:
            for m, n, k in shapes:
                try:
                    fn, what = op_fn(op, m, n, k)
                    us = median_us(fn)
                    rec = {"op": op, "kernel": what, "m": m, "n": n, "k": k, "time_us": us,
                           "tflops": 2 * m * n * k / us / 1e6}
                    rows.append(f"{op:5} {m}x{n}x{k}: {us:9.2f} us {rec['tflops']:8.1f} TFLOP/s  ({what})")
                except Exception as e:  # an op this torch/GPU lacks: say so, keep going
                    rec = {"op": op, "m": m, "n": n, "k": k, "error": str(e).splitlines()[0][:200]}
                    rows.append(f"{op:5} {m}x{n}x{k}: unavailable ({rec['error']})")
                print(rows[-1], flush=True)
                if out:
                    out.write(json.dumps(rec) + "\n")
    if out:
        out.close()


if __name__ == "__main__":
    sys.exit(main())

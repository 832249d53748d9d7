"""PyTorch side-by-side baseline: times the same GEMMs and a device copy with CUDA events (median).

Usage on a GPU machine: python3 bench/peers/torch_gemm.py [M N K ...]  (triples; default: the shapes below)
"""
import sys
import torch


def median_ms(fn, warmup=10, runs=100):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(runs):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        e.synchronize()
        times.append(s.elapsed_time(e))
    times.sort()
    return times[len(times) // 2]


def main():
    args = [int(a) for a in sys.argv[1:]]
    shapes = [tuple(args[i:i + 3]) for i in range(0, len(args), 3)] or [(1, 4096, 4096), (4096, 4096, 4096), (8192, 8192, 8192)]
    n = (1 << 30) // 4
    src = torch.rand(n, device="cuda") * 2 - 1
    dst = torch.empty_like(src)
    ms = median_ms(lambda: dst.copy_(src))
    print(f"torch copy 1 GiB: {2 * n * 4 / ms / 1e6:.1f} GB/s (read + write)")
    for dtype, name in [(torch.float16, "FP16"), (torch.bfloat16, "BF16")]:
        for m, nn, k in shapes:
            sets = max(1, (2 * 50_000_000) // ((m * k + nn * k + m * nn) * 2) + 1)
            xs = [torch.rand(m, k, device="cuda", dtype=dtype) * 2 - 1 for _ in range(sets)]
            ws = [torch.rand(nn, k, device="cuda", dtype=dtype) * 2 - 1 for _ in range(sets)]
            i = [0]

            def run():
                j = i[0] % sets
                i[0] += 1
                torch.matmul(xs[j], ws[j].t())

            t = median_ms(run)
            print(f"torch {name} {m}x{nn}x{k}: {t * 1e3:.1f} us, {2 * m * nn * k / t / 1e9:.1f} TFLOP/s")


if __name__ == "__main__":
    main()

"""Session 61: the f16 model of INT4's subnormal row step (session 60's subn_error_model.py, whose setup this imports)
for the ways of summing its f16 accumulators that were weighed before the tensor-core sums: widened every 1, 2 or 4
words; the accumulators started at -8 sum(x) of their words (centred, the start taken back in FP32); the two accumulators
added in f16x2 before widening (`hsum_pairs`); the two 2-word groups added in f16 before one widening (`tree4`, and with
the pair add too). Prints each one's relative L2 error against f64. Run from the repository root."""
import importlib.util
import sys

import numpy as np

spec = importlib.util.spec_from_file_location(
    "s60", "bench/results/h200-2026-11-30-session60/subn_error_model.py")
s60 = importlib.util.module_from_spec(spec)
_print = print
sys.modules["builtins"].print = lambda *a, **k: None  # the session 60 script prints its own three figures
spec.loader.exec_module(s60)
sys.modules["builtins"].print = _print
h, fma, q, x, z, s, N, K, rel = s60.h, s60.fma, s60.q, s60.x, s60.z, s60.s, s60.N, s60.K, s60.rel
UP = 2.0**15
LANES = [(0, 0), (1, 4), (2, 2), (3, 6)]


def packed(xx, b, i):
    return h(xx[b + i] * UP - xx[b + i + 1] * UP / 16), h(xx[b + i + 1] * UP / 16)


def run(words=2, centre=None, combine="wide"):
    y = np.zeros(N)
    f = lambda a: a.astype(np.float32)
    hadd = lambda a, b: (f(a) + f(b)).astype(h)
    for c in range(K // 32):
        qq, xx = q[:, 32 * c:32 * c + 32], x[32 * c:32 * c + 32]
        xs, start, groups = 0.0, 0.0, []
        for w0 in range(0, 4, words):
            init = np.zeros(4)
            if centre is not None:
                for wd in range(w0, w0 + words):
                    for lane, i in LANES:
                        cc, dd = packed(xx, 8 * wd, i)
                        init[lane] -= centre * (float(cc) + 17 * float(dd)) * 2.0**-24
            init = init.astype(h)
            start += float(init.astype(np.float64).sum())
            acc = np.tile(init, (N, 1)).astype(h)
            for wd in range(w0, w0 + words):
                b = 8 * wd
                for lane, i in LANES:
                    cc, dd = packed(xx, b, i)
                    xs += float(cc) + 17 * float(dd)
                    bb = ((qq[:, b + i] + 16 * qq[:, b + i + 1]) * 2.0**-24).astype(h)
                    nn = (qq[:, b + i] * 2.0**-24).astype(h)
                    acc[:, lane] = fma(nn, np.full(N, cc), fma(bb, np.full(N, dd), acc[:, lane]))
            groups.append(acc)
        if combine == "wide":
            hs = sum(f(a).sum(1) for a in groups)
        elif combine == "pairs":
            hs = sum(f(hadd(a[:, 0:2], a[:, 2:4])).sum(1) for a in groups)
        elif combine == "tree4":
            hs = f(hadd(groups[0], groups[1])).sum(1)
        else:  # tree4 + pairs
            t = hadd(groups[0], groups[1])
            hs = f(hadd(t[:, 0:2], t[:, 2:4])).sum(1)
        g = 32 * c // 128
        y += s[:, g] * (hs - np.float32(start) - z[:, g] * np.float32(xs * 2.0**-24)) * 2**24 / UP
    return y


print("q - z (dot8hz):", rel(s60.q_minus_z()))
for w in (1, 2, 4):
    print(f"widened every {w} words:", rel(run(w)))
print("centred at 8, every 4 words:", rel(run(4, 8.0)))
print("centred at 8, every 2 words:", rel(run(2, 8.0)))
print("every 2 words, f16x2 pair add (hsum_pairs):", rel(run(2, combine="pairs")))
print("2-word groups added in f16, one widening:", rel(run(2, combine="tree4")))
print("the same with the pair add:", rel(run(2, combine="tree4p")))

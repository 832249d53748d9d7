"""Session 60: an f16 model of INT4's ring row step at K = 4096 (numpy; f16 FMAs as exact f32 products rounded once).
Prints the relative L2 error against f64 of dot8hz's q - z decode (the kernel before) and of dot8subn's subnormal
codes with their f16 sums widened every 4 or 2 words (the kernel's SUBN_WORDS), x's sum taken as rounded to f16.
The GPU measured 4.7-5.5e-4 (q - z), 0.9-1.0e-3 (4 words) and 6.5-7.2e-4 (2 words): r1, r2."""
import numpy as np

rng = np.random.default_rng(1)
K, N = 4096, 512
h = np.float16


def fma(a, b, c):
    return (a.astype(np.float32) * b.astype(np.float32) + c.astype(np.float32)).astype(h)


x = rng.uniform(-1, 1, K).astype(np.float32)
x = (x / np.abs(x).max()).astype(np.float32)
q = rng.integers(0, 16, (N, K))
G = K // 128
z = rng.integers(5, 11, (N, G))
s = rng.uniform(0.5, 1.5, (N, G))
zf = np.repeat(z, 128, axis=1)
sf = np.repeat(s, 128, axis=1)
ref = ((q - zf) * sf * x[None, :].astype(np.float64)).sum(1)


def q_minus_z():
    xr = x.astype(h)
    y = np.zeros(N)
    for c in range(K // 32):
        sl = slice(32 * c, 32 * c + 32)
        qq, xx = q[:, sl] - zf[:, sl], xr[sl]
        acc = np.zeros((N, 4), dtype=h)
        for wd in range(4):
            b = 8 * wd
            for lane, i0, i1 in [(0, 0, 2), (1, 4, 6), (2, 1, 3), (3, 5, 7)]:
                a = fma(qq[:, b + i0].astype(h), np.full(N, xx[b + i0]), acc[:, lane])
                acc[:, lane] = fma(qq[:, b + i1].astype(h), np.full(N, xx[b + i1]), a)
        p = (acc[:, 0:2].astype(np.float32) + acc[:, 2:4].astype(np.float32)).astype(h).astype(np.float32)
        y += s[:, 32 * c // 128] * (p[:, 0] + p[:, 1])
    return y


def subnormal(words):
    up = 2.0**15
    y = np.zeros(N)
    for c in range(K // 32):
        sl = slice(32 * c, 32 * c + 32)
        qq, xx = q[:, sl], x[sl]
        xs, hs = 0.0, np.zeros(N, dtype=np.float32)
        acc = np.zeros((N, 4), dtype=h)
        for wd in range(4):
            b = 8 * wd
            for lane, i in [(0, 0), (1, 4), (2, 2), (3, 6)]:
                cc, dd = h(xx[b + i] * up - xx[b + i + 1] * up / 16), h(xx[b + i + 1] * up / 16)
                xs += float(cc) + 17 * float(dd)
                bb = ((qq[:, b + i] + 16 * qq[:, b + i + 1]) * 2.0**-24).astype(h)
                nn = (qq[:, b + i] * 2.0**-24).astype(h)
                acc[:, lane] = fma(nn, np.full(N, cc), fma(bb, np.full(N, dd), acc[:, lane]))
            if (wd + 1) % words == 0:
                hs += acc.astype(np.float32).sum(1)
                acc = np.zeros((N, 4), dtype=h)
        g = 32 * c // 128
        y += s[:, g] * (hs - z[:, g] * np.float32(xs * 2.0**-24)) * 2**24 / up
    return y


rel = lambda y: np.linalg.norm(y - ref) / np.linalg.norm(ref)
print("q - z (dot8hz):", rel(q_minus_z()))
print("subnormal, widened every 4 words:", rel(subnormal(4)))
print("subnormal, widened every 2 words:", rel(subnormal(2)))

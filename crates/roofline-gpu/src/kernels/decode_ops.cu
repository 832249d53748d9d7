// The non-GEMM kernels of one decode step of a Llama-family model (roofline model-bench): FP16 activations,
// FP32 math, FP16 KV cache. Header-free for NVRTC (conversions are inline PTX). HD = head_dim (128).
//
//   add_rmsnorm   x += delta (when given), out = x * rsqrt(mean(x^2) + eps) * w          grid B, 256 threads
//   rope_append   RoPE (rotate-half) on the q and k heads of the fused qkv row at position pos, k and v
//                 appended to the cache [B, Hkv, Smax, HD]                                  grid (B, Hq + Hkv), HD/2
//   attn_split    flash-decoding: one CTA per (b, q head, chunk of positions); 4 warps, online softmax per
//                 warp, merged in shared memory; partial (max, sum, acc[HD]) to a workspace  grid (B*Hq, splits), 128
//   attn_combine  merges the splits of one (b, q head) into out [B, Hq*HD]                   grid B*Hq, HD
//   silu_mul      out = silu(gate) * up from the fused gate_up row [B, 2F]                    grid (B, F/256), 256

typedef unsigned short u16;
typedef unsigned int u32;

#define NEG_INF (-__int_as_float(0x7f800000))

#ifndef HD
#define HD 128
#endif

// PDL 1 (sm_90+, launched with the programmatic-serialization attribute): let the next kernel be scheduled
// as soon as every CTA of this one has started, and wait for the previous kernel (whose output every kernel
// here reads) before touching memory; the launch latency of each kernel then overlaps its predecessor.
#ifndef PDL
#define PDL 0
#endif
__device__ __forceinline__ void pdl_enter() {
#if PDL
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

__device__ __forceinline__ float h2f(u16 h) {
    float f;
    asm("{ .reg .f16 t; mov.b16 t, %1; cvt.f32.f16 %0, t; }" : "=f"(f) : "h"(h));
    return f;
}

__device__ __forceinline__ u16 f2h(float v) {
    u16 h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(v));
    return h;
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// One CTA of 1024 threads per row; each thread keeps its (at most NORM_PER_THREAD) elements in registers, so
// x, delta and w are read once and x (when updated) and out written once.
#define NORM_PER_THREAD 16
extern "C" __global__ void __launch_bounds__(1024) add_rmsnorm(u16* __restrict__ x, const u16* __restrict__ delta,
                                                              const u16* __restrict__ w, u16* __restrict__ out, int d,
                                                              float eps) {
    pdl_enter();
    const int b = blockIdx.x;
    u16* xr = x + (size_t)b * d;
    __shared__ float part[32];
    float v[NORM_PER_THREAD];
    float ss = 0.0f;
#pragma unroll
    for (int j = 0; j < NORM_PER_THREAD; ++j) {
        const int i = threadIdx.x + j * blockDim.x;
        v[j] = 0.0f;
        if (i < d) {
            float t = h2f(xr[i]);
            if (delta != nullptr) {
                const u16 r = f2h(t + h2f(delta[(size_t)b * d + i]));
                xr[i] = r;
                t = h2f(r);  // the stored residual is FP16: normalize what the next layer reads
            }
            v[j] = t;
            ss += t * t;
        }
    }
    ss = warp_sum(ss);
    if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = ss;
    __syncthreads();
    if (threadIdx.x < 32) {
        float t = threadIdx.x < (blockDim.x >> 5) ? part[threadIdx.x] : 0.0f;
        t = warp_sum(t);
        if (threadIdx.x == 0) part[0] = t;
    }
    __syncthreads();
    const float inv = rsqrtf(part[0] / (float)d + eps);
#pragma unroll
    for (int j = 0; j < NORM_PER_THREAD; ++j) {
        const int i = threadIdx.x + j * blockDim.x;
        if (i < d) out[(size_t)b * d + i] = f2h(v[j] * inv * h2f(w[i]));
    }
}

extern "C" __global__ void rope_append(u16* __restrict__ qkv, u16* __restrict__ kc, u16* __restrict__ vc, int pos,
                                       int hq, int hkv, int smax, float theta) {
    pdl_enter();
    const int b = blockIdx.x;
    const int h = blockIdx.y;  // 0..hq-1: q heads, hq..hq+hkv-1: k heads
    const int i = threadIdx.x;  // 0..HD/2-1
    const int row = (hq + 2 * hkv) * HD;
    u16* head = qkv + (size_t)b * row + (size_t)h * HD;
    const float freq = exp2f(-2.0f * (float)i / (float)HD * log2f(theta));
    float sn, cs;
    sincosf((float)pos * freq, &sn, &cs);
    const float x1 = h2f(head[i]), x2 = h2f(head[i + HD / 2]);
    const u16 r1 = f2h(x1 * cs - x2 * sn), r2 = f2h(x2 * cs + x1 * sn);
    if (h < hq) {
        head[i] = r1;
        head[i + HD / 2] = r2;
    } else {
        const int kh = h - hq;
        const size_t c = (((size_t)b * hkv + kh) * smax + pos) * HD;
        kc[c + i] = r1;
        kc[c + i + HD / 2] = r2;
        const u16* v = qkv + (size_t)b * row + (size_t)(hq + hkv + kh) * HD;
        vc[c + i] = v[i];
        vc[c + i + HD / 2] = v[i + HD / 2];
    }
}

// One (b, q head, chunk): lane l owns elements 4l..4l+3 of the head.
extern "C" __global__ void attn_split(const u16* __restrict__ qkv, const u16* __restrict__ kc,
                                      const u16* __restrict__ vc, float* __restrict__ part, int len, int hq, int hkv,
                                      int smax, int chunk, float scale) {
    pdl_enter();
    const int bh = blockIdx.x;
    const int b = bh / hq, h = bh % hq;
    const int kh = h / (hq / hkv);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int row = (hq + 2 * hkv) * HD;
    const u16* q = qkv + (size_t)b * row + (size_t)h * HD;
    float qv[4];
#pragma unroll
    for (int e = 0; e < 4; ++e) qv[e] = h2f(q[4 * lane + e]) * scale;
    const size_t base = ((size_t)b * hkv + kh) * smax * HD;
    const int p0 = blockIdx.y * chunk, p1 = min(len, p0 + chunk);
    float m = NEG_INF, l = 0.0f, acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    // Positions p0 + warp + 4j: the K and V rows of 4 positions are loaded before any is used, so their
    // latencies overlap (a chunk is at most 16 positions: 4 per warp).
    for (int pb = p0 + warp; pb < p1; pb += 16) {
        uint2 kv[4], vv[4];
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const int p = pb + 4 * j;
            if (p < p1) {
                kv[j] = *(const uint2*)(kc + base + (size_t)p * HD + 4 * lane);
                vv[j] = *(const uint2*)(vc + base + (size_t)p * HD + 4 * lane);
            }
        }
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            if (pb + 4 * j >= p1) break;
            const u16 k4[4] = {(u16)(kv[j].x & 0xffffu), (u16)(kv[j].x >> 16), (u16)(kv[j].y & 0xffffu), (u16)(kv[j].y >> 16)};
            float s = 0.0f;
#pragma unroll
            for (int e = 0; e < 4; ++e) s += qv[e] * h2f(k4[e]);
            s = warp_sum(s);
            const float mn = fmaxf(m, s);
            const float corr = __expf(m - mn), pw = __expf(s - mn);
            const u16 v4[4] = {(u16)(vv[j].x & 0xffffu), (u16)(vv[j].x >> 16), (u16)(vv[j].y & 0xffffu), (u16)(vv[j].y >> 16)};
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[e] = acc[e] * corr + pw * h2f(v4[e]);
            l = l * corr + pw;
            m = mn;
        }
    }
    // Merge the 4 warps.
    __shared__ float sm[4], sl[4], sacc[4][HD];
    if (lane == 0) {
        sm[warp] = m;
        sl[warp] = l;
    }
#pragma unroll
    for (int e = 0; e < 4; ++e) sacc[warp][4 * lane + e] = acc[e];
    __syncthreads();
    if (warp == 0) {
        float mm = fmaxf(fmaxf(sm[0], sm[1]), fmaxf(sm[2], sm[3]));
        float ll = 0.0f, a[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
        for (int w = 0; w < 4; ++w) {
            const float c = sm[w] == NEG_INF ? 0.0f : __expf(sm[w] - mm);
            ll += sl[w] * c;
#pragma unroll
            for (int e = 0; e < 4; ++e) a[e] += sacc[w][4 * lane + e] * c;
        }
        float* out = part + ((size_t)bh * gridDim.y + blockIdx.y) * (HD + 2);
        if (lane == 0) {
            out[0] = mm;
            out[1] = ll;
        }
#pragma unroll
        for (int e = 0; e < 4; ++e) out[2 + 4 * lane + e] = a[e];
    }
}

// Split weights exp(m_s - max) go to shared memory once; each thread then sums its element over the splits
// with independent (coalesced) loads, instead of a serial chain of global reads per split.
#define MAX_SPLITS 1024
extern "C" __global__ void attn_combine(const float* __restrict__ part, u16* __restrict__ out, int splits) {
    pdl_enter();
    const int bh = blockIdx.x;
    const int i = threadIdx.x;  // 0..HD-1
    const float* p = part + (size_t)bh * splits * (HD + 2);
    __shared__ float sc[MAX_SPLITS];
    __shared__ float red[HD / 32];
    __shared__ float mx, tot;
    float m = NEG_INF;
    for (int s = i; s < splits; s += blockDim.x) {
        sc[s] = p[s * (HD + 2)];
        m = fmaxf(m, sc[s]);
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
    if ((i & 31) == 0) red[i >> 5] = m;
    __syncthreads();
    if (i == 0) {
        float t = red[0];
        for (int w = 1; w < HD / 32; ++w) t = fmaxf(t, red[w]);
        mx = t;
    }
    __syncthreads();
    float l = 0.0f;
    for (int s = i; s < splits; s += blockDim.x) {
        const float c = sc[s] == NEG_INF ? 0.0f : __expf(sc[s] - mx);
        sc[s] = c;
        l += p[s * (HD + 2) + 1] * c;
    }
    l = warp_sum(l);
    __syncthreads();
    if ((i & 31) == 0) red[i >> 5] = l;
    __syncthreads();
    if (i == 0) {
        float t = 0.0f;
        for (int w = 0; w < HD / 32; ++w) t += red[w];
        tot = t;
    }
    __syncthreads();
    float a = 0.0f;
#pragma unroll 8
    for (int s = 0; s < splits; ++s) a += p[s * (HD + 2) + 2 + i] * sc[s];
    out[(size_t)bh * HD + i] = f2h(a / tot);
}

extern "C" __global__ void silu_mul(const u16* __restrict__ gu, u16* __restrict__ out, int f) {
    pdl_enter();
    const int b = blockIdx.x;
    const int i = blockIdx.y * blockDim.x + threadIdx.x;
    if (i >= f) return;
    const float g = h2f(gu[(size_t)b * 2 * f + i]), u = h2f(gu[(size_t)b * 2 * f + f + i]);
    out[(size_t)b * f + i] = f2h(g / (1.0f + __expf(-g)) * u);
}

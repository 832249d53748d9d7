// The non-GEMM kernels of one decode step of a Llama-family model (roofline model-bench): FP16 activations,
// FP32 math, FP16 KV cache. Header-free for NVRTC (conversions are inline PTX). HD = head_dim (128).
//
//   add_rmsnorm   x += delta (when given), out = x * rsqrt(mean(x^2) + eps) * w          grid B, 256 threads
//   rope_append   RoPE (rotate-half) on the q and k heads of the fused qkv row at position pos, k and v
//                 appended to the cache [B, Hkv, Smax, HD]                                  grid (B, Hq + Hkv), HD/2
//   attn_split    flash-decoding: one CTA per (b, q head, chunk of positions); 4 warps, online softmax per
//                 warp, merged in shared memory; partial (max, sum, acc[HD]) to a workspace  grid (B*Hq, splits), 128
//   attn_combine  merges the splits of the q heads of one (b, KV head) into out [B, Hq*HD]    grid B*Hkv, 128
//   attn_rope     rope_append + attn_split + attn_combine in one launch (the fused step), one CTA per
//                 (b, KV head, chunk) for all GQA q heads of the group: q and the new k rotated in registers,
//                 k and v appended, the last CTA of each (b, KV head) combines     grid (B*Hkv, splits), 128
//   attn_cluster  what attn_rope does, on thread-block clusters (sm_90+): a cluster of CL CTAs per (b, KV head),
//                 the splits merged through distributed shared memory      grid (CL, B*Hkv), cluster CL, 256
//   silu_mul      out = silu(gate) * up from the fused gate_up row [B, 2F]                    grid (B, F/256), 256
//   topk_route    MoE routing: softmax of each row's E router logits, its top K experts (ties: the lower id),
//                 their probabilities renormalized to sum 1 (Mixtral)                        grid B, 32
//   moe_gather    copies the x rows routed to each expert into that expert's input rows grid (rows, D/1024), 128
//   moe_combine   x[b] += shared[b] + sum_j w[b, j] * (expert j's output row of b)        grid (B, D/1024), 128

typedef unsigned short u16;
typedef unsigned int u32;

#define NEG_INF (-__int_as_float(0x7f800000))

#ifndef HD
#define HD 128
#endif
// q heads per KV head (hq / hkv) for the fused attention, a compile-time constant (its q vectors, softmax
// state and accumulators are registers).
#ifndef GQA
#define GQA 1
#endif

// PDL 1 (sm_90+, launched with the programmatic-serialization attribute): let the next kernel be scheduled
// as soon as every CTA of this one has started, and wait for the previous kernel (whose output every kernel
// here reads) before touching memory; the launch latency of each kernel then overlaps its predecessor.
#ifndef PDL
#define PDL 0
#endif
__device__ __forceinline__ void pdl_trigger() {
#if PDL
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}
__device__ __forceinline__ void pdl_wait() {
#if PDL
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
__device__ __forceinline__ void pdl_enter() {
    pdl_trigger();
    pdl_wait();
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

// Online-softmax update of one position's score s and value row (this lane's 4 elements).
__device__ __forceinline__ void softmax_step(float s, const float v4[4], float& m, float& l, float acc[4]) {
    const float mn = fmaxf(m, s);
    const float corr = __expf(m - mn), pw = __expf(s - mn);
#pragma unroll
    for (int e = 0; e < 4; ++e) acc[e] = acc[e] * corr + pw * v4[e];
    l = l * corr + pw;
    m = mn;
}

// This lane's slice (elements 4l..4l+3) of the K and V rows of positions p0 + warp + 4j (j < 4) below p1:
// a chunk is at most 16 positions (the host keeps it so), 4 per warp, all loaded before any is used so
// their latencies overlap.
#define MAX_CHUNK 16
struct KvRows {
    uint2 k[4], v[4];
};
__device__ __forceinline__ void load_kv(const u16* __restrict__ kc, const u16* __restrict__ vc, size_t base, int p0,
                                        int p1, KvRows& r) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
        const int p = p0 + warp + 4 * j;
        if (p < p1) {
            r.k[j] = *(const uint2*)(kc + base + (size_t)p * HD + 4 * lane);
            r.v[j] = *(const uint2*)(vc + base + (size_t)p * HD + 4 * lane);
        }
    }
}

// Flash-decoding over positions [p0, p1) (p1 - p0 <= MAX_CHUNK, rows from load_kv) of one (b, q head) with
// 128 threads: lane l owns elements 4l..4l+3 of the head (qv: q * scale). With `has_new`, warp 0 also takes
// one more position whose (rotated) key and value this lane holds in kn / vn (the token being decoded, not
// read back from the cache). The CTA's partial (max, sum, acc[HD]) goes to out.
__device__ __forceinline__ void attend_chunk(const float qv[4], const KvRows& rows, int p0, int p1, bool has_new,
                                             const float kn[4], const float vn[4], float* __restrict__ out) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    float m = NEG_INF, l = 0.0f, acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    {
        const int pb = p0 + warp;
        const uint2* kv = rows.k;
        const uint2* vv = rows.v;
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            if (pb + 4 * j >= p1) break;
            const u16 k4[4] = {(u16)(kv[j].x & 0xffffu), (u16)(kv[j].x >> 16), (u16)(kv[j].y & 0xffffu), (u16)(kv[j].y >> 16)};
            float s = 0.0f;
#pragma unroll
            for (int e = 0; e < 4; ++e) s += qv[e] * h2f(k4[e]);
            s = warp_sum(s);
            const float v4[4] = {h2f((u16)(vv[j].x & 0xffffu)), h2f((u16)(vv[j].x >> 16)), h2f((u16)(vv[j].y & 0xffffu)),
                                 h2f((u16)(vv[j].y >> 16))};
            softmax_step(s, v4, m, l, acc);
        }
    }
    if (has_new && warp == 0) {
        float s = 0.0f;
#pragma unroll
        for (int e = 0; e < 4; ++e) s += qv[e] * kn[e];
        softmax_step(warp_sum(s), vn, m, l, acc);
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
        if (lane == 0) {
            out[0] = mm;
            out[1] = ll;
        }
#pragma unroll
        for (int e = 0; e < 4; ++e) out[2 + 4 * lane + e] = a[e];
    }
}

// One (b, q head, chunk) over the cache (q already rotated in qkv, the new key already appended).
extern "C" __global__ void attn_split(const u16* __restrict__ qkv, const u16* __restrict__ kc,
                                      const u16* __restrict__ vc, float* __restrict__ part, int len, int hq, int hkv,
                                      int smax, int chunk, float scale) {
    pdl_enter();
    const int bh = blockIdx.x;
    const int b = bh / hq, h = bh % hq;
    const int kh = h / (hq / hkv);
    const int lane = threadIdx.x & 31;
    const int row = (hq + 2 * hkv) * HD;
    const u16* q = qkv + (size_t)b * row + (size_t)h * HD;
    float qv[4];
#pragma unroll
    for (int e = 0; e < 4; ++e) qv[e] = h2f(q[4 * lane + e]) * scale;
    const size_t base = ((size_t)b * hkv + kh) * smax * HD;
    const int p0 = blockIdx.y * chunk, p1 = min(len, p0 + chunk);
    const float none[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    KvRows rows;
    load_kv(kc, vc, base, p0, p1, rows);
    attend_chunk(qv, rows, p0, p1, false, none, none, part + ((size_t)bh * gridDim.y + blockIdx.y) * (HD + 2));
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

// Merges the `splits` partials of each of the GQA consecutive heads at `part` into out[GQA][HD], the heads in
// parallel: warp w takes heads w, w + 4, ...; its lanes stride over the splits for the maximum and the
// softmax sum, then lane l sums elements 4l..4l+3 over the splits with independent loads (each split's
// weight exp(m_s - max) recomputed per lane, no shared memory, no barrier). Loads go through L2: the
// partials were written by other CTAs of this launch.
__device__ __forceinline__ void combine_heads(const float* __restrict__ part, u16* __restrict__ out, int splits) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    for (int g = warp; g < GQA; g += 4) {
        const float* p = part + (size_t)g * splits * (HD + 2);
        float mx = NEG_INF;
        for (int s = lane; s < splits; s += 32) mx = fmaxf(mx, __ldcg(p + (size_t)s * (HD + 2)));
        mx = warp_max(mx);
        float tot = 0.0f;
        for (int s = lane; s < splits; s += 32) {
            const float ms = __ldcg(p + (size_t)s * (HD + 2));
            if (ms != NEG_INF) tot += __ldcg(p + (size_t)s * (HD + 2) + 1) * __expf(ms - mx);
        }
        tot = warp_sum(tot);
        float a[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll 16
        for (int s = 0; s < splits; ++s) {
            const float* ps = p + (size_t)s * (HD + 2);
            const float ms = __ldcg(ps);
            const float c = ms == NEG_INF ? 0.0f : __expf(ms - mx);
            // (HD + 2) floats per partial and an even offset: 8-byte aligned.
            const float2 v0 = __ldcg((const float2*)(ps + 2 + 4 * lane)), v1 = __ldcg((const float2*)(ps + 4 + 4 * lane));
            a[0] += v0.x * c, a[1] += v0.y * c, a[2] += v1.x * c, a[3] += v1.y * c;
        }
#pragma unroll
        for (int e = 0; e < 4; ++e) out[(size_t)g * HD + 4 * lane + e] = f2h(a[e] / tot);
    }
}

// Merges the splits of the GQA q heads of one (b, KV head) group (attn_split's partials, heads consecutive)
// into out; 128 threads.
extern "C" __global__ void attn_combine(const float* __restrict__ part, u16* __restrict__ out, int splits) {
    pdl_enter();
    const size_t bh0 = (size_t)blockIdx.x * GQA;
    combine_heads(part + bh0 * splits * (HD + 2), out + bh0 * HD, splits);
}

// RoPE (rotate-half, as rope_append) at position pos of this lane's 4 elements 4l..4l+3: the angles are the
// same for every head, so they are computed once (rope_angles) and applied per head (rope_apply, rounded to
// FP16 as rope_append stores its results).
__device__ __forceinline__ void rope_angles(int pos, float theta, float cs[4], float sn[4]) {
    const int e0 = 4 * (threadIdx.x & 31);
#pragma unroll
    for (int j = 0; j < 4; ++j) {
        const int i = (e0 + j) % (HD / 2);
        const float freq = exp2f(-2.0f * (float)i / (float)HD * log2f(theta));
        sincosf((float)pos * freq, &sn[j], &cs[j]);
    }
}
// rope_angles before griddepcontrol.wait: the angles depend only on the position, so they are computed while
// the previous kernel finishes instead of between the wait and the q loads (nvdisasm of attn_cluster, sm_90:
// the four sincosf ran after the wait, ~420 instructions before the first load of q). The empty volatile asm
// consumes them, and volatile asm statements keep their order, so the PTX computes them before the wait;
// ptxas still schedules a few polynomial steps after it, behind the q loads, where they overlap the loads'
// latency (18 instructions now separate the wait from the first q load).
__device__ __forceinline__ void rope_angles_early(int pos, float theta, float cs[4], float sn[4]) {
    rope_angles(pos, theta, cs, sn);
    asm volatile("" ::"f"(cs[0]), "f"(cs[1]), "f"(cs[2]), "f"(cs[3]), "f"(sn[0]), "f"(sn[1]), "f"(sn[2]), "f"(sn[3]));
}
__device__ __forceinline__ void rope_apply(const u16* __restrict__ head, const float cs[4], const float sn[4],
                                           float out[4]) {
    const int e0 = 4 * (threadIdx.x & 31);
    const bool lo = e0 < HD / 2;
    const int pe = lo ? e0 + HD / 2 : e0 - HD / 2;
    const uint2 xv = *(const uint2*)(head + e0), yv = *(const uint2*)(head + pe);
    const u16 x4[4] = {(u16)(xv.x & 0xffffu), (u16)(xv.x >> 16), (u16)(xv.y & 0xffffu), (u16)(xv.y >> 16)};
    const u16 y4[4] = {(u16)(yv.x & 0xffffu), (u16)(yv.x >> 16), (u16)(yv.y & 0xffffu), (u16)(yv.y >> 16)};
#pragma unroll
    for (int j = 0; j < 4; ++j) {
        const float x = h2f(x4[j]), y = h2f(y4[j]);
        out[j] = h2f(f2h(lo ? x * cs[j] - y * sn[j] : x * cs[j] + y * sn[j]));
    }
}

// RoPE + KV append + flash-decoding + combine in one launch (the fused step). CTA (b * hkv + kv head, split)
// serves all GQA q heads of its KV head, so each K and V row is read once for the group: the cached rows
// of its chunk (below the new position len - 1) are loaded before waiting for the previous kernel (they
// are not what it writes), then q is rotated from the raw qkv row; the CTA of the last split also rotates
// the new key, appends it and the new value to the cache and attends to them from registers. Every CTA
// writes one partial per q head, then counts itself in counters[b * hkv + kv head]; the last one merges
// the splits of the group's heads into out and re-arms the counter.
extern "C" __global__ void __launch_bounds__(128) attn_rope(const u16* __restrict__ qkv, u16* __restrict__ kc,
                                                            u16* __restrict__ vc, float* __restrict__ part,
                                                            u32* __restrict__ counters, u16* __restrict__ out, int len,
                                                            int hq, int hkv, int smax, int chunk, float scale,
                                                            float theta) {
    pdl_trigger();
    const int bk = blockIdx.x;
    const int b = bk / hkv, kh = bk % hkv;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int row = (hq + 2 * hkv) * HD;
    const int pos = len - 1;
    const int splits = gridDim.y;
    const size_t base = ((size_t)b * hkv + kh) * smax * HD;
    const int p0 = blockIdx.y * chunk, p1 = min(pos, p0 + chunk);  // cached positions only
    KvRows rows;
    load_kv(kc, vc, base, p0, p1, rows);
    float cs[4], sn[4];
    rope_angles_early(pos, theta, cs, sn);
    pdl_wait();

    const u16* qkv_b = qkv + (size_t)b * row;
    float qv[GQA][4];
#pragma unroll
    for (int g = 0; g < GQA; ++g) {
        rope_apply(qkv_b + (size_t)(kh * GQA + g) * HD, cs, sn, qv[g]);
#pragma unroll
        for (int e = 0; e < 4; ++e) qv[g][e] *= scale;
    }
    const bool last_split = blockIdx.y == splits - 1;
    float kn[4] = {0.0f, 0.0f, 0.0f, 0.0f}, vn[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    if (last_split) {
        rope_apply(qkv_b + (size_t)(hq + kh) * HD, cs, sn, kn);
        const uint2 vv = *(const uint2*)(qkv_b + (size_t)(hq + hkv + kh) * HD + 4 * lane);
        vn[0] = h2f((u16)(vv.x & 0xffffu)), vn[1] = h2f((u16)(vv.x >> 16));
        vn[2] = h2f((u16)(vv.y & 0xffffu)), vn[3] = h2f((u16)(vv.y >> 16));
        if (warp == 0) {
            const size_t c = base + (size_t)pos * HD + 4 * lane;
            const u32 k01 = (u32)f2h(kn[0]) | ((u32)f2h(kn[1]) << 16), k23 = (u32)f2h(kn[2]) | ((u32)f2h(kn[3]) << 16);
            *(uint2*)(kc + c) = make_uint2(k01, k23);
            *(uint2*)(vc + c) = vv;
        }
    }

    float m[GQA], l[GQA], acc[GQA][4];
#pragma unroll
    for (int g = 0; g < GQA; ++g) {
        m[g] = NEG_INF, l[g] = 0.0f;
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[g][e] = 0.0f;
    }
    const int pb = p0 + warp;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
        if (pb + 4 * j >= p1) break;
        const uint2 kw = rows.k[j], vw = rows.v[j];
        const float k4[4] = {h2f((u16)(kw.x & 0xffffu)), h2f((u16)(kw.x >> 16)), h2f((u16)(kw.y & 0xffffu)),
                             h2f((u16)(kw.y >> 16))};
        const float v4[4] = {h2f((u16)(vw.x & 0xffffu)), h2f((u16)(vw.x >> 16)), h2f((u16)(vw.y & 0xffffu)),
                             h2f((u16)(vw.y >> 16))};
#pragma unroll
        for (int g = 0; g < GQA; ++g) {
            float s = 0.0f;
#pragma unroll
            for (int e = 0; e < 4; ++e) s += qv[g][e] * k4[e];
            softmax_step(warp_sum(s), v4, m[g], l[g], acc[g]);
        }
    }
    if (last_split && warp == 0) {
#pragma unroll
        for (int g = 0; g < GQA; ++g) {
            float s = 0.0f;
#pragma unroll
            for (int e = 0; e < 4; ++e) s += qv[g][e] * kn[e];
            softmax_step(warp_sum(s), vn, m[g], l[g], acc[g]);
        }
    }

    // Merge the 4 warps per head (warp w merges heads w, w + 4, ...) and write the partials.
    __shared__ float sm[4][GQA], sl[4][GQA], sacc[4][GQA][HD];
#pragma unroll
    for (int g = 0; g < GQA; ++g) {
        if (lane == 0) {
            sm[warp][g] = m[g];
            sl[warp][g] = l[g];
        }
#pragma unroll
        for (int e = 0; e < 4; ++e) sacc[warp][g][4 * lane + e] = acc[g][e];
    }
    __syncthreads();
    for (int g = warp; g < GQA; g += 4) {
        const float mm = fmaxf(fmaxf(sm[0][g], sm[1][g]), fmaxf(sm[2][g], sm[3][g]));
        float ll = 0.0f, a[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
        for (int w = 0; w < 4; ++w) {
            const float c = sm[w][g] == NEG_INF ? 0.0f : __expf(sm[w][g] - mm);
            ll += sl[w][g] * c;
#pragma unroll
            for (int e = 0; e < 4; ++e) a[e] += sacc[w][g][4 * lane + e] * c;
        }
        float* o = part + (((size_t)b * hq + kh * GQA + g) * splits + blockIdx.y) * (HD + 2);
        if (lane == 0) {
            o[0] = mm;
            o[1] = ll;
        }
#pragma unroll
        for (int e = 0; e < 4; ++e) o[2 + 4 * lane + e] = a[e];
    }

    __shared__ bool is_last;
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) is_last = atomicAdd(counters + bk, 1u) == (u32)splits - 1;
    __syncthreads();
    if (!is_last) return;
    __threadfence();
    const size_t bh0 = (size_t)b * hq + kh * GQA;
    combine_heads(part + bh0 * splits * (HD + 2), out + bh0 * HD, splits);
    if (threadIdx.x == 0) counters[bk] = 0;
}

#if __CUDA_ARCH__ >= 900
// ---------------------------------------------------------------------------------------------------------
// attn_cluster: the fused step's attention (RoPE + KV append + flash-decoding + merge) on thread-block
// clusters (sm_90+). One cluster of CL CTAs per (b, KV head), CTA r of the cluster taking a contiguous range
// of the cached positions (the last CTA also the new one). Against attn_rope it removes the chain of
// dependent global round trips at the end (partials to global memory, fence, arrival counter, one CTA
// merging every split): the CTAs merge through distributed shared memory between two cluster barriers, each
// CTA producing 1/CL of the outputs. Inside a CTA each warp runs its own online softmax over 8 positions per
// iteration; the 8 x GP scores of an iteration are reduced across the lanes with a transposed butterfly
// (15 shuffles for 16 scores instead of 80), and the cached K and V rows of the first iteration are loaded
// before griddepcontrol.wait (they are not what the previous kernel writes), the next iteration's while the
// current one is computed. Launched with grid (CL, B * Hkv), cluster (CL, 1, 1), CW * 32 threads.
#define CW 8  // warps per CTA
#define ROWS 8  // positions per warp and iteration
// GQA padded to a power of two (the score layout of a reduction round); heads >= GQA have q = 0.
#define GP (GQA <= 1 ? 1 : GQA <= 2 ? 2 : GQA <= 4 ? 4 : 8)
// Positions per reduction round: at most 16 scores in flight (registers), 8 with GQA 1.
#define RPR (GP >= 2 ? 16 / GP : ROWS)
#define NVR (RPR * GP)  // scores per round: 8 or 16
#define SH (NVR == 16 ? 1 : 2)  // after the round, lane l holds score (l >> SH)
#define MAX_CL 16
// Two CTAs per SM (registers capped at 128) up to GQA 4: a 16-CTA cluster then fits on 8 SMs, so every
// cluster of a Llama-8B step (8 x 16 CTAs) is resident at once even on GPCs of fewer than 16 free SMs.
#ifndef CLUSTER_MIN_BLOCKS
#define CLUSTER_MIN_BLOCKS (GQA <= 4 ? 2 : 1)
#endif

__device__ __forceinline__ u32 cluster_rank() {
    u32 r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
    return r;
}
__device__ __forceinline__ u32 cluster_ctas() {
    u32 r;
    asm volatile("mov.u32 %0, %%cluster_nctarank;" : "=r"(r));
    return r;
}
// Every thread of every CTA of the cluster: shared-memory writes before it are visible to the cluster after.
__device__ __forceinline__ void cluster_sync() {
    asm volatile("barrier.cluster.arrive.release.aligned;\n\tbarrier.cluster.wait.acquire.aligned;" ::: "memory");
}
// The exit guard: no CTA leaves while another may still read its shared memory. Nothing written before it
// needs to be visible to the cluster, so the arrive is relaxed: a release arrive compiles to MEMBAR.ALL.GPU
// (nvdisasm, sm_90), which waits for the thread's global stores (the outputs) to be performed; ncu on the
// INT4 step (session 8) put 11% of the kernel's stall samples on memory barriers. (The merge's barrier
// keeps its release: peers read the partials it publishes; any cluster-scope release is that MEMBAR.)
__device__ __forceinline__ void cluster_exit_sync() {
    asm volatile("barrier.cluster.arrive.relaxed.aligned;\n\tbarrier.cluster.wait.aligned;" ::: "memory");
}
// The float at the same shared-memory offset as `p` in CTA `rank` of the cluster.
__device__ __forceinline__ float ld_dsmem(const float* p, u32 rank) {
    u32 a, ra;
    asm("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(a) : "l"(p));
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(ra) : "r"(a), "r"(rank));
    float v;
    asm volatile("ld.shared::cluster.f32 %0, [%1];" : "=f"(v) : "r"(ra) : "memory");
    return v;
}

// Sums N values (a power of two <= 32) over the warp, transposed: step o exchanges half of the remaining
// values with lane l ^ o, so after log2(N) steps lane l holds the whole sum of value (l >> (5 - log2 N)) and
// the remaining steps add plain. Returns that sum.
template <int N>
__device__ __forceinline__ float warp_sum_transposed(float (&v)[N]) {
    const int lane = threadIdx.x & 31;
    int n = N;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        if (n > 1) {
            const bool hi = (lane & o) != 0;
#pragma unroll
            for (int i = 0; i < N / 2; ++i) {
                if (i < n / 2) {
                    const float send = hi ? v[i] : v[i + n / 2];
                    const float keep = hi ? v[i + n / 2] : v[i];
                    v[i] = keep + __shfl_xor_sync(0xffffffffu, send, o);
                }
            }
            n >>= 1;
        } else {
            v[0] += __shfl_xor_sync(0xffffffffu, v[0], o);
        }
    }
    return v[0];
}

// KV8 1: the cache holds FP8 E4M3 codes, one scale for all of K and one for all of V (kernel arguments
// k_scale, v_scale: value = code x scale); 0: FP16 values (the scales are then 1). A lane's slice of a row
// (elements 4l..4l+3) is 4 codes (kv_slice u32) or 4 halves (uint2).
#ifndef KV8
#define KV8 0
#endif
#if KV8
typedef unsigned char kv_t;
typedef u32 kv_slice;
#else
typedef u16 kv_t;
typedef uint2 kv_slice;
#endif
#define KV_SLICE_BYTES ((int)sizeof(kv_slice))

// K and V rows staged in dynamic shared memory, two stages (iterations) in flight:
// [stage][warp][row][K, V][lane] slices; a warp copies and reads only its own rows.
#define KV_STAGE_BYTES (CW * ROWS * 2 * 32 * KV_SLICE_BYTES)
extern __shared__ __align__(16) kv_slice kv_smem[];
__device__ __forceinline__ int kv_slot(int stage, int j, int which) {
    return (((stage * CW + (int)(threadIdx.x >> 5)) * ROWS + j) * 2 + which) * 32 + (int)(threadIdx.x & 31);
}
// cp.async of this lane's slice (elements 4l..4l+3) of the K and V rows of positions pb..pb+ROWS-1 into
// `stage`, one commit group; rows at or past `lim` are zero-filled (their softmax weight is zero, and 0 x 0
// keeps the accumulators finite).
__device__ __forceinline__ void issue_rows(const kv_t* __restrict__ kc, const kv_t* __restrict__ vc, size_t base,
                                           int pb, int lim, int stage) {
    const int lane = threadIdx.x & 31;
#pragma unroll
    for (int j = 0; j < ROWS; ++j) {
        const bool ok = pb + j < lim;
        const size_t at = base + (size_t)(ok ? pb + j : 0) * HD + 4 * lane;
        u32 dk, dv;
        asm("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(dk) : "l"(&kv_smem[kv_slot(stage, j, 0)]));
        asm("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(dv) : "l"(&kv_smem[kv_slot(stage, j, 1)]));
        asm volatile("cp.async.ca.shared.global [%0], [%1], %2, %3;" ::"r"(dk), "l"(kc + at), "n"(KV_SLICE_BYTES),
                     "r"(ok ? KV_SLICE_BYTES : 0)
                     : "memory");
        asm volatile("cp.async.ca.shared.global [%0], [%1], %2, %3;" ::"r"(dv), "l"(vc + at), "n"(KV_SLICE_BYTES),
                     "r"(ok ? KV_SLICE_BYTES : 0)
                     : "memory");
    }
    asm volatile("cp.async.commit_group;" ::: "memory");
}
__device__ __forceinline__ void unpack4(uint2 w, float f[4]) {
    f[0] = h2f((u16)(w.x & 0xffffu)), f[1] = h2f((u16)(w.x >> 16));
    f[2] = h2f((u16)(w.y & 0xffffu)), f[3] = h2f((u16)(w.y >> 16));
}
// A cache slice as 4 floats in code units (FP16: the values; FP8: the codes' values, before the scale).
__device__ __forceinline__ void unpack_kv(kv_slice w, float f[4]) {
#if KV8
    u32 lo, hi;  // byte i of w is element i; each e4m3 pair becomes an f16 pair, low byte -> low half
    asm("{ .reg .b16 a, b; mov.b32 {a, b}, %2; cvt.rn.f16x2.e4m3x2 %0, a; cvt.rn.f16x2.e4m3x2 %1, b; }"
        : "=r"(lo), "=r"(hi)
        : "r"(w));
    unpack4(make_uint2(lo, hi), f);
#else
    unpack4(w, f);
#endif
}
// This lane's 4 elements of row j's K (which 0) or V (1) in stage st: the staged cache slice, or for the new
// position (not in the cache when the stage was copied) its own values `fresh`.
__device__ __forceinline__ void stage_row(int st, int j, int which, bool is_new, const float fresh[4], float out[4]) {
    unpack_kv(kv_smem[kv_slot(st, j, which)], out);
    if (is_new) {
#pragma unroll
        for (int e = 0; e < 4; ++e) out[e] = fresh[e];
    }
}
// Four values divided by the scale as a cache slice (FP8: E4M3 codes, round to nearest, saturated at 448).
__device__ __forceinline__ kv_slice pack_kv(const float v[4], float inv_scale) {
#if KV8
    u16 lo, hi;  // cvt packs its first operand into the upper byte
    asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(lo) : "f"(v[1] * inv_scale), "f"(v[0] * inv_scale));
    asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(hi) : "f"(v[3] * inv_scale), "f"(v[2] * inv_scale));
    return (u32)lo | ((u32)hi << 16);
#else
    return make_uint2((u32)f2h(v[0]) | ((u32)f2h(v[1]) << 16), (u32)f2h(v[2]) | ((u32)f2h(v[3]) << 16));
#endif
}

extern "C" __global__ void __launch_bounds__(CW * 32, CLUSTER_MIN_BLOCKS)
    attn_cluster(const u16* __restrict__ qkv, kv_t* __restrict__ kc, kv_t* __restrict__ vc, u16* __restrict__ out,
                 int len, int hq, int hkv, int smax, float scale, float theta, float k_scale, float v_scale) {
    pdl_trigger();
    const u32 rank = cluster_rank(), ncl = cluster_ctas();
    const int bk = blockIdx.y;
    const int b = bk / hkv, kh = bk % hkv;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int row = (hq + 2 * hkv) * HD;
    const int pos = len - 1;
    // Cached positions [0, pos) in ncl contiguous ranges; the last range also takes the new position.
    const int per = (pos + (int)ncl - 1) / (int)ncl;
    const int p0 = min(pos, (int)rank * per);
    const int p1 = rank == ncl - 1 ? len : min(pos, p0 + per);
    const size_t base = ((size_t)b * hkv + kh) * smax * HD;
    const int iters = (p1 - p0 + CW * ROWS - 1) / (CW * ROWS);
    const int cached = min(p1, pos);
    issue_rows(kc, vc, base, p0 + warp * ROWS, cached, 0);
    if (iters > 1) issue_rows(kc, vc, base, p0 + CW * ROWS + warp * ROWS, cached, 1);
    float cs[4], sn[4];
    rope_angles_early(pos, theta, cs, sn);
    pdl_wait();

    const u16* qkv_b = qkv + (size_t)b * row;
    // q rotated and scaled by 1/sqrt(d) * log2(e) (the softmax runs in base 2) and by K's scale (the scores
    // are then those of the dequantized keys; V's scale is applied to the output).
    const float qscale = scale * 1.4426950408889634f * k_scale;
    float qv[GP][4];
#pragma unroll
    for (int g = 0; g < GP; ++g) {
        if (g < GQA) {
            rope_apply(qkv_b + (size_t)(kh * GQA + g) * HD, cs, sn, qv[g]);
#pragma unroll
            for (int e = 0; e < 4; ++e) qv[g][e] *= qscale;
        } else {
#pragma unroll
            for (int e = 0; e < 4; ++e) qv[g][e] = 0.0f;
        }
    }
    // The new position: its rotated key and value come from qkv; the warp that attends to it appends them.
    float kn[4] = {0.0f, 0.0f, 0.0f, 0.0f}, vn[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    const int new_off = pos - p0;  // in [0, p1 - p0) only in the last CTA
    const bool new_here = rank == ncl - 1 && (new_off % (CW * ROWS)) / ROWS == warp;
    if (new_here) {
        rope_apply(qkv_b + (size_t)(hq + kh) * HD, cs, sn, kn);
        unpack4(*(const uint2*)(qkv_b + (size_t)(hq + hkv + kh) * HD + 4 * lane), vn);
        // Appended as the cache stores them, and attended to as stored (in code units, like the cached rows).
        const kv_slice ks = pack_kv(kn, 1.0f / k_scale), vs = pack_kv(vn, 1.0f / v_scale);
        const size_t c = base + (size_t)pos * HD + 4 * lane;
        *(kv_slice*)(kc + c) = ks;
        *(kv_slice*)(vc + c) = vs;
        unpack_kv(ks, kn);
        unpack_kv(vs, vn);
    }

    // This lane's softmax state is that of head (lane >> SH) % GP; acc[g] is this lane's 4 elements of head g.
    float m = NEG_INF, l = 0.0f, acc[GP][4];
#pragma unroll
    for (int g = 0; g < GP; ++g) {
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[g][e] = 0.0f;
    }
    __shared__ float ps[CW][NVR], pc[CW][GP];
    const int idx = lane >> SH;
    for (int it = 0; it < iters; ++it) {
        const int pb = p0 + it * CW * ROWS + warp * ROWS;
        const int st = it & 1;
        // This iteration's copies done (the next iteration's may still be in flight).
        if (it + 1 < iters) {
            asm volatile("cp.async.wait_group 1;" ::: "memory");
        } else {
            asm volatile("cp.async.wait_group 0;" ::: "memory");
        }
        __syncwarp();
        if (pb < p1) {  // warp-uniform
#pragma unroll
            for (int rd = 0; rd < ROWS / RPR; ++rd) {
                float sv[NVR];
#pragma unroll
                for (int r = 0; r < RPR; ++r) {
                    const int j = rd * RPR + r;
                    float k4[4];
                    stage_row(st, j, 0, pb + j == pos, kn, k4);
#pragma unroll
                    for (int g = 0; g < GP; ++g) {
                        float s = 0.0f;
#pragma unroll
                        for (int e = 0; e < 4; ++e) s += qv[g][e] * k4[e];
                        sv[r * GP + g] = s;
                    }
                }
                float s = warp_sum_transposed<NVR>(sv);
                if (pb + rd * RPR + idx / GP >= p1) s = NEG_INF;
                // Max and sum over the round's positions of this lane's head: the lanes differing in the
                // position bits of the score index.
                float mt = s;
#pragma unroll
                for (int o = (1 << SH) * GP; o < 32; o <<= 1) mt = fmaxf(mt, __shfl_xor_sync(0xffffffffu, mt, o));
                const float mn = fmaxf(m, mt);
                const float p = mn == NEG_INF ? 0.0f : exp2f(s - mn);
                const float corr = mn == NEG_INF ? 1.0f : exp2f(m - mn);
                float psum = p;
#pragma unroll
                for (int o = (1 << SH) * GP; o < 32; o <<= 1) psum += __shfl_xor_sync(0xffffffffu, psum, o);
                l = l * corr + psum;
                m = mn;
                if ((lane & ((1 << SH) - 1)) == 0) {
                    ps[warp][idx] = p;
                    if (idx < GP) pc[warp][idx] = corr;
                }
                __syncwarp();
#pragma unroll
                for (int g = 0; g < GQA; ++g) {
                    const float c = pc[warp][g];
#pragma unroll
                    for (int e = 0; e < 4; ++e) acc[g][e] *= c;
                }
#pragma unroll
                for (int r = 0; r < RPR; ++r) {
                    const int j = rd * RPR + r;
                    float v4[4];
                    stage_row(st, j, 1, pb + j == pos, vn, v4);
#pragma unroll
                    for (int g = 0; g < GQA; ++g) {
                        const float w = ps[warp][r * GP + g];
#pragma unroll
                        for (int e = 0; e < 4; ++e) acc[g][e] += w * v4[e];
                    }
                }
                __syncwarp();
            }
        }
        // The stage just read takes the iteration after next.
        if (it + 2 < iters) issue_rows(kc, vc, base, pb + 2 * CW * ROWS, cached, st);
    }
    asm volatile("cp.async.wait_all;" ::: "memory");  // iters == 0: stage 0's (zero-fill) copies

    // Merge the CTA's warps into its partial (max, sum, acc) per head, in cluster-visible shared memory;
    // the warps' accumulators go where the K and V stages were, once every warp is done with them.
    __shared__ float wm[CW][GP], wl[CW][GP];
    __shared__ float cm[GP], csum[GP], cacc[GQA * HD];
    float(*wacc)[GQA][HD] = (float(*)[GQA][HD])kv_smem;
    __syncthreads();
    if (idx < GP && (lane & ((1 << SH) - 1)) == 0) {
        wm[warp][idx] = m;
        wl[warp][idx] = l;
    }
#pragma unroll
    for (int g = 0; g < GQA; ++g) {
#pragma unroll
        for (int e = 0; e < 4; ++e) wacc[warp][g][4 * lane + e] = acc[g][e];
    }
    __syncthreads();
    for (int o = threadIdx.x; o < GQA * HD; o += CW * 32) {
        const int g = o / HD;
        float mx = NEG_INF;
#pragma unroll
        for (int w = 0; w < CW; ++w) mx = fmaxf(mx, wm[w][g]);
        float a = 0.0f, t = 0.0f;
#pragma unroll
        for (int w = 0; w < CW; ++w) {
            const float c = wm[w][g] == NEG_INF ? 0.0f : exp2f(wm[w][g] - mx);
            a += wacc[w][g][o % HD] * c;
            t += wl[w][g] * c;
        }
        cacc[o] = a;
        if (o % HD == 0) {
            cm[g] = mx;
            csum[g] = t;
        }
    }
    cluster_sync();
    // Merge the cluster: CTA r produces outputs [r E, (r + 1) E) of the group's GQA x HD.
    const int per_cta = (GQA * HD + (int)ncl - 1) / (int)ncl;
    for (int t = threadIdx.x; t < per_cta; t += CW * 32) {
        const int o = (int)rank * per_cta + t;
        if (o >= GQA * HD) break;
        const int g = o / HD;
        float rm[MAX_CL], rs[MAX_CL], ra[MAX_CL];
#pragma unroll
        for (int r = 0; r < MAX_CL; ++r) {
            if (r < (int)ncl) {
                rm[r] = ld_dsmem(&cm[g], r);
                rs[r] = ld_dsmem(&csum[g], r);
                ra[r] = ld_dsmem(&cacc[o], r);
            }
        }
        float mx = NEG_INF;
#pragma unroll
        for (int r = 0; r < MAX_CL; ++r) {
            if (r < (int)ncl) mx = fmaxf(mx, rm[r]);
        }
        float a = 0.0f, t2 = 0.0f;
#pragma unroll
        for (int r = 0; r < MAX_CL; ++r) {
            if (r < (int)ncl && rm[r] != NEG_INF) {
                const float c = exp2f(rm[r] - mx);
                a += ra[r] * c;
                t2 += rs[r] * c;
            }
        }
        out[((size_t)b * hq + kh * GQA) * HD + o] = f2h(a / t2 * v_scale);
    }
    cluster_exit_sync();
}
#endif

extern "C" __global__ void silu_mul(const u16* __restrict__ gu, u16* __restrict__ out, int f) {
    pdl_enter();
    const int b = blockIdx.x;
    const int i = blockIdx.y * blockDim.x + threadIdx.x;
    if (i >= f) return;
    const float g = h2f(gu[(size_t)b * 2 * f + i]), u = h2f(gu[(size_t)b * 2 * f + f + i]);
    out[(size_t)b * f + i] = f2h(g / (1.0f + __expf(-g)) * u);
}

// Most routed experts topk_route takes (8 logits per lane).
#define MAX_EXPERTS 256

extern "C" __global__ void topk_route(const u16* __restrict__ logits, int* __restrict__ ids, float* __restrict__ wts,
                                      int e, int k) {
    pdl_enter();
    const int b = blockIdx.x, lane = threadIdx.x;
    float v[MAX_EXPERTS / 32];
#pragma unroll
    for (int i = 0; i < MAX_EXPERTS / 32; ++i) {
        const int j = lane + 32 * i;
        v[i] = j < e ? h2f(logits[(size_t)b * e + j]) : NEG_INF;
    }
    // k rounds of a warp argmax; lane t keeps the t-th pick. exp(l - l_top) / sum over the picks is the
    // softmax over all E logits renormalized over the top k.
    float top = 0.0f, sum = 0.0f, mine = 0.0f;
    int mine_id = 0;
    for (int t = 0; t < k; ++t) {
        float bv = NEG_INF;
        int bi = 0x7fffffff;
#pragma unroll
        for (int i = 0; i < MAX_EXPERTS / 32; ++i)
            if (v[i] > bv) bv = v[i], bi = lane + 32 * i;  // increasing ids: ties keep the lower
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) {
            const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
            const int oi = __shfl_xor_sync(0xffffffffu, bi, o);
            if (ov > bv || (ov == bv && oi < bi)) bv = ov, bi = oi;
        }
        bi = min(bi, e - 1);
        if (t == 0) top = bv;
        const float p = __expf(bv - top);
        sum += p;
        if (lane == t) mine = p, mine_id = bi;
#pragma unroll
        for (int i = 0; i < MAX_EXPERTS / 32; ++i)
            if (lane + 32 * i == bi) v[i] = NEG_INF;
    }
    if (lane < k) {
        ids[b * k + lane] = mine_id;
        wts[b * k + lane] = mine / sum;
    }
}

// Eight FP16 values of a 16-byte word as floats, and back.
__device__ __forceinline__ void unpack8(uint4 v, float* f) {
    const u32 w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        f[2 * i] = h2f((u16)(w[i] & 0xffffu));
        f[2 * i + 1] = h2f((u16)(w[i] >> 16));
    }
}
__device__ __forceinline__ uint4 pack8(const float* f) {
    u32 w[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) w[i] = (u32)f2h(f[2 * i]) | ((u32)f2h(f[2 * i + 1]) << 16);
    return make_uint4(w[0], w[1], w[2], w[3]);
}

// One 16-byte word per thread, grid (rows, ceil(d / 8 / 128)): every load of a row is in flight at once (a
// loop over the row in one CTA measured 10.7 us for the combine, one DRAM round trip per iteration).
extern "C" __global__ void moe_gather(const u16* __restrict__ x, u16* const* __restrict__ dst,
                                      const int* __restrict__ src, int d) {
    pdl_enter();
    const int r = blockIdx.x;
    const int i = blockIdx.y * blockDim.x + threadIdx.x;
    if (i >= d / 8) return;
    ((uint4*)dst[r])[i] = ((const uint4*)(x + (size_t)src[r] * d))[i];
}

// grid (B, ceil(d / 8 / 128)), 128 threads, 8 values per thread; k <= 32.
extern "C" __global__ void moe_combine(u16* __restrict__ x, const float* __restrict__ wts,
                                       const u16* const* __restrict__ rows, const u16* __restrict__ shared, int k,
                                       int d) {
    pdl_enter();
    const int b = blockIdx.x;
    const int i = blockIdx.y * blockDim.x + threadIdx.x;
    if (i >= d / 8) return;
    const size_t o = (size_t)b * d + 8 * (size_t)i;
    float acc[8], t[8];
    unpack8(*(const uint4*)(x + o), acc);
    if (shared) {
        unpack8(*(const uint4*)(shared + o), t);
#pragma unroll
        for (int e = 0; e < 8; ++e) acc[e] += t[e];
    }
    float sum[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
    for (int j = 0; j < k; ++j) {
        const float w = wts[b * k + j];
        unpack8(((const uint4*)rows[b * k + j])[i], t);
#pragma unroll
        for (int e = 0; e < 8; ++e) sum[e] = fmaf(w, t[e], sum[e]);
    }
#pragma unroll
    for (int e = 0; e < 8; ++e) acc[e] += sum[e];
    *(uint4*)(x + o) = pack8(acc);
}

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
//
// Built after wo_prims.cuh (types, h2f, f2h, PDL) and attn_cluster.cuh (RoPE, the cluster attention).

// PDL 1 (sm_90+, launched with the programmatic-serialization attribute): let the next kernel be scheduled
// as soon as every CTA of this one has started, and wait for the previous kernel (whose output every kernel
// here reads) before touching memory; the launch latency of each kernel then overlaps its predecessor
// (pdl_trigger and pdl_wait: wo_prims.cuh).
__device__ __forceinline__ void pdl_enter() {
    pdl_trigger();
    pdl_wait();
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// One CTA of 1024 threads per row; each thread keeps its (at most NORM_PER_THREAD) elements in registers, so
// x, delta and w are read once and x (when updated) and out written once.
#define NORM_PER_THREAD 16
extern "C" __global__ void __launch_bounds__(1024) add_rmsnorm(u16* __restrict__ x, const u16* delta,
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
__device__ __forceinline__ void load_kv(const u16* kc, const u16* vc, size_t base, int p0,
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
extern "C" __global__ void attn_split(const u16* qkv, const u16* kc,
                                      const u16* vc, float* __restrict__ part, int len, int hq, int hkv,
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
__device__ __forceinline__ void combine_heads(const float* part, u16* __restrict__ out, int splits) {
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
extern "C" __global__ void attn_combine(const float* part, u16* __restrict__ out, int splits) {
    pdl_enter();
    const size_t bh0 = (size_t)blockIdx.x * GQA;
    combine_heads(part + bh0 * splits * (HD + 2), out + bh0 * HD, splits);
}

// RoPE + KV append + flash-decoding + combine in one launch (the fused step). CTA (b * hkv + kv head, split)
// serves all GQA q heads of its KV head, so each K and V row is read once for the group: the cached rows
// of its chunk (below the new position len - 1) are loaded before waiting for the previous kernel (they
// are not what it writes), then q is rotated from the raw qkv row; the CTA of the last split also rotates
// the new key, appends it and the new value to the cache and attends to them from registers. Every CTA
// writes one partial per q head, then counts itself in counters[b * hkv + kv head]; the last one merges
// the splits of the group's heads into out and re-arms the counter.
extern "C" __global__ void __launch_bounds__(128) attn_rope(const u16* qkv, u16* __restrict__ kc,
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
// Profiling experiment (ROOFLINE_NVRTC_EXTRA=-DEXP_ATTN_TRIGGER=1): the next kernel (o_proj) released when
// the attention's CTAs end instead of when they start, so its CTAs do not stream their weights beside it.
#ifndef EXP_ATTN_TRIGGER
#define EXP_ATTN_TRIGGER 0
#endif
// attn_cluster: RoPE + KV append + flash-decoding + merge on thread-block clusters (attn_cluster.cuh).
extern "C" __global__ void __launch_bounds__(CW * 32, CLUSTER_MIN_BLOCKS)
    attn_cluster(const u16* qkv, kv_t* __restrict__ kc, kv_t* __restrict__ vc, u16* __restrict__ out,
                 int len, int hq, int hkv, int smax, float scale, float theta, float k_scale, float v_scale) {
    if (!EXP_ATTN_TRIGGER) pdl_trigger();
    attn_cluster_start(kc, vc, len, hkv, smax);
    float cs[4], sn[4];
    rope_angles_early(len - 1, theta, cs, sn);
    pdl_wait();
    attn_cluster_finish(qkv, kc, vc, out, len, hq, hkv, smax, scale, cs, sn, k_scale, v_scale);
}
#endif

extern "C" __global__ void silu_mul(const u16* gu, u16* __restrict__ out, int f) {
    pdl_enter();
    const int b = blockIdx.x;
    const int i = blockIdx.y * blockDim.x + threadIdx.x;
    if (i >= f) return;
    const float g = h2f(gu[(size_t)b * 2 * f + i]), u = h2f(gu[(size_t)b * 2 * f + f + i]);
    out[(size_t)b * f + i] = f2h(g / (1.0f + __expf(-g)) * u);
}

// Most routed experts topk_route takes (8 logits per lane).
#define MAX_EXPERTS 256

extern "C" __global__ void topk_route(const u16* logits, int* __restrict__ ids, float* __restrict__ wts,
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
extern "C" __global__ void moe_gather(const u16* x, u16* const* __restrict__ dst,
                                      const int* __restrict__ src, int d) {
    pdl_enter();
    const int r = blockIdx.x;
    const int i = blockIdx.y * blockDim.x + threadIdx.x;
    if (i >= d / 8) return;
    ((uint4*)dst[r])[i] = ((const uint4*)(x + (size_t)src[r] * d))[i];
}

// grid (B, ceil(d / 8 / 128)), 128 threads, 8 values per thread; k <= 32.
extern "C" __global__ void moe_combine(u16* __restrict__ x, const float* wts,
                                       const u16* const* rows, const u16* shared, int k,
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

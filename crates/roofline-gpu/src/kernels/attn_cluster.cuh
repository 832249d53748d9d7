// The decode attention of the fused step on thread-block clusters (sm_90+), as device functions shared by
// the attn_cluster kernel (decode_ops.cu) and the qkv projection fused with it (attn_qkv.cu); RoPE helpers
// for attn_rope too. Needs wo_prims.cuh (integer types, h2f, f2h, PDL). HD = head_dim (128), GQA = q heads
// per KV head.

#define NEG_INF (-__int_as_float(0x7f800000))

#ifndef HD
#define HD 128
#endif
// q heads per KV head (hq / hkv) for the fused attention, a compile-time constant (its q vectors, softmax
// state and accumulators are registers).
#ifndef GQA
#define GQA 1
#endif

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
#ifndef CW
#define CW 8  // warps per CTA (the attention's; a fused kernel may have more, see attn_bar)
#endif
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

// A barrier of the CW attention warps (named barrier 2): the CTA's other warps (a fused kernel's producer
// warp) may have left.
__device__ __forceinline__ void attn_bar() { asm volatile("bar.sync 2, %0;" ::"n"(CW * 32) : "memory"); }

// The CTA's share of the attention: its (b, KV head), its positions [p0, p1) (cached below `cached`; the
// new one is pos = len - 1), the cache offset of its (b, KV head) and its iterations of CW x ROWS positions.
// Integer arithmetic only: computed where needed rather than kept live across other work.
struct AttnRange {
    int b, kh, pos, p0, p1, iters, cached;
    size_t base;
};
__device__ __forceinline__ AttnRange attn_range(int len, int hkv, int smax) {
    const u32 rank = cluster_rank(), ncl = cluster_ctas();
    AttnRange a;
    const int bk = blockIdx.y;
    a.b = bk / hkv, a.kh = bk % hkv;
    const int pos = len - 1;
    a.pos = pos;
    // Cached positions [0, pos) in ncl contiguous ranges; the last range also takes the new position.
    const int per = (pos + (int)ncl - 1) / (int)ncl;
    a.p0 = min(pos, (int)rank * per);
    a.p1 = rank == ncl - 1 ? len : min(pos, a.p0 + per);
    a.base = ((size_t)a.b * hkv + a.kh) * smax * HD;
    a.iters = (a.p1 - a.p0 + CW * ROWS - 1) / (CW * ROWS);
    a.cached = min(a.p1, pos);
    return a;
}

// Before griddepcontrol.wait (reads only the cache rows below the new position, which no kernel of the step
// writes): the cp.async copies of the CTA's first one or two iterations' K and V rows. Warps 0..CW-1 only.
__device__ __forceinline__ void attn_cluster_start(const kv_t* __restrict__ kc, const kv_t* __restrict__ vc, int len,
                                                   int hkv, int smax) {
    const AttnRange a = attn_range(len, hkv, smax);
    const int warp = threadIdx.x >> 5;
    issue_rows(kc, vc, a.base, a.p0 + warp * ROWS, a.cached, 0);
    if (a.iters > 1) issue_rows(kc, vc, a.base, a.p0 + CW * ROWS + warp * ROWS, a.cached, 1);
}

// After the wait (q, k and v of the new token in qkv; cs / sn: rope_angles of the new position): RoPE, the
// new key and value appended, the online
// softmax over the CTA's positions, its warps merged, then the cluster merged through distributed shared
// memory into out. Warps 0..CW-1 of every CTA of the cluster.
__device__ __forceinline__ void attn_cluster_finish(const u16* qkv, kv_t* __restrict__ kc,
                                                   kv_t* __restrict__ vc, u16* __restrict__ out, int len, int hq,
                                                   int hkv, int smax, float scale, const float cs[4],
                                                   const float sn[4], float k_scale, float v_scale) {
    const AttnRange a = attn_range(len, hkv, smax);
    const u32 rank = cluster_rank(), ncl = cluster_ctas();
    const int b = a.b, kh = a.kh, pos = a.pos, p0 = a.p0, p1 = a.p1, iters = a.iters, cached = a.cached;
    const size_t base = a.base;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int row = (hq + 2 * hkv) * HD;
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
    attn_bar();
    if (idx < GP && (lane & ((1 << SH) - 1)) == 0) {
        wm[warp][idx] = m;
        wl[warp][idx] = l;
    }
#pragma unroll
    for (int g = 0; g < GQA; ++g) {
#pragma unroll
        for (int e = 0; e < 4; ++e) wacc[warp][g][4 * lane + e] = acc[g][e];
    }
    attn_bar();
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

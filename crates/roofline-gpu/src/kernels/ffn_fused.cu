// The whole SwiGLU FFN of one decode token in one launch (batch 1, INT4 g128 weights, FP16 x):
//   x += W_down . (silu(g) * u),  (g, u) = rsqrt(mean(x^2) + eps) . W_gate_up . x
// with the post-attention RMSNorm's weight folded into W_gate_up by the host. Appended by the host to
// weight_only_xreg.cu's source, compiled with FMT = 4, MT = 1, R = 8, C = 1, FUSE = 1 (its `load_step`,
// `Meta` and INT4 decode are reused), and FD (hidden size, a multiple of 1024), FF (intermediate size, a
// multiple of 128).
//
// Why one kernel: the two GEMVs of the FFN each pay a ramp (the first weight bytes a full DRAM latency
// away, PDL hiding only what registers can hold) and a drain (the last CTAs finishing alone); at 4 bits
// their bytes take ~20 + 10 us at the roof and the pair measured 26.4 + 17.3 us in the Llama-3.1-8B step
// (bench/RESULTS.md, session 10). Here the intermediate dimension is split over the CTAs instead: CTA c owns
// the pieces [p0, p1) of 16 intermediate values, computes their gate and up rows over all of K (phase A),
// keeps h = silu(g) * u in shared memory and multiplies it straight into the matching 16-column pieces of
// W_down for every output row (phase B). No CTA waits for another until the end: one ramp, one drain.
// The CTAs' partial outputs (FD floats each) are summed after one grid barrier (every CTA resident: the
// host launches at most one CTA per SM), each CTA reducing a slice of the outputs and adding it into x.
//
// Layouts (host: weight_only/ffn.rs):
//   gu, gu_s, gu_z  gate_up [2 FF][FD] as the x-in-registers kernel reads it: codes row-major, scales /
//                   zero points transposed ([FD/128][2 FF]; pack::xreg_tables)
//   dn              W_down's codes piece-major: [FF/16][FD][8 bytes] (16 nibbles of one row), so a warp's
//                   load of 32 row pairs is 512 contiguous bytes
//   dn_s, dn_z      W_down's scales / zero points transposed: [FF/128][FD] f16, [FF/128][FD/2] (row 2i low)
//   part            [gridDim.x][FD] floats, the CTAs' partial outputs
//   bar             2 words: arrival count, generation (zero-initialised once; the kernel leaves count 0)

#ifndef FD
#error "FD (hidden size) must be defined"
#endif
#ifndef FF
#error "FF (intermediate size) must be defined"
#endif
#if FMT != 4 || MT != 1 || R != 8 || C != 1 || !FUSE
#error "the fused FFN is built on the INT4 g128, M = 1, R = 8, C = 1, FUSE = 1 x-in-registers source"
#endif
#define FFN_WARPS 16
#define FFN_THREADS (FFN_WARPS * 32)
#define KSL (FD / 1024)                // K slices of 1024 values (32 lanes x one 32-value chunk)
#define RGS (FFN_WARPS / KSL)          // row groups: warps sharing a K slice deal the row steps out
#define PAIRS (FD / 2)                 // output row pairs of phase B
#define NP ((PAIRS + FFN_THREADS - 1) / FFN_THREADS)  // row pairs per thread
#if FD % 1024 != 0 || KSL > FFN_WARPS
#error "FD must be a multiple of 1024, at most 16384"
#endif
#if FF % 128 != 0
#error "FF must be a multiple of 128"
#endif

__device__ __forceinline__ u32 ld_acquire_u32(const u32* p) {
    u32 v;
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}

// Phase B's codes of piece p for this thread's row pairs (pairs past FD / 2 load nothing).
__device__ __forceinline__ void load_piece(const uint4* __restrict__ dn, int p, uint4 q[NP]) {
#pragma unroll
    for (int i = 0; i < NP; ++i) {
        const int pr = threadIdx.x + i * FFN_THREADS;
        q[i] = pr < PAIRS ? ld_weights(dn + (size_t)p * PAIRS + pr) : make_uint4(0u, 0u, 0u, 0u);
    }
}

// W_down's scales (both rows of each pair, f16x2) and zero points (one byte per pair) of group g.
__device__ __forceinline__ void load_group(const u8* __restrict__ dn_s, const u8* __restrict__ dn_z, int g,
                                           u32 sc[NP], u32 zb[NP]) {
#pragma unroll
    for (int i = 0; i < NP; ++i) {
        const int pr = threadIdx.x + i * FFN_THREADS;
        sc[i] = pr < PAIRS ? __ldg((const u32*)(dn_s + ((size_t)g * FD + 2 * pr) * 2)) : 0u;
        zb[i] = pr < PAIRS ? __ldg(dn_z + (size_t)g * PAIRS + pr) : 0u;
    }
}

// sum over the 8 nibbles e of word v of (1 + e / 128) * h[e] (the INT4_FLOAT decode of weight_only_xreg.cu).
__device__ __forceinline__ float dot8(u32 v, const float* h, float acc) {
#pragma unroll
    for (int i = 0; i < 8; ++i) {
        const u32 sh = i < 4 ? v << (16 - 4 * i) : v >> (4 * i - 16);
        acc = fmaf(as_float(lop3_and_or(sh, 0x000f0000u, 0x3f800000u)), h[i], acc);
    }
    return acc;
}

extern "C" __global__ void __launch_bounds__(FFN_THREADS, 1)
wo_ffn(const uint4* __restrict__ gu, const u8* __restrict__ gu_s, const u8* __restrict__ gu_z,
       const uint4* __restrict__ dn, const u8* __restrict__ dn_s, const u8* __restrict__ dn_z, u16* x,
       float* __restrict__ part, u32* bar, float eps) {
    pdl_trigger();
    // psum: [KSL][2 fs] phase A's partial sums per K slice; h: fs floats; hs: a sum of h per piece.
    extern __shared__ float smem[];
    __shared__ float ss_sh[KSL];
    __shared__ float red[FFN_WARPS][64];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int pieces = FF / 16;
    const int p0 = (int)(((long long)blockIdx.x * pieces) / gridDim.x);
    const int p1 = (int)(((long long)(blockIdx.x + 1) * pieces) / gridDim.x);
    const int fs = (p1 - p0) * 16;
    float* psum = smem;
    float* hsh = smem + KSL * 2 * fs;
    float* hs = hsh + fs;

    // ---- Phase A: the CTA's gate rows [16 p0, 16 p1) and up rows FF + the same, over all of K ----
    const int ks = warp % KSL, rg = warp / KSL;
    const bool active = rg < RGS;
    const int kc = FD / EPC;
    const int cbase = ks * 32 + lane;
    const int steps = 2 * fs / R;
    uint4 q[R][C];
    Meta meta[R][C];
    // Global row of CTA-local row r (gate rows first, then up rows; a step of 8 never straddles them).
    auto grow = [&](int r) { return r < fs ? p0 * 16 + r : FF + p0 * 16 + (r - fs); };
    if (active && rg < steps) load_step(gu, gu_s, gu_z, 2 * FF, 2 * FF, kc, grow(rg * R), cbase, q, meta);
    pdl_wait();  // the first weights are in flight; x is read only from here

    float xr[EPC], xsum = 0.0f, ss = 0.0f;
    {
        const uint4* xp = (const uint4*)(x + (size_t)cbase * EPC);
#pragma unroll
        for (int s = 0; s < SUBS; ++s) {
            const uint4 xv = xp[s];  // plain load: x is written by earlier kernels of the step
            x2f(xv.x, xr[8 * s + 0], xr[8 * s + 1]);
            x2f(xv.y, xr[8 * s + 2], xr[8 * s + 3]);
            x2f(xv.z, xr[8 * s + 4], xr[8 * s + 5]);
            x2f(xv.w, xr[8 * s + 6], xr[8 * s + 7]);
        }
#pragma unroll
        for (int e = 0; e < EPC; ++e) {
            xsum += xr[e];
            ss = fmaf(xr[e], xr[e], ss);
        }
    }
    if (rg == 0) {
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(FULL, ss, o);
        if (lane == 0) ss_sh[ks] = ss;
    }

    for (int st = rg; active && st < steps; st += RGS) {
        float acc[R];
#pragma unroll
        for (int u = 0; u < R; ++u) {
            float ps = 0.0f;
#pragma unroll
            for (int wd = 0; wd < 4; ++wd) ps = dot8(word(q[u][0], wd), xr + 8 * wd, ps);
            const float z128 = 128.0f + (float)(meta[u][0].zero & 15u);
            acc[u] = meta[u][0].scale * fmaf(ps, 128.0f, -z128 * xsum);
        }
        // The next step's loads go out before the reduction's shuffles.
        if (st + RGS < steps) load_step(gu, gu_s, gu_z, 2 * FF, 2 * FF, kc, grow((st + RGS) * R), cbase, q, meta);
        // Transposed butterfly (as wo_xreg): row (lane >> 2) & 7 summed over the warp in 3 + 2 shuffles.
#pragma unroll
        for (int s = 0; s < 3; ++s) {
            const int half = R >> (s + 1);
            const int o = 16 >> s;
            const bool up = (lane & o) != 0;
#pragma unroll
            for (int i = 0; i < half; ++i) {
                const float send = up ? acc[i] : acc[i + half];
                const float keep = up ? acc[i + half] : acc[i];
                acc[i] = keep + __shfl_xor_sync(FULL, send, o);
            }
        }
#pragma unroll
        for (int o = 2; o > 0; o >>= 1) acc[0] += __shfl_xor_sync(FULL, acc[0], o);
        if ((lane & 3) == 0) psum[ks * 2 * fs + st * R + ((lane >> 2) & 7)] = acc[0];
    }

    // Phase B's first codes and its first two groups' scales go out before the barrier (they depend on
    // nothing), so the stream of weight bytes does not stop while h is formed.
    uint4 cur[NP], nxt[NP];
    u32 sca[NP], zba[NP], scb[NP], zbb[NP];
    const int g0 = p0 >> 3;
    load_piece(dn, p0, cur);
    load_group(dn_s, dn_z, g0, sca, zba);
    const bool two = ((p1 - 1) >> 3) > g0;
    if (two) load_group(dn_s, dn_z, g0 + 1, scb, zbb);
    __syncthreads();

    // h = silu(g) * u of the CTA's intermediate values, and its sum per piece (the INT4 zero points'
    // term in phase B).
    {
        float t = 0.0f;
#pragma unroll
        for (int s = 0; s < KSL; ++s) t += ss_sh[s];
        const float inv = rsqrtf(t / (float)FD + eps);
        for (int i = threadIdx.x; i < fs; i += FFN_THREADS) {
            float g = 0.0f, u = 0.0f;
#pragma unroll
            for (int s = 0; s < KSL; ++s) {
                g += psum[s * 2 * fs + i];
                u += psum[s * 2 * fs + fs + i];
            }
            g *= inv;
            u *= inv;
            hsh[i] = __fdividef(g, 1.0f + __expf(-g)) * u;
        }
    }
    __syncthreads();
    if (threadIdx.x < fs / 16) {
        float t = 0.0f;
#pragma unroll
        for (int e = 0; e < 16; ++e) t += hsh[threadIdx.x * 16 + e];
        hs[threadIdx.x] = t;
    }
    __syncthreads();

    // ---- Phase B: every output row's dot with h over the CTA's pieces, folded per scale group ----
    float acc0[NP], acc1[NP], gp0[NP], gp1[NP];
#pragma unroll
    for (int i = 0; i < NP; ++i) acc0[i] = acc1[i] = gp0[i] = gp1[i] = 0.0f;
    float hsum = 0.0f;
    int g = g0;
    for (int p = p0; p < p1; ++p) {
        if (p + 1 < p1) load_piece(dn, p + 1, nxt);
        float h[16];
        {
            const float4* h4 = (const float4*)(hsh + (p - p0) * 16);
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const float4 v = h4[e];
                h[4 * e] = v.x, h[4 * e + 1] = v.y, h[4 * e + 2] = v.z, h[4 * e + 3] = v.w;
            }
        }
        hsum += hs[p - p0];
#pragma unroll
        for (int i = 0; i < NP; ++i) {
            gp0[i] = dot8(cur[i].y, h + 8, dot8(cur[i].x, h, gp0[i]));  // row 2 pr
            gp1[i] = dot8(cur[i].w, h + 8, dot8(cur[i].z, h, gp1[i]));  // row 2 pr + 1
        }
        if (p + 1 == p1 || ((p + 1) & 7) == 0) {
            // The group ends: sum (q - z) h = 128 sum (1 + q/128) h - (128 + z) sum h, times the scale.
            const bool first = g == g0;
#pragma unroll
            for (int i = 0; i < NP; ++i) {
                const u32 sc = first ? sca[i] : scb[i], zb = first ? zba[i] : zbb[i];
                float s0, s1;
                h2x2f(sc, s0, s1);
                acc0[i] = fmaf(s0, fmaf(gp0[i], 128.0f, -(128.0f + (float)(zb & 15u)) * hsum), acc0[i]);
                acc1[i] = fmaf(s1, fmaf(gp1[i], 128.0f, -(128.0f + (float)((zb >> 4) & 15u)) * hsum), acc1[i]);
                gp0[i] = gp1[i] = 0.0f;
            }
            hsum = 0.0f;
            ++g;
            // A third group (more than 8 pieces per CTA): its scales are loaded when it starts.
            if (g > g0 + 1 && p + 1 < p1) load_group(dn_s, dn_z, g, scb, zbb);
        }
#pragma unroll
        for (int i = 0; i < NP; ++i) cur[i] = nxt[i];
    }
#pragma unroll
    for (int i = 0; i < NP; ++i) {
        const int pr = threadIdx.x + i * FFN_THREADS;
        if (pr < PAIRS) __stcg((float2*)(part + (size_t)blockIdx.x * FD) + pr, make_float2(acc0[i], acc1[i]));
    }

    // ---- Grid barrier (all CTAs are resident: at most one per SM), then each CTA reduces a slice ----
    __syncthreads();
    if (threadIdx.x == 0) {
        const u32 gen = ld_acquire_u32(bar + 1);  // read before arriving: it cannot move until all arrive
        __threadfence();
        const u32 arrived = atomicAdd(bar, 1u);
        if (arrived == gridDim.x - 1) {
            atomicExch(bar, 0u);
            __threadfence();
            atomicAdd(bar + 1, 1u);
        } else {
            while (ld_acquire_u32(bar + 1) == gen) __nanosleep(20);
        }
        __threadfence();
    }
    __syncthreads();

    const int r0 = (int)(((long long)blockIdx.x * FD) / gridDim.x);
    const int r1 = (int)(((long long)(blockIdx.x + 1) * FD) / gridDim.x);
    const int rows = r1 - r0;  // <= 64 (the host keeps gridDim.x >= FD / 64)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
        const int r = lane + 32 * half;
        float t = 0.0f;
        if (r < rows) {
            // Partials warp, warp + 16, ...: eight L2 loads in flight per lane at 128 CTAs.
            constexpr int V = 8;
            for (int j0 = warp; j0 < (int)gridDim.x; j0 += V * FFN_WARPS) {
                float v[V];
#pragma unroll
                for (int u = 0; u < V; ++u) {
                    const int j = j0 + u * FFN_WARPS;
                    v[u] = j < (int)gridDim.x ? __ldcg(part + (size_t)j * FD + r0 + r) : 0.0f;
                }
#pragma unroll
                for (int u = 0; u < V; ++u) t += v[u];
            }
        }
        red[warp][r] = t;
    }
    __syncthreads();
    if (threadIdx.x < rows) {
        float t = 0.0f;
#pragma unroll
        for (int w = 0; w < FFN_WARPS; ++w) t += red[w][threadIdx.x];
        const int o = r0 + threadIdx.x;
        x[o] = f2out(io2f(x[o]) + t);
    }
}

// Weight-only low-bit GEMV / skinny GEMM: y[M,N] = x[M,K] . W[N,K]^T, FP32 accumulation.
//
// Compiled by NVRTC with -D options (see weight_only/mod.rs):
//   FMT   0 FP16, 1 BF16, 2 FP8 E4M3 (per-row FP32 scale), 3 INT8 (per-row FP32 scale),
//         4 INT4 g128 asym (FP16 scale, 4-bit zero per group), 5 NF4 (FP16 absmax per 64),
//         6 MXFP4 (E8M0 scale per 32), 7 NVFP4 (E4M3 scale per 16, FP32 global scale)
//   XBF16 0: x and y are FP16, 1: BF16
//   MT    rows of x (1..16); R rows of W per warp; U 16-byte chunks per lane in flight; WARPS per CTA.
//   PF    1: software-pipelined (the next U x R chunks are loaded before the current ones are decoded).
//   MINB  CTAs per SM the register allocation must allow (__launch_bounds__ minimum blocks).
//   PDL   1: programmatic dependent launch (see wo_common.cuh).
//
// Layout: W row-major (row n = output channel), K packed LSB-first as roofline-quant packs it, so a row is
// K*bits/8 bytes = KC 16-byte chunks. Lane l of a warp reads chunks l, l+32, ... of its rows: a warp
// instruction reads 512 contiguous bytes of one row (coalesced), U chunks x R rows independent loads in
// flight per lane. x is read with coherent 16-byte loads after griddepcontrol.wait (`ld_dep`: the read-only
// path could be hoisted above it; L1/L2 resident: it is at most 16 x 14336 x 2 B and every CTA of an SM
// reads the same slice); weights bypass L1 (no_allocate) so they do not evict x. gridDim.y > 1 splits K:
// each split adds its partial sums into an FP32 workspace with atomicAdd and the last CTA of a row tile
// (counter per tile) converts the tile to y and re-zeroes the workspace and the counter, so one launch does
// it all and the workspace is ready for the next call.
// No headers: fp16/bf16 conversions are inline PTX (wo_common.cuh, prepended by the host).

#ifndef FMT
#error "FMT must be defined"
#endif
#ifndef PF
#define PF 0
#endif
#ifndef MINB
#define MINB 1
#endif
// SX 1: x (as f32) and the block scales of the CTA's rows are staged in shared memory once per CTA, so the
// inner loop reads them with shared-memory loads instead of L1 round trips per chunk (dynamic shared memory:
// MT x chunks_per_split x (EPC + 4) floats, padded per chunk against bank conflicts, then the Meta table).
#ifndef SX
#define SX 0
#endif
// Chunks per block-scale entry (Meta) along a row.
#if FMT == 4
#define CPG 4
#elif FMT == 5
#define CPG 2
#else
#define CPG 1
#endif
#define XPAD (EPC + 4)
// GRP 1: each lane takes U consecutive chunks (whole scale groups: one scale load per group instead of one
// per chunk; weights then go through L1, since a warp instruction reads every other 16 bytes) instead of
// chunks 32 apart. U must be a multiple of CPG (the host sees to it).
#ifndef GRP
#define GRP 0
#endif
#if GRP
#define CSTRIDE 1
#define LMUL U
#else
#define CSTRIDE 32
#define LMUL 1
#endif
// Profiling experiments only (ROOFLINE_NVRTC_EXTRA="-DEXP_...=1"; results are wrong by design): skip the
// per-chunk scale loads, use x = 1 instead of loading it, or reinterpret code bits instead of decoding.
#ifndef EXP_NOMETA
#define EXP_NOMETA 0
#endif
#ifndef EXP_XCONST
#define EXP_XCONST 0
#endif
#ifndef EXP_NODECODE
#define EXP_NODECODE 0
#endif

__device__ __forceinline__ Meta load_meta(const u8* __restrict__ scales, const u8* __restrict__ zeros, int n,
                                          int c, int k) {
    Meta m;
#if FMT == 4
    int groups = k / 128;
    int g = c >> 2;  // 4 chunks of 32 per group of 128
    m.scale = h2f(__ldg((const u16*)scales + (size_t)n * groups + g));
    u32 zb = __ldg(zeros + (size_t)n * ((groups + 1) >> 1) + (g >> 1));
    u32 z = (zb >> ((g & 1) * 4)) & 15u;
    m.zero = int4_zero_pair(z);  // f16 of (1024 + z): exponent 10 (0x6400) with mantissa z
#elif FMT == 5
    m.scale = h2f(__ldg((const u16*)scales + (size_t)n * (k / 64) + (c >> 1)));
#elif FMT == 6
    m.scale = e8m0f(__ldg(scales + (size_t)n * (k / 32) + c));
#elif FMT == 7
    m.s2 = __ldg((const u16*)scales + (size_t)n * (k / 32) + c);
#else
    m.dummy = 0;
#endif
    return m;
}

// Loads the U x R chunks (and their scales) a lane handles at chunk c (chunks past c_end: zeros).
__device__ __forceinline__ void load_set(const uint4* __restrict__ w, const u8* __restrict__ scales,
                                         const u8* __restrict__ zeros, const int rows[R], int c, int c_end, int k,
                                         int kc, uint4 q[U][R], Meta meta[U][R]) {
#pragma unroll
    for (int u = 0; u < U; ++u) {
        const int cc = c + CSTRIDE * u;
#pragma unroll
        for (int r = 0; r < R; ++r) {
            if (cc < c_end) {
#if GRP
                q[u][r] = ld_weights_l1(w + (size_t)rows[r] * kc + cc);
#else
                q[u][r] = ld_weights(w + (size_t)rows[r] * kc + cc);
#endif
#if EXP_NOMETA || SX
                meta[u][r] = zero_meta();
#else
                if (GRP && u % CPG != 0)
                    meta[u][r] = meta[u - u % CPG][r];  // same scale group as the chunk before
                else
                    meta[u][r] = load_meta(scales, zeros, rows[r], cc, k);
#endif
            } else {
                q[u][r].x = q[u][r].y = q[u][r].z = q[u][r].w = 0u;
                meta[u][r] = zero_meta();
            }
        }
    }
}

// Decodes a loaded set and accumulates its products with x into acc.
__device__ __forceinline__ void compute_set(const u16* x, int k, int c, int c_end, const float* lut,
                                            const uint4 q[U][R], const Meta meta[U][R], float acc[R][MT],
                                            const float* xs, int xstride, int c_begin) {
#pragma unroll
    for (int u = 0; u < U; ++u) {
        const int cc = c + CSTRIDE * u;
        if (cc < c_end) {
#if BLOCK_SCALED
            float part[R][MT];
#pragma unroll
            for (int r = 0; r < R; ++r)
#pragma unroll
                for (int m = 0; m < MT; ++m) part[r][m] = 0.0f;
#endif
#pragma unroll
            for (int j = 0; j < SUBS; ++j) {
                float wf[R][8];
#pragma unroll
                for (int r = 0; r < R; ++r) {
#if EXP_NODECODE
#pragma unroll
                    for (int e = 0; e < 8; ++e)  // code bits as a finite float in [0, 2)
                        wf[r][e] = as_float((word(q[u][r], (j + e) & 3) >> (e & 3)) & 0x3f7fffffu);
#else
                    decode8(q[u][r], j, meta[u][r], lut, wf[r]);
#endif
                }
#pragma unroll
                for (int m = 0; m < MT; ++m) {
                    float xf[8];
#if SX
                    const float4* xp = (const float4*)(xs + m * xstride + (cc - c_begin) * XPAD + 8 * j);
                    const float4 xa = xp[0], xb = xp[1];
                    xf[0] = xa.x, xf[1] = xa.y, xf[2] = xa.z, xf[3] = xa.w;
                    xf[4] = xb.x, xf[5] = xb.y, xf[6] = xb.z, xf[7] = xb.w;
#else
#if EXP_XCONST
                    const uint4 xv = make_uint4(0x3c003c00u, 0x3c003c00u, 0x3c003c00u, 0x3c003c00u);
#else
                    const uint4 xv = ld_dep((const uint4*)(x + (size_t)m * k + (size_t)cc * EPC + 8 * j));
#endif
                    x2f(xv.x, xf[0], xf[1]);
                    x2f(xv.y, xf[2], xf[3]);
                    x2f(xv.z, xf[4], xf[5]);
                    x2f(xv.w, xf[6], xf[7]);
#endif
#pragma unroll
                    for (int r = 0; r < R; ++r)
#pragma unroll
                        for (int e = 0; e < 8; ++e) {
#if BLOCK_SCALED
                            part[r][m] = fmaf(wf[r][e], xf[e], part[r][m]);
#else
                            acc[r][m] = fmaf(wf[r][e], xf[e], acc[r][m]);
#endif
                        }
                }
#if BLOCK_SCALED
                if ((j + 1) % (SUBS / SEGS) == 0) {
                    const int seg = j / (SUBS / SEGS);
#pragma unroll
                    for (int r = 0; r < R; ++r) {
                        const float s = seg_scale(meta[u][r], seg);
#pragma unroll
                        for (int m = 0; m < MT; ++m) {
                            acc[r][m] = fmaf(part[r][m] * E2M1_UP, s, acc[r][m]);
                            part[r][m] = 0.0f;
                        }
                    }
                }
#endif
            }
        }
    }
}

// Reduces a finished row group over the warp, applies per-row / per-tensor scales and writes y (or adds
// into the split-K workspace); leaves acc zeroed for the next group.
__device__ __forceinline__ void finish_group(const u8* __restrict__ scales, float gscale, u16* __restrict__ y,
                                             float* __restrict__ ws, int lane, int group, const int rows[R],
                                             int n_rows, bool split, int flags, const float* inv,
                                             float acc[R][MT]) {
#if FUSE
    // FUSE_ADD without split-K: the residual values this lane will add (output (r, m) is stored by lane
    // (r MT + m) % 32) are loaded first, so their latency overlaps the reduction.
    constexpr int YS = (R * MT + 31) / 32;
    float yold[YS];
#pragma unroll
    for (int i = 0; i < YS; ++i) {
        const int idx = i * 32 + lane, r = idx / MT, m = idx - r * MT, n = group * R + r;
        yold[i] = (!split && (flags & FUSE_ADD) && idx < R * MT && n < n_rows) ? io2f(y[(size_t)m * n_rows + n]) : 0.0f;
    }
#endif
    // Warp reduction (butterfly: every lane ends with every sum).
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
        for (int m = 0; m < MT; ++m) {
            float v = acc[r][m];
#pragma unroll
            for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
            acc[r][m] = v;
        }
#pragma unroll
    for (int r = 0; r < R; ++r) {
        float s = 1.0f;
#if ROW_SCALED
        s = __ldg((const float*)scales + rows[r]);
#elif FMT == 7
        s = gscale;
#endif
#pragma unroll
        for (int m = 0; m < MT; ++m) {
            const int n = group * R + r;
            if (lane == ((r * MT + m) & 31) && n < n_rows) {
#if FUSE
                const float v = acc[r][m] * s * ((flags & FUSE_NORM) ? inv[m] : 1.0f) + yold[(r * MT + m) >> 5];
#else
                const float v = acc[r][m] * s;
#endif
                const size_t o = (size_t)m * n_rows + n;
                splitk_store(ws, y, o, v, split, flags & ~FUSE_ADD);
            }
            acc[r][m] = 0.0f;
        }
    }
}

extern "C" __global__ void __launch_bounds__(WARPS * 32, MINB)
wo_gemv(const uint4* __restrict__ w, const u8* __restrict__ scales, const u8* __restrict__ zeros, float gscale,
        const u16* x, u16* __restrict__ y, float* __restrict__ ws, u32* __restrict__ counters,
        int n_rows, int k, int chunks_per_split, int flags, float eps) {
    flags = fuse_flags(flags);
#if USES_LUT
    __shared__ float lut[16];
    if (threadIdx.x < 16) lut[threadIdx.x] = kLut[threadIdx.x];
    __syncthreads();
#else
    const float* lut = nullptr;
#endif
    pdl_trigger();
    const int lane = threadIdx.x & 31;
    const int warp = threadIdx.x >> 5;
    const int kc = k / EPC;  // 16-byte chunks per row
    const int c_begin = blockIdx.y * chunks_per_split;
    const int c_end = min(kc, c_begin + chunks_per_split);
    const bool split = gridDim.y > 1;

    // Work of this warp: row groups gw, gw + warps_total, ... (one group when the grid covers N, as it
    // always does with split-K; several when the grid is sized to the resident CTAs), each walked over its
    // K range in steps of 32 * U chunks. The steps are one flat sequence, so with PF the first loads of
    // the next group are in flight while the last step of this one decodes.
    const int groups = (n_rows + R - 1) / R;
    const int warps_total = gridDim.x * WARPS;
    const int gw = blockIdx.x * WARPS + warp;
    const int per_group = (c_end - c_begin + 32 * U - 1) / (32 * U);
    const int my_groups = gw < groups ? (groups - gw + warps_total - 1) / warps_total : 0;
    const int steps = my_groups * per_group;

    float acc[R][MT];
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
        for (int m = 0; m < MT; ++m) acc[r][m] = 0.0f;

    int group = gw, it = 0;  // current step's group and step within the group
    int rows[R];
#pragma unroll
    for (int r = 0; r < R; ++r) rows[r] = min(group * R + r, n_rows - 1);  // clamped: loads stay in bounds
    uint4 q[U][R];
    Meta meta[U][R];
    if (steps > 0) load_set(w, scales, zeros, rows, c_begin + lane * LMUL, c_end, k, kc, q, meta);
    pdl_wait();  // the first weights are in flight; x, y and the workspace are touched only from here
    __shared__ float fuse_inv[WARPS][MT];  // each warp stores its own rows: its own slot, no CTA barrier
    fuse_norm_prologue(x, k, MT, flags, eps, fuse_inv[warp]);
#if SX
    // Stage x and the scales while the first weights are in flight (the grid covers N: one group per warp).
    extern __shared__ float4 smem_raw[];
    float* xs = (float*)smem_raw;
    const int xstride = chunks_per_split * XPAD;
    Meta* ms = (Meta*)(xs + MT * xstride);
    const int mstride = (chunks_per_split + CPG - 1) / CPG;
    {
        const int n8 = (c_end - c_begin) * (EPC / 8);  // 8-element pieces per row of x
        for (int i = threadIdx.x; i < MT * n8; i += blockDim.x) {
            const int m = i / n8, p = i - m * n8;
            const int e = p * 8;  // element offset in the K range
            const uint4 xv = ld_dep((const uint4*)(x + (size_t)m * k + (size_t)c_begin * EPC + e));
            float f[8];
            x2f(xv.x, f[0], f[1]);
            x2f(xv.y, f[2], f[3]);
            x2f(xv.z, f[4], f[5]);
            x2f(xv.w, f[6], f[7]);
            float4* dst = (float4*)(xs + m * xstride + (e / EPC) * XPAD + e % EPC);
            dst[0] = make_float4(f[0], f[1], f[2], f[3]);
            dst[1] = make_float4(f[4], f[5], f[6], f[7]);
        }
        const int groups_here = (c_end - c_begin + CPG - 1) / CPG;
        const int row_base = blockIdx.x * WARPS * R;
        for (int i = threadIdx.x; i < WARPS * R * groups_here; i += blockDim.x) {
            const int rl = i / groups_here, g = i - rl * groups_here;
            ms[rl * mstride + g] = load_meta(scales, zeros, min(row_base + rl, n_rows - 1), c_begin + g * CPG, k);
        }
    }
    __syncthreads();
#else
    const float* xs = nullptr;
    const int xstride = 0;
#endif
    for (int st = 0; st < steps; ++st) {
        const int c = c_begin + lane * LMUL + it * 32 * U;
        // The next step's group and position.
        int ngroup = group, nit = it + 1;
        if (nit == per_group) {
            nit = 0;
            ngroup += warps_total;
        }
        int nrows[R];
#pragma unroll
        for (int r = 0; r < R; ++r) nrows[r] = min(ngroup * R + r, n_rows - 1);
        const bool more = st + 1 < steps;
#if PF
        // Software pipeline: the next step's loads are in flight while this step decodes.
        uint4 qn[U][R];
        Meta mn[U][R];
        if (more) load_set(w, scales, zeros, nrows, c_begin + lane * LMUL + nit * 32 * U, c_end, k, kc, qn, mn);
#endif
#if SX
#pragma unroll
        for (int u = 0; u < U; ++u)
#pragma unroll
            for (int r = 0; r < R; ++r) {
                const int cc = c + CSTRIDE * u;
                if (cc < c_end) meta[u][r] = ms[(warp * R + r) * mstride + (cc - c_begin) / CPG];
            }
#endif
        compute_set(x, k, c, c_end, lut, q, meta, acc, xs, xstride, c_begin);
        if (nit == 0) {
            finish_group(scales, gscale, y, ws, lane, group, rows, n_rows, split, flags, fuse_inv[warp], acc);
        }
        group = ngroup;
        it = nit;
#pragma unroll
        for (int r = 0; r < R; ++r) rows[r] = nrows[r];
#if PF
        if (more) {
#pragma unroll
            for (int u = 0; u < U; ++u)
#pragma unroll
                for (int r = 0; r < R; ++r) {
                    q[u][r] = qn[u][r];
                    meta[u][r] = mn[u][r];
                }
        }
#else
        if (more) load_set(w, scales, zeros, rows, c_begin + lane * LMUL + it * 32 * U, c_end, k, kc, q, meta);
#endif
    }

    if (!split) return;

    const int tile0 = blockIdx.x * WARPS * R;
    splitk_finish(ws, y, counters, tile0, min(WARPS * R, n_rows - tile0), n_rows, MT, flags);
}

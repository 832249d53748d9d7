// Weight-only GEMV for the smallest batches with x held in registers: y[M,N] = x[M,K] . W[N,K]^T, FP32
// accumulation. wo_common.cuh (types, conversions, decode8) is prepended by the host.
//
// Compiled by NVRTC with -D options:
//   FMT, XBF16  as in weight_only_gemv.cu (0 FP16 .. 7 NVFP4; x/y FP16 or BF16)
//   MT     rows of x; the host keeps MT x C x EPC <= 64 (x values per lane in registers)
//   R      weight rows a warp takes per step (2, 4 or 8)
//   C      16-byte chunks per lane per row (a warp's K slice is 32 x C chunks)
//   WARPS  warps per CTA = K slices per CTA
//   PF     1: the next step's loads are issued before this step decodes
//   MINB   __launch_bounds__ minimum CTAs per SM;  PDL  1: programmatic dependent launch
//
// Why: the split-K kernel re-reads x (L1) and one scale per row and chunk for every 16-byte weight load, so a
// 4-bit weight load costs ~4 more L1 round trips and the registers to hold them (bench/RESULTS.md, session 3:
// without those loads INT4 reaches the copy bandwidth). Here a warp owns one K slice for all the rows of its
// CTA: x for the slice is loaded once into registers, and the block scales are stored transposed
// ([scale column][row], rows padded to a multiple of 8) so the R rows of a step share one vector load per
// chunk. Per lane and step: R x C weight loads (lane l reads chunk slice*32C + 32j + l of each row, so a warp
// instruction reads 512 contiguous bytes), C scale loads (+ C zero-point loads for INT4), no x loads.
//
// Reduction: after a step each lane has R partial sums (one per row); a transposed butterfly (R/2 + R/4 + ...
// shuffles, then log2(32/R) more) leaves row r = (lane >> (5 - log2 R)) & (R - 1) summed over the warp, 9
// shuffles for 8 rows instead of 40. Warp partials go to shared memory ([warp][m][row of the CTA]); after the
// row loop the CTA adds its warps' partials, applies per-row / per-tensor scales and writes y, or, when K is
// split over gridDim.y, adds into the FP32 workspace and the last CTA of the row tile converts it (as in
// weight_only_gemv.cu, which leaves workspace and counter zeroed for the next call).
//
// Layout of the tables (host side: weight_only/pack.rs `xreg_tables`), n_pad = N rounded up to 8:
//   INT4 g128: scales f16 [K/128][n_pad], zeros 4-bit [K/128][n_pad / 2] (row 2i in the low nibble)
//   NF4: absmax f16 [K/64][n_pad];  MXFP4: E8M0 [K/32][n_pad];  NVFP4: E4M3 pairs [K/32][n_pad][2]
//   FP8 / INT8: per-row FP32 scales [N] (unchanged);  FP16 / BF16: none.

#ifndef PF
#define PF 0
#endif
// SILU 1 (with FUSE): SwiGLU on load (FUSE_SILU) compiled in; only the launches that use it are built so.
#ifndef SILU
#define SILU 0
#endif
#ifndef MINB
#define MINB 1
#endif
#if R == 2
#define LOG2U 1
#elif R == 4
#define LOG2U 2
#elif R == 8
#define LOG2U 3
#else
#error "R must be 2, 4 or 8"
#endif
#define SLICE (32 * C)
// INT4F 1 (INT4 g128 only, default): codes become floats 1 + q/128 with one shift and one lop3 each (the
// nibble moved to mantissa bits 16-19 under the exponent of 1.0), so a lane sums x (1 + q/128) over its
// chunk and the chunk's x sum (kept with x) turns it into sum (q - z) x = 128 part - (128 + z) sum x:
// about 2.9 instructions per weight instead of ~3.8 through f16x2 (bench/RESULTS.md, session 4).
#ifndef INT4F
#define INT4F 1
#endif
// XH 1 (M = 1, 4-bit weights; the host's `LaunchPlan::xh_default` says where): x packed once in f16x2 pairs
// scaled by a power of two per lane, each word of 8 codes decoded to exact f16 and multiplied in f16x2
// (wo_common.cuh's dot8h / dot8f4 as in the ring GEMV; NF4 through a shared-memory table of code pairs): 13-17
// instructions per 8 weights where the FP32 path decodes each weight to a float (INT4: shift and lop3; the
// others: a shared-memory table of 16 floats).
#ifndef XH
#define XH 0
#endif
#if XH && (MT != 1 || FMT < 4)
#error "XH takes M = 1 and 4-bit weights"
#endif
#define INT4_FLOAT (FMT == 4 && INT4F && !XH)
// INT8F 1 (INT8 only, default): codes become floats 1 + (b + 128) 2^-15 with one byte permute each (bytes
// [0, b ^ 0x80, 0x80, 0x3F]), multiplied by x as they are; x (b + 128 + 32768) 2^-15 summed over the chunk
// comes back to x b in one FMA with the chunk's sum of x (9 instructions a word against the exact decode's
// 13: a byte permute, a subtraction and an FMA a weight). The partial sums lose about 8 of FP32's 24 bits to
// the 2^15 offset: relative error about 1e-4, against 1e-8 exact (both far below the FP16 output's 5e-4).
#ifndef INT8F
#define INT8F 1
#endif
#define INT8_FLOAT (FMT == 3 && INT8F)
#define FULL 0xffffffffu

// Bytes of one row's scale entry per chunk (ISZ) and the scale column of chunk c (MCOL).
#if FMT == 4
#define ISZ 2
#define MCOL(c) ((c) >> 2)
#elif FMT == 5
#define ISZ 2
#define MCOL(c) ((c) >> 1)
#elif FMT == 6
#define ISZ 1
#define MCOL(c) (c)
#elif FMT == 7
#define ISZ 2
#define MCOL(c) (c)
#endif

// NST > 0: weights and scales are staged through shared memory with cp.async, NST steps per warp in flight
// (NST - 1 ahead of the one being decoded), so the bytes in flight no longer cost registers. Each lane reads
// back only what it copied itself, so `cp.async.wait_group` is the only synchronisation. R must be 8.
#ifndef NST
#define NST 0
#endif
#if NST > 0 && R != 8
#error "staged loads take R = 8"
#endif
#define WBYTES (R * C * 32 * 16)  // per warp and stage: weights, [R][C][lane] 16 bytes each
#define MBYTES (C * 32 * 16)      // scales, [C][lane] up to 16 bytes
#define ZBYTES (C * 32 * 4)       // INT4 zero points, [C][lane] 4 bytes
#define STAGE_BYTES (WBYTES + MBYTES + ZBYTES)

__device__ __forceinline__ u32 smem_addr(const void* p) {
    u32 a;
    asm("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(a) : "l"(p));
    return a;
}

// cp.async of B bytes (4, 8 or 16), zero-filled when !ok.
template <int B>
__device__ __forceinline__ void cp_async(u32 dst, const void* src, bool ok) {
    if constexpr (B == 16)
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(src), "r"(ok ? 16 : 0) : "memory");
    else
        asm volatile("cp.async.ca.shared.global [%0], [%1], %2, %3;" ::"r"(dst), "l"(src), "n"(B), "r"(ok ? B : 0)
                     : "memory");
}

// Loads B (1, 2, 4, 8 or 16) bytes into 32-bit words, little-endian.
template <int B>
__device__ __forceinline__ void ldg_bytes(const u8* __restrict__ p, u32* out) {
    if constexpr (B == 16) {
        const uint4 v = __ldg((const uint4*)p);
        out[0] = v.x, out[1] = v.y, out[2] = v.z, out[3] = v.w;
    } else if constexpr (B == 8) {
        const uint2 v = __ldg((const uint2*)p);
        out[0] = v.x, out[1] = v.y;
    } else if constexpr (B == 4) {
        out[0] = __ldg((const u32*)p);
    } else if constexpr (B == 2) {
        out[0] = __ldg((const u16*)p);
    } else {
        out[0] = __ldg(p);
    }
}

#if BLOCK_SCALED
// The R rows' block-scale entries of chunk slot j from the loaded words (sw: R entries of ISZ bytes; zw: R
// INT4 zero points, 4 bits each).
__device__ __forceinline__ void unpack_meta(const u32* sw, u32 zw, Meta meta[R][C], int j) {
#pragma unroll
    for (int u = 0; u < R; ++u) {
#if FMT == 4 || FMT == 5 || FMT == 7
        const u32 h = (sw[u / 2] >> (16 * (u & 1))) & 0xffffu;
#endif
#if FMT == 4
        meta[u][j].scale = h2f((u16)h);
        meta[u][j].zero = int4_zero_pair((zw >> (4 * u)) & 15u);
#elif FMT == 5
        meta[u][j].scale = h2f((u16)h);
#elif FMT == 6
        meta[u][j].scale = e8m0f((sw[u / 4] >> (8 * (u & 3))) & 0xffu);
#elif FMT == 7
        meta[u][j].s2 = h;
#endif
    }
}
#endif

// The R rows' weights of chunks cbase + 32 j (j < C) at row n0, and their block scales (rows past N are
// clamped for the loads and discarded later; chunks past the row are zeros).
__device__ __forceinline__ void load_step(const uint4* __restrict__ w, const u8* __restrict__ scales,
                                          const u8* __restrict__ zeros, int n_rows, int n_pad, int kc, int n0,
                                          int cbase, uint4 q[R][C], Meta meta[R][C]) {
#pragma unroll
    for (int u = 0; u < R; ++u) {
        const size_t row = (size_t)min(n0 + u, n_rows - 1);
#pragma unroll
        for (int j = 0; j < C; ++j) {
            const int c = cbase + 32 * j;
            if (c < kc)
                q[u][j] = ld_weights(w + row * kc + c);
            else
                q[u][j] = make_uint4(0u, 0u, 0u, 0u);
        }
    }
#if BLOCK_SCALED
#pragma unroll
    for (int j = 0; j < C; ++j) {
        const int c = cbase + 32 * j;
        if (c < kc) {
            const size_t col = (size_t)MCOL(c);
            u32 sw[(R * ISZ + 3) / 4];
            ldg_bytes<R * ISZ>(scales + (col * n_pad + n0) * ISZ, sw);
#if FMT == 4
            u32 zw;
            ldg_bytes<R / 2>(zeros + col * (n_pad / 2) + n0 / 2, &zw);
#else
            const u32 zw = 0u;
#endif
            unpack_meta(sw, zw, meta, j);
        } else {
#pragma unroll
            for (int u = 0; u < R; ++u) meta[u][j] = zero_meta();
        }
    }
#endif
}

#if NST > 0
// Issues the cp.async copies of step n0 (what load_step loads) into this warp's stage at `st` (shared
// address) and commits them as one group.
__device__ __forceinline__ void issue_step(const uint4* __restrict__ w, const u8* __restrict__ scales,
                                           const u8* __restrict__ zeros, int n_rows, int n_pad, int kc, int n0,
                                           int cbase, int lane, u32 st) {
#pragma unroll
    for (int u = 0; u < R; ++u) {
        const size_t row = (size_t)min(n0 + u, n_rows - 1);
#pragma unroll
        for (int j = 0; j < C; ++j) {
            const int c = cbase + 32 * j;
            cp_async<16>(st + ((u * C + j) * 32 + lane) * 16, w + row * kc + min(c, kc - 1), c < kc);
        }
    }
#if BLOCK_SCALED
#pragma unroll
    for (int j = 0; j < C; ++j) {
        const int c = cbase + 32 * j;
        const size_t col = (size_t)MCOL(min(c, kc - 1));
        cp_async<R * ISZ>(st + WBYTES + (j * 32 + lane) * 16, scales + (col * n_pad + n0) * ISZ, c < kc);
#if FMT == 4
        cp_async<R / 2>(st + WBYTES + MBYTES + (j * 32 + lane) * 4, zeros + col * (n_pad / 2) + n0 / 2, c < kc);
#endif
    }
#endif
    asm volatile("cp.async.commit_group;" ::: "memory");
}

// Reads back this lane's copies of a stage (generic pointer `sp`) once they have landed.
__device__ __forceinline__ void read_step(const u8* sp, int lane, uint4 q[R][C], Meta meta[R][C]) {
#pragma unroll
    for (int u = 0; u < R; ++u)
#pragma unroll
        for (int j = 0; j < C; ++j) q[u][j] = *(const uint4*)(sp + ((u * C + j) * 32 + lane) * 16);
#if BLOCK_SCALED
#pragma unroll
    for (int j = 0; j < C; ++j) {
        const uint4 mv = *(const uint4*)(sp + WBYTES + (j * 32 + lane) * 16);
        const u32 sw[4] = {mv.x, mv.y, mv.z, mv.w};
#if FMT == 4
        const u32 zw = *(const u32*)(sp + WBYTES + MBYTES + (j * 32 + lane) * 4);
#else
        const u32 zw = 0u;
#endif
        unpack_meta(sw, zw, meta, j);
    }
#endif
}
#endif

// Transposed butterfly over a warp of R values per lane (R = 1 << LOG2U): stage s halves the rows a lane
// carries, exchanging the other half with the lane 16 >> s away; then the remaining lanes of a row group are
// summed. Returns, in lane l, the warp's sum of row (l >> (5 - LOG2U)) & (R - 1); v is clobbered. (The
// fused FFN, appended to this source, reduces its row steps with it too.)
__device__ __forceinline__ float butterfly_rows(float (&v)[R]) {
    const int lane = threadIdx.x & 31;
#pragma unroll
    for (int s = 0; s < LOG2U; ++s) {
        const int half = R >> (s + 1);
        const int o = 16 >> s;
        const bool up = (lane & o) != 0;
#pragma unroll
        for (int i = 0; i < half; ++i) {
            const float send = up ? v[i] : v[i + half];
            const float keep = up ? v[i + half] : v[i];
            v[i] = keep + __shfl_xor_sync(FULL, send, o);
        }
    }
#pragma unroll
    for (int o = 16 >> LOG2U; o > 0; o >>= 1) v[0] += __shfl_xor_sync(FULL, v[0], o);
    return v[0];
}

// XREG_NO_KERNEL: the helpers above only, for the sources built on them (the ring GEMV, the fused FFN, the fused
// attention input); without it every such build compiled this kernel too, about half its compile time.
#ifndef XREG_NO_KERNEL
extern "C" __global__ void __launch_bounds__(WARPS * 32, MINB)
wo_xreg(const uint4* __restrict__ w, const u8* __restrict__ scales, const u8* __restrict__ zeros, float gscale,
        const u16* x, u16* __restrict__ y, float* __restrict__ ws, u32* __restrict__ counters,
        int n_rows, int k, int rpc, int flags, float eps) {
    flags = fuse_flags(flags);
    pdl_trigger();
#if USES_LUT && !XH
    __shared__ float lut[16];
    if (threadIdx.x < 16) lut[threadIdx.x] = kLut[threadIdx.x];
#else
    const float* lut = nullptr;
#endif
    extern __shared__ float part[];  // [WARPS][MT][rpc] warp partial sums
    const int lane = threadIdx.x & 31;
    const int warp = threadIdx.x >> 5;
    const int kc = k / EPC;
    const int n_pad = (n_rows + 7) & ~7;
    const int cbase = (blockIdx.y * WARPS + warp) * SLICE + lane;
    // The CTA's rows: the N / R row groups dealt out evenly (CTAs differ by at most one group), so a grid of
    // exactly one wave keeps every SM equally busy (80-row tiles left 37 of 132 SMs a CTA short at
    // 28672 rows). `rpc` (>= the largest share) is the stride of the partial sums in shared memory.
    const int units = (n_rows + R - 1) / R;
    const int per = units / gridDim.x, extra = units % gridDim.x;
    const int row0 = (blockIdx.x * per + min((int)blockIdx.x, extra)) * R;
    const int nrow = max(0, min((per + ((int)blockIdx.x < extra)) * R, n_rows - row0));
    const int steps = (nrow + R - 1) / R;
    const bool split = gridDim.y > 1;

    uint4 q[R][C];
    Meta meta[R][C];
#if NST > 0
    // This warp's stages follow the partial sums: [WARPS][NST][STAGE_BYTES].
    u8* stages = (u8*)(part + WARPS * MT * rpc) + (size_t)warp * NST * STAGE_BYTES;
    const u32 stages_s = smem_addr(stages);
#pragma unroll
    for (int p = 0; p < NST - 1; ++p) {
        if (p < steps)
            issue_step(w, scales, zeros, n_rows, n_pad, kc, row0 + p * R, cbase, lane, stages_s + p * STAGE_BYTES);
        else
            asm volatile("cp.async.commit_group;" ::: "memory");
    }
#else
    load_step(w, scales, zeros, n_rows, n_pad, kc, row0, cbase, q, meta);
#endif
#if XH && FMT == 5
    // NF4 in f16x2 through the table of code pairs (wo_common.cuh `nf4_pair_fill`), filled while the
    // previous kernel finishes.
    __shared__ __align__(16) u8 nf4_tab[nf4_tab_bytes<false>()];
    nf4_pair_fill<false>(nf4_tab);
    const u32 lane4 = 4u * lane;
#endif
    pdl_wait();  // the first weights are in flight; x, y and the workspace are touched only from here
#if FUSE
    // FUSE_NORM: without split-K the CTA's warps hold all of x in registers, and each adds its slice's
    // squares into fuse_ss (no extra loads, no latency); with split-K the warps read all of x first (the
    // rows dealt out to them).
    __shared__ float fuse_inv[MT], fuse_ss[WARPS][MT];  // read after the __syncthreads before the epilogue
    if (split) fuse_norm_rows(x, k, MT, flags, eps, fuse_inv, warp, WARPS);  // the rows dealt out to the warps
#endif

    // x of this lane's chunks, as floats, for the whole row loop.
    float xr[MT][C][EPC];
#pragma unroll
    for (int m = 0; m < MT; ++m)
#pragma unroll
        for (int j = 0; j < C; ++j) {
            const int c = cbase + 32 * j;
#pragma unroll
            for (int s = 0; s < SUBS; ++s) {
#if FUSE && SILU
                if (flags & FUSE_SILU) {
                    // x = silu(gate) * up from the gate_up row [2K] (zeros past K).
                    uint4 gv = make_uint4(0u, 0u, 0u, 0u), uv = gv;
                    if (c < kc) {
                        const u16* gr = x + (size_t)m * 2 * k + (size_t)c * EPC + 8 * s;
                        gv = ld_dep((const uint4*)gr);
                        uv = ld_dep((const uint4*)(gr + k));
                    }
                    const u32 gw[4] = {gv.x, gv.y, gv.z, gv.w}, uw[4] = {uv.x, uv.y, uv.z, uv.w};
#pragma unroll
                    for (int h = 0; h < 4; ++h)
                        silu_mul2(gw[h], uw[h], xr[m][j][8 * s + 2 * h], xr[m][j][8 * s + 2 * h + 1]);
                    continue;
                }
#endif
                uint4 xv = make_uint4(0u, 0u, 0u, 0u);
                if (c < kc) xv = ld_dep((const uint4*)(x + (size_t)m * k + (size_t)c * EPC + 8 * s));
                x2f(xv.x, xr[m][j][8 * s + 0], xr[m][j][8 * s + 1]);
                x2f(xv.y, xr[m][j][8 * s + 2], xr[m][j][8 * s + 3]);
                x2f(xv.z, xr[m][j][8 * s + 4], xr[m][j][8 * s + 5]);
                x2f(xv.w, xr[m][j][8 * s + 6], xr[m][j][8 * s + 7]);
            }
        }
#if INT4_FLOAT || INT8_FLOAT
    float xsum[MT][C];
#pragma unroll
    for (int m = 0; m < MT; ++m)
#pragma unroll
        for (int j = 0; j < C; ++j) {
            float t = 0.0f;
#pragma unroll
            for (int e = 0; e < EPC; ++e) t += xr[m][j][e];
            xsum[m][j] = t;
        }
#endif
#if FUSE
    if (!split && (flags & FUSE_NORM)) {
#pragma unroll
        for (int m = 0; m < MT; ++m) {
            float ss = 0.0f;
#pragma unroll
            for (int j = 0; j < C; ++j)
#pragma unroll
                for (int e = 0; e < EPC; ++e) ss = fmaf(xr[m][j][e], xr[m][j][e], ss);  // zeros past K
#pragma unroll
            for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(FULL, ss, o);
            if (lane == 0) fuse_ss[warp][m] = ss;
        }
    }
#endif
#if USES_LUT && !XH
    __syncthreads();  // the LUT
#elif FMT == 5
    __syncthreads();  // the pair table
#endif
#if XH
    // x as f16x2 pairs scaled by 2^-e (2^(e-1) <= the lane's largest |x| < 2^e; exact), and each chunk's sum
    // (INT4's zero points); the row sums are multiplied back by 2^e before the butterfly.
    u32 xh[C][4][4];
    float xsh[C], xout;
    {
        float mx = 0.0f;
#pragma unroll
        for (int j = 0; j < C; ++j)
#pragma unroll
            for (int e = 0; e < EPC; ++e) mx = fmaxf(mx, fabsf(xr[0][j][e]));
        const int ex = unit_exp(mx);
        xout = ldexpf(1.0f, ex);
        const float inv = ldexpf(1.0f, -ex) * E2M1_UP;  // E2M1: the decode's 2^-14 cancels it
#pragma unroll
        for (int j = 0; j < C; ++j) xsh[j] = pack_x(xr[0][j], inv, xh[j]);
    }
#endif

    for (int st = 0; st < steps; ++st) {
        const int n0 = row0 + st * R;
#if NST > 0
        {
            const int ahead = st + NST - 1;
            if (ahead < steps)
                issue_step(w, scales, zeros, n_rows, n_pad, kc, row0 + ahead * R, cbase, lane,
                           stages_s + (ahead % NST) * STAGE_BYTES);
            else
                asm volatile("cp.async.commit_group;" ::: "memory");
            asm volatile("cp.async.wait_group %0;" ::"n"(NST - 1) : "memory");
            read_step(stages + (st % NST) * STAGE_BYTES, lane, q, meta);
        }
#endif
#if PF
        uint4 qn[R][C];
        Meta mn[R][C];
        if (st + 1 < steps) load_step(w, scales, zeros, n_rows, n_pad, kc, n0 + R, cbase, qn, mn);
#endif
        float acc[R][MT];
#pragma unroll
        for (int u = 0; u < R; ++u)
#pragma unroll
            for (int m = 0; m < MT; ++m) acc[u][m] = 0.0f;
#pragma unroll
        for (int u = 0; u < R; ++u)
#pragma unroll
            for (int j = 0; j < C; ++j) {
                float part_s[MT];
#pragma unroll
                for (int m = 0; m < MT; ++m) part_s[m] = 0.0f;
#if XH
                {
                    const uint4 qq = q[u][j];
                    u32 ae = 0u, ao = 0u;
#if FMT == 7
                    // NVFP4: values 0-15 of the chunk under the first E4M3 scale, 16-31 under the second.
                    u32 be = 0u, bo = 0u;
                    dot8f4(qq.x, xh[j][0], ae, ao);
                    dot8f4(qq.y, xh[j][1], ae, ao);
                    dot8f4(qq.z, xh[j][2], be, bo);
                    dot8f4(qq.w, xh[j][3], be, bo);
                    acc[u][0] += nv_chunk(ae, ao, be, bo, meta[u][j].s2);
#else
#pragma unroll
                    for (int wd = 0; wd < 4; ++wd) {
#if FMT == 4
                        dot8h(word(qq, wd), xh[j][wd], ae, ao);
#elif FMT == 5
                        dot8nf4t<false>(word(qq, wd), xh[j][wd], nf4_tab, lane4, ae, ao);
#else
                        dot8f4(word(qq, wd), xh[j][wd], ae, ao);
#endif
                    }
#if FMT == 4
                    // sum (q - z) x = sum (q - 8) x + (8 - z) sum x; meta.zero holds (1024 + z) as f16.
                    const float z8 = 8.0f - (float)(meta[u][j].zero & 15u);
                    acc[u][0] = fmaf(meta[u][j].scale, fmaf(z8, xsh[j], hsum4(ae, ao)), acc[u][0]);
#else
                    acc[u][0] = fmaf(meta[u][j].scale, hsum4(ae, ao), acc[u][0]);
#endif
#endif
                }
#elif INT4_FLOAT
#pragma unroll
                for (int wd = 0; wd < 4; ++wd) {
                    const u32 v = word(q[u][j], wd);
#pragma unroll
                    for (int i = 0; i < 8; ++i) {
                        const u32 sh = i < 4 ? v << (16 - 4 * i) : v >> (4 * i - 16);
                        const float f = as_float(lop3_and_or(sh, 0x000f0000u, 0x3f800000u));  // 1 + q / 128
#pragma unroll
                        for (int m = 0; m < MT; ++m) part_s[m] = fmaf(f, xr[m][j][8 * wd + i], part_s[m]);
                    }
                }
                {
                    // meta.zero holds (1024 + z) as f16 in its low half: z = its low 4 bits.
                    const float z128 = 128.0f + (float)(meta[u][j].zero & 15u);
#pragma unroll
                    for (int m = 0; m < MT; ++m)
                        acc[u][m] = fmaf(meta[u][j].scale, fmaf(part_s[m], 128.0f, -z128 * xsum[m][j]), acc[u][m]);
                }
#elif INT8_FLOAT
#pragma unroll
                for (int wd = 0; wd < 4; ++wd) {
                    const u32 v = word(q[u][j], wd) ^ 0x80808080u;
#pragma unroll
                    for (int i = 0; i < 4; ++i) {
                        const float f = as_float(prmt(v, 0x3f800000u, 0x7604u + 16u * i));  // 1 + (b + 128) 2^-15
#pragma unroll
                        for (int m = 0; m < MT; ++m) part_s[m] = fmaf(f, xr[m][j][4 * wd + i], part_s[m]);
                    }
                }
#pragma unroll
                for (int m = 0; m < MT; ++m) acc[u][m] += fmaf(part_s[m], 32768.0f, -32896.0f * xsum[m][j]);
#else
#pragma unroll
                for (int s = 0; s < SUBS; ++s) {
                    float wf[8];
                    decode8(q[u][j], s, meta[u][j], lut, wf);
#pragma unroll
                    for (int m = 0; m < MT; ++m)
#pragma unroll
                        for (int e = 0; e < 8; ++e) part_s[m] = fmaf(wf[e], xr[m][j][8 * s + e], part_s[m]);
#if BLOCK_SCALED
                    if ((s + 1) % (SUBS / SEGS) == 0) {
                        const float sc = seg_scale(meta[u][j], s / (SUBS / SEGS));
#pragma unroll
                        for (int m = 0; m < MT; ++m) {
                            acc[u][m] = fmaf(part_s[m] * E2M1_UP, sc, acc[u][m]);
                            part_s[m] = 0.0f;
                        }
                    }
#endif
                }
#if !BLOCK_SCALED
#pragma unroll
                for (int m = 0; m < MT; ++m) acc[u][m] += part_s[m];
#endif
#endif  // INT4_FLOAT / INT8_FLOAT
            }
#if XH
#pragma unroll
        for (int u = 0; u < R; ++u) acc[u][0] *= xout;
#endif
        // Each row summed over the warp (the transposed butterfly).
        const int r = (lane >> (5 - LOG2U)) & (R - 1);
#pragma unroll
        for (int m = 0; m < MT; ++m) {
            float v[R];
#pragma unroll
            for (int u = 0; u < R; ++u) v[u] = acc[u][m];
            const float sum = butterfly_rows(v);
            if ((lane & ((32 >> LOG2U) - 1)) == 0 && st * R + r < nrow) part[(warp * MT + m) * rpc + st * R + r] = sum;
        }
#if PF
        if (st + 1 < steps) {
#pragma unroll
            for (int u = 0; u < R; ++u)
#pragma unroll
                for (int j = 0; j < C; ++j) {
                    q[u][j] = qn[u][j];
                    meta[u][j] = mn[u][j];
                }
        }
#elif NST == 0
        if (st + 1 < steps) load_step(w, scales, zeros, n_rows, n_pad, kc, n0 + R, cbase, q, meta);
#endif
    }
#if FUSE
    // FUSE_ADD without split-K: the residual values of this thread's first outputs are loaded before the
    // barrier, so their latency overlaps it (the rest, if any, are loaded when stored). Loading them with x
    // instead, before the row loop, measured no better (INT4 o_proj 7.7 vs 7.5 us).
    constexpr int YPF = 4;
    float yold[YPF];
#pragma unroll
    for (int j = 0; j < YPF; ++j) {
        const int i = threadIdx.x + j * blockDim.x;
        const int m = i / max(nrow, 1), rr = i - m * nrow;
        yold[j] = (!split && (flags & FUSE_ADD) && i < MT * nrow) ? io2f(y[(size_t)m * n_rows + row0 + rr]) : 0.0f;
    }
#endif
    __syncthreads();

    // The CTA's rows: sum the warps' partials, scale, write (or add into the split-K workspace).
    int j = 0;
    for (int i = threadIdx.x; i < MT * nrow; i += blockDim.x, ++j) {
        const int m = i / nrow, rr = i - m * nrow;
        float v = 0.0f;
#pragma unroll
        for (int wp = 0; wp < WARPS; ++wp) v += part[(wp * MT + m) * rpc + rr];
        const int n = row0 + rr;
#if ROW_SCALED
        v *= __ldg((const float*)scales + n);
#elif FMT == 7
        v *= gscale;
#endif
        const size_t o = (size_t)m * n_rows + n;
#if FUSE
        if (flags & FUSE_NORM) {
            if (split) {
                v *= fuse_inv[m];
            } else {
                float t = 0.0f;
#pragma unroll
                for (int wp = 0; wp < WARPS; ++wp) t += fuse_ss[wp][m];
                v *= rsqrtf(t / (float)k + eps);
            }
        }
        if (j < YPF) {
            v += yold[j < YPF ? j : 0];
            splitk_store(ws, y, o, v, split, flags & ~FUSE_ADD);
        } else {
            splitk_store(ws, y, o, v, split, flags);
        }
#else
        splitk_store(ws, y, o, v, split, 0);
#endif
    }
    if (!split) return;

    splitk_finish(ws, y, counters, row0, nrow, n_rows, MT, flags);
}
#endif  // XREG_NO_KERNEL

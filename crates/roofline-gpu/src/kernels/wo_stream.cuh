// Shared by the kernels that stream weight rows (INT4 g128; NF4, MXFP4, NVFP4, and FP8 / INT8 with per-row
// scales and plain FP16 or BF16, for the ring GEMV) into shared memory with Hopper bulk copies (sm_90+) and multiply them
// by one x row (the ring GEMV: up to 3, `row_step_m`; FP16 or BF16; the ring scales x into [-1, 1) and packs it as
// f16), in f16x2 (BF16 weights: in FP32): the fused FFN (ffn_fused.cu) and the
// ring GEMV (wo_ring.cu). Appended to weight_only_xreg.cu's source (M = 1, R = 8, C = 1: its `Meta`, `unpack_meta`,
// `word` and `butterfly_rows`), before the kernel's own file; FD is K (a multiple of 1024).

#ifndef FD
#error "FD (the row length K) must be defined"
#endif
#if FMT > 7 || MT != 1 || R != 8 || C != 1 || !FUSE
#error "the streaming kernels are built on the FP16, BF16, FP8, INT8, INT4 g128, NF4, MXFP4 or NVFP4, M = 1, R = 8, C = 1, FUSE = 1 x-in-registers source"
#endif
// Bytes of one weight row: FD codes of 4 bits, of 8 (FP8, INT8; their per-row FP32 scales are applied to the
// row sums, no tables) or of 16 (FP16, BF16: no scales at all).
#define ROWB (FD * (FMT <= 1 ? 16 : FMT <= 3 ? 8 : 4) / 8)
// A lane's chunk of each row of a row step: one 16-byte chunk (EPC values), for FP16 and BF16 two side by side
// (32 bytes, the 16 values of an 8-bit chunk, so that their K slices are 8-bit's): LV values, LCB bytes.
#define LCH (FMT <= 1 ? 2 : 1)
#define LV (EPC * LCH)
#define LCB (16 * LCH)
// The scale tables (pack::xreg_tables, [column][row]) per row step of 8 rows: RS_COLS columns, RS_SB bytes of
// scales and RS_ZB of zero points per column; RS_COL(c): the column of the lane's 32-value chunk c.
#if FMT <= 3
#define RS_COLS 0  // FP8 / INT8: no block scales
#define RS_SB 0
#define RS_ZB 0
#define RS_COL(c) 0
#elif FMT == 4
#define RS_COLS (FD / 128)
#define RS_SB 16  // 8 FP16 scales
#define RS_ZB 4   // 8 4-bit zero points
#define RS_COL(c) ((c) >> 2)
#elif FMT == 5
#define RS_COLS (FD / 64)
#define RS_SB 16  // 8 FP16 absmax scales (one per 64 values)
#define RS_ZB 0
#define RS_COL(c) ((c) >> 1)
#elif FMT == 6
#define RS_COLS (FD / 32)
#define RS_SB 8  // 8 E8M0 scales
#define RS_ZB 0
#define RS_COL(c) (c)
#else
#define RS_COLS (FD / 32)
#define RS_SB 16  // 8 x two E4M3 scales (one per 16 values)
#define RS_ZB 0
#define RS_COL(c) (c)
#endif
#define KSL (FD / (32 * LV))  // K slices of 32 lanes x one chunk (1024 4-bit values, 512 8- or 16-bit ones)
// (The ring GEMV's tensor-core row step in K splits, RW_SPLITS > 1 in wo_ring.cu, takes each CTA's share of K in slices
// of 256 values: FD a multiple of 256 there.)
#if !(defined(RW_SPLITS) && RW_SPLITS > 1 && FD % 256 == 0) && FD % 1024 != 0 || KSL > 31
#error "FD must be a multiple of 1024, at most 31 K slices (one row group and a producer warp in 1024 threads)"
#endif
// K parts of a row step in shared memory (the ring GEMV's RW_KH, wo_ring.cu): its rows RW_KH times shorter
// (ROWB / RW_KH bytes), row_step reading the lane's chunk within its part. 1 everywhere else.
#ifndef RW_KH
#define RW_KH 1
#endif
// Profiling experiment (results wrong by design): EXP_FFN_NOLOAD 1: no weights are copied, the consumers
// decode whatever the ring holds without waiting (the kernel's compute alone: 26.0 us of its 41.4 us at
// Llama-3.1-8B's shape on the H100, session 13; since the scales are staged in shared memory its output can
// be non-finite, which model-bench's step check rejects: time it with ncu on the ffn_gpu test instead).
#ifndef EXP_FFN_NOLOAD
#define EXP_FFN_NOLOAD 0
#endif
// EXP_FFN_LOADONLY 1: the weights stream through the ring as usual, the consumers release each stage
// without decoding it and every partial output is zero (x comes out unchanged): the kernel's streaming alone.
#ifndef EXP_FFN_LOADONLY
#define EXP_FFN_LOADONLY 0
#endif
// EXP_RING_HALFDECODE 1 (INT4, wrong results): a row step decodes and multiplies only the first two words of
// each lane's 16 bytes: what a decode of half the instructions would gain.
#ifndef EXP_RING_HALFDECODE
#define EXP_RING_HALFDECODE 0
#endif
// RW_SUBN 1 (INT4: the ring GEMV's CUDA-core row step, the fused FFN's phase A and attn_qkv's ring; ring/plan.rs,
// ffn.rs and attn_qkv.rs set it): the codes as f16 subnormals, 4 ALU instructions and 4 multiply-adds a word
// instead of 13 (`dot8subn`, x packed by `pack_x_subn`); the zero point comes off each chunk's sum in FP32 as z
// times the lane's sum of x. 0: `dot8hz`'s q - z pairs (the x-in-registers kernel's and the FFN's phase B always).
#ifndef RW_SUBN
#define RW_SUBN 0
#endif
// RW_SUBN's words of a chunk in one pair of f16x2 accumulators before they are widened to FP32. 4 (one pair a chunk)
// ran 2-3% faster still (session 60, 1x14336x4096 9.07 us against 9.30) but its longer f16 chains of uncentred sums
// failed the 1e-3 check (up to 1.01e-3); at 2 the ring test's errors are 6.5-7.2e-4 (dot8hz's 4.7-5.5e-4).
#ifndef SUBN_WORDS
#define SUBN_WORDS 2
#endif
// SUBN_MMA 1 (RW_SUBN's row step, sm_80+; the ring, the fused FFN and attn_qkv run it on sm_90 only): each row's f16x2
// sums are widened and added by the tensor cores instead of by conversions, adds and a butterfly (`row_step_subn`);
// 0: session 60's (A/B: ROOFLINE_NVRTC_EXTRA=-DSUBN_MMA=0).
#ifndef SUBN_MMA
#define SUBN_MMA 1
#endif
// NF4_TC 1 (NF4's CUDA-core row step, sm_80+; the ring GEMV sets it where it runs, ring/plan.rs `nf4_tensor_sums`): each
// row's f16x2 sums are widened, added over the lane pairs of NF4's 64-value blocks and gathered by the tensor cores, as
// RW_SUBN's `row_step_subn` does over INT4's quads (`row_step_nf4tc`); 0: hsum4, the scale a row and the butterfly.
#ifndef NF4_TC
#define NF4_TC 0
#endif
// The row steps whose sums the tensor cores add (`mma_f16_f32`, `tc_sum_rows`).
#define TC_SUMS ((FMT == 4 && RW_SUBN && SUBN_MMA) || (FMT == 5 && NF4_TC))

#if FMT == 4
// The 8 INT4 codes of word v (nibble i = code i) against x packed by `pack_x_subn`, as f16 subnormals, no
// offsets and no subtractions: f16 bits 0-9 are a subnormal's mantissa, linear in them (value = bits 2^-24), so
// v's bytes 0 and 2 masked as they stand are the f16 pair (q0 + 16 q1, q4 + 16 q5) 2^-24, and their low nibbles
// (q0, q4) 2^-24; bytes 1 and 3 come down by one byte permute. The byte b = q0 + 16 q1 times x1 / 16, plus the
// nibble q0 times (x0 - x1 / 16), is x0 q0 + x1 q1: a[0] = (x0 - x1 / 16, x4 - x5 / 16), a[1] = (x1, x5) / 16,
// a[2] = (x2 - x3 / 16, x6 - x7 / 16), a[3] = (x3, x7) / 16, each times the caller's 2^15 / max|x| (products of
// 2^-24-scaled codes stay normal for all but the smallest x; those land in f16's subnormals, off by 2^-25 at
// most). Sums q (not q - z): the caller takes z sum(x) off in FP32. FP16 subnormals run at full rate (no FTZ).
__device__ __forceinline__ void dot8subn(u32 v, const u32 a[4], u32& acc_e, u32& acc_o) {
    const u32 bh = prmt(v, 0u, 0x4341u);  // bytes 1 and 3 in the halves' low bytes
    acc_e = hfma2(v & 0x000f000fu, a[0], hfma2(v & 0x00ff00ffu, a[1], acc_e));
    acc_o = hfma2(bh & 0x000f000fu, a[2], hfma2(bh, a[3], acc_o));
}

// x's chunk (NV values) packed for `dot8subn`: each value times `up` (the caller's 2^15 / its largest |x|, a power
// of two), a[wd][k] as above for word wd's values 8 wd + k. Returns sum(x) up 2^-24, the zero points' term in
// the units of dot8subn's sums: with SUBN_MMA the sum over the lane's quad (all 32 lanes must call it together).
template <int NV>
__device__ __forceinline__ float pack_x_subn(const float xr[NV], float up, u32 xh[4][4]) {
#pragma unroll
    for (int wd = 0; wd < 4; ++wd) {
        if (8 * wd >= NV) {
#pragma unroll
            for (int k = 0; k < 4; ++k) xh[wd][k] = 0u;
            continue;
        }
        const float* v = xr + 8 * wd;
        const float s = up * 0.0625f;
        xh[wd][0] = f2x2h(fmaf(v[0], up, -v[1] * s), fmaf(v[4], up, -v[5] * s));
        xh[wd][1] = f2x2h(v[1] * s, v[5] * s);
        xh[wd][2] = f2x2h(fmaf(v[2], up, -v[3] * s), fmaf(v[6], up, -v[7] * s));
        xh[wd][3] = f2x2h(v[3] * s, v[7] * s);
    }
    // Summed as rounded to f16 (what the products see: x0 = a[0] + a[1], x1 = 16 a[1]), so that x's rounding cancels
    // in sum(x (q - z)) as it does in dot8hz's products of q - z.
    float xsum = 0.0f;
#pragma unroll
    for (int wd = 0; wd < 4; ++wd) {
#pragma unroll
        for (int k = 0; k < 4; k += 2) {
            float c0, c1, d0, d1;
            h2x2f(xh[wd][k], c0, c1);
            h2x2f(xh[wd][k + 1], d0, d1);
            xsum += (c0 + c1) + 17.0f * (d0 + d1);
        }
    }
#if SUBN_MMA
    // row_step_subn takes the zero points off the sums of a lane quad (the 128 values of one INT4 group): the quad's
    // sum of x (the same bits in its four lanes: the adds are commutative).
    xsum += __shfl_xor_sync(FULL, xsum, 1);
    xsum += __shfl_xor_sync(FULL, xsum, 2);
#endif
    return xsum * 0x1p-24f;
}
#endif

#if FMT == 5 && !defined(NF4_T0)
#error "NF4 needs its f16 byte tables NF4_T0..NF4_T7 (mma::nf4_f16_tables)"
#endif
// NF4_PAIRS 1 (the ring GEMV's default for NF4, and the fused FFN's where a ring fits beside it): NF4 codes
// through the shared-memory table of code pairs (wo_common.cuh `nf4_pair_fill`, `dot8nf4t`; the caller fills
// it and passes it to row_step); 0: the byte-permute decode (`dot8nf4`). NF4_WIDE 1 (the ring GEMV): the
// table's 64 KB layout, one byte permute a lookup, in the caller's dynamic shared memory; 0: the 32 KB one,
// a static array.
#ifndef NF4_PAIRS
#define NF4_PAIRS 0
#endif
#ifndef NF4_WIDE
#define NF4_WIDE 0
#endif

// What normalized x (rms 1, so |x| <= sqrt(FD)) is multiplied by to lie within [-1, 1]: 2^-ceil(log2(FD) / 2), exact
// (the ring's FP8 / INT8 and INT4 subnormal builds with the fused norm, the fused FFN's INT4 subnormal phase A).
__device__ __forceinline__ float norm_down() { return ldexpf(1.0f, -((33 - __clz(FD - 1)) / 2)); }

// What normalized x (rms 1, so |x| <= sqrt(FD)) is multiplied by for the E2M1 decode's 2^-14
// (wo_common.cuh E2M1_UP): 2^14 / 2^ceil(log2(FD) / 2), so it stays within f16 (at most 2^14, exact); the
// rest of 2^14, E2M1_UP / this, goes onto the sums (host test: ring/tests.rs `e2m1_norm_factor_keeps_x_in_f16_for_every_k`).
__device__ __forceinline__ float e2m1_norm_up() { return 16384.0f * norm_down(); }

// With NF4_PAIRS, NF4's pair table filled: NF4_WIDE at `dyn` (64 KB of the caller's dynamic shared memory,
// 16-byte aligned), else in 32 KB of static shared memory; nullptr without. Every thread of the CTA calls it;
// the caller synchronizes before the first lookup.
__device__ __forceinline__ const u8* nf4_pair_table(u8* dyn) {
#if FMT == 5 && NF4_PAIRS && NF4_WIDE
    nf4_pair_fill<true>(dyn);
    return dyn;
#elif FMT == 5 && NF4_PAIRS
    __shared__ __align__(16) u8 nf4_tab[nf4_tab_bytes<false>()];
    nf4_pair_fill<false>(nf4_tab);
    return nf4_tab;
#else
    return nullptr;
#endif
}

#if FMT == 5
// dot8h for NF4 the way this build decodes it: through the pair table `nf4t` (NF4_PAIRS, `nf4_pair_table`;
// its layout per NF4_WIDE) or by byte permutes (`dot8nf4`, `nf4t` unused).
__device__ __forceinline__ void dot8nf4_any(u32 v, const u32 a[4], const u8* nf4t, u32& acc_e, u32& acc_o) {
#if NF4_PAIRS
    dot8nf4t<NF4_WIDE>(v, a, nf4t, 4u * (threadIdx.x & 31), acc_e, acc_o);
#else
    dot8nf4(v, a, acc_e, acc_o);
#endif
}
#endif

// The sum of squares of a lane's chunk of x.
__device__ __forceinline__ float chunk_sum_sq(const float xr[LV]) {
    float ss = 0.0f;
#pragma unroll
    for (int e = 0; e < LV; ++e) ss = fmaf(xr[e], xr[e], ss);
    return ss;
}

// The lane's 32-value chunk of x (values cbase x EPC ...) as floats; returns their sum of squares.
__device__ __forceinline__ float load_chunk(const u16* x, int cbase, float xr[LV]) {
    const uint4* xp = (const uint4*)(x + (size_t)cbase * LV);
#pragma unroll
    for (int s = 0; s < LV / 8; ++s) {
        const uint4 xv = xp[s];  // plain load: x is written by earlier kernels of the step
        x2f(xv.x, xr[8 * s + 0], xr[8 * s + 1]);
        x2f(xv.y, xr[8 * s + 2], xr[8 * s + 3]);
        x2f(xv.z, xr[8 * s + 4], xr[8 * s + 5]);
        x2f(xv.w, xr[8 * s + 6], xr[8 * s + 7]);
    }
    return chunk_sum_sq(xr);
}

#if TC_SUMS
// d += A B on the tensor cores: mma.sync m16n8k16, A (row-major 16 x 16) and B (column-major 16 x 8) in f16, C and D
// in FP32, each lane's fragments as the PTX ISA lays them out (lane = 4 g + t: a0 rows g, a1 rows g + 8, columns 2t
// and 2t + 1; a2, a3 the same 8 columns on; b0 rows 2t, 2t + 1 of column g, b1 8 rows on; d0, d1 row g, columns 2t
// and 2t + 1; d2, d3 row g + 8).
__device__ __forceinline__ void mma_f16_f32(float (&d)[4], u32 a0, u32 a1, u32 a2, u32 a3, u32 b0, u32 b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// The f16 ones a lane holds in B for the MMA of rows i and i + 4 (`row_step_subn`): B's columns 2i and
// 2i + 1 are held by lanes 8i .. 8i + 7.
__device__ __forceinline__ u32 tc_sum_ones(int i) { return ((threadIdx.x & 31) >> 3) == i ? 0x3c003c00u : 0u; }

// The warp's sum of row (lane >> 2) & 7 (butterfly_rows' layout) from each lane's rows t and t + 4 of its quad (lane =
// 4g + t; v0, v1): one exchange leaves a lane one of the two (lane bit 4: row t + 4), two adds over lane bits 3 and
// 2 finish the sum, and a gather brings row g to lane 4g + t (from the lanes of t = g & 3, bit 4 = g >> 2).
__device__ __forceinline__ float tc_sum_rows(float v0, float v1) {
    const int lane = threadIdx.x & 31, g = (lane >> 2) & 7;
    const bool hi = (lane & 16) != 0;
    float v = (hi ? v1 : v0) + __shfl_xor_sync(FULL, hi ? v0 : v1, 16);
    v += __shfl_xor_sync(FULL, v, 8);
    v += __shfl_xor_sync(FULL, v, 4);
    return __shfl_sync(FULL, v, ((g >> 2) << 4) | (g & 3));
}
#endif

#if FMT == 4 && RW_SUBN && SUBN_MMA

// row_step_m for INT4's subnormal codes (RW_SUBN) with SUBN_MMA: the same products (`dot8subn`), but the f16x2
// sums are widened, added over the lane quad (lanes 4 g .. 4 g + 3: the 128 values of INT4 group g of the warp's K
// slice, one scale and zero point a row) and gathered by the tensor cores. Rows i and i + 4 of the step take one
// MMA a SUBN_WORDS words: A = their four accumulators (a0, a2: row i's; a1, a3: row i + 4's) and B ones in columns 2i
// and 2i + 1 only (held by lanes 8i .. 8i + 7), all into one D; so D row g, column 2t is row t's quad sum and D row
// g + 8 row t + 4's (FP32 adds). Each lane then applies its quad's zero point and scale to 2 rows, not 8 (the
// sums' four conversions and four adds a row and SUBN_WORDS words, and 8 scales unpacked, were about a third of
// the step's instructions: session 61), and the warp's sum is 3 exchanges (a lane's two rows to one, then lane
// bits 3 and 2) and one gather. `xsum[m]`: pack_x_subn's quad sums.
template <int MR, bool SCALES_IN_STAGE>
__device__ __forceinline__ void row_step_subn(const u8* sp, const u8* sc, const u8* zc, u32 fb, u32 par,
                                              const u32 (&xh)[MR][4][4], float (&out)[MR], const float* xsum) {
    const int t = threadIdx.x & 3;
    if (SCALES_IN_STAGE && !EXP_FFN_NOLOAD) mbar_wait(fb, par);
    // Rows t and t + 4: their scales (f16, 8 rows a column) and zero points (nibbles of one word).
    const float s0 = h2f(((const u16*)sc)[t]), s1 = h2f(((const u16*)sc)[t + 4]);
    const u32 zw = *(const u32*)zc;
    const float z0 = __uint_as_float(0x4b000000u | ((zw >> (4 * t)) & 15u)) - 8388608.0f;  // exact
    const float z1 = __uint_as_float(0x4b000000u | ((zw >> (4 * t + 16)) & 15u)) - 8388608.0f;
    if (!SCALES_IN_STAGE && !EXP_FFN_NOLOAD) mbar_wait(fb, par);
    if (EXP_FFN_LOADONLY) {
#pragma unroll
        for (int m = 0; m < MR; ++m) out[m] = 0.0f;
        return;
    }
    float d[MR][4];
#pragma unroll
    for (int m = 0; m < MR; ++m) d[m][0] = d[m][1] = d[m][2] = d[m][3] = 0.0f;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const u32 b = tc_sum_ones(i);  // f16 (1, 1) in columns 2i, 2i + 1
        const uint4 q0 = *(const uint4*)(sp + i * (ROWB / RW_KH));
        const uint4 q1 = *(const uint4*)(sp + (i + 4) * (ROWB / RW_KH));
#pragma unroll
        for (int m = 0; m < MR; ++m) {
#pragma unroll
            for (int w0 = 0; w0 < 4 - 2 * EXP_RING_HALFDECODE; w0 += SUBN_WORDS) {
                u32 e0 = 0u, o0 = 0u, e1 = 0u, o1 = 0u;
#pragma unroll
                for (int wd = w0; wd < w0 + SUBN_WORDS; ++wd) {
                    dot8subn(word(q0, wd), xh[m][wd], e0, o0);
                    dot8subn(word(q1, wd), xh[m][wd], e1, o1);
                }
                mma_f16_f32(d[m], e0, e1, o0, o1, b, b);
            }
        }
    }
#pragma unroll
    for (int m = 0; m < MR; ++m) {
        // Rows t and t + 4 of the quad's group, less z sum(x), scaled; then the warp's sums.
        out[m] = tc_sum_rows(s0 * fmaf(-z0, xsum[m], d[m][0]), s1 * fmaf(-z1, xsum[m], d[m][2]));
    }
}
#endif

#if FMT == 5 && NF4_TC
// The f16 ones a lane holds in B for the MMA of rows i and i + 4 (`row_step_nf4tc`): column 2i sums the A columns of
// a quad's lanes 0 and 1 (NF4 block 2g' of the quad's two), column 2i + 1 those of lanes 2 and 3; B's column c is held
// by lanes 4c .. 4c + 3, its rows 2t, 2t + 1, 2t + 8, 2t + 9 (lane t's A columns) by lane 4c + t.
__device__ __forceinline__ u32 tc_sum_ones_nf4(int i) {
    const int lane = threadIdx.x & 31, c = lane >> 2;
    return (c >> 1) == i && (c & 1) == ((lane & 3) >> 1) ? 0x3c003c00u : 0u;
}

// row_step_m for NF4 with NF4_TC: the same products (`dot8nf4_any`, four words in each pair of f16x2 accumulators, as
// hsum4 took them), but the sums are widened, added over each 64-value block's lane pair and gathered by the tensor
// cores: rows i and i + 4 take one MMA, A = their four accumulators (as `row_step_subn`'s) and B ones that sum lanes 0-1
// of a quad into column 2i and lanes 2-3 into 2i + 1 (`tc_sum_ones_nf4`); so lane 4g + t holds D[g][2t], D[g][2t + 1]
// (row t: its quad's two blocks) and D[g + 8][2t], D[g + 8][2t + 1] (row t + 4), applies those four blocks' absmax
// scales and sums the warp as `row_step_subn` does (`tc_sum_rows`). `sc`: the lane's own scale column (8 rows of f16),
// `cs` bytes from the next column (the quad's two columns are its lanes 0-1's and 2-3's).
template <int MR, bool SCALES_IN_STAGE>
__device__ __forceinline__ void row_step_nf4tc(const u8* sp, const u8* sc, int cs, u32 fb, u32 par,
                                               const u32 (&xh)[MR][4][4], float (&out)[MR], const u8* nf4t) {
    const int t = threadIdx.x & 3;
    if (SCALES_IN_STAGE && !EXP_FFN_NOLOAD) mbar_wait(fb, par);
    // Rows t and t + 4 of the quad's first column (lanes 0-1's) and of its second.
    const u16* c0 = (const u16*)(sc - (t >> 1) * cs);
    const u16* c1 = (const u16*)(sc - (t >> 1) * cs + cs);
    const float s00 = h2f(c0[t]), s01 = h2f(c1[t]), s10 = h2f(c0[t + 4]), s11 = h2f(c1[t + 4]);
    if (!SCALES_IN_STAGE && !EXP_FFN_NOLOAD) mbar_wait(fb, par);
    if (EXP_FFN_LOADONLY) {
#pragma unroll
        for (int m = 0; m < MR; ++m) out[m] = 0.0f;
        return;
    }
    float d[MR][4];
#pragma unroll
    for (int m = 0; m < MR; ++m) d[m][0] = d[m][1] = d[m][2] = d[m][3] = 0.0f;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const u32 b = tc_sum_ones_nf4(i);
        const uint4 q0 = *(const uint4*)(sp + i * (ROWB / RW_KH));
        const uint4 q1 = *(const uint4*)(sp + (i + 4) * (ROWB / RW_KH));
#pragma unroll
        for (int m = 0; m < MR; ++m) {
            u32 e0 = 0u, o0 = 0u, e1 = 0u, o1 = 0u;
#pragma unroll
            for (int wd = 0; wd < 4; ++wd) {
                dot8nf4_any(word(q0, wd), xh[m][wd], nf4t, e0, o0);
                dot8nf4_any(word(q1, wd), xh[m][wd], nf4t, e1, o1);
            }
            mma_f16_f32(d[m], e0, e1, o0, o1, b, b);
        }
    }
#pragma unroll
    for (int m = 0; m < MR; ++m) {
        out[m] = tc_sum_rows(fmaf(s01, d[m][1], s00 * d[m][0]), fmaf(s11, d[m][3], s10 * d[m][2]));
    }
}
#endif

// One row step (8 rows of FD codes at `sp`, the lane's chunk at cbase; rows ROWB / RW_KH bytes apart) against
// the lane's chunk of MR rows of x (`xh[m]`, as `pack_x` lays them out; the ring GEMV's RW_M): the rows' scales (8
// f16) and zero points (4 bytes) at `sc` / `zc` in shared memory, read before waiting on the stage's `full` mbarrier
// (shared address `fb`, phase parity `par`), or after it with SCALES_IN_STAGE (the scales come with the stage: the
// ring GEMV's RW_SSTREAM). Sets `out[m]` to weight row (lane >> 2) & 7's dot product with x row m, summed over the
// warp (in the lanes with lane & 3 == 0). `nf4t`: with NF4_PAIRS, NF4's pair table (`nf4_pair_table`). `xsum`:
// with RW_SUBN (INT4), the MR rows' `pack_x_subn` sums of the lane's x (`xh` packed by it). `cs`: with NF4_TC, the bytes
// from one scale column to the next (`row_step_nf4tc`).
// FP8 / INT8 (no block scales: `sc`, `zc` and `nf4t` unread; the row scales come after the sums): the lane's 16
// codes of each row, 4 words through `dot4b` against x's pairs as `pack_x` lays them out.
// Each word is decoded once for all MR rows of x: the decode helpers (dot8hz, dot8f4, dot4b, ...) are pure
// (non-volatile asm, shared-memory loads with no store between), so the compiler keeps one decode of a word and
// MR sets of products (session 50: INT4 at M = 2 costs 1.21x its M = 1 time, not 2x).
template <int MR, bool SCALES_IN_STAGE = false>
__device__ __forceinline__ void row_step_m(const u8* sp, const u8* sc, const u8* zc, u32 fb, u32 par,
                                           const u32 (&xh)[MR][4][4], float (&out)[MR], const u8* nf4t = nullptr,
                                           const float* xsum = nullptr, int cs = 0) {
#if FMT == 4 && RW_SUBN && SUBN_MMA
    row_step_subn<MR, SCALES_IN_STAGE>(sp, sc, zc, fb, par, xh, out, xsum);
#elif FMT == 5 && NF4_TC
    row_step_nf4tc<MR, SCALES_IN_STAGE>(sp, sc, cs, fb, par, xh, out, nf4t);
#else
    // 8-bit codes have no block scales: their stage is waited for first, as a stage carrying its scales is.
    if ((SCALES_IN_STAGE || FMT <= 3) && !EXP_FFN_NOLOAD) mbar_wait(fb, par);
#if FMT >= 4
    u32 sw[4], zw = 0u;
#if FMT == 4 || FMT == 5 || FMT == 7
    {
        const uint4 v = *(const uint4*)sc;
        sw[0] = v.x, sw[1] = v.y, sw[2] = v.z, sw[3] = v.w;
#if FMT == 4
        zw = *(const u32*)zc;
#endif
    }
#else
    {
        const uint2 v = *(const uint2*)sc;
        sw[0] = v.x, sw[1] = v.y, sw[2] = 0u, sw[3] = 0u;
    }
#endif
    Meta meta[R][C];
    unpack_meta(sw, zw, meta, 0);
    if (!SCALES_IN_STAGE && !EXP_FFN_NOLOAD) mbar_wait(fb, par);
#endif
    float acc[MR][R];
#pragma unroll
    for (int u = 0; u < R; ++u) {
        if (EXP_FFN_LOADONLY) {
#pragma unroll
            for (int m = 0; m < MR; ++m) acc[m][u] = 0.0f;
            continue;
        }
        const uint4 q = *(const uint4*)(sp + u * (ROWB / RW_KH));
#if FMT == 0
        // FP16: the lane's 16 weights (two 16-byte chunks) against x's pairs (`pack_x<LV>`), 4 products per f16x2
        // half; no decode.
        const uint4 q2 = *(const uint4*)(sp + u * (ROWB / RW_KH) + 16);
#pragma unroll
        for (int m = 0; m < MR; ++m) {
            u32 ae = 0u, ao = 0u;  // f16x2 accumulators
#pragma unroll
            for (int wd = 0; wd < 4; ++wd) {
                ae = hfma2(word(q, wd), xh[m][0][wd], ae);
                ao = hfma2(word(q2, wd), xh[m][1][wd], ao);
            }
            acc[m][u] = hsum4(ae, ao);
        }
#elif FMT == 1
        // BF16: the lane's 16 weights (two 16-byte chunks) widened to FP32 (a shift or a mask each, exact) against
        // x in FP32 (`xh` holds its bits, [e / 4][e % 4] = x[e]: wo_ring.cu), products and sums in FP32 (bf16x2
        // sums keep 8 bits); 2 instructions a weight, far below the issue rate a 16-bit stream allows.
        const uint4 q2 = *(const uint4*)(sp + u * (ROWB / RW_KH) + 16);
#pragma unroll
        for (int m = 0; m < MR; ++m) {
            float fa = 0.0f, fb = 0.0f;
#pragma unroll
            for (int wd = 0; wd < 4; ++wd) {
                const u32 v = word(q, wd), v2 = word(q2, wd);
                const int h = wd >> 1, e = 2 * (wd & 1);
                fa = fmaf(as_float(v << 16), as_float(xh[m][h][e]), fa);
                fb = fmaf(as_float(v & 0xffff0000u), as_float(xh[m][h][e + 1]), fb);
                fa = fmaf(as_float(v2 << 16), as_float(xh[m][2 + h][e]), fa);
                fb = fmaf(as_float(v2 & 0xffff0000u), as_float(xh[m][2 + h][e + 1]), fb);
            }
            acc[m][u] = fa + fb;
        }
#elif FMT <= 3
        // the row scale is applied to the row's sum after the K slices are added
#pragma unroll
        for (int m = 0; m < MR; ++m) {
            u32 ae = 0u, ao = 0u;
#pragma unroll
            for (int wd = 0; wd < 4; ++wd) {
                dot4b(word(q, wd), xh[m][wd >> 1][2 * (wd & 1)], xh[m][wd >> 1][2 * (wd & 1) + 1], ae, ao);
            }
            acc[m][u] = hsum4(ae, ao);
        }
#elif FMT == 4
        // The codes decode to q - z (the zero point folded into the decode: no (8 - z) sum(x) term), and the two
        // accumulators are added in f16x2 before widening: 2% off INT4's ring GEMV at 1x4096x14336 and 1x14336x4096
        // (H200, session 39: 10.86-10.95 -> 10.64-10.65 us, 9.99-10.01 -> 9.77-9.92), its decode alone 8.32 ->
        // 8.14-8.19; rel. error at 14336x4096 4.8e-4 -> 5.2e-4. (The f16x2 add gained nothing measurable for NF4
        // and MXFP4, which keep hsum4.)
#if RW_SUBN
        // The sums of q against x (dot8subn) widened every SUBN_WORDS words (f16 chains of 2 SUBN_WORDS products: q is
        // not centred as q - z is, so its sums run larger and round more), less the row's zero point times the
        // lane's sum of x (`xsum`).
        const float zf = __uint_as_float(0x4b000000u | ((zw >> (4 * u)) & 15u)) - 8388608.0f;  // z, exact
#pragma unroll
        for (int m = 0; m < MR; ++m) {
            float t = -zf * xsum[m];
#pragma unroll
            for (int w0 = 0; w0 < 4 - 2 * EXP_RING_HALFDECODE; w0 += SUBN_WORDS) {
                u32 ae = 0u, ao = 0u;
#pragma unroll
                for (int wd = w0; wd < w0 + SUBN_WORDS; ++wd) dot8subn(word(q, wd), xh[m][wd], ae, ao);
                t += hsum4(ae, ao);
            }
            acc[m][u] = meta[u][0].scale * t;
        }
#else
        const u32 zhi = int4_zero_hi(meta[u][0].zero);
#pragma unroll
        for (int m = 0; m < MR; ++m) {
            u32 ae = 0u, ao = 0u;
#pragma unroll
            for (int wd = 0; wd < 4 - 2 * EXP_RING_HALFDECODE; ++wd) {
                dot8hz(word(q, wd), xh[m][wd], meta[u][0].zero, zhi, ae, ao);
            }
            acc[m][u] = meta[u][0].scale * hsum_pairs(ae, ao);
        }
#endif
#elif FMT == 5
#pragma unroll
        for (int m = 0; m < MR; ++m) {
            u32 ae = 0u, ao = 0u;
#pragma unroll
            for (int wd = 0; wd < 4; ++wd) dot8nf4_any(word(q, wd), xh[m][wd], nf4t, ae, ao);
            acc[m][u] = meta[u][0].scale * hsum4(ae, ao);
        }
#elif FMT == 6
#pragma unroll
        for (int m = 0; m < MR; ++m) {
            u32 ae = 0u, ao = 0u;
#pragma unroll
            for (int wd = 0; wd < 4; ++wd) dot8f4(word(q, wd), xh[m][wd], ae, ao);
            acc[m][u] = meta[u][0].scale * hsum4(ae, ao);
        }
#else
        // NVFP4: values 0-15 of the chunk (words 0, 1) under the first E4M3 scale, 16-31 under the second.
#pragma unroll
        for (int m = 0; m < MR; ++m) {
            u32 ae = 0u, ao = 0u, be = 0u, bo = 0u;
            dot8f4(word(q, 0), xh[m][0], ae, ao);
            dot8f4(word(q, 1), xh[m][1], ae, ao);
            dot8f4(word(q, 2), xh[m][2], be, bo);
            dot8f4(word(q, 3), xh[m][3], be, bo);
            acc[m][u] = nv_chunk(ae, ao, be, bo, meta[u][0].s2);
        }
#endif
    }
    // Weight row (lane >> 2) & 7 summed over the warp for each x row, in 3 + 2 shuffles each (wo_xreg's butterfly,
    // R = 8).
#pragma unroll
    for (int m = 0; m < MR; ++m) out[m] = butterfly_rows(acc[m]);
#endif
}

// row_step_m for one row of x (`xh`; the fused FFN, and the ring GEMV at RW_M = 1): returns the row sums.
template <bool SCALES_IN_STAGE = false>
__device__ __forceinline__ float row_step(const u8* sp, const u8* sc, const u8* zc, u32 fb, u32 par,
                                          const u32 xh[4][4], const u8* nf4t = nullptr,
                                          const float* xsum = nullptr) {
    u32 x1[1][4][4];
#pragma unroll
    for (int wd = 0; wd < 4; ++wd)
#pragma unroll
        for (int k = 0; k < 4; ++k) x1[0][wd][k] = xh[wd][k];
    float out[1];
    row_step_m<1, SCALES_IN_STAGE>(sp, sc, zc, fb, par, x1, out, nf4t, xsum);
    return out[0];
}


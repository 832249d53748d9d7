// Weight-only GEMV / skinny GEMM on tensor cores: y[M,N] = x[M,K] . W[N,K]^T for FP16, FP8 E4M3 (per-row
// scale), INT8 (per-row scale), 4-bit weights (INT4 g128, NF4, MXFP4, NVFP4) and BF16 weights with FP16 x (BF16
// converted to f16 as it is decoded), and BF16, FP8, INT8, INT4, MXFP4, NVFP4 and NF4 weights with BF16 x (XBF16:
// the MMAs take BF16 operands, the weights decoded to BF16 exactly, NF4's codebook as two BF16 parts in two MMAs;
// session 47; NF4's parts through the bulk ring's table, session 48), FP32 accumulation in mma.sync.m16n8k16.
//
// Why: the CUDA-core kernel (weight_only_gemv.cu) spends ~4-7 instructions per 4-bit weight (decode, f16->f32
// conversions at 1/8 rate, one FMA per element per row of x) and stalls at 40-58% of the copy bandwidth; here
// one MMA does 16x8x16 multiply-adds and the decode produces f16x2 pairs straight into the A fragment. For
// 8- and 16-bit weights the CUDA cores are the limit from a few rows of x (one FMA per weight and row).
//
// Compiled by NVRTC with -D options: FMT (0 FP16, 1 BF16, 2 FP8 E4M3, 3 INT8, 4 INT4 g128, 5 NF4, 6 MXFP4, 7 NVFP4;
// NF4 also NF4_T0..7, the f16 byte tables of its codebook), MT rows of x (1..16), U k-tiles in
// flight per lane, WARPS per CTA, PF 1 = software-pipelined (the next U tiles load while these decode).
// No headers: wo_prims.cuh (conversions, loads, bit tricks) is prepended by the host.
//
// Layout (host side: weight_only/mma.rs): W is cut into tiles of 16 rows x 64 K. Lane l (g = l / 4, t = l % 4)
// holds QV 16-byte words of a tile (QV = bits / 4: 1, 2 or 4), the A fragments of the tile's four k-steps s
// (16 K each), eight elements a0..a7 per k-step:
//   a0, a1 = W[g][16s+2t], W[g][16s+2t+1]        a2, a3 = W[g+8][16s+2t], W[g+8][16s+2t+1]
//   a4, a5 = W[g][16s+2t+8], W[g][16s+2t+9]      a6, a7 = W[g+8][16s+2t+8], W[g+8][16s+2t+9]
// 4-bit: word s of the lane's uint4 holds k-step s, INT4 with a0..a7 in nibbles 0,4,1,5,2,6,3,7 (so the
// 0x000F000F magic yields the pairs), FP4 and NF4 in nibbles 0..7; 8-bit: two words per k-step, a0..a7 in
// bytes; 16-bit: uint4 s holds k-step s's four A registers. The lane's uint4 v of a tile sits at (tile x QV
// + v) x 512 + 16 l bytes, tiles ordered [row tile][k tile]: a warp load reads 512 contiguous bytes. Scales
// and zero points keep the CUDA-core kernel's layout (the x-stationary kernel reads mma.rs `xs_meta`).

#ifndef FMT
#error "FMT must be defined"
#endif
#ifndef PF
#define PF 0
#endif
#ifndef MINB
#define MINB 1
#endif
#ifndef XB
#define XB 0
#endif
#ifndef CL
#define CL 0
#endif
#ifndef XMC
#define XMC 0
#endif
#if XMC && CL
#error "x multicast (XMC) takes one K split, the clustered reduction (CL) several"
#endif

// XF16 1 (the bulk ring, wo_mma_xb, with BF16 x; host `Tuning::xf16`): x and y stay BF16 in memory, but once x
// has landed in shared memory each of its rows is scaled by a power of two into [-1, 1) (2^-e, 2^(e-1) <= the
// row's largest |x| over the CTA's K span < 2^e) and rewritten as f16 in place (`xb_x_to_f16`): BF16's 8
// significant bits are exact in f16 from 2^-16 of the row's largest value (the ring GEMV's scaling, wo_ring.cu).
// The MMAs then take FP16 x's operands and decodes, and each row's sums go back up by 2^e before they are parked
// or stored. XMMA_BF16: the MMAs' operands are BF16 (BF16 x without XF16).
#ifndef XF16
#define XF16 0
#endif
#ifndef XR
#define XR 0
#endif
#if XF16 && !(XBF16 && XB)
#error "XF16 converts BF16 x on the bulk ring (XBF16, XB)"
#endif
#define XMMA_BF16 (XBF16 && !XF16)

#if XMMA_BF16 && FMT == 0
#error "the MMA kernel takes BF16 x with every format but FP16 weights (11 significant bits); FP16 x with every format"
#endif
#if XMMA_BF16 && FMT == 5 && !defined(NF4_L0)
#error "NF4 with BF16 x needs its codebook's BF16 hi parts (NF4_T*) and lo parts (NF4_L*)"
#endif

#define NB ((MT + 7) / 8)  // n8 blocks of x rows
// k-steps (16 K each) that share one scale: INT4 g128 and NF4 64 -> a whole tile (4), MXFP4 32 -> 2, NVFP4
// 16 -> 1.
// FP16, BF16, FP8 and INT8 have no block scales (a whole tile, scale 1; FP8 and INT8 scale each row at the end).
#if FMT <= 5
#define FLUSH 4
#elif FMT == 6
#define FLUSH 2
#elif FMT == 7
#define FLUSH 1
#else
#error "the MMA kernel handles FP16 (0), BF16 (1), FP8 E4M3 (2), INT8 (3) and the 4-bit formats (4 to 7)"
#endif
// uint4 words per lane and tile: the A fragments of the tile's four k-steps at 16, 8 or 4 bits per element.
#define QV (FMT <= 1 ? 4 : (FMT == 2 || FMT == 3) ? 2 : 1)
#define ROW_SCALED (FMT == 2 || FMT == 3)
// NVFP4: the decode gives the E2M1 values times 2^-14 and `mma_tile` multiplies them by their E4M3 scales
// times 2^7 in f16 (exact: |w s| 2^-7 from 2^-17 with at most 6 significant bits, ulp 2^-24, to 21), so the
// sums come out 2^-7 small: the tensor scale takes 2^7 back.
#define NV_UP 128.0f

#if FMT == 5 && defined(NF4_TAB)
// NF4_TAB (the bulk ring, set by the host where the table fits its shared memory; LaunchPlan::nf4_table):
// NF4's codes decoded through a table of code pairs at the start of the dynamic shared memory instead of
// `nf4_pairs`' byte permutes: the 256 values a byte of codes takes as f16x2 (code of the low nibble, code of
// the high nibble), NF4_TAB copies (8, 16, 32 or 64) each, lane l reading copy l % NF4_TAB (32 and 64: no
// bank conflicts). Why: at M = 16 the byte-permute decode (about 20 integer instructions a word) made NF4 the
// slowest 4-bit format, 22.6 us against INT4's 17.2 at 16x14336x4096 (session 26); at M = 1 the ring GEMV's
// pair table took NF4 from 16.1 to 13.5 us (session 24).
// BF16 x (XMMA_BF16): entry e holds NF4_TAB copies of the pair of the codebook's BF16 hi parts, then NF4_TAB
// copies of the pair of its lo parts (host: mma.rs `nf4_bf16_tables`), in half the copies of the f16 table the
// plan sized (`LaunchPlan::key`), so the same bytes: 32 copies, entries 256 bytes apart as the f16 table's 64.
// H200, session 48, us, byte permutes / table: 16x14336x4096 32.2 / 23.9, 16x4096x14336 33.5 / 25.2,
// 2x14336x4096 27.9 / 19.1, 8x14336x4096 28.1 / 19.7 (2 tiles in flight at M <= 8: LaunchPlan::new_x).
#define NF4_ENT (XMMA_BF16 ? 8 : 4)
#define XB_TAB_BYTES (256 * NF4_TAB * NF4_ENT)
extern __shared__ __align__(128) u8 nf4_dyn[];  // the dynamic shared memory (wo_mma_xb's xb_smem)

// Fills the table; every thread of the CTA calls it, the caller synchronizes before the first lookup. Entry e
// is `nf4_pairs` of the byte e; a warp's 16-byte stores are consecutive (no bank conflicts).
__device__ __forceinline__ void nf4_tab_fill() {
    constexpr int per_row = NF4_TAB * NF4_ENT / 16;  // 16-byte stores a row
    for (int c = threadIdx.x; c < 256 * per_row; c += blockDim.x) {
        const int e = c / per_row;
        u32 p[4];
        nf4_pairs((u32)e, p);
#if XMMA_BF16
        if (c % per_row >= per_row / 2)
            nf4_pairs_of((u32)e, p, NF4_L0, NF4_L1, NF4_L2, NF4_L3, NF4_L4, NF4_L5, NF4_L6, NF4_L7);
#endif
        *(uint4*)(nf4_dyn + e * NF4_TAB * NF4_ENT + (c % per_row) * 16) = make_uint4(p[0], p[0], p[0], p[0]);
    }
}

#if XMMA_BF16
// This lane's offset of the entry of byte k of v (its hi copy; the lo copy NF4_TAB x 4 bytes on).
__device__ __forceinline__ u32 nf4_tab_off2(u32 v, int k) {
#if NF4_TAB == 32
    return prmt(((u32)threadIdx.x & 31u) * 4u, v, 0x1140u + 16u * k);
#else
    return prmt(v, 0u, 0x4440u + k) * (NF4_TAB * 8u) + ((u32)threadIdx.x % NF4_TAB) * 4u;
#endif
}
#endif

// The 8 codes of word v as `nf4_pairs` gives them: p[k] = the pair of byte k, one shared-memory load each.
// NF4_TAB 64 (entries 256 bytes apart): one byte permute makes a lookup's whole offset, the code byte over
// the lane's copy (byte k of v as bits 8-15, lane x 4 as bits 0-7), where 32 copies take a permute and a
// shift-and-add (session 30).
__device__ __forceinline__ void nf4_tab_pairs(u32 v, u32 p[4]) {
#if NF4_TAB == 64
    const u32 copy = ((u32)threadIdx.x & 31u) * 4u;
#pragma unroll
    for (int k = 0; k < 4; ++k) p[k] = *(const u32*)(nf4_dyn + prmt(copy, v, 0x1140u + 16u * k));
#else
    const u32 copy = ((u32)threadIdx.x % NF4_TAB) * 4u;
#pragma unroll
    for (int k = 0; k < 4; ++k) p[k] = *(const u32*)(nf4_dyn + prmt(v, 0u, 0x4440u + k) * (NF4_TAB * 4u) + copy);
#endif
}
#else
#define XB_TAB_BYTES 0
#endif

// An f16x2 pair as the bf16x2 pair of the same values (BF16 x: FP8's decode), exact for f16 values whose last
// three mantissa bits are zero (E4M3's have at most 4 significant bits). Exponent and mantissa moved down three
// bits make a BF16 2^-112 times the value (f16's bias 15, BF16's 127; subnormals included, both formats'
// subnormals being linear in their bits), and one exact bf16x2 FMA (times 2^112, plus -0) takes the factor
// back: four instructions a pair. (mma.rs `bf16_decodes_are_exact` runs every BF16 decode on the CPU.)
__device__ __forceinline__ u32 h2_to_bf2(u32 h) {
    u32 b = ((h >> 3) & 0x0fff0fffu) | (h & 0x80008000u);
    asm("fma.rn.bf16x2 %0, %0, %1, %2;" : "+r"(b) : "r"(0x77807780u), "r"(0x80008000u));
    return b;
}

// Decodes one word into the four f16x2 A registers (bf16x2 with BF16 x, XMMA_BF16). zg: INT4 zero-point pair
// (1024 + z) of row g; zg8: the pair -(64 + z) of row g + 8 (see Meta::zp; with BF16 x `zero_pair` makes them
// -(128 + z) and -(16 + z)).
__device__ __forceinline__ void decode(u32 v, u32 zg, u32 zg8, u32 a[4]) {
#if FMT == 4 && XMMA_BF16
    // BF16 (x in BF16): BF16 keeps 7 mantissa bits, so the high nibbles cannot stay where they sit (bit 7 is
    // the exponent's). Rows g (nibbles 0, 4 and 2, 6) as 128 + q (0x4300 | q) plus -(128 + z); rows g + 8
    // (nibbles 1, 5 and 3, 7) one bit down, as 128 + 8 q, times 1/8 plus -(16 + z): three shifts a word
    // instead of one, one exact bf16x2 FMA a pair (zg, zg8 from `zero_pair`; sub.bf16x2 needs sm_90).
    const u32 v1 = v >> 1, v8 = v >> 8, v9 = v >> 9;
    a[0] = lop3_and_or(v, 0x000f000fu, 0x43004300u);
    a[1] = lop3_and_or(v1, 0x00780078u, 0x43004300u);
    a[2] = lop3_and_or(v8, 0x000f000fu, 0x43004300u);
    a[3] = lop3_and_or(v9, 0x00780078u, 0x43004300u);
    asm("fma.rn.bf16x2 %0, %0, %1, %2;" : "+r"(a[0]) : "r"(0x3f803f80u), "r"(zg));
    asm("fma.rn.bf16x2 %0, %0, %1, %2;" : "+r"(a[1]) : "r"(0x3e003e00u), "r"(zg8));
    asm("fma.rn.bf16x2 %0, %0, %1, %2;" : "+r"(a[2]) : "r"(0x3f803f80u), "r"(zg));
    asm("fma.rn.bf16x2 %0, %0, %1, %2;" : "+r"(a[3]) : "r"(0x3e003e00u), "r"(zg8));
#elif FMT == 4
    // Rows g (nibbles 0, 4 and 2, 6) as 1024 + q minus 1024 + z; rows g + 8 (nibbles 1, 5 and 3, 7) where
    // they sit, as 1024 + 16 q, times 1/16 minus 64 + z in one exact f16x2 FMA: one shift per word instead of
    // three, two FMAs for two subtractions (all values small integers, every step exact).
    const u32 v8 = v >> 8;
    a[0] = lop3_and_or(v, 0x000f000fu, 0x64006400u);
    a[1] = lop3_and_or(v, 0x00f000f0u, 0x64006400u);
    a[2] = lop3_and_or(v8, 0x000f000fu, 0x64006400u);
    a[3] = lop3_and_or(v8, 0x00f000f0u, 0x64006400u);
    asm("sub.f16x2 %0, %0, %1;" : "+r"(a[0]) : "r"(zg));
    asm("fma.rn.f16x2 %0, %0, %1, %2;" : "+r"(a[1]) : "r"(0x2c002c00u), "r"(zg8));
    asm("sub.f16x2 %0, %0, %1;" : "+r"(a[2]) : "r"(zg));
    asm("fma.rn.f16x2 %0, %0, %1, %2;" : "+r"(a[3]) : "r"(0x2c002c00u), "r"(zg8));
#elif FMT == 5 && defined(NF4_TAB) && !XMMA_BF16
    // NF4 through the bulk ring's shared-memory table of code pairs (nf4_tab_pairs below).
    nf4_tab_pairs(v, a);
#elif FMT == 5
    // NF4 -> f16 through byte tables (wo_prims.cuh `nf4_pairs`): the A registers are neighbour pairs.
    nf4_pairs(v, a);
#else
    // MXFP4 / NVFP4 in the CUDA-core E2M1 layout (wo_prims.cuh `e2m1_dev_pairs`, host mma.rs `repack`):
    // neighbour pairs, each value times 2^-14 (MXFP4's `block_scale` takes it back; NVFP4's f16 scales times
    // 2^7 take half of it back, the tensor scale times NV_UP the rest).
    e2m1_dev_pairs(v, a);
#if XMMA_BF16
    // BF16 x: each f16 pair (bits 15 and 11-9 a half, the rest zero) with its exponent and mantissa three bits
    // down: BF16 values 2^-112 times the f16's, 2^-126 times E2M1's (0.5 a subnormal). In C, not one asm lop3:
    // ptxas then folds the shifts into `e2m1_dev_pairs`' own (left shifts as IMAD / LEA, off the integer pipe
    // that the decode fills): MXFP4 16x14336x4096 19.8 us against 20.3 with an asm shift and select a pair
    // (session 47). MXFP4 takes 2^112 back in one exact bf16x2 FMA; NVFP4's scales take it in `mma_tile`.
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        a[i] = ((a[i] >> 3) & 0x0fff0fffu) | (a[i] & 0xf000f000u);
#if FMT == 6
        asm("fma.rn.bf16x2 %0, %0, %1, %2;" : "+r"(a[i]) : "r"(0x77807780u), "r"(0x80008000u));
#endif
    }
#endif
#endif
}

// The four f16x2 (BF16: bf16x2) A registers of k-step s from this lane's QV words of a tile: 16-bit weights as stored, FP8
// E4M3 pairs converted (exact; the low byte to the low half), INT8 through 0x64 over each byte of q + 128
// (the f16 of 1024 + q + 128, exact) minus 1152, 4-bit words through `decode`.
__device__ __forceinline__ void decode_step(const uint4 (&qw)[QV], int s, u32 zg, u32 zg8, u32 a[4]) {
#if FMT == 1 && !XMMA_BF16
    // BF16 weights with FP16 x: each pair widened to FP32 exactly (a shift, a mask) and rounded to f16x2, exact
    // for |w| from 2^-14 to 65504 (the host refuses weights past FP16's range; below 2^-14 f16's subnormals keep
    // them within 2^-25).
    const u32 w[4] = {qw[s].x, qw[s].y, qw[s].z, qw[s].w};
#pragma unroll
    for (int i = 0; i < 4; ++i)
        asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(a[i]) : "f"(__uint_as_float(w[i] & 0xffff0000u)), "f"(__uint_as_float(w[i] << 16)));
#elif FMT <= 1
    a[0] = qw[s].x, a[1] = qw[s].y, a[2] = qw[s].z, a[3] = qw[s].w;
#elif FMT == 2 || FMT == 3
    const u32 w0 = word(qw[s >> 1], 2 * (s & 1)), w1 = word(qw[s >> 1], 2 * (s & 1) + 1);
#if FMT == 2
    asm("{ .reg .b16 l, h;\n\t"
        "mov.b32 {l, h}, %4; cvt.rn.f16x2.e4m3x2 %0, l; cvt.rn.f16x2.e4m3x2 %1, h;\n\t"
        "mov.b32 {l, h}, %5; cvt.rn.f16x2.e4m3x2 %2, l; cvt.rn.f16x2.e4m3x2 %3, h; }"
        : "=r"(a[0]), "=r"(a[1]), "=r"(a[2]), "=r"(a[3])
        : "r"(w0), "r"(w1));
#elif XMMA_BF16
    // INT8 to BF16 (8 significant bits, so no single magic): the pair's bytes b in the halves' low bytes; q =
    // (0x4300 | b & 0x7f: 128 + its low 7 bits) minus (0x4300 | b & 0x80: 128, or 256 where q < 0) in one exact
    // bf16x2 FMA (times -1, plus).
    const u32 x[4] = {prmt(w0, 0u, 0x4140u), prmt(w0, 0u, 0x4342u), prmt(w1, 0u, 0x4140u), prmt(w1, 0u, 0x4342u)};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        a[i] = lop3_and_or(x[i], 0x007f007fu, 0x43004300u);
        asm("fma.rn.bf16x2 %0, %1, %2, %0;" : "+r"(a[i]) : "r"(lop3_and_or(x[i], 0x00800080u, 0x43004300u)), "r"(0xbf80bf80u));
    }
#else
    const u32 u0 = w0 ^ 0x80808080u, u1 = w1 ^ 0x80808080u;
    a[0] = prmt(u0, 0x64646464u, 0x4140u);  // bytes [u0.0, 0x64, u0.1, 0x64]: elements 0, 1
    a[1] = prmt(u0, 0x64646464u, 0x4342u);
    a[2] = prmt(u1, 0x64646464u, 0x4140u);
    a[3] = prmt(u1, 0x64646464u, 0x4342u);
#pragma unroll
    for (int i = 0; i < 4; ++i) asm("sub.f16x2 %0, %0, %1;" : "+r"(a[i]) : "r"(0x64806480u));
#endif
#else
    decode(word(qw[0], s), zg, zg8, a);
#endif
#if XMMA_BF16 && FMT == 2
    // FP8 with BF16 x: the f16 values as BF16 (INT8, INT4 and the E2M1 formats decode to BF16 themselves)
#pragma unroll
    for (int i = 0; i < 4; ++i) a[i] = h2_to_bf2(a[i]);
#endif
}

// Profiling experiment (ROOFLINE_NVRTC_EXTRA=-DEXP_NOMMA=1 or 2, wrong results): the MMAs dropped. 1: their
// operands handed to an empty asm, which emits no instruction, so ptxas drops whatever only fed them (the
// decode, NF4's table lookups; not the ldmatrix of x, an asm volatile): the loads alone, much as
// EXP_LOADONLY (session 30 found this; sessions 26-29 read 1 as "the decode without the MMAs"). 2: their
// operands XORed into the accumulator's low mantissa bits (four LOP3 an MMA; the sums stay finite), so the
// decode runs and is waited on: the loads and the decode without the MMAs.
#ifndef EXP_NOMMA
#define EXP_NOMMA 0
#endif
__device__ __forceinline__ void mma(float c[4], const u32 a[4], u32 b0, u32 b1) {
#if EXP_NOMMA == 2
    c[0] = __int_as_float(__float_as_int(c[0]) ^ ((a[0] ^ a[1] ^ a[2] ^ a[3] ^ b0 ^ b1) & 0x7fffu));
    return;
#elif EXP_NOMMA
    asm volatile("" ::"r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    return;
#endif
#if XMMA_BF16
#define MMA_AB "bf16.bf16"
#else
#define MMA_AB "f16.f16"
#endif
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32." MMA_AB ".f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Per-tile metadata of rows g and g + 8, loaded together with the tile's codes (so its latency overlaps
// the weight loads instead of stalling the MMAs): INT4 g128: the FP16 scales of the tile's group and its
// zero points as the f16 halves `decode` subtracts, 0x6400 | z (1024 + z) for row g and 0xd400 | z << 4
// (-(64 + z)) for row g + 8 (zp's low and high half; the x-stationary table stores them so, mma.rs
// `xs_meta`); NF4: the tile's FP16 absmax; MXFP4: the tile's two E8M0 bytes; NVFP4: the tile's four E4M3
// bytes.
struct Meta {
#if FMT == 4
    u16 s[2];
    u32 zp;
#elif FMT == 5
    u16 s[2];
#elif FMT == 6
    u16 e[2];
#elif FMT == 7
    u32 e[2];
#else
    u8 none;  // no block scales
#endif
};

__device__ __forceinline__ Meta load_meta(const u8* __restrict__ scales, const u8* __restrict__ zeros, int rg, int rg8,
                                          int kt, int k) {
    Meta m;
    const int r[2] = {rg, rg8};
#if FMT == 4
    m.zp = 0u;
#endif
#pragma unroll
    for (int i = 0; i < 2; ++i) {
#if FMT == 4
        const int groups = k / 128, gi = kt / 2;
        m.s[i] = __ldg((const u16*)scales + (size_t)r[i] * groups + gi);
        const u32 z = (__ldg(zeros + (size_t)r[i] * ((groups + 1) >> 1) + (gi >> 1)) >> ((gi & 1) * 4)) & 15u;
        m.zp |= (i == 0 ? 0x6400u | z : 0xd400u | (z << 4)) << (16 * i);
#elif FMT == 5
        m.s[i] = __ldg((const u16*)scales + (size_t)r[i] * (k / 64) + kt);
#elif FMT == 6
        m.e[i] = __ldg((const u16*)scales + ((size_t)r[i] * (k / 32) + 2 * kt) / 2);
#elif FMT == 7
        m.e[i] = __ldg((const u32*)scales + ((size_t)r[i] * (k / 16) + 4 * kt) / 4);
#else
        m.none = 0;
#endif
    }
    return m;
}

// INT4: the f16x2 pair (1024 + z, 1024 + z) of row g (i = 0), (-(64 + z), -(64 + z)) of row g + 8 (i = 1;
// f16 64 + z is 0x5400 | z << 4): one byte permute of Meta::zp.
__device__ __forceinline__ u32 zero_pair(const Meta& m, int i) {
#if FMT == 4 && XMMA_BF16
    // BF16 `decode`: (-(128 + z), twice) = 0xc300 | z for row g, (-(16 + z), twice) = 0xc180 | z << 3 for row
    // g + 8, from the same f16 halves (z in bits 0-3 of the low one, 4-7 of the high one)
    return i == 0 ? lop3_and_or(prmt(m.zp, 0u, 0x1010u), 0x000f000fu, 0xc300c300u)
                  : lop3_and_or(prmt(m.zp, 0u, 0x3232u) >> 1, 0x00780078u, 0xc180c180u);
#elif FMT == 4
    return prmt(m.zp, 0u, i == 0 ? 0x1010u : 0x3232u);
#else
    return 0u;
#endif
}

// Scale of row i (0: g, 1: g + 8) for the k-steps ending at k-step s of the tile.
__device__ __forceinline__ float block_scale(const Meta& m, int i, int s) {
#if FMT == 4 || FMT == 5
    return h2f(m.s[i]);
#elif FMT == 6
    // 2^(e - 127) times the decode's 2^14 back (the host keeps e <= 240, mma.rs MXFP4_MMA_MAX_SCALE; e = 0's
    // subnormal 2^-127 becomes the normal 2^-113 like every other)
    return as_float((((m.e[i] >> (8 * (s / 2))) & 0xffu) + 14u) << 23);
#elif FMT == 7
    return e4m3_to_f((m.e[i] >> (8 * s)) & 0xffu);
#else
    return 1.0f;
#endif
}

// Partial sums `part` (C fragments: c0, c1 row g, c2, c3 row g + 8) times the rows' block scales into acc.
__device__ __forceinline__ void flush_part(const float part[NB][4], float sg, float sg8, float acc[NB][4]) {
#pragma unroll
    for (int b = 0; b < NB; ++b) {
        acc[b][0] = fmaf(part[b][0], sg, acc[b][0]);
        acc[b][1] = fmaf(part[b][1], sg, acc[b][1]);
        acc[b][2] = fmaf(part[b][2], sg8, acc[b][2]);
        acc[b][3] = fmaf(part[b][3], sg8, acc[b][3]);
    }
}

// Decodes one 64-K tile (this lane's QV x 16 bytes: four k-steps) and runs its MMAs against the x fragments
// bx, accumulating into acc with the block scales applied every FLUSH k-steps.
__device__ __forceinline__ void mma_tile(const uint4 (&qw)[QV], const Meta& meta, const u32 bx[NB][4][2],
                                         float acc[NB][4]) {
#if FMT == 7
    // NVFP4: each k-step's E4M3 block scales (times 2^7, NV_UP) multiply the decoded E2M1 weights (times
    // 2^-14) in f16, rows g (A registers 0 and 2) and g + 8 (1 and 3), exactly (see NV_UP), so the
    // MMAs accumulate straight into acc: no partial sums, no scale FMAs waiting on every MMA (a block of 16
    // is one k-step, so the flush below ran after each).
#pragma unroll
    for (int s = 0; s < 4; ++s) {
        u32 a[4];
        decode_step(qw, s, 0u, 0u, a);
        // byte s of each row's scale word (row g low, row g + 8 high) in one byte permute (the shifts and
        // masks compiled to three or four instructions a k-step)
        u32 sc = e4m3x2_to_h2(prmt(meta.e[0], meta.e[1], (u32)(s | ((4 + s) << 4))));
#if XMMA_BF16
        // BF16: the decode gave E2M1 times 2^-126; the scales (positive, f16-normal) three bits down are BF16
        // 2^-112 times the scale, times 2^127 and 2^104 in two exact FMAs: the scale times 2^119 (at most
        // 1.75 x 2^127), so the products are w s 2^-7 as in f16 (from 2^-17, at most 6 significant bits: exact).
        sc = (sc >> 3) & 0x0fff0fffu;
        asm("fma.rn.bf16x2 %0, %0, %1, %2;" : "+r"(sc) : "r"(0x7f007f00u), "r"(0x80008000u));
        asm("fma.rn.bf16x2 %0, %0, %1, %2;" : "+r"(sc) : "r"(0x73807380u), "r"(0x80008000u));
#define NV_MUL(r, f) asm("fma.rn.bf16x2 %0, %0, %1, %2;" : "+r"(r) : "r"(f), "r"(0x80008000u))
#else
        asm("mul.rn.f16x2 %0, %0, %1;" : "+r"(sc) : "r"(0x58005800u));  // times 2^7 (NV_UP), exact: at most 57344
#define NV_MUL(r, f) asm("mul.rn.f16x2 %0, %0, %1;" : "+r"(r) : "r"(f))
#endif
        // (row g's scale, twice), (row g + 8's, twice): as `mov.b32 {l, l}` ptxas folds them into the HMUL2s'
        // .H0_H0 / .H1_H1 operand selects; as two prmt they were two instructions a k-step (session 30)
        u32 sg, sg8;
        asm("{ .reg .b16 l, h; mov.b32 {l, h}, %2; mov.b32 %0, {l, l}; mov.b32 %1, {h, h}; }"
            : "=r"(sg), "=r"(sg8)
            : "r"(sc));
        NV_MUL(a[0], sg);
        NV_MUL(a[2], sg);
        NV_MUL(a[1], sg8);
        NV_MUL(a[3], sg8);
#undef NV_MUL
#pragma unroll
        for (int b = 0; b < NB; ++b) mma(acc[b], a, bx[b][s][0], bx[b][s][1]);
    }
#elif FMT == 5 && XMMA_BF16 && defined(NF4_TAB)
    // NF4 with BF16 x through the table: the hi parts' MMAs of the tile's four k-steps, then the lo parts'
    // (four registers a k-step live, as with the f16 table), one partial sum flushed once (a tile is a block)
    float part[NB][4];
#pragma unroll
    for (int b = 0; b < NB; ++b)
#pragma unroll
        for (int i = 0; i < 4; ++i) part[b][i] = 0.0f;
#pragma unroll
    for (int h = 0; h < 2; ++h)
#pragma unroll
        for (int s = 0; s < 4; ++s) {
            u32 a[4];
#pragma unroll
            for (int k = 0; k < 4; ++k)
                a[k] = *(const u32*)(nf4_dyn + nf4_tab_off2(word(qw[0], s), k) + h * NF4_TAB * 4);
#pragma unroll
            for (int b = 0; b < NB; ++b) mma(part[b], a, bx[b][s][0], bx[b][s][1]);
        }
    flush_part(part, block_scale(meta, 0, 3), block_scale(meta, 1, 3), acc);
#else
    const u32 zg = zero_pair(meta, 0);
    const u32 zg8 = zero_pair(meta, 1);
    float part[NB][4];
#pragma unroll
    for (int s = 0; s < 4; ++s) {
        if (s % FLUSH == 0) {
#pragma unroll
            for (int b = 0; b < NB; ++b)
#pragma unroll
                for (int i = 0; i < 4; ++i) part[b][i] = 0.0f;
        }
        u32 a[4];
        decode_step(qw, s, zg, zg8, a);
#pragma unroll
        for (int b = 0; b < NB; ++b) mma(part[b], a, bx[b][s][0], bx[b][s][1]);
#if FMT == 5 && XMMA_BF16
        // NF4 with BF16 x: `decode` gave the codebook's BF16 hi parts (NF4_T*); its lo parts (NF4_L*, c - hi)
        // in a second MMA, so the sum holds the codes to 16 significant bits (host: mma.rs `nf4_bf16_tables`)
        nf4_pairs_of(word(qw[0], s), a, NF4_L0, NF4_L1, NF4_L2, NF4_L3, NF4_L4, NF4_L5, NF4_L6, NF4_L7);
#pragma unroll
        for (int b = 0; b < NB; ++b) mma(part[b], a, bx[b][s][0], bx[b][s][1]);
#endif
        if (s % FLUSH == FLUSH - 1) flush_part(part, block_scale(meta, 0, s), block_scale(meta, 1, s), acc);
    }
#endif
}

// Loads the U tiles (and their scales) from tile kt; tiles past kt_end are zeros.
__device__ __forceinline__ void load_set(const uint4* __restrict__ wt, const u8* __restrict__ scales,
                                         const u8* __restrict__ zeros, int rg, int rg8, int kt, int kt_end, int k,
                                         uint4 q[U][QV], Meta meta[U]) {
#pragma unroll
    for (int u = 0; u < U; ++u) {
        if (kt + u < kt_end) {
#pragma unroll
            for (int v = 0; v < QV; ++v) q[u][v] = ld_weights(wt + ((size_t)(kt + u) * QV + v) * 32);
            meta[u] = load_meta(scales, zeros, rg, rg8, kt + u, k);
        } else {
#pragma unroll
            for (int v = 0; v < QV; ++v) q[u][v] = make_uint4(0u, 0u, 0u, 0u);
        }
    }
}

// Decodes U loaded tiles and runs their MMAs into acc.
__device__ __forceinline__ void compute_set(const u16* x, int k, int kt, int kt_end, int g, int t,
                                            const uint4 q[U][QV], const Meta meta[U], float acc[NB][4]) {
#pragma unroll
    for (int u = 0; u < U; ++u) {
        if (kt + u < kt_end) {
            const int kbase = (kt + u) * 64;
            // x fragments of the tile's four k-steps, loaded before any MMA.
            u32 bx[NB][4][2];
#pragma unroll
            for (int b = 0; b < NB; ++b) {
                const int m = b * 8 + g;  // B fragment column = row of x
#pragma unroll
                for (int s = 0; s < 4; ++s) {
                    if (m < MT) {
                        const u32* xr = (const u32*)(x + (size_t)m * k + kbase + 16 * s + 2 * t);
                        bx[b][s][0] = ld_dep(xr);
                        bx[b][s][1] = ld_dep(xr + 4);
                    } else {
                        bx[b][s][0] = bx[b][s][1] = 0u;
                    }
                }
            }
            mma_tile(q[u], meta[u], bx, acc);
        }
    }
}

// The K-walking entry of the plain tensor-core key (XS=0); the x-stationary builds (XS=1, 2) launch their own entries
// below and leave this one out (it was about a third of their compile time).
#if !XS
extern "C" __global__ void __launch_bounds__(WARPS * 32, MINB)
wo_mma(const uint4* __restrict__ w, const u8* __restrict__ scales, const u8* __restrict__ zeros, float gscale,
       const u16* x, u16* __restrict__ y, float* __restrict__ ws, u32* __restrict__ counters,
       int n_rows, int k, int tiles_per_split, int flags, float eps) {
    flags = fuse_flags(flags);
    const int lane = threadIdx.x & 31;
    const int warp = threadIdx.x >> 5;
    const int g = lane >> 2, t = lane & 3;
    const int rt = blockIdx.x * WARPS + warp;  // this warp's row tile
    const int row_tiles = (n_rows + 15) / 16;
    const int kt_total = k / 64;
    const int kt_begin = blockIdx.y * tiles_per_split;
    const int kt_end = min(kt_total, kt_begin + tiles_per_split);
    const int rg = min(rt * 16 + g, n_rows - 1);  // clamped: scale reads stay in bounds
    const int rg8 = min(rt * 16 + g + 8, n_rows - 1);

    float acc[NB][4];
#pragma unroll
    for (int b = 0; b < NB; ++b)
#pragma unroll
        for (int i = 0; i < 4; ++i) acc[b][i] = 0.0f;

    __shared__ float fuse_inv[WARPS][MT];  // each warp stores its own rows: its own slot
    fuse_norm_prologue(x, k, MT, flags, eps, fuse_inv[warp]);
    if (rt < row_tiles) {
        const uint4* wt = w + (size_t)rt * kt_total * QV * 32 + lane;
        uint4 q[U][QV];
        Meta meta[U];
        int kt = kt_begin;
        load_set(wt, scales, zeros, rg, rg8, kt, kt_end, k, q, meta);
        for (; kt < kt_end; kt += U) {
#if PF
            // Software pipeline: the next U tiles are in flight while these decode.
            uint4 qn[U][QV];
            Meta mn[U];
            load_set(wt, scales, zeros, rg, rg8, kt + U, kt_end, k, qn, mn);
#endif
            compute_set(x, k, kt, kt_end, g, t, q, meta, acc);
#if PF
#pragma unroll
            for (int u = 0; u < U; ++u) {
#pragma unroll
                for (int v = 0; v < QV; ++v) q[u][v] = qn[u][v];
                meta[u] = mn[u];
            }
#else
            load_set(wt, scales, zeros, rg, rg8, kt + U, kt_end, k, q, meta);
#endif
        }
    }

    // C fragment: c0, c1 = rows g (x rows 2t, 2t+1 of block b), c2, c3 = row g + 8.
    const bool split = gridDim.y > 1;
    if (rt < row_tiles) {
#pragma unroll
        for (int b = 0; b < NB; ++b)
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                const int n = rt * 16 + g + (i >= 2 ? 8 : 0);
                const int m = b * 8 + 2 * t + (i & 1);
                if (m < MT && n < n_rows) {
                    float v = acc[b][i];
#if FMT == 7
                    v *= gscale * NV_UP;
#elif ROW_SCALED
                    v *= __ldg((const float*)scales + n);
#endif
                    if (flags & FUSE_NORM) v *= fuse_inv[warp][m];
                    const size_t o = (size_t)m * n_rows + n;
                    splitk_store(ws, y, o, v, split, flags);
                }
            }
    }
    if (!split) return;

    const int row0 = blockIdx.x * WARPS * 16;
    splitk_finish(ws, y, counters, row0, min(WARPS * 16, n_rows - row0), n_rows, MT, flags);
}
#endif  // !XS

#if XS
// x-stationary variant (XS=1, entry wo_mma_xs), for the smallest batches: warp w of CTA (bx, by) owns the KT
// k-tiles starting at (by * WARPS + w) * KT and keeps x's B fragments for them in registers (8 KT registers
// per n8 block), then walks the CTA's row tiles (RTPC of them, the kernel's last argument), loading the next
// row tile's KT weight tiles while the current ones decode and run their MMAs. The per-chunk x loads of the
// K-walking kernel above are gone, and the decode is f16x2 work feeding one MMA per 256 weights instead of
// ~3 CUDA-core instructions per weight (the limit of weight_only_xreg.cu for 4-bit weights: bench/RESULTS.md,
// session 4). Scales come from a table with rows g and g + 8 side by side (the `scales` argument; `zeros` is
// unused). Warp partial sums of a row tile go to shared memory ([warp][row tile of the CTA][16][MT]); the
// CTA adds them (and splits over gridDim.y add into the workspace as above).
#ifndef KT
#define KT 4
#endif
// TRED 1: the warps' sums reduced after every row tile through two row-tile slots (a barrier per row tile).
// TRED 2: every warp adds its row tile's sums into one [MT][rows] table with shared-memory atomics, reduced
// once at the end (one barrier per CTA; any number of row tiles up to the table's shared memory).
#ifndef TRED
#define TRED 0
#endif

// Bytes of one entry of the table: INT4 and NVFP4 8, NF4 and MXFP4 4, none for the formats without block
// scales.
#if FMT == 4 || FMT == 7
#define XS_ES 8
#elif FMT == 5 || FMT == 6
#define XS_ES 4
#else
#define XS_ES 0
#endif

// An entry of the table (its first word, and its second for 8-byte entries) as the Meta of rows g and g + 8.
__device__ __forceinline__ Meta meta_of(u32 lo, u32 hi) {
    Meta m;
#if FMT == 4
    m.s[0] = (u16)(lo & 0xffffu);
    m.s[1] = (u16)(lo >> 16);
    m.zp = hi;
#elif FMT == 5
    m.s[0] = (u16)(lo & 0xffffu);
    m.s[1] = (u16)(lo >> 16);
#elif FMT == 6
    m.e[0] = (u16)(lo & 0xffffu);
    m.e[1] = (u16)(lo >> 16);
#elif FMT == 7
    m.e[0] = lo;
    m.e[1] = hi;
#else
    m.none = 0;  // FP16 / FP8 / INT8: no block scales (`meta` holds FP8 / INT8's per-row scales)
#endif
    return m;
}

// Scales of rows g and g + 8 from the x-stationary table (host: weight_only/mma.rs `xs_meta`): one load per
// scale column (INT4: group of 128; MXFP4 / NVFP4: 64-K tile) instead of two or four.
// Entry ((rt * cols + col) * 8 + g), cols = K / 128 (INT4) or K / 64 (the other block-scaled formats).
__device__ __forceinline__ Meta load_meta_xs(const u8* __restrict__ meta, int col, int rt, int cols, int g) {
    const size_t e = ((size_t)rt * cols + col) * 8 + g;
#if XS_ES == 8
    const uint2 v = __ldg((const uint2*)meta + e);
    return meta_of(v.x, v.y);
#elif XS_ES == 4
    return meta_of(__ldg((const u32*)meta + e), 0u);
#else
    return meta_of(0u, 0u);
#endif
}

__device__ __forceinline__ void xs_load(const uint4* __restrict__ w, const u8* __restrict__ scales, int rt, int kt0,
                                        int kt_total, int lane, int g, uint4 q[KT][QV], Meta meta[KT]) {
#pragma unroll
    for (int i = 0; i < KT; ++i) {
        const int kt = kt0 + i;
        if (kt < kt_total) {
#pragma unroll
            for (int v = 0; v < QV; ++v) q[i][v] = ld_weights(w + (((size_t)rt * kt_total + kt) * QV + v) * 32 + lane);
#if FMT == 4
            // one group of 128 = two tiles: the odd tile reuses the even tile's scales
            if (i % 2 == 1 && (kt0 % 2) == 0)
                meta[i] = meta[i - 1];
            else
#endif
                meta[i] = load_meta_xs(scales, FMT == 4 ? kt / 2 : kt, rt, FMT == 4 ? kt_total / 2 : kt_total, g);
        } else {
#pragma unroll
            for (int v = 0; v < QV; ++v) q[i][v] = make_uint4(0u, 0u, 0u, 0u);
        }
    }
}

// The CTA's sum over its warps of `rows` rows starting at CTA row `r0` (partial sums `part[warp][m][r0 + r]`,
// row stride `ps`), scaled (NVFP4's global scale, FP8 / INT8's row scales, the fused norm) and stored to y or,
// split over gridDim.y, added into the workspace. Threads walk rows for each x row: coalesced.
__device__ __forceinline__ void xs_reduce(const float* part, int ps, int r0, int rows, int rt0, int n_rows,
                                          int kt_total, const u8* __restrict__ scales, u16* __restrict__ y,
                                          float* __restrict__ ws, int flags, const float* fuse_inv, float gscale) {
    const bool split = gridDim.y > 1;
    const int slices = (kt_total + KT - 1) / KT;
    const int warps_here = TRED == 2 ? 1 : min(WARPS, slices - (int)blockIdx.y * WARPS);
    for (int i = threadIdx.x; i < rows * MT; i += blockDim.x) {
        const int m = i / rows, r = r0 + i - m * rows;
        float v = 0.0f;
        for (int wp = 0; wp < warps_here; ++wp) v += part[((size_t)wp * MT + m) * ps + r - (TRED == 1 ? r0 : 0)];
#if FMT == 7
        v *= gscale * NV_UP;
#elif ROW_SCALED
        v *= __ldg((const float*)scales + rt0 * 16 + r);  // FP8 / INT8: the row's scale (xs_meta passes them)
#endif
        if (flags & FUSE_NORM) v *= fuse_inv[m];
        const size_t o = (size_t)m * n_rows + rt0 * 16 + r;
        splitk_store(ws, y, o, v, split, flags);
    }
}

#if XS == 1
extern "C" __global__ void __launch_bounds__(WARPS * 32, MINB)
wo_mma_xs(const uint4* __restrict__ w, const u8* __restrict__ scales, const u8* __restrict__ zeros, float gscale,
          const u16* x, u16* __restrict__ y, float* __restrict__ ws, u32* __restrict__ counters,
          int n_rows, int k, int rtpc, int flags, float eps) {
    pdl_trigger();
    flags = fuse_flags(flags);
    // [WARPS][MT][rtpc * 16 + 4]: rows contiguous, so the epilogue's reads, workspace atomics and y stores run
    // along rows (coalesced); the pad of 4 floats puts a fragment store's 4 x-columns t on different banks.
    // TRED 1: [2][WARPS][MT][16 + 4], one row tile per slot, reduced right after the row tile. TRED 2:
    // [MT][rtpc * 16 + 4], the warps' sums added in with atomics (zeroed first).
    extern __shared__ float part[];
#if TRED == 1
    const int ps = 16 + 4;
#else
    const int ps = rtpc * 16 + 4;
#endif
    const int lane = threadIdx.x & 31;
    const int warp = threadIdx.x >> 5;
    const int g = lane >> 2, t = lane & 3;
    const int row_tiles = (n_rows + 15) / 16;
    const int kt_total = k / 64;
    const int kt0 = (blockIdx.y * WARPS + warp) * KT;
    const int rt0 = blockIdx.x * rtpc;
    const int rt_end = min(row_tiles, rt0 + rtpc);
    const int rows_here = min(n_rows, rt_end * 16) - rt0 * 16;

    uint4 q[KT][QV];
    Meta meta[KT];
    if (rt0 < rt_end) xs_load(w, scales, rt0, kt0, kt_total, lane, g, q, meta);
#if TRED == 2
    for (int i = threadIdx.x; i < MT * ps; i += blockDim.x) part[i] = 0.0f;
    __syncthreads();
#endif
    pdl_wait();  // the first weights are in flight; x, y and the workspace are touched only from here

    // B fragments of x for this warp's k-tiles: column g = row g of x block b, k = 16 s + 2 t (+1, +8, +9).
    __shared__ float fuse_inv[MT];  // read after the __syncthreads before the epilogue
    fuse_norm_rows(x, k, MT, flags, eps, fuse_inv, warp, WARPS);  // the rows dealt out to the warps
    u32 bx[KT][NB][4][2];
#pragma unroll
    for (int b = 0; b < NB; ++b)
#pragma unroll
        for (int i = 0; i < KT; ++i)
#pragma unroll
            for (int s = 0; s < 4; ++s) {
                const int m = b * 8 + g;
                if (m < MT && kt0 + i < kt_total) {
                    const u32* xr = (const u32*)(x + (size_t)m * k + (kt0 + i) * 64 + 16 * s + 2 * t);
                    bx[i][b][s][0] = ld_dep(xr);
                    bx[i][b][s][1] = ld_dep(xr + 4);
                } else {
                    bx[i][b][s][0] = bx[i][b][s][1] = 0u;
                }
            }

    for (int rt = rt0; rt < rt_end; ++rt) {
        uint4 qn[KT][QV];
        Meta mn[KT];
        if (rt + 1 < rt_end) xs_load(w, scales, rt + 1, kt0, kt_total, lane, g, qn, mn);
        float acc[NB][4];
#pragma unroll
        for (int b = 0; b < NB; ++b)
#pragma unroll
            for (int i = 0; i < 4; ++i) acc[b][i] = 0.0f;
#pragma unroll
        for (int i = 0; i < KT; ++i) {
            if (kt0 + i < kt_total) mma_tile(q[i], meta[i], bx[i], acc);
        }
        // C fragment: c0, c1 = row g, x rows 2t, 2t+1 of block b; c2, c3 = row g + 8.
#if TRED == 1
        float* slot = part + ((rt - rt0) & 1) * (WARPS * MT * ps);
        const int rl = 0;
#else
        float* slot = part;
        const int rl = (rt - rt0) * 16;
#endif
#pragma unroll
        for (int b = 0; b < NB; ++b)
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                const int m = b * 8 + 2 * t + (i & 1);
                const int r = rl + g + (i >= 2 ? 8 : 0);
#if TRED == 2
                // [m][r]: with ps = 4 mod 32 the lanes (g, t) of one (b, i) hit 32 different banks
                if (m < MT) atomicAdd(&slot[(size_t)m * ps + r], acc[b][i]);
#else
                if (m < MT) slot[((size_t)warp * MT + m) * ps + r] = acc[b][i];
#endif
            }
#if TRED == 1
        // The CTA adds this row tile's warp sums now (a slot is rewritten two row tiles later, after the next
        // barrier, which every thread reaches only once its reads of it are done).
        __syncthreads();
        xs_reduce(slot, ps, rt * 16 - rt0 * 16, min(16, n_rows - rt * 16), rt0, n_rows, kt_total, scales, y, ws,
                  flags, fuse_inv, gscale);
#endif
#pragma unroll
        for (int i = 0; i < KT; ++i) {
#pragma unroll
            for (int v = 0; v < QV; ++v) q[i][v] = qn[i][v];
            meta[i] = mn[i];
        }
    }
#if TRED != 1
    __syncthreads();
    xs_reduce(part, ps, 0, rows_here, rt0, n_rows, kt_total, scales, y, ws, flags, fuse_inv, gscale);
#endif
    if (gridDim.y == 1) return;

    splitk_finish(ws, y, counters, rt0 * 16, rows_here, n_rows, MT, flags);
}
#endif  // XS == 1

#if XS == 2
// x in shared memory, weights streamed along K (XS=2, entry wo_mma_xk), for the decode batches where the
// x-stationary kernel above is latency-bound (M = 16, session 11: ncu on INT4 16x14336x4096 showed 26% of the
// warps' stalls at its per-row-tile barrier and 32% waiting on weights with one row tile in flight per warp).
// Here the accumulators stay put instead of x: CTA (bx, by) copies x's columns of K split `by` (tiles_per_split
// 64-K tiles, every row of x, rows up to the n8 blocks zero-filled) into shared memory once, and each warp walks
// whole row tiles along that K range (rows rt0 + warp, rt0 + warp + WARPS, ... of the CTA's rtpc), keeping U
// 64-K weight tiles in flight in a register ring (slots refilled XKG at a time as their tiles are decoded, across
// row tile ends), reading x's B fragments with ldmatrix (one ldmatrix.x4 per k-step at M > 8, per two k-steps up to
// M = 8). A row tile's sums leave the warp once, when its K range is done: to y, or with K split over gridDim.y
// into the workspace (splitk_finish as above). No barrier after the staging one. Weights and scales in the
// x-stationary layout (`mma.rs`: fragment order, `xs_meta`); dynamic shared memory NB x 8 x (tiles_per_split x
// 64 + 8) halfs (the pad of 8 puts ldmatrix's eight rows on different banks).

// Ring slots refilled together: 4 (or all U when fewer) consecutive 512-byte pieces of a warp's weights
// requested back to back. Session 11, M = 16 (us, 4 vs 1 at a time): the loads alone (EXP_LOADONLY) INT4
// 16x14336x4096 17.3 vs 21.0; the kernel INT4 26.3 vs 27.3, FP8 30.1 vs 32.8, INT4 16x4096x14336 23.8 vs
// 24.3. Each refill right after its tile scattered a warp's requests in time and the DRAM pages with them.
#ifndef XKG
#define XKG (U % 4 == 0 ? 4 : U % 2 == 0 ? 2 : 1)
#endif
#if U % XKG != 0
#error "XKG must divide U"
#endif

__device__ __forceinline__ void ldsm_x4(u32 addr, u32& d0, u32& d1, u32& d2, u32& d3) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(d0), "=r"(d1), "=r"(d2), "=r"(d3)
                 : "r"(addr));
}

// x's columns [kb, kb + span) x 64 of rows 0 .. NB x 8 (zeros past MT) into shared memory at `xs_base`
// (row stride `ld` halfs), 16 bytes per cp.async, all of them in flight at once (a load-then-store loop
// waited one L2 round trip per 16 bytes and thread: 8 to 32 of them before the first MMA). Committed; the
// caller waits (cp.async.wait_all) and synchronizes the CTA.
__device__ __forceinline__ void xk_stage_x(const u16* x, int k, int kb, int span, int ld, u32 xs_base) {
    const int cpr = span * 8;  // 16-byte chunks per row
    for (int i = threadIdx.x; i < NB * 8 * cpr; i += blockDim.x) {
        const int m = i / cpr, c = i - m * cpr;
        const u32 dst = xs_base + (u32)(m * ld + c * 8) * 2u;
        const u16* src = x + (size_t)(m < MT ? m : 0) * k + (size_t)kb * 64 + c * 8;
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(src), "r"(m < MT ? 16 : 0));
    }
    asm volatile("cp.async.commit_group;" ::: "memory");
}

// This lane's ldmatrix row address in the staged x: lane l gives row l % 8 of matrix l / 8. M > 8: matrices
// (block 0, k 0-7), (block 0, k 8-15), (block 1, k 0-7), (block 1, k 8-15) of a k-step; up to M = 8: k 0-7,
// 8-15 of k-step s, then of k-step s + 1.
__device__ __forceinline__ u32 xk_x_addr(u32 xs_base, int ld, int lane, int rows_x = NB * 8) {
#if NB == 2
    int lrow = (lane >> 4) * 8 + (lane & 7);
    const int lcol = ((lane >> 3) & 1) * 8;
#else
    int lrow = lane & 7;
    const int lcol = ((lane >> 3) & 1) * 8 + (lane >> 4) * 16;
#endif
    // x staged in fewer rows than the n8 blocks take (XR: MT): the missing rows read a real one, their sums unused.
    if (lrow >= rows_x) lrow %= rows_x;
    u32 xaddr = xs_base + (u32)(lrow * ld + lcol) * 2u;
    // Opaque to the compiler: under the ring's register pressure ptxas otherwise rebuilt this address from
    // the thread index and the shared window (S2R, S2UR and ~12 integer instructions) for every tile.
    asm volatile("mov.b32 %0, %0;" : "+r"(xaddr));
    return xaddr;
}

// The register-ring kernel's x staging: x's columns staged (xk_stage_x) while the fused norm's row factors
// are computed (the rows dealt out to the warps), both awaited and the CTA synchronized; returns this lane's
// ldmatrix address. (The bulk ring stages x in chunks through bulk copies instead: xb_stage_x.)
__device__ __forceinline__ u32 xk_stage(const u16* x, int k, int kb, int span, int ld, u32 xs_base,
                                        int flags, float eps, float* fuse_inv) {
    xk_stage_x(x, k, kb, span, ld, xs_base);
    fuse_norm_rows(x, k, MT, flags, eps, fuse_inv, threadIdx.x >> 5, WARPS);
    asm volatile("cp.async.wait_all;" ::: "memory");
    __syncthreads();
    return xk_x_addr(xs_base, ld, threadIdx.x & 31);
}

// x's B fragments of the split's 64-K tile `kt` (counted from the split's first) from the staged x.
__device__ __forceinline__ void xk_x_frags(u32 xaddr, int kt, u32 bx[NB][4][2]) {
    const u32 a = xaddr + (u32)kt * 128u;  // 64 halfs per tile
#if NB == 2
#pragma unroll
    for (int s = 0; s < 4; ++s) ldsm_x4(a + 32u * s, bx[0][s][0], bx[0][s][1], bx[1][s][0], bx[1][s][1]);
#else
#pragma unroll
    for (int s = 0; s < 4; s += 2) ldsm_x4(a + 32u * s, bx[0][s][0], bx[0][s][1], bx[0][s + 1][0], bx[0][s + 1][1]);
#endif
}

// Row tile `rt`'s K range is done: its sums (C fragment: c0, c1 = row g, x rows 2t, 2t + 1 of block b; c2, c3
// = row g + 8) scaled (NVFP4's tensor scale, FP8 / INT8's row scales, the fused norm) to y, or with K split
// over gridDim.y into the workspace; acc is zeroed for the next row tile.
// Sum v of output (m, n) scaled: NVFP4's tensor scale, FP8 / INT8's row scales, the fused norm (all linear,
// so split-K partials take them too).
__device__ __forceinline__ float xk_scaled(float v, int m, int n, const u8* __restrict__ scales, float gscale,
                                           int flags, const float* fuse_inv) {
#if FMT == 7
    v *= gscale * NV_UP;
#elif ROW_SCALED
    v *= __ldg((const float*)scales + n);  // FP8 / INT8: the row's scale
#endif
    if (flags & FUSE_NORM) v *= fuse_inv[m];
    return v;
}

__device__ __forceinline__ void xk_store(float acc[NB][4], int rt, int g, int t, int n_rows,
                                         const u8* __restrict__ scales, float gscale, int flags, const float* fuse_inv,
                                         float* __restrict__ ws, u16* __restrict__ y, bool split) {
#pragma unroll
    for (int b = 0; b < NB; ++b)
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const int m = b * 8 + 2 * t + (i & 1);
            const int n = rt * 16 + g + (i >= 2 ? 8 : 0);
            if (m < MT && n < n_rows) {
                const float v = xk_scaled(acc[b][i], m, n, scales, gscale, flags, fuse_inv);
                splitk_store(ws, y, (size_t)m * n_rows + n, v, split, flags);
            }
            acc[b][i] = 0.0f;
        }
}

// One 64-K weight tile (this lane's QV words at `wl`, the lane's place in the tile) and its scales into a
// ring slot.
__device__ __forceinline__ void xk_load(const uint4* __restrict__ wl, const u8* __restrict__ scales, int rt, int kt,
                                        int kt_total, int g, uint4 (&q)[QV], Meta& meta) {
#pragma unroll
    for (int v = 0; v < QV; ++v) q[v] = ld_weights(wl + v * 32);
    meta = load_meta_xs(scales, FMT == 4 ? kt / 2 : kt, rt, FMT == 4 ? kt_total / 2 : kt_total, g);
}

#if !XB  // the bulk ring below replaces this entry
extern "C" __global__ void __launch_bounds__(WARPS * 32, MINB)
wo_mma_xk(const uint4* __restrict__ w, const u8* __restrict__ scales, const u8* __restrict__ zeros, float gscale,
          const u16* x, u16* __restrict__ y, float* __restrict__ ws, u32* __restrict__ counters,
          int n_rows, int k, int rtpc, int flags, float eps) {
    pdl_trigger();
    flags = fuse_flags(flags);
    extern __shared__ __align__(16) u16 xsm[];
    __shared__ float fuse_inv[MT];
    const int lane = threadIdx.x & 31;
    const int warp = threadIdx.x >> 5;
    const int g = lane >> 2, t = lane & 3;
    const int row_tiles = (n_rows + 15) / 16;
    const int kt_total = k / 64;
    const int tps = (kt_total + gridDim.y - 1) / gridDim.y;  // 64-K tiles per split (the host's split count
    const int kb = blockIdx.y * tps;                        // leaves no split empty)
    const int ke = min(kt_total, kb + tps);
    const int span = ke - kb;
    const int ld = tps * 64 + 8;  // shared-memory row stride of x, halfs
    const int rt0 = blockIdx.x * rtpc;
    const int rt_end = min(row_tiles, rt0 + rtpc);
    const int mine = rt0 + warp < rt_end ? (rt_end - rt0 - warp + WARPS - 1) / WARPS : 0;
    const int tiles = mine * span;  // tiles this warp decodes

    // The ring: U tiles in flight before the wait (weights and scales only: no earlier kernel writes them).
    uint4 q[U][QV];
    Meta meta[U];
    int lrt = rt0 + warp, lkt = kb;  // the next tile to load, and this lane's 16 bytes of it:
    const uint4* wl = w + ((size_t)lrt * kt_total + lkt) * QV * 32 + lane;
    // a tile is QV x 32 uint4 after the previous one; the next row tile's first starts WARPS row tiles on
    const size_t row_jump = ((size_t)WARPS * kt_total - span) * QV * 32;
#pragma unroll
    for (int u = 0; u < U; ++u) {
        if (u < tiles) {
            xk_load(wl, scales, lrt, lkt, kt_total, g, q[u], meta[u]);
            wl += QV * 32;
            if (++lkt == ke) lkt = kb, lrt += WARPS, wl += row_jump;
        }
    }
    pdl_wait();

    const u32 xaddr = xk_stage(x, k, kb, span, ld, (u32)__cvta_generic_to_shared(xsm), flags, eps, fuse_inv);

    float acc[NB][4];
#pragma unroll
    for (int b = 0; b < NB; ++b)
#pragma unroll
        for (int i = 0; i < 4; ++i) acc[b][i] = 0.0f;
    const bool split = gridDim.y > 1;
    int crt = rt0 + warp, ckt = kb;  // the tile being decoded
    for (int j0 = 0; j0 < tiles; j0 += U) {
#pragma unroll
        for (int u = 0; u < U; ++u) {
            if (j0 + u < tiles) {
                u32 bx[NB][4][2];
                xk_x_frags(xaddr, ckt - kb, bx);
#if EXP_LOADONLY
                // Profiling experiment (ROOFLINE_NVRTC_EXTRA=-DEXP_LOADONLY=1, wrong results): the weights and
                // scales consumed without decode or MMA.
                {
                    u32 xv = bx[0][0][0];
#pragma unroll
                    for (int v = 0; v < QV; ++v) xv ^= q[u][v].x ^ q[u][v].y ^ q[u][v].z ^ q[u][v].w;
                    acc[0][0] += as_float((xv & 0x007fffffu) | 0x3f800000u) + block_scale(meta[u], 0, 3);
                }
#elif EXP_NODECODE
                // Profiling experiment: MMAs on the raw words (finite f16 bit patterns), no decode.
                {
                    float part[NB][4] = {};
#pragma unroll
                    for (int s = 0; s < 4; ++s) {
                        const u32 wv = word(q[u][0], s) & 0x3bff3bffu;
                        const u32 a[4] = {wv, wv ^ 0x00010001u, wv ^ 0x00020002u, wv ^ 0x00030003u};
#pragma unroll
                        for (int b = 0; b < NB; ++b) mma(part[b], a, bx[b][s][0], bx[b][s][1]);
                    }
#pragma unroll
                    for (int b = 0; b < NB; ++b)
#pragma unroll
                        for (int i = 0; i < 4; ++i) acc[b][i] += part[b][i] * block_scale(meta[u], 0, 3);
                }
#else
                mma_tile(q[u], meta[u], bx, acc);
#endif
                // Refill the slots XKG at a time (the tiles U ahead, maybe of the warp's next row tile): XKG
                // consecutive 512-byte pieces requested back to back.
                if ((u + 1) % XKG == 0) {
#pragma unroll
                    for (int v = u + 1 - XKG; v <= u; ++v) {
                        if (j0 + v + U < tiles) {
                            xk_load(wl, scales, lrt, lkt, kt_total, g, q[v], meta[v]);
                            wl += QV * 32;
                            if (++lkt == ke) lkt = kb, lrt += WARPS, wl += row_jump;
                        }
                    }
                }
                if (++ckt == ke) {
                    xk_store(acc, crt, g, t, n_rows, scales, gscale, flags, fuse_inv, ws, y, split);
                    ckt = kb;
                    crt += WARPS;
                }
            }
        }
    }
    if (!split) return;

    splitk_finish(ws, y, counters, rt0 * 16, min(n_rows, rt_end * 16) - rt0 * 16, n_rows, MT, flags);
}

#endif  // !XB

#if XB
// The bulk ring (XB=1, entry wo_mma_xb, sm_90+): wo_mma_xk with each warp's weight tiles and their scale
// columns streamed through a ring of NST slots in shared memory by bulk copies (`cp.async.bulk`, an mbarrier
// per slot) instead of a ring of registers. Why: at M = 16 the register ring kept too few bytes in flight (the
// loads alone, EXP_LOADONLY, ran INT4 16x14336x4096 in 17.3 us against 13.2 for the whole M = 1 GEMV, session
// 11), and every byte in flight cost a register the decode and the MMAs needed. A slot holds up to U 64-K tiles
// of one row tile (contiguous in the fragment layout, as are their scale columns), so lane 0 fills it with two
// copies: the first version copied each 512-byte tile and its scales on their own and ran at a third of the
// bandwidth (session 18). The warp refills a slot right after it decoded it, so the ring needs no producer
// warp and no cross-warp barrier; the first NST slots are requested before griddepcontrol.wait (weights and
// scales depend on no kernel). Slots end where row tiles end: slot after slot walks the warp's share of the
// CTA's tiles (XbCursor), both where the warp fills and where it decodes. Dynamic shared memory: x as
// wo_mma_xk lays it out (rounded up to 128 bytes), then WARPS x NST x XB_SLOT bytes of rings, then, where the
// plan gives one (always with CL), the parking table (xb_park).
#define XB_TILE (QV * 512)  // bytes of one tile's codes
#if FMT == 4
#define XB_CB 64                // bytes of a scale column (INT4: a group of 128, two tiles)
#define XB_COL(kt) ((kt) >> 1)  // the scale column of tile kt
#define XB_COLS (U / 2 + 1)     // most columns of a slot (it may start at an odd tile)
#else
#define XB_CB (8 * XS_ES)
#define XB_COL(kt) (kt)
#define XB_COLS U
#endif
#define XB_SLOT ((U * XB_TILE + XB_COLS * XB_CB + 127) / 128 * 128)
#if NST < 2
#error "the bulk ring needs NST >= 2 slots per warp"
#endif

// Where a warp is in its walk over slots: tile kt of row tile rt, `left` tiles of its share still to go. A
// CTA's work is its row tiles' K split, rows x span tiles in row-tile order, and warp w takes the share
// [w total / WARPS, (w + 1) total / WARPS) rounded down to whole row tiles, or to whole slots (U tiles)
// where whole row tiles would leave an eighth of the warps idle and the CTA has a parking table to add
// shared row tiles' sums in (`xb_balanced`, `xb_share`); slot after slot walks it, a slot never crossing a
// row tile. Until session 20 warp w took row tiles w, w + WARPS, ...: a CTA of 14 row tiles kept 2 of its 16
// warps idle (ncu, INT4 16x14336x4096: a quarter of the warps' cycles stalled on barriers), a CTA of 7 nine;
// sharing the tiles, INT4 16x14336x4096 ran 18.5 us against 20.2 (MXFP4 21.0 vs 23.1, NF4 23.8 vs 26.5,
// NVFP4 22.1 vs 24.5), but where no warp was idle (16 row tiles) the table's atomics (compare-and-swap loops
// in shared memory) and the barrier before its sum cost 2-3 us (4096x14336, 4096x4096). (Session 19 tried
// starting each row tile's walk at a different offset, so that the warps of the grid would not read the same
// offsets at the same time: INT4 16x14336x4096 23.8 -> 26.9 us, the loads alone 17.5 -> 18.3.)
struct XbCursor {
    int rt, kt, left;
};

// Tiles in the slot starting at the cursor (there are some: c.left > 0).
__device__ __forceinline__ int xb_len(const XbCursor& c, int ke) { return min(min(U, ke - c.kt), c.left); }

// Moves the cursor past a slot of n tiles; true when that slot ended a stretch of one row tile (the row
// tile's K split, or the warp's share).
__device__ __forceinline__ bool xb_advance(XbCursor& c, int n, int kb, int ke) {
    c.kt += n;
    c.left -= n;
    if (c.kt == ke) {
        c.kt = kb;
        ++c.rt;
        return true;
    }
    return c.left == 0;
}

// Whether the warps share the CTA's `rows` row tiles' tiles (the CTA having a parking table): where owning
// whole row tiles would leave an eighth of the warps' time idle or more.
__device__ __forceinline__ bool xb_balanced(bool table, int rows) {
    return table && 8 * rows <= 7 * ((rows + WARPS - 1) / WARPS) * WARPS;
}

// Warp `warp`'s share of the CTA's `rows` row tiles (from rt0) x `span` tiles (from kb), its bounds rounded
// down to multiples of `grain` tiles: the cursor at its start.
__device__ __forceinline__ XbCursor xb_share(int warp, int rows, int span, int grain, int rt0, int kb) {
    const int total = rows * span;
    const int u0 = warp * total / WARPS / grain * grain;
    const int u1 = warp + 1 == WARPS ? total : (warp + 1) * total / WARPS / grain * grain;
    return {rt0 + u0 / span, kb + u0 % span, u1 - u0};
}

// Lane 0 requests the warp's next slot (the slot at cursor c, with its scale columns) into the slot at
// shared address `dst`, completing on the mbarrier at `bar`, and moves c past it.
__device__ __forceinline__ void xb_fill(u32 dst, u32 bar, XbCursor& c, int kb, int ke, int kt_total,
                                        const uint4* __restrict__ w, const u8* __restrict__ scales) {
    const int n = xb_len(c, ke);
    const int c0 = XB_COL(c.kt), nc = XB_COL(c.kt + n - 1) - c0 + 1;
    mbar_expect_tx(bar, (u32)(n * XB_TILE + nc * XB_CB));
    bulk_copy(dst, w + ((size_t)c.rt * kt_total + c.kt) * QV * 32, (u32)(n * XB_TILE), bar);
#if XB_CB > 0
    const int cols = FMT == 4 ? kt_total / 2 : kt_total;  // scale columns of a row tile
    bulk_copy(dst + U * XB_TILE, scales + ((size_t)c.rt * cols + c0) * XB_CB, (u32)(nc * XB_CB), bar);
#endif
    xb_advance(c, n, kb, ke);
}

// Entry g of a scale column staged in shared memory.
__device__ __forceinline__ Meta xb_meta(const u8* e, int g) {
#if XS_ES == 8
    const uint2 v = *(const uint2*)(e + 8 * g);
    return meta_of(v.x, v.y);
#elif XS_ES == 4
    return meta_of(*(const u32*)(e + 4 * g), 0u);
#else
    return meta_of(0u, 0u);
#endif
}

// x through bulk copies too, in chunks of XCT 64-K tiles (XB_XCH chunks at most; one mbarrier each), so
// that a warp decodes its first slot once x's first chunk is in, not once all of x is. What x costs is its
// traffic more than the wait (session 19, INT4 16x14336x4096 in one split, the loads alone: 17.8 us with
// x, 15.9 / 14.8 / 13.7 with 1/2, 1/4, 1/64 of it; staged in another order per CTA, 17.9): every CTA
// reads its K split of x, 16 rows, from L2. Chunks of 16 tiles against cp.async and a CTA barrier: the
// kernel 21.7 vs 22.8 us (2 splits), the loads alone 17.5 vs 18.4; chunks of 4 tiles were slower (24.5).
// Session 24 (INT4 16x14336x4096, one split): chunks of 16 tiles 17.1 us, of 4 / 8 / 32 / 64 tiles 21.6 /
// 18.6 / 17.5 / 18.2; the chunks requested in a rotated order per CTA 17.4.
#ifndef XCT
#define XCT 16
#endif
#define XB_XCH 32

// Tiles per x chunk of a split of `span` tiles.
__device__ __forceinline__ int xb_chunk_tiles(int span) { return max(XCT, (span + XB_XCH - 1) / XB_XCH); }

// Warp 0 requests x's columns of tiles [kb, kb + span), chunk after chunk, each row of x (MT of them) on its
// own copy (rows are `ld` halfs apart in shared memory, k in global), chunk c completing on `xbar + 8 c`.
// The `nthreads` first threads zero-fill x's rows MT .. rows_x (with rows_x = NB x 8 the n8 blocks' padding,
// which no copy writes; XR's x has MT rows, its fragments reading real rows in the padding's place). The chunk
// barriers must be initialized (by thread 0) before; the caller synchronizes the threads after.
// Profiling experiment (ROOFLINE_NVRTC_EXTRA=-DEXP_XROWS=r, wrong results): only x's first r rows copied,
// the rest zero-filled, so x's L2 traffic is r / MT of the real one.
#ifdef EXP_XROWS
#define XB_XROWS (EXP_XROWS < MT ? EXP_XROWS : MT)
#else
#define XB_XROWS MT
#endif
// XMC=1 (x multicast): the CTA pair of a cluster along N shares x's copies, each requesting the rows of its
// rank's parity into both CTAs' shared memory (`bulk_copy_pair`, same offsets), so x leaves L2 once per pair;
// every CTA still expects all of x's bytes on its own chunk barriers. The pair's barriers must be initialized
// before (cluster_sync after the initialization).
__device__ __forceinline__ void xb_stage_x(const u16* x, int k, int kb, int span, int ld, u32 xs_base,
                                           u32 xbar, int rows_x, int nthreads) {
    const int ct = xb_chunk_tiles(span), nch = (span + ct - 1) / ct;
    const int lane = threadIdx.x & 31;
    if (threadIdx.x < 32) {
        if (lane == 0)
            for (int c = 0; c < nch; ++c) mbar_expect_tx(xbar + 8 * c, (u32)(XB_XROWS * min(ct, span - c * ct) * 128));
        __syncwarp();
#if XMC
        const int m0 = 2 * lane + (int)cluster_rank(), mstep = 64;
#else
        const int m0 = lane, mstep = 32;
#endif
        for (int c = 0; c < nch; ++c) {
            const int t0 = c * ct, nt = min(ct, span - t0);
            for (int m = m0; m < XB_XROWS; m += mstep) {
                const u32 dst = xs_base + (u32)(m * ld + t0 * 64) * 2u;
                const u16* src = x + (size_t)m * k + (size_t)(kb + t0) * 64;
#if XMC
                bulk_copy_pair(dst, src, (u32)(nt * 128), xbar + 8 * c);
#else
                bulk_copy(dst, src, (u32)(nt * 128), xbar + 8 * c);
#endif
            }
        }
    }
    for (int i = threadIdx.x; i < (rows_x - XB_XROWS) * ld / 8; i += nthreads) {
        const int m = XB_XROWS + i / (ld / 8), c = i % (ld / 8);
        asm volatile("st.shared.v4.u32 [%0], {%1, %1, %1, %1};" ::"r"(xs_base + (u32)(m * ld + c * 8) * 2u), "r"(0u)
                     : "memory");
    }
}

#if XF16
// 16 bytes of shared memory at `addr` (volatile: ordered with the in-place stores around it).
__device__ __forceinline__ uint4 xb_lds16(u32 addr) {
    uint4 q;
    asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(q.x), "=r"(q.y), "=r"(q.z), "=r"(q.w)
                 : "r"(addr));
    return q;
}

// XF16: x's rows [0, MT) in shared memory (row m at xs_base + m ld 2 bytes, span x 64 BF16 values) rewritten in place
// as f16 scaled by 2^-e, e per row from its largest |x| (2^(e-1) <= max < 2^e; 0 for a zero row), and xup[m] = 2^e.
// Waits for all of x's chunks first (each chunk barrier's phase 0; the later waits on them pass at once). Warp w takes
// rows w, w + WARPS, ...; the caller synchronizes the CTA before the MMAs read x and the epilogue reads xup.
__device__ __forceinline__ void xb_x_to_f16(u32 xs_base, int ld, int span, u32 xbar, float* xup, int warp) {
    const int nch = (span + xb_chunk_tiles(span) - 1) / xb_chunk_tiles(span);
    for (int c = 0; c < nch; ++c) mbar_wait(xbar + 8 * c, 0u);
    const int lane = threadIdx.x & 31, nv = span * 8;  // 16-byte vectors of a row
    for (int m = warp; m < MT; m += WARPS) {
        const u32 row = xs_base + (u32)(m * ld) * 2u;
        u32 mx = 0u;  // |x| bits of two BF16 halves (non-negative floats order as their bits)
        for (int v = lane; v < nv; v += 32) {
            const uint4 q = xb_lds16(row + 16u * v);
            const u32 a = __vmaxu2(q.x & 0x7fff7fffu, q.y & 0x7fff7fffu);
            const u32 b = __vmaxu2(q.z & 0x7fff7fffu, q.w & 0x7fff7fffu);
            mx = __vmaxu2(mx, __vmaxu2(a, b));
        }
        mx = __reduce_max_sync(0xffffffffu, max(mx & 0xffffu, mx >> 16));
        const float big = __uint_as_float(mx << 16);
        const int e = unit_exp(big);
        const float down = ldexpf(1.0f, -e);
        if (lane == 0) xup[m] = ldexpf(1.0f, e);
        for (int v = lane; v < nv; v += 32) {
            const uint4 q = xb_lds16(row + 16u * v);
            u32 h[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                // (lo, hi) BF16 -> f16x2, exact: the product by 2^-e is, and f16 holds 8 bits from 2^-17 up (scaled)
                const float lo = __uint_as_float(h[i] << 16) * down, hi = __uint_as_float(h[i] & 0xffff0000u) * down;
                asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(h[i]) : "f"(hi), "f"(lo));
            }
            asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};"
                         ::"r"(row + 16u * v), "r"(h[0]), "r"(h[1]), "r"(h[2]), "r"(h[3])
                         : "memory");
        }
    }
}

// XF16: a row tile's sums (acc, the m16n8 fragments' layout) back up by their x rows' 2^e.
__device__ __forceinline__ void xb_x_up(float acc[NB][4], const float* xup, int t) {
#pragma unroll
    for (int b = 0; b < NB; ++b)
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const int m = b * 8 + 2 * t + (i & 1);
            if (m < MT) acc[b][i] *= xup[m];
        }
}
#endif

// Profiling experiment (ROOFLINE_NVRTC_EXTRA=-DEXP_XREUSE=r, wrong results for r > 1): x's fragments read from
// shared memory (ldmatrix) for every r-th tile of a slot only, the others reusing them, so the ldmatrix
// traffic is 1 / r of the real one (what reading x once for r row tiles would cost).
#ifndef EXP_XREUSE
#define EXP_XREUSE 1
#endif
#if FMT == 4
// INT4: the two tiles of one group of 128 (an even tile and the next; x's fragments at `xa`, tiles u and u +
// 1 of the slot): their eight k-steps' MMAs into one partial sum, flushed once with the group's scales
// (mma_tile flushes every tile: ten more instructions a pair).
__device__ __forceinline__ void mma_group(const uint4 (&q0)[QV], const uint4 (&q1)[QV], const Meta& meta, u32 xa,
                                          int u, float acc[NB][4]) {
    const u32 zg = zero_pair(meta, 0);
    const u32 zg8 = zero_pair(meta, 1);
    float part[NB][4];
#pragma unroll
    for (int b = 0; b < NB; ++b)
#pragma unroll
        for (int i = 0; i < 4; ++i) part[b][i] = 0.0f;
    u32 bx[NB][4][2] = {};  // (dead stores unless EXP_XREUSE > 2)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        if ((u + h) % EXP_XREUSE == 0) xk_x_frags(xa, u + h, bx);
#pragma unroll
        for (int s = 0; s < 4; ++s) {
            u32 a[4];
            decode_step(h == 0 ? q0 : q1, s, zg, zg8, a);
#pragma unroll
            for (int b = 0; b < NB; ++b) mma(part[b], a, bx[b][s][0], bx[b][s][1]);
        }
    }
    flush_part(part, block_scale(meta, 0, 3), block_scale(meta, 1, 3), acc);
}
#endif

// The lane's words of the n tiles at `sp` (512 QV bytes apart) and their entries of the scale columns at `cp`
// (the column of tile ckt first): what xb_tiles decodes.
template <bool FULL>
__device__ __forceinline__ void xb_load(const u8* sp, const u8* cp, int n, int ckt, int lane, int g, uint4 (&q)[U][QV],
                                        Meta (&meta)[U]) {
    const int c0 = XB_COL(ckt);
#pragma unroll
    for (int u = 0; u < U; ++u) {
        if (FULL || u < n) {
#pragma unroll
            for (int v = 0; v < QV; ++v) q[u][v] = *(const uint4*)(sp + u * XB_TILE + v * 512 + 16 * lane);
            meta[u] = xb_meta(cp + (XB_COL(ckt + u) - c0) * XB_CB, g);
        }
    }
}

// The MMAs of the n tiles (from tile ckt; x's fragments of the first at `xa`) whose words and scale entries
// xb_load read, into acc. FULL (n == U, every slot but a row tile's last when U does not divide the split): no
// guard per tile, so the tiles are one basic block and ptxas interleaves one tile's decode and x fragments with
// the previous tile's MMA chain (a guarded tile was a block of its own: each tile's loads, decode, four
// dependent MMAs and scale FMAs ran back to back). INT4 slots of whole groups (FULL, from an even tile, U
// even) take them two tiles at a time (mma_group).
template <bool FULL>
__device__ __forceinline__ void xb_tiles(const uint4 (&q)[U][QV], const Meta (&meta)[U], int n, int ckt, u32 xa,
                                         float acc[NB][4]) {
#if FMT == 4 && U % 2 == 0 && !EXP_LOADONLY
    if (FULL && (ckt & 1) == 0) {
#pragma unroll
        for (int u = 0; u < U; u += 2) mma_group(q[u], q[u + 1], meta[u], xa, u, acc);
        return;
    }
#endif
    u32 bx[NB][4][2] = {};
#pragma unroll
    for (int u = 0; u < U; ++u) {
        if (FULL || u < n) {
            if (u % EXP_XREUSE == 0) xk_x_frags(xa, u, bx);
#if EXP_LOADONLY
            // Profiling experiment (wrong results): the slot's words consumed without decode or MMA.
            u32 xv = bx[0][0][0];
#pragma unroll
            for (int v = 0; v < QV; ++v) xv ^= q[u][v].x ^ q[u][v].y ^ q[u][v].z ^ q[u][v].w;
            acc[0][0] += as_float((xv & 0x007fffffu) | 0x3f800000u) + block_scale(meta[u], 0, 3);
#else
            mma_tile(q[u], meta[u], bx, acc);
#endif
        }
    }
}

// Decodes the n tiles of the slot at `sp` (from tile ckt; x's fragments of its first at `xa`; the slot's scale
// columns after its U tiles) and runs their MMAs into acc.
template <bool FULL>
__device__ __forceinline__ void xb_slot(const u8* sp, int n, int ckt, u32 xa, int lane, int g, float acc[NB][4]) {
    uint4 q[U][QV];
    Meta meta[U];
    xb_load<FULL>(sp, sp + U * XB_TILE, n, ckt, lane, g, q, meta);
    xb_tiles<FULL>(q, meta, n, ckt, xa, acc);
}

// The parking table ([MT][rtpc x 16 + 4] floats after the rings, pad 4: the lanes' (m, r) on 32 banks),
// where the plan gave the CTA one (LaunchPlan::park_bytes: the dynamic shared memory reaches past the rings
// by it): the warps add their stretches' sums into it, so that a row tile may be shared by warps, and with
// CL=1 the K splits of a row block, one cluster (gridDim.y CTAs along y, rank = split), sum their tables
// through distributed shared memory: no workspace atomics, no counter, no last-CTA pass (at M = 16 those
// cost INT4 16x14336x4096 ~3 us of its 18 us loads-only time in 2 splits, session 19).

// Row tile `lr` (of the CTA's) sums into the parking table, added where the warps share row tiles (`add`:
// the table was zeroed), else stored (the warp owns the row tile); acc zeroed.
__device__ __forceinline__ void xb_park(float acc[NB][4], float* red, int ps, int lr, int g, int t, bool add) {
#pragma unroll
    for (int b = 0; b < NB; ++b)
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const int m = b * 8 + 2 * t + (i & 1);
            float* e = red + m * ps + lr * 16 + g + (i >= 2 ? 8 : 0);
            if (m < MT) {
                if (add)
                    atomicAdd(e, acc[b][i]);
                else
                    *e = acc[b][i];
            }
            acc[b][i] = 0.0f;
        }
}

// The row block's `rows` outputs (from row rt0 x 16) from the parking tables, scaled and stored to y (y +=
// with FUSE_ADD), or with K split over the workspace (`split`, not `cl`) added there. `cl`: the splits are
// this cluster's CTAs, every one parked (cluster_sync), and this CTA sums a 1 / gridDim.y share of the
// outputs over their tables; otherwise the CTA's own table (its warps parked, __syncthreads) holds its sums.
__device__ __forceinline__ void xb_table_sum(const float* red, int ps, int rt0, int rows, int n_rows,
                                             const u8* __restrict__ scales, float gscale, int flags,
                                             const float* fuse_inv, float* __restrict__ ws, u16* __restrict__ y,
                                             bool cl, bool split) {
    const int parts = cl ? (int)gridDim.y : 1, total = rows * MT;
    const int share = (total + parts - 1) / parts, i0 = cl ? (int)cluster_rank() * share : 0;
    const int i1 = min(total, i0 + share);
    for (int i = i0 + threadIdx.x; i < i1; i += blockDim.x) {
        const int m = i / rows, r = i - m * rows, n = rt0 * 16 + r;
        float v = 0.0f;
        if (cl)
            for (int q = 0; q < parts; ++q) v += ld_dsmem(red + m * ps + r, (u32)q);
        else
            v = red[m * ps + r];
        v = xk_scaled(v, m, n, scales, gscale, flags, fuse_inv);
        splitk_store(ws, y, (size_t)m * n_rows + n, v, split && !cl, flags);
    }
}

#if !XR  // (XR builds its own entry below)
extern "C" __global__ void __launch_bounds__(WARPS * 32, MINB)
wo_mma_xb(const uint4* __restrict__ w, const u8* __restrict__ scales, const u8* __restrict__ zeros, float gscale,
          const u16* x, u16* __restrict__ y, float* __restrict__ ws, u32* __restrict__ counters,
          int n_rows, int k, int rtpc, int flags, float eps) {
    pdl_trigger();
    flags = fuse_flags(flags);
    extern __shared__ __align__(128) u8 xb_dyn[];
    u8* const xb_smem = xb_dyn + XB_TAB_BYTES;  // x, the rings and the parking table after NF4's table, if any
    __shared__ __align__(8) unsigned long long full[WARPS][NST];
    __shared__ __align__(8) unsigned long long xfull[XB_XCH];
    __shared__ float fuse_inv[MT];
    const int lane = threadIdx.x & 31;
    const int warp = threadIdx.x >> 5;
    const int g = lane >> 2, t = lane & 3;
    const int row_tiles = (n_rows + 15) / 16;
    const int kt_total = k / 64;
    const int tps = (kt_total + gridDim.y - 1) / gridDim.y;
    const int kb = blockIdx.y * tps;
    const int ke = min(kt_total, kb + tps);
    const int span = ke - kb;
    const int ld = tps * 64 + 8;
    const int rt0 = blockIdx.x * rtpc;
    const int rt_end = min(row_tiles, rt0 + rtpc);
    const int xbytes = (NB * 8 * ld * 2 + 127) & ~127;
    const u8* ring = xb_smem + xbytes + warp * (NST * XB_SLOT);
    const u32 ring_s = (u32)__cvta_generic_to_shared(ring);
    const u32 bar_s = (u32)__cvta_generic_to_shared(&full[warp][0]);
    float* red = (float*)(xb_smem + xbytes + WARPS * NST * XB_SLOT);  // the parking table, if any
    const int ps = rtpc * 16 + 4;
    const bool table = dynamic_smem_bytes() >= (u32)(XB_TAB_BYTES + xbytes + WARPS * NST * XB_SLOT + MT * ps * 4);
    const bool bal = xb_balanced(table, rt_end - rt0);
    const bool split = gridDim.y > 1;
    const bool parked = bal || (CL && split);  // the sums go through the table (CL plans always have it)

    // the next slot lane 0 requests, and the slot being decoded
    XbCursor fc = xb_share(warp, max(0, rt_end - rt0), span, bal ? U : span, rt0, kb), cc = fc;
    const u32 xbar_s = (u32)__cvta_generic_to_shared(&xfull[0]);
    if (lane == 0) {
#pragma unroll
        for (int i = 0; i < NST; ++i) mbar_init(bar_s + 8 * i, 1);
        if (warp == 0)
            for (int c = 0; c < XB_XCH; ++c) mbar_init(xbar_s + 8 * c, 1);
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
        asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
#pragma unroll
        for (int sl = 0; sl < NST; ++sl)
            if (fc.left > 0) xb_fill(ring_s + sl * XB_SLOT, bar_s + 8 * sl, fc, kb, ke, kt_total, w, scales);
    }
    __syncwarp();
#if FMT == 5 && defined(NF4_TAB)
    nf4_tab_fill();  // depends on no kernel (read after the barrier below)
#endif
    pdl_wait();
#if XMC
    cluster_sync();  // the pair's chunk barriers initialized before either requests x into both
#endif

    const u32 xs_base = (u32)__cvta_generic_to_shared(xb_smem);
    xb_stage_x(x, k, kb, span, ld, xs_base, xbar_s, NB * 8, blockDim.x);
    if (bal)
        for (int i = threadIdx.x; i < MT * ps; i += blockDim.x) red[i] = 0.0f;
    fuse_norm_rows(x, k, MT, flags, eps, fuse_inv, warp, WARPS);
    __syncthreads();  // x's padding rows, the zeroed table, the norm factors, the chunk barriers' initialization,
                      // NF4's table
#if XF16
    __shared__ float xup[MT];
    xb_x_to_f16(xs_base, ld, span, xbar_s, xup, warp);
    __syncthreads();  // x in f16, its rows' factors
#endif
    const u32 xaddr = xk_x_addr(xs_base, ld, lane);
    const int xct = xb_chunk_tiles(span);
    int xin = 0;  // x's tiles [kb, kb + xin) are known to be in

    float acc[NB][4];
#pragma unroll
    for (int b = 0; b < NB; ++b)
#pragma unroll
        for (int i = 0; i < 4; ++i) acc[b][i] = 0.0f;
    int sl = 0;
    u32 par = 0u;
    while (cc.left > 0) {
        const int n = xb_len(cc, ke);
        const int ckt = cc.kt;
        while (xin < ckt + n - kb) {  // the slot reaches into x's next chunk
            mbar_wait(xbar_s + 8 * (xin / xct), 0u);
            xin = min(span, xin + xct);
        }
        mbar_wait(bar_s + 8 * sl, par);
        const u8* sp = ring + sl * XB_SLOT;
        const u32 xa = xaddr + (u32)(ckt - kb) * 128u;
        if (n == U)
            xb_slot<true>(sp, n, ckt, xa, lane, g, acc);
        else
            xb_slot<false>(sp, n, ckt, xa, lane, g, acc);
        // Every lane has used its words of the slot: lane 0 refills it with the slot NST on. (Session 26
        // refilled it as soon as its words were in registers, before the MMAs: no gain, RESULTS.md.)
        __syncwarp();
        if (lane == 0 && fc.left > 0) xb_fill(ring_s + sl * XB_SLOT, bar_s + 8 * sl, fc, kb, ke, kt_total, w, scales);
        const int crt = cc.rt;
        if (xb_advance(cc, n, kb, ke)) {
#if XF16
            xb_x_up(acc, xup, t);
#endif
            if (parked)
                xb_park(acc, red, ps, crt - rt0, g, t, bal);
            else
                xk_store(acc, crt, g, t, n_rows, scales, gscale, flags, fuse_inv, ws, y, split);
        }
        if (++sl == NST) sl = 0, par ^= 1u;
    }
    const int rows = min(n_rows, rt_end * 16) - rt0 * 16;  // outputs of the CTA's row tiles
    if (parked) {
#if CL
        if (split) {
            cluster_sync();  // every split's sums parked
            xb_table_sum(red, ps, rt0, rows, n_rows, scales, gscale, flags, fuse_inv, ws, y, true, true);
            cluster_exit_sync();  // no CTA leaves while another reads its table
            return;
        }
#endif
        __syncthreads();  // every warp's sums parked
        xb_table_sum(red, ps, rt0, rows, n_rows, scales, gscale, flags, fuse_inv, ws, y, false, split);
    }
#if XMC
    // No CTA leaves while its pair's copies may still land in it (a CTA past the last row tile has no slot
    // that waits for x).
    for (; xin < span; xin = min(span, xin + xct)) mbar_wait(xbar_s + 8 * (xin / xct), 0u);
    cluster_exit_sync();
#endif
    if (!split) return;

    splitk_finish(ws, y, counters, rt0 * 16, rows, n_rows, MT, flags);
}
#endif  // !XR

#if XR
// XR 1 (with XB; entry wo_mma_xr, sm_90+, one K split): the bulk ring's tiles streamed the M = 1 ring GEMV's way
// (wo_ring.cu). A producer warp (the CTA's last) copies the CTA's tiles, which lie contiguous in memory ([row
// tile][k tile]), in units of WARPS x U tiles (16 KB of 4-bit codes at U = 2: half a row tile at K = 4096) with
// the unit's scale columns, into one ring of NST slots shared by the WARPS consumer warps; it issues unit u once
// unit u - XR_AHEAD has landed (0: as the slots free up). Consumer warp w takes tiles w U .. w U + U - 1 of every
// unit (so its K range within a row tile repeats row tile after row tile), reads its words and scale entries
// into registers, releases the slot and runs the MMAs; at a row tile's end the warps' partial sums meet in a
// table (RB buffers of a row tile's WARPS x 16 x NB x 8 floats) and the last warp to arrive (a shared-memory
// counter) adds them and stores y. Why: the per-warp rings (wo_mma_xb) stream their 2 KB copies far below the
// read roof on the H200 even without decode (EXP_LOADONLY, INT4 2x14336x4096: 10.0 us; 16x: 13.0; the M = 1
// ring streams 16 KB units at about 7, session 49). x is staged in MT rows (not NB x 8: the n8 blocks' missing
// rows read real ones, their sums unused), so K reaches 14336 at M = 4. Host: LaunchPlan::producer. Buffers: a
// warp writes row tile r's partials only once the producer filled its last unit, i.e. once every warp released
// the unit NST before; with RB x (units a row tile) >= NST + 1 that unit lies past row tile r - RB, whose last
// warp had added it up before releasing anything later (the kernel's `rb` below).
#if FMT <= 1 || XMC || CL
#error "XR streams 4- and 8-bit tiles in one K split without clusters"
#endif
#ifndef XR_AHEAD
#define XR_AHEAD 2
#endif
// Profiling experiment (ROOFLINE_NVRTC_EXTRA, wrong results): EXP_XR_NOSCALES 1, the units' scale columns not
// copied (the slots' stale bytes read instead).
#ifndef EXP_XR_NOSCALES
#define EXP_XR_NOSCALES 0
#endif
#define XR_UT (WARPS * U)                        // tiles a unit
#define XR_SC (FMT == 4 ? XR_UT / 2 : XR_UT)     // scale columns a unit (INT4: a group of 128 is two tiles)
#define XR_SLOT ((XR_UT * XB_TILE + XR_SC * XB_CB + 127) / 128 * 128)
#define XR_PART (WARPS * NB * 128)               // floats of one row tile's partial sums (a buffer)

// Units of the CTA's row tiles (`upr` a row tile) and the partial-sum buffers the ring's depth needs.
__device__ __forceinline__ int xr_buffers(int upr) { return (NST + upr) / upr; }  // ceil((NST + 1) / upr)

extern "C" __global__ void __launch_bounds__(WARPS * 32 + 32, 1)
wo_mma_xr(const uint4* __restrict__ w, const u8* __restrict__ scales, const u8* __restrict__ zeros, float gscale,
          const u16* x, u16* __restrict__ y, float* __restrict__ ws, u32* __restrict__ counters,
          int n_rows, int k, int rtpc, int flags, float eps) {
    pdl_trigger();
    flags = fuse_flags(flags);
    extern __shared__ __align__(128) u8 xb_dyn[];
    u8* const xr_smem = xb_dyn + XB_TAB_BYTES;  // x, the ring and the partial sums after NF4's table, if any
    __shared__ __align__(8) unsigned long long full[NST], empty[NST];
    __shared__ __align__(8) unsigned long long xfull[XB_XCH];
    __shared__ int arrived[NST + 1];
    __shared__ float fuse_inv[MT];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int g = lane >> 2, t = lane & 3;
    const int row_tiles = (n_rows + 15) / 16;
    const int kt_total = k / 64, upr = kt_total / XR_UT;  // units a row tile (the host: XR_UT divides K / 64)
    const int ld = kt_total * 64 + 8;
    const int rt0 = blockIdx.x * rtpc, rows = max(0, min(row_tiles, rt0 + rtpc) - rt0);
    const int units = rows * upr;
    const int xbytes = (MT * ld * 2 + 127) & ~127;
    u8* const ring = xr_smem + xbytes;
    float* const part = (float*)(ring + NST * XR_SLOT);
    const int rb = xr_buffers(upr);
    const u32 ring_s = (u32)__cvta_generic_to_shared(ring);
    const u32 full_s = (u32)__cvta_generic_to_shared(&full[0]), empty_s = (u32)__cvta_generic_to_shared(&empty[0]);
    const u32 xbar_s = (u32)__cvta_generic_to_shared(&xfull[0]);
    if (threadIdx.x == 0) {
        for (int i = 0; i < NST; ++i) {
            mbar_init(full_s + 8 * i, 1);         // the producer's expect_tx
            mbar_init(empty_s + 8 * i, WARPS);    // every consumer warp
        }
        for (int c = 0; c < XB_XCH; ++c) mbar_init(xbar_s + 8 * c, 1);
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
        asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    }
    if (threadIdx.x <= NST) arrived[threadIdx.x] = 0;
#if FMT == 5 && defined(NF4_TAB)
    nf4_tab_fill();  // depends on no kernel
#endif
    __syncthreads();
    if (warp == WARPS) {
        // ---- Producer: the CTA's units in order, each into slot u % NST once the unit NST before was released ----
        if (lane == 0) {
            const int cols = FMT == 4 ? kt_total / 2 : kt_total;  // scale columns of a row tile
            for (int u = 0; u < units; ++u) {
                const int slot = u % NST, rt = rt0 + u / upr, kt0 = (u % upr) * XR_UT;
                if (u >= NST) mbar_wait(empty_s + 8 * slot, (u32)((u / NST - 1) & 1));
                if (XR_AHEAD > 0 && XR_AHEAD < NST && u >= XR_AHEAD)
                    mbar_wait(full_s + 8 * ((u - XR_AHEAD) % NST), (u32)(((u - XR_AHEAD) / NST) & 1));
                const u32 dst = ring_s + slot * XR_SLOT, bar = full_s + 8 * slot;
                mbar_expect_tx(bar, (u32)(XR_UT * XB_TILE + (EXP_XR_NOSCALES ? 0 : XR_SC * XB_CB)));
                bulk_copy(dst, w + ((size_t)rt * kt_total + kt0) * QV * 32, (u32)(XR_UT * XB_TILE), bar);
#if XB_CB > 0 && !EXP_XR_NOSCALES
                bulk_copy(dst + XR_UT * XB_TILE, scales + ((size_t)rt * cols + XB_COL(kt0)) * XB_CB, (u32)(XR_SC * XB_CB),
                          bar);
#endif
            }
        }
        return;
    }
    // ---- Consumers ----
    pdl_wait();  // x is the previous kernels' output
    const u32 xs_base = (u32)__cvta_generic_to_shared(xr_smem);
    xb_stage_x(x, k, 0, kt_total, ld, xs_base, xbar_s, MT, WARPS * 32);
    fuse_norm_rows(x, k, MT, flags, eps, fuse_inv, warp, WARPS);
    asm volatile("bar.sync 1, %0;" ::"n"(WARPS * 32) : "memory");  // the norm factors (the producer has left)
#if XF16
    __shared__ float xup[MT];
    xb_x_to_f16(xs_base, ld, kt_total, xbar_s, xup, warp);
    asm volatile("bar.sync 1, %0;" ::"n"(WARPS * 32) : "memory");  // x in f16, its rows' factors
#endif
    const u32 xaddr = xk_x_addr(xs_base, ld, lane, MT);
    const int xct = xb_chunk_tiles(kt_total);
    int xin = 0;  // x's tiles [0, xin) are known to be in
    float acc[NB][4];
#pragma unroll
    for (int b = 0; b < NB; ++b)
#pragma unroll
        for (int i = 0; i < 4; ++i) acc[b][i] = 0.0f;
    for (int u = 0; u < units; ++u) {
        const int slot = u % NST, pu = u % upr, ckt = pu * XR_UT + warp * U;
        while (xin < ckt + U) {  // the warp's tiles reach into x's next chunk
            mbar_wait(xbar_s + 8 * (xin / xct), 0u);
            xin = min(kt_total, xin + xct);
        }
        mbar_wait(full_s + 8 * slot, (u32)((u / NST) & 1));
        const u8* sp = ring + slot * XR_SLOT;
        uint4 q[U][QV];
        Meta meta[U];
        xb_load<true>(sp + warp * U * XB_TILE, sp + XR_UT * XB_TILE + (XB_COL(ckt) - XB_COL(pu * XR_UT)) * XB_CB, U, ckt,
                      lane, g, q, meta);
        __syncwarp();
        if (lane == 0) mbar_arrive(empty_s + 8 * slot, 1);  // the warp's words are in registers
        xb_tiles<true>(q, meta, U, ckt, xaddr + (u32)ckt * 128u, acc);
        if (pu == upr - 1) {
            // The row tile's end: this warp's sums into its buffer; the last warp adds the WARPS of them and stores.
            const int b = (u / upr) % rb;
            float* pb = part + b * XR_PART;
#pragma unroll
            for (int nb = 0; nb < NB; ++nb)
#pragma unroll
                for (int i = 0; i < 4; ++i) pb[((warp * NB + nb) * 4 + i) * 32 + lane] = acc[nb][i];
            __syncwarp();
            int before = 0;
            if (lane == 0) {
                __threadfence_block();
                before = atomicAdd(&arrived[b], 1);
            }
            before = __shfl_sync(0xffffffffu, before, 0);
            if (before == WARPS - 1) {
                __threadfence_block();
#pragma unroll
                for (int nb = 0; nb < NB; ++nb)
#pragma unroll
                    for (int i = 0; i < 4; ++i) {
                        float v = 0.0f;
                        for (int ww = 0; ww < WARPS; ++ww) v += pb[((ww * NB + nb) * 4 + i) * 32 + lane];
                        acc[nb][i] = v;
                    }
#if XF16
                xb_x_up(acc, xup, t);
#endif
                __syncwarp();
                if (lane == 0) atomicExch(&arrived[b], 0);
            }
            if (before == WARPS - 1)
                xk_store(acc, rt0 + u / upr, g, t, n_rows, scales, gscale, flags, fuse_inv, ws, y, false);
            else
#pragma unroll
                for (int nb = 0; nb < NB; ++nb)
#pragma unroll
                    for (int i = 0; i < 4; ++i) acc[nb][i] = 0.0f;
        }
    }
}
#endif  // XR
#endif  // XB
#endif  // XS == 2
#endif

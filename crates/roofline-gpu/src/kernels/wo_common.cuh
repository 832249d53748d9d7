// Shared by weight_only_gemv.cu and weight_only_xreg.cu (the host prepends it, after wo_prims.cuh): chunk
// geometry per format, x / y conversions, the per-chunk scale record `Meta`, the per-chunk decode (`decode8`)
// and the NF4 / E2M1 tables. Needs FMT and XBF16 defined (see the kernels' headers).

#ifndef FMT
#error "FMT must be defined"
#endif

#if FMT <= 1
#define EPC 8   // elements per 16-byte chunk
#elif FMT <= 3
#define EPC 16
#else
#define EPC 32
#endif
#define SUBS (EPC / 8)  // 8-element sub-chunks per chunk

// Scale segments per chunk (a partial sum is kept per segment, then multiplied by the segment's scale).
#if FMT == 7
#define SEGS 2
#else
#define SEGS 1
#endif
#define BLOCK_SCALED (FMT >= 4)
// MXFP4 / NVFP4 codes come in the E2M1 device layout (pack.rs `device_codes`), decoded by `e2m1_dev_pairs`
// to their values times 2^-14, so the f16x2 kernels multiply x by E2M1_UP = 2^14 (x scaled into [-1, 1)
// stays below 2^14; products and sums are those of the unscaled decode) and the FP32 decode's partial sums
// are multiplied by it before their block scale (the fused FFN scales its normalized x and each piece of h
// by powers of two).
#define E2M1_SCALED (FMT >= 6)
#if E2M1_SCALED
#define E2M1_UP 16384.0f
#else
#define E2M1_UP 1.0f
#endif
// The FP32 decode reads a 16-entry LUT (NF4).
#define USES_LUT (FMT == 5)
#define ROW_SCALED (FMT == 2 || FMT == 3)

// Two x values packed in a 32-bit word -> floats.
__device__ __forceinline__ void x2f(u32 v, float& a, float& b) {
#if XBF16
    a = as_float(v << 16);
    b = as_float(v & 0xffff0000u);
#else
    h2x2f(v, a, b);
#endif
}

// SwiGLU on load: silu(g) * u of the two x values in word `g` (gates) and word `u` (ups), as floats. Fast
// exp and division: an IEEE division per element put ~1 us of ALU work on the path between pdl_wait and the
// first FMA of the x-in-registers kernel.
__device__ __forceinline__ void silu_mul2(u32 g, u32 u, float& a, float& b) {
    float g0, g1, u0, u1;
    x2f(g, g0, g1);
    x2f(u, u0, u1);
    a = __fdividef(g0, 1.0f + __expf(-g0)) * u0;
    b = __fdividef(g1, 1.0f + __expf(-g1)) * u1;
}

// Per-chunk metadata, loaded with the weights.
struct Meta {
#if FMT == 4
    float scale;
    u32 zero;
#elif FMT == 5 || FMT == 6
    float scale;
#elif FMT == 7
    u32 s2;  // two E4M3 bytes
#else
    u32 dummy;
#endif
};

// Decodes the 8 elements of sub-chunk j (unscaled for block formats: INT4 gives q - zero, NF4 the code
// value, FP4 the E2M1 value; FP8 the E4M3 value; INT8 the integer).
__device__ __forceinline__ void decode8(const uint4& q, int j, const Meta& meta, const float* lut, float w[8]) {
#if FMT == 0
#pragma unroll
    for (int i = 0; i < 4; ++i) h2x2f(word(q, i), w[2 * i], w[2 * i + 1]);
#elif FMT == 1
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        u32 v = word(q, i);
        w[2 * i] = as_float(v << 16);
        w[2 * i + 1] = as_float(v & 0xffff0000u);
    }
#elif FMT == 2
#pragma unroll
    for (int i = 0; i < 2; ++i) {
        u32 v = word(q, 2 * j + i);
        u32 lo, hi;
        asm("{ .reg .b16 a, b; mov.b32 {a, b}, %2; cvt.rn.f16x2.e4m3x2 %0, a; cvt.rn.f16x2.e4m3x2 %1, b; }"
            : "=r"(lo), "=r"(hi)
            : "r"(v));
        h2x2f(lo, w[4 * i], w[4 * i + 1]);
        h2x2f(hi, w[4 * i + 2], w[4 * i + 3]);
    }
#elif FMT == 3
#pragma unroll
    for (int i = 0; i < 2; ++i) {
        // signed byte b -> float: (0x4B000000 | (b ^ 0x80)) = 2^23 + b + 128, exact subtraction.
        u32 v = word(q, 2 * j + i) ^ 0x80808080u;
#pragma unroll
        for (int b = 0; b < 4; ++b) {
            u32 t = __byte_perm(v, 0x4B000000u, 0x7650u + (u32)b);
            w[4 * i + b] = as_float(t) - 8388736.0f;
        }
    }
#elif FMT == 4
    // One 32-bit word = 8 nibbles e0..e7 (LSB first). Half magic 0x6400 = 1024: (0x6400 | q) = 1024 + q,
    // (0x6400 | q << 4) = 1024 + 16 q; subtract/scale in f16x2 exactly to (q - zero), then widen to f32.
    u32 v = word(q, j);
    u32 lo0 = lop3_and_or(v, 0x000f000fu, 0x64006400u);        // (e0, e4)
    u32 hi0 = lop3_and_or(v, 0x00f000f0u, 0x64006400u);        // (16 e1, 16 e5)
    u32 lo1 = lop3_and_or(v >> 8, 0x000f000fu, 0x64006400u);   // (e2, e6)
    u32 hi1 = lop3_and_or(v >> 8, 0x00f000f0u, 0x64006400u);   // (16 e3, 16 e7)
    // meta.zero holds the f16x2 pair (1024 + z, 1024 + z); hsub for lo, hfma (x/16 - (64 + z)) for hi.
    u32 zlo = meta.zero;
    // (64 + z) in f16: exponent 6 (0x5400), ulp 1/16, so the mantissa field is 16 z.
    u32 zhi = ((zlo & 0x000f000fu) << 4) | 0x54005400u;
    const u32 sixteenth = 0x2c002c00u;  // 1/16 in f16x2
    asm("sub.f16x2 %0, %0, %1;" : "+r"(lo0) : "r"(zlo));
    asm("sub.f16x2 %0, %0, %1;" : "+r"(lo1) : "r"(zlo));
    asm("{ .reg .b32 n; xor.b32 n, %1, 0x80008000; fma.rn.f16x2 %0, %0, %2, n; }" : "+r"(hi0) : "r"(zhi), "r"(sixteenth));
    asm("{ .reg .b32 n; xor.b32 n, %1, 0x80008000; fma.rn.f16x2 %0, %0, %2, n; }" : "+r"(hi1) : "r"(zhi), "r"(sixteenth));
    h2x2f(lo0, w[0], w[4]);
    h2x2f(hi0, w[1], w[5]);
    h2x2f(lo1, w[2], w[6]);
    h2x2f(hi1, w[3], w[7]);
#elif !USES_LUT
    // E2M1 in the CUDA-core layout: the values times 2^-14 (the callers multiply the sums by E2M1_UP).
    u32 p[4];
    e2m1_dev_pairs(word(q, j), p);
#pragma unroll
    for (int i = 0; i < 4; ++i) h2x2f(p[i], w[2 * i], w[2 * i + 1]);
#else
    // NF4: shared-memory LUT of 16 floats; offsets pre-multiplied by 4 (bytes).
    u32 v = word(q, j);
    const char* base = (const char*)lut;
    w[0] = *(const float*)(base + ((v << 2) & 0x3cu));
#pragma unroll
    for (int i = 1; i < 8; ++i) w[i] = *(const float*)(base + ((v >> (4 * i - 2)) & 0x3cu));
#endif
}

#if FMT == 5
__constant__ float kLut[16] = {-1.0f, -0.6961928f, -0.52507305f, -0.3949175f, -0.28444138f, -0.18477343f,
                               -0.091050036f, 0.0f, 0.0795803f, 0.1609302f, 0.2461123f, 0.33791524f,
                               0.44070983f, 0.562617f, 0.72295684f, 1.0f};
#endif

__device__ __forceinline__ Meta zero_meta() {
    Meta m;
#if FMT == 4
    m.scale = 0.0f;
    m.zero = 0x64006400u;
#elif FMT == 5 || FMT == 6
    m.scale = 0.0f;
#elif FMT == 7
    m.s2 = 0u;
#else
    m.dummy = 0u;
#endif
    return m;
}

__device__ __forceinline__ float seg_scale(const Meta& m, int seg) {
#if FMT == 4 || FMT == 5 || FMT == 6
    return m.scale;
#elif FMT == 7
    float lo, hi;
    e4m3x2_to_f(m.s2, lo, hi);
    return seg ? hi : lo;
#else
    return 1.0f;
#endif
}

#if FMT >= 2 || FMT == 0
// ---- f16x2 dot products of 4- and 8-bit codes against x pairs (x-in-registers at M = 1, ring, fused FFN) ----
// x is scaled by a power of two into [-1, 1) and packed in f16x2 pairs (`pack_x`); a word of 8 codes (4-bit)
// or 4 (8-bit, the ring GEMV) is decoded to exact f16 values and multiplied into two f16x2 accumulators,
// which `hsum4` widens once per 16-byte chunk (16 products each for 4-bit codes, 8 for 8-bit: far from f16's
// range, rounding within the 1e-3 the tests allow). FP16 weights (the ring GEMV) need no decode: 4 products
// an accumulator half per 32-byte chunk (wo_stream.cuh's row_step).

// Packed f16x2 arithmetic.
__device__ __forceinline__ u32 hsub2(u32 a, u32 b) {
    u32 d;
    asm("sub.f16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
    return d;
}
__device__ __forceinline__ u32 hmul2(u32 a, u32 b) {
    u32 d;
    asm("mul.rn.f16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
    return d;
}
__device__ __forceinline__ u32 hfma2(u32 a, u32 b, u32 c) {
    u32 d;
    asm("fma.rn.f16x2 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
    return d;
}
__device__ __forceinline__ u32 f2x2h(float lo, float hi) {
    u32 d;
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(d) : "f"(hi), "f"(lo));
    return d;
}

// The 8 INT4 codes of word v (nibble i = code i) as exact f16 pairs q - z: p[0] = codes (0, 4), p[1] = (2, 6), p[2]
// = (1, 5), p[3] = (3, 7) (lop3 into 1024 + q / 1024 + 16 q; `zlo`, the (1024 + z) pair `int4_zero_pair`,
// subtracted from the low nibbles; the high ones times 1/16 plus `zhi`, the -(64 + z) pair, `int4_zero_hi`). The
// ring GEMV's tensor-core row step (wo_ring.cu RW_MMA) takes them as B fragments.
__device__ __forceinline__ void int4_pairs_z(u32 v, u32 zlo, u32 zhi, u32 p[4]) {
    const u32 t = v >> 8;
    p[0] = hsub2(lop3_and_or(v, 0x000f000fu, 0x64006400u), zlo);                // (q0, q4) - z
    p[1] = hsub2(lop3_and_or(t, 0x000f000fu, 0x64006400u), zlo);                // (q2, q6) - z
    p[2] = hfma2(lop3_and_or(v, 0x00f000f0u, 0x64006400u), 0x2c002c00u, zhi);  // (q1, q5) - z
    p[3] = hfma2(lop3_and_or(t, 0x00f000f0u, 0x64006400u), 0x2c002c00u, zhi);  // (q3, q7) - z
}

// int4_pairs_z for BF16 (the tensor-core ring with BF16 x): the same pairs as exact bf16x2 q - z. BF16 keeps 7
// mantissa bits, so the high nibbles go one bit down first: the low ones as 128 + q (0x4300 | q) plus `zlo`, the
// pair -(128 + z); the high ones as 128 + 8 q, times 1/8 plus `zhi`, the pair -(16 + z) (`int4_zero_pairs_bf16`):
// 11 instructions a word against 9 (three shifts, one exact bf16x2 FMA a pair; weight_only_mma.cu's BF16 decode).
__device__ __forceinline__ void int4_pairs_z_bf16(u32 v, u32 zlo, u32 zhi, u32 p[4]) {
    const u32 v1 = v >> 1, v8 = v >> 8, v9 = v >> 9;
    p[0] = lop3_and_or(v, 0x000f000fu, 0x43004300u);   // (q0, q4) + 128
    p[1] = lop3_and_or(v8, 0x000f000fu, 0x43004300u);  // (q2, q6) + 128
    p[2] = lop3_and_or(v1, 0x00780078u, 0x43004300u);  // 8 (q1, q5) + 128
    p[3] = lop3_and_or(v9, 0x00780078u, 0x43004300u);  // 8 (q3, q7) + 128
    asm("fma.rn.bf16x2 %0, %0, %1, %2;" : "+r"(p[0]) : "r"(0x3f803f80u), "r"(zlo));
    asm("fma.rn.bf16x2 %0, %0, %1, %2;" : "+r"(p[1]) : "r"(0x3f803f80u), "r"(zlo));
    asm("fma.rn.bf16x2 %0, %0, %1, %2;" : "+r"(p[2]) : "r"(0x3e003e00u), "r"(zhi));
    asm("fma.rn.bf16x2 %0, %0, %1, %2;" : "+r"(p[3]) : "r"(0x3e003e00u), "r"(zhi));
}

// int4_pairs_z_bf16's zero-point pairs of INT4 zero point z (0-15): -(128 + z) and -(16 + z) in both bf16 halves
// (128 + z: exponent 7, z the mantissa's low bits; 16 + z: exponent 4, z three bits up).
__device__ __forceinline__ void int4_zero_pairs_bf16(u32 z, u32& zlo, u32& zhi) {
    zlo = (0xc300u | z) * 0x10001u;
    zhi = (0xc180u | (z << 3)) * 0x10001u;
}

// The 8 INT4 codes of word v against a[k] = (v_k, v_{k+4}) as f16x2, k < 4, less a zero point z: `int4_pairs_z`'s
// pairs multiplied in f16x2 into two accumulators (codes 0, 2, 4, 6 and 1, 3, 5, 7). About 1.6 instructions per
// weight against 3 for the f32 decode (shift, lop3, FMA each): the FFN is issue-bound (session 12, ncu: 3.8
// instructions per weight, one issued every 2 cycles per scheduler). The ring GEMV's row steps pass each row's zero
// point (no (8 - z) sum(x) term afterwards); dot8h passes z = 8.
__device__ __forceinline__ void dot8hz(u32 v, const u32 a[4], u32 zlo, u32 zhi, u32& acc_e, u32& acc_o) {
    u32 p[4];
    int4_pairs_z(v, zlo, zhi, p);
    acc_e = hfma2(p[1], a[2], hfma2(p[0], a[0], acc_e));
    acc_o = hfma2(p[3], a[3], hfma2(p[2], a[1], acc_o));
}

// dot8hz at z = 8: the codes as q - 8, the zero point's (8 - z) sum(x) term left to the caller.
__device__ __forceinline__ void dot8h(u32 v, const u32 a[4], u32& acc_e, u32& acc_o) {
    dot8hz(v, a, 0x64086408u, 0xd480d480u, acc_e, acc_o);  // 1032 = 1024 + 8, -72 = -(64 + 8)
}

// dot8hz's high constant from the zero-point pair `zero` = (1024 + z) in both halves (Meta::zero): 960 - (1024
// + z) = -(64 + z), exact, in one f16x2 subtraction (0x6380 is f16 960).
__device__ __forceinline__ u32 int4_zero_hi(u32 zero) { return hsub2(0x63806380u, zero); }

// The zero-point pair of INT4 zero point z (0-15): (1024 + z) in both f16 halves (Meta::zero, dot8hz's `zlo`).
__device__ __forceinline__ u32 int4_zero_pair(u32 z) {
    const u32 zh = 0x6400u | z;
    return zh | (zh << 16);
}

// dot8h for MXFP4 / NVFP4: the 8 E2M1 codes of word v against a[k] = (x_{2k}, x_{2k+1}) (neighbours, as
// NF4), decoded by wo_prims.cuh's `e2m1_dev_pairs` (9 instructions and the 4 multiply-adds per word; x
// times E2M1_UP).
__device__ __forceinline__ void dot8f4(u32 v, const u32 a[4], u32& acc_e, u32& acc_o) {
    u32 p[4];
    e2m1_dev_pairs(v, p);
    acc_e = hfma2(p[2], a[2], hfma2(p[0], a[0], acc_e));
    acc_o = hfma2(p[3], a[3], hfma2(p[1], a[1], acc_o));
}

#if FMT == 5 && defined(NF4_T0)
// dot8h for NF4 (ring GEMV, fused FFN): the 8 codes of word v against a[k] = (x_{2k}, x_{2k+1}), decoded
// to f16 neighbour pairs by the tensor-core kernel's byte tables (wo_prims.cuh `nf4_pairs`): no shared-memory
// lookup (the ring's 256-entry pair table it replaced, one copy, cost bank conflicts and a dependent load per
// pair: 1x14336x4096 21.3 us against 17.5-18.1; the x-in-registers kernel's table has a copy per bank).
__device__ __forceinline__ void dot8nf4(u32 v, const u32 a[4], u32& acc_e, u32& acc_o) {
    u32 p[4];
    nf4_pairs(v, p);
    acc_e = hfma2(p[2], a[2], hfma2(p[0], a[0], acc_e));
    acc_o = hfma2(p[3], a[3], hfma2(p[1], a[1], acc_o));
}
#endif

#if FMT == 5
// NF4's table of code pairs (the x-in-registers kernel at M = 1 with XH, the ring GEMV and the fused FFN with
// NF4_PAIRS): the 256 pairs a byte of codes holds as f16x2 (code of the low nibble, code of the high nibble),
// one copy per shared-memory bank, [pair][copy]: lane l reads copy l, so a warp's 32 lookups never conflict.
// Rows of 128 bytes (32 KB, the copies alone) or, WIDE, 256 (64 KB, the upper half of each row unused), so
// that a lookup's byte offset is one byte permute: [lane x 4, the byte of codes, 0, 0].
template <bool WIDE>
__host__ __device__ constexpr int nf4_tab_bytes() {
    return 256 * (WIDE ? 256 : 128);
}

// Fills the table at `tab` (16-byte aligned). Every thread of the CTA calls it; the caller synchronizes before
// the first lookup. Eight neighbouring threads write a row's 128 bytes of copies, so a warp's 16-byte stores
// cover the 32 banks four times, the fewest wavefronts 512 bytes take. (Until session 26 a thread wrote a
// whole row: a warp's stores were 32 rows apart, all on the same four banks, 16.6-way conflicts in Nsight
// Compute, 230 K of the NF4 ring GEMV's 271 K shared-store wavefronts at 1x14336x4096.)
template <bool WIDE>
__device__ __forceinline__ void nf4_pair_fill(u8* tab) {
    for (int c = threadIdx.x; c < 256 * 8; c += blockDim.x) {
        const int e = c >> 3;  // the pair (row), 16-byte piece c & 7 of its copies
        const u32 v = (u32)f2h(kLut[e & 15]) | ((u32)f2h(kLut[e >> 4]) << 16);
        *(uint4*)(tab + e * (WIDE ? 256 : 128) + (c & 7) * 16) = make_uint4(v, v, v, v);
    }
}

// dot8h for NF4 through the pair table at `tab` (`lane4`: the lane's byte offset, 4 x lane): byte k of word v (codes
// 2k, 2k + 1) is one conflict-free shared-memory load of their f16x2 (`nf4t_pairs`: p[k]; the ring's tensor-core row
// step takes the pairs alone), against a[k] = (x_{2k}, x_{2k+1}). WIDE: the load's offset is one byte permute (and the
// table's base folds into the load where it is a constant, as in the ring GEMV's dynamic shared memory); else a byte
// permute and a shift-add. `dot8nf4` spends about five byte permutes and lop3s a pair on the integer pipe, which is
// what that decode saturates.
template <bool WIDE>
__device__ __forceinline__ void nf4t_pairs(u32 v, const u8* tab, u32 lane4, u32 p[4]) {
#pragma unroll
    for (int k = 0; k < 4; ++k) {
        const u32 off = WIDE ? prmt(v, lane4, 0x7604u + 16u * k)  // bytes [lane4.0, v.k, 0, 0]
                             : (prmt(v, 0u, 0x4440u + k) << 7) + lane4;
        p[k] = *(const u32*)(tab + off);
    }
}

template <bool WIDE>
__device__ __forceinline__ void dot8nf4t(u32 v, const u32 a[4], const u8* tab, u32 lane4, u32& acc_e, u32& acc_o) {
    u32 p[4];
    nf4t_pairs<WIDE>(v, tab, lane4, p);
    acc_e = hfma2(p[2], a[2], hfma2(p[0], a[0], acc_e));
    acc_o = hfma2(p[3], a[3], hfma2(p[1], a[1], acc_o));
}
#endif

#if FMT == 2 || FMT == 3
// The 4 codes of word v (byte i = code i) against xa = (x_0, x_1), xb = (x_2, x_3) as f16x2, into the
// accumulators ae (codes 0, 1) and ao (codes 2, 3). FP8 E4M3: one cvt a pair (exact: E4M3's 4 significant bits
// and its range, 2^-9 to 448, fit f16). INT8: b ^ 0x80 under the f16 exponent of 1024 (byte permutes: 1024 +
// b + 128) minus 1152, exact. 5 (FP8) or 7 (INT8) instructions a word.
__device__ __forceinline__ void dot4b(u32 v, u32 xa, u32 xb, u32& ae, u32& ao) {
#if FMT == 2
    u32 lo, hi;
    asm("{ .reg .b16 a, b; mov.b32 {a, b}, %2; cvt.rn.f16x2.e4m3x2 %0, a; cvt.rn.f16x2.e4m3x2 %1, b; }"
        : "=r"(lo), "=r"(hi)
        : "r"(v));
#else
    const u32 t = v ^ 0x80808080u;
    const u32 lo = hsub2(prmt(t, 0x64646464u, 0x4140u), 0x64806480u);  // (b0, b1)
    const u32 hi = hsub2(prmt(t, 0x64646464u, 0x4342u), 0x64806480u);  // (b2, b3)
#endif
    ae = hfma2(lo, xa, ae);
    ao = hfma2(hi, xb, ao);
}
#endif

// The two f16x2 accumulators of dot8h as one float.
__device__ __forceinline__ float hsum4(u32 e, u32 o) {
    float a, b, c, d;
    h2x2f(e, a, b);
    h2x2f(o, c, d);
    return (a + b) + (c + d);
}

__device__ __forceinline__ u32 hadd2(u32 a, u32 b) {
    u32 d;
    asm("add.f16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
    return d;
}

// hsum4 with the two accumulators added in f16x2 first: two f16 -> f32 conversions and one add instead of
// four and three (the one more f16 rounding is of a sum of 16 products; NVFP4's `nv_chunk` does the same).
__device__ __forceinline__ float hsum_pairs(u32 e, u32 o) {
    float a, b;
    h2x2f(hadd2(e, o), a, b);
    return a + b;
}

#if FMT == 7

// NVFP4's chunk from its two segments' f16x2 accumulators (ae, ao: values 0-15, be, bo: 16-31) and their
// E4M3 scales (two bytes of s2): s0 (ae + ao) + s1 (be + bo), each segment's two accumulators added in
// f16x2 first, so two pairs are widened instead of four (two hsum4: eight f16 -> f32 conversions and six
// adds against four and two; the one more f16 rounding a segment is of a sum of 16 products).
__device__ __forceinline__ float nv_chunk(u32 ae, u32 ao, u32 be, u32 bo, u32 s2) {
    float a0, a1, b0, b1, s0, s1;
    h2x2f(hadd2(ae, ao), a0, a1);
    h2x2f(hadd2(be, bo), b0, b1);
    e4m3x2_to_f(s2, s0, s1);
    return fmaf(s0, a0 + a1, s1 * (b0 + b1));
}
#endif

// The NV x values of a lane's chunk (EPC by default) times `inv` as dot8h's f16x2 pairs, [word wd][k] =
// (x[8 wd + k], x[8 wd + k + 4]); returns their sum (the zero points' term).
// NF4, MXFP4 and NVFP4 (FMT >= 5) pair neighbours instead, [wd][k] = (x[8 wd + 2 k], x[8 wd + 2 k + 1]): one
// byte of codes; so do FP8 and INT8 (16 values: [0..1][k] only; `dot4b` takes word wd's pairs as
// xh[wd / 2][2 (wd % 2)] and xh[wd / 2][2 (wd % 2) + 1]), and FP16 in the ring GEMV (its 32-byte chunks, NV = 16:
// [c][k] the pairs of 16-byte chunk c).
template <int NV = EPC>
__device__ __forceinline__ float pack_x(const float xr[NV], float inv, u32 xh[4][4]) {
#pragma unroll
    for (int wd = 0; wd < 4; ++wd)
#pragma unroll
        for (int k = 0; k < 4; ++k)
            xh[wd][k] = 8 * wd >= NV ? 0u
                        : FMT != 4   ? f2x2h(xr[8 * wd + 2 * k] * inv, xr[8 * wd + 2 * k + 1] * inv)
                                     : f2x2h(xr[8 * wd + k] * inv, xr[8 * wd + k + 4] * inv);
    float xsum = 0.0f;
#pragma unroll
    for (int e = 0; e < NV; ++e) xsum += xr[e] * inv;
    return xsum;
}
#endif  // FMT >= 2 || FMT == 0

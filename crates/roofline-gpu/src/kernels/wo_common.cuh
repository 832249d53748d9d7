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
#define ROW_SCALED (FMT == 2 || FMT == 3)

__device__ __forceinline__ u16 f2out(float v) {
    u16 h;
#if XBF16
    asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(v));
#else
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(v));
#endif
    return h;
}

// Two x values packed in a 32-bit word -> floats.
__device__ __forceinline__ void x2f(u32 v, float& a, float& b) {
#if XBF16
    a = as_float(v << 16);
    b = as_float(v & 0xffff0000u);
#else
    h2x2f(v, a, b);
#endif
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
#else
    // NF4 / E2M1: shared-memory LUT of 16 floats; offsets pre-multiplied by 4 (bytes).
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
#elif FMT == 6 || FMT == 7
__constant__ float kLut[16] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f,
                               -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};
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

// Primitives shared by the weight-only kernels (the host prepends this file to weight_only_gemv.cu,
// weight_only_xreg.cu, weight_only_mma.cu and decode_ops.cu): integer types, f16 / E4M3 conversions, the 16-byte weight
// loads, bit tricks and the programmatic-dependent-launch helpers (PDL, default 0).

typedef unsigned int u32;
typedef unsigned short u16;
typedef unsigned char u8;

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

__device__ __forceinline__ void h2x2f(u32 v, float& a, float& b) {
    asm("{ .reg .f16 l, h; mov.b32 {l, h}, %2; cvt.f32.f16 %0, l; cvt.f32.f16 %1, h; }"
        : "=f"(a), "=f"(b)
        : "r"(v));
}

__device__ __forceinline__ float as_float(u32 v) {
    float f;
    asm("mov.b32 %0, %1;" : "=f"(f) : "r"(v));
    return f;
}

__device__ __forceinline__ uint4 ld_weights(const uint4* p) {
    uint4 v;
    asm("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
        : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
        : "l"(p));
    return v;
}

__device__ __forceinline__ uint4 ld_weights_l1(const uint4* p) {
    uint4 v;
    asm("ld.global.nc.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
    return v;
}

__device__ __forceinline__ u32 word(const uint4& q, int i) {
    return i == 0 ? q.x : i == 1 ? q.y : i == 2 ? q.z : q.w;
}

__device__ __forceinline__ u32 lop3_and_or(u32 a, u32 mask, u32 magic) {
    u32 d;
    // d = (a & mask) | magic
    asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(d) : "r"(a), "r"(mask), "r"(magic));
    return d;
}

// E4M3 byte -> float (exact; no NaN in codec output).
__device__ __forceinline__ float e4m3_to_f(u32 b) {
    u32 e = (b >> 3) & 15u, m = b & 7u;
    float mag = e == 0 ? (float)m * 0.001953125f : as_float(((e + 120u) << 23) | (m << 20));
    return (b & 0x80u) ? -mag : mag;
}

// Programmatic dependent launch (sm_90+, PDL=1, launched with the programmatic-serialization attribute):
// `pdl_trigger` lets the next kernel in the stream be scheduled as this grid's last CTAs run; `pdl_wait`
// blocks until the previous grid has finished and its writes are visible. Everything before the wait may
// only read memory no earlier kernel writes (the weights and their scales); x, y and the split-K
// workspace are touched only after it.
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

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

// The power-of-two exponent e that scales values of largest magnitude `mx` into [-1, 1): 2^(e-1) <= mx < 2^e, 0 for
// mx = 0. x times 2^-e is exact and the sums go back up by 2^e (the x-in-registers kernel's and the ring GEMV's f16x2
// products, the fused FFN's hidden row, wo_mma_xb's XF16).
__device__ __forceinline__ int unit_exp(float mx) { return mx > 0.0f ? ilogbf(mx) + 1 : 0; }

// Byte permute: byte i of the result is byte (sel nibble i & 7) of {b, a} (a = bytes 0-3), or with nibble bit
// 3 set that byte's sign bit replicated (0x00 or 0xFF).
__device__ __forceinline__ u32 prmt(u32 a, u32 b, u32 sel) {
    u32 d;
    asm("prmt.b32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(sel));
    return d;
}

#ifdef NF4_T0
// NF4 -> f16 through byte tables (NF4_T0..7, host: mma.rs `nf4_f16_tables`; `decode_nf4` is this on the CPU):
// the 8 codes of word v (nibble i = code i) as the f16x2 pairs p[k] = (code 2k, code 2k + 1). The low 3 bits
// of a code pick a byte of codes 0-7 and of codes 8-15 (prmt over two table words each), the code's top bit
// selects between them (a 0x00 / 0xFF byte mask from prmt's sign-replicate mode), for the low and the high
// byte of the f16; a last prmt pair interleaves the byte planes into the pairs.
// (The lookups of one set of byte tables t0..t7; `nf4_pairs` takes NF4_T*, the tensor-core kernel's BF16
// build also NF4_L*, the codebook's BF16 lo parts.)
__device__ __forceinline__ void nf4_pairs_of(u32 v, u32 p[4], u32 t0, u32 t1, u32 t2, u32 t3, u32 t4, u32 t5, u32 t6,
                                             u32 t7) {
    const u32 sel = v & 0x77777777u;
    const u32 v4 = v << 4;
    const u32 mlo = prmt(v, v4, 0x9D8Cu);  // top-bit masks of codes 0..3
    const u32 mhi = prmt(v, v4, 0xBFAEu);  // codes 4..7
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        const u32 sh = h == 0 ? sel : sel >> 16;
        const u32 m = h == 0 ? mlo : mhi;
        u32 lo = prmt(t0, t1, sh), lo8 = prmt(t2, t3, sh);
        u32 hi = prmt(t4, t5, sh), hi8 = prmt(t6, t7, sh);
        asm("lop3.b32 %0, %0, %1, %2, 0xD8;" : "+r"(lo) : "r"(lo8), "r"(m));  // (lo & ~m) | (lo8 & m)
        asm("lop3.b32 %0, %0, %1, %2, 0xD8;" : "+r"(hi) : "r"(hi8), "r"(m));
        p[2 * h] = prmt(lo, hi, 0x5140u);      // codes 4h, 4h + 1
        p[2 * h + 1] = prmt(lo, hi, 0x7362u);  // codes 4h + 2, 4h + 3
    }
}

__device__ __forceinline__ void nf4_pairs(u32 v, u32 p[4]) {
    nf4_pairs_of(v, p, NF4_T0, NF4_T1, NF4_T2, NF4_T3, NF4_T4, NF4_T5, NF4_T6, NF4_T7);
}
#endif

__device__ __forceinline__ u32 lop3_and_or(u32 a, u32 mask, u32 magic) {
    u32 d;
    // d = (a & mask) | magic
    asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(d) : "r"(a), "r"(mask), "r"(magic));
    return d;
}

// E2M1 (MXFP4 / NVFP4) -> f16 in the CUDA-core kernels' layout (host: pack.rs `e2m1_dev_word`, mirror
// `decode_e2m1_dev`): every byte of v holds one code at bits 1-3 (magnitude) and 7 (sign), which is where an
// f16's high byte keeps exponent bits 0-1, mantissa bit 9 and the sign, and one at bits 4-6 and 0. Masking
// bits 15 and 11-9 of v and of v << 8 decodes the first kind (two codes each), and the same of b, every
// byte's second code moved into the first's bits (`>> 3`, `<< 7`), the second: p[k] = (code 2k, code 2k + 1)
// as f16 bits (sign, 0, e1, e0, m, 0...) = the code's value times 2^-14 exactly (magnitude 0.5 is the
// subnormal 2^-15). 9 instructions where the codec's nibble order took 13 (a byte-table permute per four
// magnitudes, a permute and lop3 per four signs, a permute per pair; until session 23); the kernels multiply
// x by 2^14 instead.
__device__ __forceinline__ void e2m1_dev_pairs(u32 v, u32 p[4]) {
    const u32 pair = 0x8E008E00u;  // f16 bits 15, 11-9 of both halves
    // b = (v >> 3 & K) | (v << 7 & ~K), K = 0x0E0E0E0E: one lop3 selecting by K (ptxas, given the two masks,
    // shrinks the second to the bits v << 7 can have and spends two)
    u32 b;
    asm("lop3.b32 %0, %1, %2, %3, 0xE4;" : "=r"(b) : "r"(v >> 3), "r"(v << 7), "r"(0x0E0E0E0Eu));
    p[0] = v & pair;
    p[1] = (v << 8) & pair;
    p[2] = b & pair;
    p[3] = (b << 8) & pair;
}

// E4M3 byte -> float (exact; no NaN in codec output).
__device__ __forceinline__ float e4m3_to_f(u32 b) {
    u32 e = (b >> 3) & 15u, m = b & 7u;
    float mag = e == 0 ? (float)m * 0.001953125f : as_float(((e + 120u) << 23) | (m << 20));
    return (b & 0x80u) ? -mag : mag;
}

// An E8M0 scale code (MXFP4) as a float: 2^(e - 127); code 0 is 2^-127, a subnormal.
__device__ __forceinline__ float e8m0f(u32 e) { return e == 0 ? as_float(0x00400000u) : as_float(e << 23); }

// Two E4M3 bytes (bits 0-7 and 8-15 of b; no NaN in codec output) -> floats, exact: on sm_89+ one cvt to
// f16x2 and two widenings, against about 9 integer instructions each for e4m3_to_f (older GPUs).
__device__ __forceinline__ void e4m3x2_to_f(u32 b, float& lo, float& hi) {
#if __CUDA_ARCH__ >= 890
    u32 h;
    asm("{ .reg .b16 a; cvt.u16.u32 a, %1; cvt.rn.f16x2.e4m3x2 %0, a; }" : "=r"(h) : "r"(b));
    h2x2f(h, lo, hi);
#else
    lo = e4m3_to_f(b & 0xffu);
    hi = e4m3_to_f((b >> 8) & 0xffu);
#endif
}

// Two E4M3 bytes (bits 0-7 and 8-15 of b; no NaN in codec output) -> f16x2, the low byte to the low half,
// exact (E4M3's 4 significant bits and its range, 2^-9 to 448, fit f16): one cvt on sm_89+.
__device__ __forceinline__ u32 e4m3x2_to_h2(u32 b) {
    u32 h;
#if __CUDA_ARCH__ >= 890
    asm("{ .reg .b16 a; cvt.u16.u32 a, %1; cvt.rn.f16x2.e4m3x2 %0, a; }" : "=r"(h) : "r"(b));
#else
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(h) : "f"(e4m3_to_f((b >> 8) & 0xffu)), "f"(e4m3_to_f(b & 0xffu)));
#endif
    return h;
}

// Programmatic dependent launch (sm_90+, PDL=1, launched with the programmatic-serialization attribute):
// `pdl_trigger` lets the next kernel in the stream be scheduled as this grid's last CTAs run; `pdl_wait`
// blocks until the previous grid has finished and its writes are visible. Everything before the wait may
// only read memory no earlier kernel writes (the weights and their scales); x, y and the split-K
// workspace are touched only after it, and read with `ld_dep` or plain loads (below).
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

// Loads of what an earlier kernel of the stream wrote (x, the KV cache, partial sums), after pdl_wait: plain
// coherent `ld.global`, never the read-only path. ptxas takes `ld.global.nc` (__ldg, and what nvcc makes of
// loads through `const __restrict__` pointers) as memory no grid writes while this one runs, and may move it
// above griddepcontrol.wait: session 28 found an x-in-registers GEMV's x loads ahead of ACQBULK in its SASS,
// and a model-bench LM head that had read the residual stream before the final norm wrote it (right when
// launched again). So these loads are volatile asm ordered after the wait, and kernel parameters that an
// earlier kernel writes are not `__restrict__`.
__device__ __forceinline__ uint4 ld_dep(const uint4* p) {
    uint4 v;
    asm volatile("ld.global.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p)
                 : "memory");
    return v;
}
__device__ __forceinline__ u32 ld_dep(const u32* p) {
    u32 v;
    asm volatile("ld.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}

// Bytes of dynamic shared memory the CTA was launched with.
__device__ __forceinline__ u32 dynamic_smem_bytes() {
    u32 r;
    asm("mov.u32 %0, %%dynamic_smem_size;" : "=r"(r));
    return r;
}

// Thread-block clusters (sm_90+; the cluster attention, the tensor-core kernel's split-K reduction).
__device__ __forceinline__ u32 cluster_rank() {
    u32 r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
    return r;
}
__device__ __forceinline__ u32 cluster_ctas() {
    u32 r;
    asm volatile("mov.u32 %0, %%cluster_nctarank;" : "=r"(r));
    return r;
}
// Every thread of every CTA of the cluster: shared-memory writes before it are visible to the cluster after.
__device__ __forceinline__ void cluster_sync() {
    asm volatile("barrier.cluster.arrive.release.aligned;\n\tbarrier.cluster.wait.acquire.aligned;" ::: "memory");
}
// The exit guard: no CTA leaves while another may still read its shared memory. Nothing written before it
// needs to be visible to the cluster, so the arrive is relaxed: a release arrive compiles to MEMBAR.ALL.GPU
// (nvdisasm, sm_90), which waits for the thread's global stores (the outputs) to be performed; ncu on the
// INT4 step (session 8) put 11% of the kernel's stall samples on memory barriers. (The merge's barrier
// keeps its release: peers read the partials it publishes; any cluster-scope release is that MEMBAR.)
__device__ __forceinline__ void cluster_exit_sync() {
    asm volatile("barrier.cluster.arrive.relaxed.aligned;\n\tbarrier.cluster.wait.aligned;" ::: "memory");
}
// The float at the same shared-memory offset as `p` in CTA `rank` of the cluster.
__device__ __forceinline__ float ld_dsmem(const float* p, u32 rank) {
    u32 a, ra;
    asm("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(a) : "l"(p));
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(ra) : "r"(a), "r"(rank));
    float v;
    asm volatile("ld.shared::cluster.f32 %0, [%1];" : "=f"(v) : "r"(ra) : "memory");
    return v;
}

// Hopper (sm_90+) mbarriers and bulk copies, for the kernels that stream weights into shared memory (the
// ring GEMV and fused FFN through wo_stream.cuh, the tensor-core kernel's bulk ring): an mbarrier per
// buffer counts arrivals and the bytes of the copies that complete on it (`expect_tx`), and a waiter spins on
// the parity of its phase. Unused functions emit no code, so older architectures still compile this file.
__device__ __forceinline__ void mbar_init(u32 a, u32 count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(a), "r"(count) : "memory");
}

__device__ __forceinline__ void mbar_arrive(u32 a, u32 count) {
    asm volatile("{ .reg .b64 st; mbarrier.arrive.shared::cta.b64 st, [%0], %1; }" ::"r"(a), "r"(count) : "memory");
}

__device__ __forceinline__ void mbar_expect_tx(u32 a, u32 bytes) {
    asm volatile("{ .reg .b64 st; mbarrier.arrive.expect_tx.shared::cta.b64 st, [%0], %1; }" ::"r"(a), "r"(bytes)
                 : "memory");
}

// Waits until the phase of parity `parity` of the mbarrier at `a` has completed.
__device__ __forceinline__ void mbar_wait(u32 a, u32 parity) {
    u32 done;
    do {
        asm volatile(
            "{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
            : "=r"(done)
            : "r"(a), "r"(parity)
            : "memory");
    } while (!done);
}

// Bulk copy of `bytes` (a multiple of 16) from global `src` to shared `dst`, completing on mbarrier `bar`.
__device__ __forceinline__ void bulk_copy(u32 dst, const void* src, u32 bytes, u32 bar) {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(dst),
                 "l"(src), "r"(bytes), "r"(bar)
                 : "memory");
}

// bulk_copy into CTAs 0 and 1 of the cluster at once (multicast: the same shared-memory offsets `dst` and
// `bar` in each; the data leaves L2 once). Built for sm_90a (the multicast is slow on plain sm_90).
__device__ __forceinline__ void bulk_copy_pair(u32 dst, const void* src, u32 bytes, u32 bar) {
    asm volatile(
        "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster [%0], [%1], %2, [%3], "
        "%4;" ::"r"(dst),
        "l"(src), "r"(bytes), "r"(bar), "h"((unsigned short)3)
        : "memory");
}

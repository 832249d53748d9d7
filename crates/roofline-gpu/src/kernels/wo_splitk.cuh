// Epilogue shared by the weight-only kernels (the host prepends this file, after wo_prims.cuh, to each
// source): the fused prologue/epilogue options of a launch, and split-K. With K split over gridDim.y each
// CTA adds its partial sums into the FP32 workspace with atomicAdd; the last CTA (per-tile counter) of row
// tile blockIdx.x converts rows [row0, row0 + rows) x mt of the workspace to y, and leaves workspace and
// counter zeroed for the next call, so one launch does it all.
//
// Fusions (kernel arguments `flags`, `eps`), which let a decode step drop its RMSNorm kernels:
//   FUSE_NORM  x is the un-normalized residual stream and the RMSNorm's weight is folded into W (W diag(g)):
//              y = rsqrt(mean(x[m]^2) + eps) . x W^T. The inverse RMS of every row of x is computed after
//              pdl_wait (fuse_norm_rows: by each warp for itself in the K-walking kernels, by the CTA's warps
//              together in the x-stationary ones) and applied to the output (it is linear, so split-K
//              partials take it too).
//   FUSE_ADD   y += x W^T: a residual add (y is read before it is written; split-K adds it once, at the end).
//   FUSE_SILU  x is a gate_up row [M][2K] (gate then up): the kernel multiplies silu(gate) * up as it loads x
//              (the x-in-registers kernel only: it loads x once per warp), so SwiGLU needs no kernel of its
//              own in front of down_proj.

#define FUSE_NORM 1
#define FUSE_ADD 2
#define FUSE_SILU 4
// FUSE 0 (default): the kernels ignore `flags` (fuse_flags returns a compile-time 0, so none of the fused
// code is emitted and the kernels are what they were before fusion existed: the prologue and the residual
// loads cost ~1.5 us of latency at 1x4096x4096 even when skipped at run time). The host compiles FUSE = 1
// builds only for fused launches.
#ifndef FUSE
#define FUSE 0
#endif
__device__ __forceinline__ int fuse_flags(int flags) { return FUSE ? flags : 0; }

// One x/y element (FP16, or BF16 when XBF16) as a float.
__device__ __forceinline__ float io2f(u16 h) {
#if XBF16
    return as_float((u32)h << 16);
#else
    return h2f(h);
#endif
}

// A float as one x/y element (FP16, or BF16 when XBF16), rounded to nearest even.
__device__ __forceinline__ u16 f2out(float v) {
    u16 h;
#if XBF16
    asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(v));
#else
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(v));
#endif
    return h;
}

// This warp's inverse RMS of rows m0, m0 + mstep, ... (< mt) of x (K elements each, K a multiple of 8) into
// inv[m]; 1 when FUSE_NORM is off. Every lane of the warp must call it (a no-op without FUSE: inv is then never
// read). A CTA whose warps share one inv array deals the rows out (m0 = warp, mstep = warps) and synchronizes
// before reading it. Four 16-byte loads per lane are in flight at a time: one at a time put a dependent L2
// round trip per 256 elements on the kernel's critical path (INT4 16x28672x4096 with the norm fused, one
// warp over all 16 rows: 186 us against 40 us unfused, session 8).
__device__ __forceinline__ void fuse_norm_rows(const u16* x, int k, int mt, int flags, float eps,
                                               float* inv, int m0, int mstep) {
    if (!FUSE) return;
    const int lane = threadIdx.x & 31;
    const int chunks = k / 8;
    for (int m = m0; m < mt; m += mstep) {
        float s = 0.0f;
        if (flags & FUSE_NORM) {
            const uint4* xr = (const uint4*)(x + (size_t)m * k);
            for (int i0 = lane; i0 < chunks; i0 += 4 * 32) {
                uint4 v[4];
#pragma unroll
                for (int u = 0; u < 4; ++u) {
                    const int i = i0 + 32 * u;
                    v[u] = i < chunks ? ld_dep(xr + i) : make_uint4(0u, 0u, 0u, 0u);
                }
#pragma unroll
                for (int u = 0; u < 4; ++u) {
                    const u32 wds[4] = {v[u].x, v[u].y, v[u].z, v[u].w};
#pragma unroll
                    for (int j = 0; j < 4; ++j) {
                        const float a = io2f((u16)(wds[j] & 0xffffu)), b = io2f((u16)(wds[j] >> 16));
                        s = fmaf(a, a, fmaf(b, b, s));
                    }
                }
            }
#pragma unroll
            for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
        }
        if (lane == 0) inv[m] = (flags & FUSE_NORM) ? rsqrtf(s / (float)k + eps) : 1.0f;
    }
    __syncwarp();
}

// This warp's inverse RMS of every row of x into inv[0..mt) (see fuse_norm_rows).
__device__ __forceinline__ void fuse_norm_prologue(const u16* x, int k, int mt, int flags, float eps,
                                                   float* inv) {
    fuse_norm_rows(x, k, mt, flags, eps, inv, 0, 1);
}

// One output value (already scaled by the caller): into the workspace when K is split over gridDim.y
// (splitk_finish converts it later), else straight to y (`f2out`), plus y's old value with FUSE_ADD.
__device__ __forceinline__ void splitk_store(float* __restrict__ ws, u16* __restrict__ y, size_t o, float v,
                                             bool split, int flags) {
    if (split)
        atomicAdd(ws + o, v);
    else
        y[o] = f2out((flags & FUSE_ADD) ? v + io2f(y[o]) : v);
}

// Values of the split-K finish each thread has in flight.
#define FIN 8

__device__ __forceinline__ void splitk_finish(float* __restrict__ ws, u16* __restrict__ y,
                                              u32* __restrict__ counters, int row0, int rows, int n_rows, int mt,
                                              int flags) {
    __shared__ bool is_last;
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) {
        const u32 prev = atomicAdd(counters + blockIdx.x, 1u);
        is_last = prev == gridDim.y - 1;
    }
    __syncthreads();
    if (is_last) {
        __threadfence();
        // Along rows for each x row (the workspace reads and y stores coalesce), FIN values per thread in
        // flight at once: the other splits' atomics are done and visible (the counter), so plain L2 loads
        // read the sums and plain stores zero them. An atomicExch per value, one after the other, put a
        // dependent L2 round trip per 512 outputs on the kernel's tail: 7 of them at M = 16 for the 224 rows
        // of an x-stationary CTA, most of the gap between INT4 16x14336x4096 and a plain copy (session 11).
        const int total = rows * mt;
        for (int i0 = threadIdx.x; i0 < total; i0 += FIN * blockDim.x) {
            float v[FIN], old[FIN];
            size_t o[FIN];
#pragma unroll
            for (int u = 0; u < FIN; ++u) {
                const int i = i0 + u * blockDim.x;
                const int m = i / rows, r = i - m * rows;
                o[u] = (size_t)m * n_rows + row0 + r;
                v[u] = i < total ? __ldcg(ws + o[u]) : 0.0f;
                old[u] = i < total && (flags & FUSE_ADD) ? io2f(y[o[u]]) : 0.0f;
            }
#pragma unroll
            for (int u = 0; u < FIN; ++u) {
                if (i0 + u * blockDim.x < total) {
                    __stcg(ws + o[u], 0.0f);
                    y[o[u]] = f2out(v[u] + old[u]);
                }
            }
        }
        if (threadIdx.x == 0) counters[blockIdx.x] = 0;
    }
}

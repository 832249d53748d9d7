// The read-stream calibration kernel (`roofline calibrate`, src/stream.rs): how fast this GPU reads device
// memory when it does nothing else, the roof a decode GEMV (almost all reads) streams against.
//
// Every thread loads 16-byte vectors in a grid-stride loop, UNROLL loads issued before any is used, and folds
// their words by XOR (cheap, exact, and every byte read reaches the result, so nothing can be skipped); each
// CTA writes one word. The host checks the XOR of the CTAs' words against its own.
//
// Options: THREADS (CTA size), UNROLL (loads in flight per thread), PDL (sm_90+: programmatic dependent
// launch as the GEMV kernels take it; the next launch may start streaming while this one finishes, and the
// one dependent access, the final store, waits for the previous launch), BLOCKED (1: CTA c reads only its
// contiguous share [c n / G, (c + 1) n / G) of the n vectors, as the ring GEMV's CTAs take their rows, instead of
// the grid-stride interleave; a diagnostic, src/bulk_stream.rs).

#ifndef THREADS
#define THREADS 512
#endif
#ifndef UNROLL
#define UNROLL 4
#endif
#ifndef PDL
#define PDL 0
#endif
#ifndef BLOCKED
#define BLOCKED 0
#endif

__device__ __forceinline__ uint4 ld_stream(const uint4* p) {
    uint4 v;
    // Non-coherent (read-only) path, no L1 allocation: every byte is read once.
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p));
    return v;
}

extern "C" __global__ void __launch_bounds__(THREADS)
    read_stream(const uint4* __restrict__ src, unsigned long long n16, unsigned* __restrict__ out) {
#if PDL
    asm volatile("griddepcontrol.launch_dependents;");
#endif
#if BLOCKED
    const unsigned long long stride = THREADS;
    unsigned long long i = (unsigned long long)blockIdx.x * n16 / gridDim.x + threadIdx.x;
    n16 = (unsigned long long)(blockIdx.x + 1) * n16 / gridDim.x;  // the end of the CTA's share
#else
    const unsigned long long stride = (unsigned long long)gridDim.x * THREADS;
    unsigned long long i = (unsigned long long)blockIdx.x * THREADS + threadIdx.x;
#endif
    unsigned acc = 0;
    for (; i + (UNROLL - 1) * stride < n16; i += UNROLL * stride) {
        uint4 v[UNROLL];
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) v[u] = ld_stream(src + i + u * stride);
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
    }
    for (; i < n16; i += stride) {
        const uint4 v = ld_stream(src + i);
        acc ^= v.x ^ v.y ^ v.z ^ v.w;
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) acc ^= __shfl_xor_sync(0xffffffffu, acc, o);
    __shared__ unsigned warp_acc[THREADS / 32];
    if ((threadIdx.x & 31) == 0) warp_acc[threadIdx.x >> 5] = acc;
    __syncthreads();
    if (threadIdx.x == 0) {
        unsigned r = 0;
#pragma unroll
        for (int w = 0; w < THREADS / 32; ++w) r ^= warp_acc[w];
#if PDL
        // The store is the one access a previous launch's kernel could race with (it writes `out` too).
        asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
        out[blockIdx.x] = r;
    }
}

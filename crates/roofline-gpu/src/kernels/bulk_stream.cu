// The bulk-copy read stream (src/bulk_stream.rs, a diagnostic beside read_stream.cu): how fast this GPU reads
// device memory through the ring GEMV's own machinery, with no decode. Appended by the host to wo_prims.cuh.
//
// One producer warp a CTA streams the CTA's contiguous share of the buffer, UNIT bytes a bulk copy
// (`cp.async.bulk`, an mbarrier per slot), into a ring of SLOTS slots of shared memory; CONSUMERS warps wait for
// each slot, fold its words by XOR (every byte read reaches the result, as in read_stream.cu) and release it.
// AHEAD n > 0: the producer issues unit u only once unit u - n has landed (the ring GEMV's RW_AHEAD); 0: as
// many in flight as the ring has free slots. CTA c takes units [c U / G, (c + 1) U / G) of the U units, G CTAs,
// as the ring GEMV takes row steps (one CTA a SM, its rows contiguous). Each CTA writes one word; the host
// checks the XOR of all of them against its own.
//
// The ring GEMV at 1x14336x4096 INT4 (bench/RESULTS.md session 38) streams its weights, decode dropped, in 8.5
// us where read_stream.cu reads the same bytes in 7.3: this kernel tells whether the bulk copies, their
// count in flight or the partition lose it.

#if !defined(UNIT) || !defined(SLOTS)
#error "UNIT (bytes a bulk copy) and SLOTS (ring slots) must be defined"
#endif
#if UNIT % 16 != 0
#error "UNIT must be a multiple of 16 bytes"
#endif
#ifndef AHEAD
#define AHEAD 0
#endif
#ifndef CONSUMERS
#define CONSUMERS 12
#endif

__device__ __forceinline__ u32 bs_smem(const void* p) { return (u32)__cvta_generic_to_shared(p); }

extern "C" __global__ void __launch_bounds__((CONSUMERS + 1) * 32, 1)
    bulk_stream(const u8* __restrict__ src, unsigned long long units, unsigned* __restrict__ out) {
    pdl_trigger();
    extern __shared__ __align__(128) u8 ring[];
    __shared__ __align__(8) unsigned long long full[SLOTS], empty[SLOTS];
    __shared__ unsigned warp_acc[CONSUMERS];
    const unsigned long long u0 = (unsigned long long)blockIdx.x * units / gridDim.x;
    const int nu = (int)((unsigned long long)(blockIdx.x + 1) * units / gridDim.x - u0);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const u32 full_s = bs_smem(full), empty_s = bs_smem(empty);
    if (threadIdx.x == 0) {
        for (int i = 0; i < SLOTS; ++i) {
            mbar_init(full_s + 8 * i, 1);  // the producer's expect_tx
            mbar_init(empty_s + 8 * i, CONSUMERS);
        }
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
        asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    }
    __syncthreads();
    if (warp == CONSUMERS) {
        // Producer: every unit in order, as slots free up (and, AHEAD, as the unit AHEAD before lands; that
        // barrier's next phase belongs to a unit past u, not armed yet, so the parity wait reads the right one).
        if (lane == 0) {
            for (int u = 0; u < nu; ++u) {
                const int slot = u % SLOTS;
                if (u >= SLOTS) mbar_wait(empty_s + 8 * slot, (u32)((u / SLOTS - 1) & 1));
                if (AHEAD > 0 && AHEAD < SLOTS && u >= AHEAD)
                    mbar_wait(full_s + 8 * ((u - AHEAD) % SLOTS), (u32)(((u - AHEAD) / SLOTS) & 1));
                mbar_expect_tx(full_s + 8 * slot, UNIT);
                bulk_copy(bs_smem(ring + slot * UNIT), src + (u0 + u) * UNIT, UNIT, full_s + 8 * slot);
            }
        }
        return;
    }
    unsigned acc = 0;
    for (int u = 0; u < nu; ++u) {
        const int slot = u % SLOTS;
        mbar_wait(full_s + 8 * slot, (u32)((u / SLOTS) & 1));
        const uint4* p = (const uint4*)(ring + slot * UNIT);
        for (int i = threadIdx.x; i < UNIT / 16; i += CONSUMERS * 32) {
            const uint4 v = p[i];
            acc ^= v.x ^ v.y ^ v.z ^ v.w;
        }
        __syncwarp();
        if (lane == 0) mbar_arrive(empty_s + 8 * slot, 1);
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) acc ^= __shfl_xor_sync(0xffffffffu, acc, o);
    if (lane == 0) warp_acc[warp] = acc;
    asm volatile("bar.sync 1, %0;" ::"n"(CONSUMERS * 32) : "memory");  // the consumers only: the producer left
    if (threadIdx.x == 0) {
        unsigned r = 0;
#pragma unroll
        for (int w = 0; w < CONSUMERS; ++w) r ^= warp_acc[w];
        pdl_wait();  // the store is the one access a previous launch could race with (it writes `out` too)
        out[blockIdx.x] = r;
    }
}

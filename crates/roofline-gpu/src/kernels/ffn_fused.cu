// The whole SwiGLU FFN of one decode token in one launch (batch 1, 4-bit weights: INT4 g128, NF4, MXFP4 or
// NVFP4; FP16 x; sm_90+):
//   x += W_down . (silu(g) * u),  (g, u) = rsqrt(mean(x^2) + eps) . W_gate_up . x
// with the post-attention RMSNorm's weight folded into W_gate_up by the host. Appended by the host to
// weight_only_xreg.cu's source and wo_stream.cuh (bulk copies, mbarriers, the f16x2 4-bit row step and
// decodes), compiled with FMT = 4 to 7, MT = 1, R = 8, C = 1, FUSE = 1, FD (hidden size, a multiple of 1024),
// FF (intermediate size, a multiple of 128) and, but for INT4, MBG (below).
//
// Work split: the intermediate dimension is dealt out over the CTAs (at most one per SM). CTA c owns the
// pieces [p0, p1) of 16 intermediate values: it computes their gate and up rows over all of K (phase A),
// keeps h = silu(g) * u in shared memory and multiplies it straight into the matching 16-column pieces of
// W_down for every output row (phase B). No CTA ever waits for another: each adds its partial outputs (FD
// floats) into one FP32 accumulator with vector float atomics and counts itself out, and the last CTA to
// arrive folds the accumulator into x and zeroes it. (Session 16: the grid barrier this replaces, with
// every CTA then reducing a slice of the outputs from partials in global memory, held every SM to the end
// and cost 3.6 us of the 8B FFN's 38.3; this tail costs 1.9, the step 2029-2032 us instead of 2078-2086.
// The atomics sum in arrival order, so a second launch may round an output to the neighbouring FP16 value.)
//
// Streaming: a CTA's weights are three contiguous regions (its gate rows, its up rows, its W_down pieces).
// One producer thread streams them in stages of 4 FD bytes (8 rows of W_gate_up, or half a piece of W_down)
// with bulk copies (`cp.async.bulk`, completing on an mbarrier per stage) into a ring of NST stages in
// shared memory, from the moment the CTA starts (the weights depend on no kernel, so also before
// `griddepcontrol.wait`); the consumer warps decode from shared memory and release each stage on its
// `empty` mbarrier. Bytes in flight then cost neither registers nor the decoding warps' issue slots (the
// register-streaming version of this kernel ran at 2.14 TB/s, no faster than the two GEMVs: session 12).
//
// Layouts (host: weight_only/ffn.rs):
//   gu, gu_s, gu_z  gate_up [2 FF][FD]: codes row-major, scales / zero points transposed ([scale column][2 FF]
//                   entries; pack::xreg_tables)
//   dn              W_down's codes piece-major: [FF/16][FD][8 bytes] (16 nibbles of one row)
//   dn_s, dn_z      W_down's scales / zero points transposed, pack::xreg_tables: INT4 [FF/128][FD] f16 and
//                   [FF/128][FD/2] (row 2i low); NF4 [FF/64][FD] f16; MXFP4 [FF/32][FD] E8M0;
//                   NVFP4 [FF/32][FD][2] E4M3 (dn_z and gu_z are dummies but for INT4)
//   acc             FD floats, the sum of the CTAs' partial outputs (zero between launches)
//   bar             one 64-bit arrival count (zero-initialised once; launch k leaves k x gridDim.x)

#ifndef FF
#error "FF (intermediate size) must be defined"
#endif
#if FMT < 4 || FMT > 7
#error "the fused FFN takes INT4 g128, NF4, MXFP4 or NVFP4 weights"
#endif
// W_down's scales per row, by group of PB_GROUP pieces (16 intermediate values each) along FF: INT4 g128
// one f16 scale and a 4-bit zero point per 8 pieces (its first two groups staged: MBG = 2, the rest loaded
// as the CTA reaches them), MXFP4 one E8M0 byte per 2 pieces, NVFP4 one E4M3 byte per piece, stored two
// pieces (one 32-value chunk) a row: [FF/32][FD][2], NF4 one f16 absmax per 4 pieces (every group of the CTA
// staged: MBG, from the host, is the most groups a CTA's pieces touch). NVFP4's FP32 tensor scales (gs_gu,
// gs_dn) multiply the sums.
#if FMT == 4
#define PB_GROUP 8
#undef MBG
#define MBG 2
#define MB_BYTES (5 * FD)  // mb_s [2][FD] f16, mb_z [2][FD/2]
#else
#define PB_GROUP (FMT == 5 ? 4 : 2)
#ifndef MBG
#error "MBG (the most W_down scale groups a CTA touches) must be defined"
#endif
#define MB_SB (FMT == 6 ? 1 : 2)      // bytes of a group's scales per row
#define MB_BYTES (MBG * FD * MB_SB)  // mb_s [MBG][FD] E8M0 / f16, or [MBG][FD][2] E4M3
#endif
#if FF % 128 != 0
#error "FF must be a multiple of 128"
#endif
#ifndef FFN_MAXW
#define FFN_MAXW 16                          // most consumer warps
#endif
#define RGS (FFN_MAXW / KSL > 0 ? FFN_MAXW / KSL : 1)  // row groups: the KSL warps of a group share a row step
#define NACT (KSL * RGS)                     // consumer warps
#define NC (NACT * 32)                       // consumer threads
#define FFN_THREADS (NC + 32)                // + the producer warp
#define STAGE (4 * FD)                       // bytes: 8 rows of W_gate_up, or FD / 2 rows of a W_down piece
#define QPAIRS (FD / 4)                      // W_down row pairs per stage
#define NPS ((QPAIRS + NC - 1) / NC)         // row pairs per consumer thread and stage
#ifndef RING_BYTES
#define RING_BYTES (176 * 1024)              // the host passes its value
#endif
#define NST_FIT (RING_BYTES / STAGE)
// Stages in the ring: a multiple of RGS, so that every slot of phase A belongs to one row group. A consumer
// waits on a slot's `full` barrier by phase parity, which is only sound if the slot's previous stage has
// landed; that stage is then the group's own, already decoded. (With a slot shared by groups, a group
// running ahead could wait on a slot whose previous stage, another group's, was still in flight: the parity
// test then passes one phase early. EXP_FFN_LOADONLY, whose consumers race, crashed on it in session 12.)
#define NST_CAP (NST_FIT > 16 ? 16 : NST_FIT)
#define NST (NST_CAP / RGS * RGS)
#if NST < RGS
#error "the ring holds fewer stages than there are row groups"
#endif
// EXP_FFN_NOTAIL 1: the partial outputs are not summed at all (x comes out unchanged): what the tail costs.
#ifndef EXP_FFN_NOTAIL
#define EXP_FFN_NOTAIL 0
#endif
// EXP_FFN_RED 1: the CTAs add their partials into the accumulator and leave, nobody folds it into x (x
// comes out unchanged, the accumulator grows): what the atomics alone cost.
#ifndef EXP_FFN_RED
#define EXP_FFN_RED 0
#endif
// FFN_EARLY 1 (default): the producer streams weights from the CTA's start, before griddepcontrol.wait.
#ifndef FFN_EARLY
#define FFN_EARLY 1
#endif

// Consumer-only barrier (named barrier 1): the producer warp never waits on it.
__device__ __forceinline__ void consumers_sync() { asm volatile("bar.sync 1, %0;" ::"n"(NC) : "memory"); }

// W_down's scales (both rows of a pair, f16x2) and zero points (one byte per pair) of group g, for this
// thread's row pairs of both halves of a piece: from `s` / `z` (one group's FD scales and FD / 2 zero bytes,
// in shared memory for the CTA's first two groups, else global).
__device__ __forceinline__ void load_group(const u8* s, const u8* z, u32 sc[2][NPS], u32 zb[2][NPS]) {
#pragma unroll
    for (int hb = 0; hb < 2; ++hb)
#pragma unroll
        for (int i = 0; i < NPS; ++i) {
            const int ql = threadIdx.x + i * NC;
            const int pr = hb * QPAIRS + ql;
            sc[hb][i] = ql < QPAIRS ? *(const u32*)(s + 4 * pr) : 0u;
            zb[hb][i] = ql < QPAIRS ? z[pr] : 0u;
        }
}

// The CTA's scales and zero points into shared memory with cp.async, issued by the consumers before the
// producer's first weight copy (a load issued behind the ring's bulk copies waits for the DRAM queue they
// fill, several microseconds; ncu put 27% of the kernel's stall samples on such a scale load, session 13):
//   ma_s [RS_COLS][2 fs] x RS_SB / 8 bytes  gate_up's scales of the CTA's rows (gate rows, then up rows) per
//                                           scale column (INT4 f16 per 128 values, NF4 f16 per 64, MXFP4
//                                           E8M0 per 32, NVFP4 two E4M3 per 32)
//   ma_z [RS_COLS][fs] bytes                their zero points (INT4 only: two rows a byte)
//   mb_s, mb_z                              W_down's: INT4 [2][FD] f16 and [2][FD/2] of the CTA's first two
//                                           groups (g0, g0 + 1); the others [MBG][FD] x MB_SB bytes, every
//                                           group of the CTA
__device__ __forceinline__ void stage_meta(const u8* __restrict__ gu_s, const u8* __restrict__ gu_z,
                                           const u8* __restrict__ dn_s, const u8* __restrict__ dn_z, int p0,
                                           int fs, int groups_b, u8* ma_s, u8* ma_z, u8* mb_s, u8* mb_z) {
    const int qs = fs * (RS_SB / R) / 16;  // 16-byte chunks of a run of fs rows' scales
    const size_t n_pad = 2 * FF;
    for (int t = threadIdx.x; t < RS_COLS * 2 * qs; t += NC) {
        const int c = t / (2 * qs), half = (t / qs) & 1, j = t % qs;  // half 0: gate rows, 1: up rows
        const size_t row0 = (size_t)half * FF + (size_t)p0 * 16;
        cp_async<16>(smem_addr(ma_s + ((size_t)c * 2 * fs + (size_t)half * fs) * (RS_SB / R) + 16 * j),
                     gu_s + (c * n_pad + row0) * (RS_SB / R) + 16 * j, true);
    }
#if RS_ZB > 0
    const int qz = fs * RS_ZB / R / 4;  // 4-byte chunks of a run of fs rows' zero points
    for (int t = threadIdx.x; t < RS_COLS * 2 * qz; t += NC) {
        const int c = t / (2 * qz), half = (t / qz) & 1, j = t % qz;
        const size_t row0 = (size_t)half * FF + (size_t)p0 * 16;
        cp_async<4>(smem_addr(ma_z + (size_t)c * (2 * fs * RS_ZB / R) + (size_t)half * (fs * RS_ZB / R) + 4 * j),
                    gu_z + c * (n_pad * RS_ZB / R) + row0 * RS_ZB / R + 4 * j, true);
    }
#endif
    const int g0 = p0 / PB_GROUP;
#if FMT == 4
    for (int t = threadIdx.x; t < groups_b * (FD / 8 + FD / 32); t += NC) {
        const int gi = t / (FD / 8 + FD / 32), j = t % (FD / 8 + FD / 32);
        if (j < FD / 8) {
            cp_async<16>(smem_addr(mb_s + (size_t)gi * FD * 2 + 16 * j), dn_s + (size_t)(g0 + gi) * FD * 2 + 16 * j,
                         true);
        } else {
            const int k = j - FD / 8;
            cp_async<16>(smem_addr(mb_z + (size_t)gi * (FD / 2) + 16 * k),
                         dn_z + (size_t)(g0 + gi) * (FD / 2) + 16 * k, true);
        }
    }
#else
    for (int t = threadIdx.x; t < groups_b * (FD * MB_SB / 16); t += NC) {
        const int gi = t / (FD * MB_SB / 16), j = t % (FD * MB_SB / 16);
        cp_async<16>(smem_addr(mb_s + (size_t)gi * FD * MB_SB + 16 * j),
                     dn_s + (size_t)(g0 + gi) * FD * MB_SB + 16 * j, true);
    }
#endif
    asm volatile("cp.async.commit_group;" ::: "memory");
}

extern "C" __global__ void __launch_bounds__(FFN_THREADS, 1)
wo_ffn(const uint4* __restrict__ gu, const u8* __restrict__ gu_s, const u8* __restrict__ gu_z,
       const uint4* __restrict__ dn, const u8* __restrict__ dn_s, const u8* __restrict__ dn_z, u16* x,
       float* __restrict__ acc, unsigned long long* bar, float eps, float gs_gu, float gs_dn) {
    pdl_trigger();
    // Dynamic shared memory: the ring (NST stages), the scales (`stage_meta`: mb_s, mb_z, ma_s, ma_z), then
    // psum [KSL][2 fs] (phase A's sums per K slice), h [fs] and hs [fs / 16] (h summed per piece).
    extern __shared__ __align__(128) u8 smem[];
    __shared__ __align__(8) unsigned long long full[NST], empty[NST];
    __shared__ float ss_sh[KSL];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int pieces = FF / 16;
    const int p0 = (int)(((long long)blockIdx.x * pieces) / gridDim.x);
    const int p1 = (int)(((long long)(blockIdx.x + 1) * pieces) / gridDim.x);
    const int fs = (p1 - p0) * 16;
    const int steps_a = 2 * fs / R;           // phase A stages: 8 rows each
    const int stages = steps_a + 2 * (p1 - p0);  // + two per W_down piece
    u8* mb_s = smem + NST * STAGE;
    u8* mb_z = mb_s + 2 * FD * 2;  // INT4 only
    u8* ma_s = mb_s + MB_BYTES;
    u8* ma_z = ma_s + RS_COLS * 2 * fs * (RS_SB / R);
    float* psum = (float*)(ma_z + RS_COLS * 2 * fs * RS_ZB / R);
    const int g0 = p0 / PB_GROUP;
    // W_down groups staged in shared memory: INT4 the first two, the other formats all of them.
    const int groups_b = FMT == 4 ? (((p1 - 1) >> 3) > g0 ? 2 : 1) : (p1 - 1) / PB_GROUP - g0 + 1;
    float* hsh = psum + KSL * 2 * fs;
    float* hs = hsh + fs;
    const u32 ring_s = smem_addr(smem);
    const u32 full_s = smem_addr(full), empty_s = smem_addr(empty);
    // Global row of CTA-local row r of phase A (gate rows first, then up rows; a stage never straddles them).
    auto grow = [&](int r) { return r < fs ? p0 * 16 + r : FF + p0 * 16 + (r - fs); };

    if (threadIdx.x == 0) {
        for (int i = 0; i < NST; ++i) {
            mbar_init(full_s + 8 * i, 1);
            mbar_init(empty_s + 8 * i, NACT);
        }
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
        asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    }
    // The scales go out first (no kernel writes them), ahead of the weights in the DRAM queue.
    if (warp < NACT) stage_meta(gu_s, gu_z, dn_s, dn_z, p0, fs, groups_b, ma_s, ma_z, mb_s, mb_z);
    const u8* nf4t = nf4_pair_table(nullptr);  // NF4's pair table, for both phases' products
    __syncthreads();

    if (warp == NACT) {
        // ---- Producer: every stage of the CTA's three regions, in the order the consumers take them ----
        if (lane == 0 && !EXP_FFN_NOLOAD) {
#if !FFN_EARLY
            pdl_wait();  // profiling experiment: no weight streaming while the previous kernel runs
#endif
            for (int s = 0; s < stages; ++s) {
                const int slot = s % NST;
                if (s >= NST) mbar_wait(empty_s + 8 * slot, (u32)((s / NST - 1) & 1));
                const u8* src;
                if (s < steps_a) {
                    src = (const u8*)gu + (size_t)grow(s * R) * (FD / 2);
                } else {
                    const int b = s - steps_a;
                    src = (const u8*)dn + ((size_t)(p0 + b / 2) * FD + (size_t)(b & 1) * (FD / 2)) * 8;
                }
                mbar_expect_tx(full_s + 8 * slot, STAGE);
                bulk_copy(ring_s + slot * STAGE, src, STAGE, full_s + 8 * slot);
            }
        }
    } else {
        // ---- Phase A: row step st (8 rows) is stage st, taken by row group st % RGS ----
        const int ks = warp % KSL, rg = warp / KSL;
        const int cbase = ks * 32 + lane;  // the lane's 32-value chunk of every row
        const size_t col = (size_t)RS_COL(cbase);  // its scale column
        pdl_wait();  // x is read only from here (the producer has been streaming since the start)

        float xr[EPC];
        float ss = load_chunk(x, cbase, xr);
        if (rg == 0) {
#pragma unroll
            for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(FULL, ss, o);
            if (lane == 0) ss_sh[ks] = ss;
        }
        asm volatile("cp.async.wait_all;" ::: "memory");  // this thread's share of the scales landed
        consumers_sync();
        // x normalized (rms 1) before the f16x2 products keeps them and their sums far from f16's range.
        float inv;
        {
            float t = 0.0f;
#pragma unroll
            for (int s = 0; s < KSL; ++s) t += ss_sh[s];
            inv = rsqrtf(t / (float)FD + eps);
        }
        // MXFP4 / NVFP4 in the E2M1 device layout (decoded to their values times 2^-14): the normalized x goes
        // up by `e2m1_norm_up` and the sums come back by the rest (`a_fix`, on gate and up before the SiLU).
#if E2M1_SCALED
        const float up = e2m1_norm_up();
        const float a_fix = E2M1_UP / up;
        inv *= up;
#elif FMT == 4 && RW_SUBN
        // INT4's codes as f16 subnormals (wo_stream.cuh `dot8subn`): the normalized x (|x| <= sqrt(FD)) down into
        // [-1, 1] and up by 2^15, the sums back by the rest (their 2^-24 and the 2^15: 2^9).
        const float down = norm_down();
        const float a_fix = 512.0f / down;
        inv *= down * 32768.0f;
#else
        const float a_fix = 1.0f;
#endif
        u32 xh[4][4];  // word wd, pair k: (x[8 wd + k], x[8 wd + k + 4])
#if FMT == 4 && RW_SUBN
        const float xsum = pack_x_subn<EPC>(xr, inv, xh);  // the zero points' term (row_step takes it off)
#else
        pack_x(xr, inv, xh);  // (its sum of x: no zero-point term here, row_step folds the zero points in)
        const float xsum = 0.0f;
#endif

        for (int st = rg; st < steps_a; st += RGS) {
            const int slot = st % NST;
            const float sum = row_step(smem + slot * STAGE + cbase * 16, ma_s + (col * 2 * fs + st * R) * (RS_SB / R),
                                       ma_z + (col * 2 * fs + st * R) * RS_ZB / R, full_s + 8 * slot,
                                       (u32)((st / NST) & 1), xh, nf4t, &xsum);
            __syncwarp();
            if (lane == 0) mbar_arrive(empty_s + 8 * slot, RGS);  // the group's KSL warps: NACT arrivals
            if ((lane & 3) == 0) psum[ks * 2 * fs + st * R + ((lane >> 2) & 7)] = sum;
        }

#if FMT == 4
        // W_down's first two groups' scales (staged in shared memory).
        u32 sca[2][NPS], zba[2][NPS], scb[2][NPS], zbb[2][NPS];
        load_group(mb_s, mb_z, sca, zba);
        if (groups_b > 1) load_group(mb_s + FD * 2, mb_z + FD / 2, scb, zbb);
#endif
        consumers_sync();

        // h = silu(g) * u of the CTA's intermediate values, and its sum per piece (the INT4 zero points' term).
        for (int i = threadIdx.x; i < fs; i += NC) {
            float g = 0.0f, u = 0.0f;
#pragma unroll
            for (int s = 0; s < KSL; ++s) {
                g += psum[s * 2 * fs + i];
                u += psum[s * 2 * fs + fs + i];
            }
            g *= gs_gu * a_fix, u *= gs_gu * a_fix;  // NVFP4's tensor scale (1 for the others), the E2M1 factor
            hsh[i] = __fdividef(g, 1.0f + __expf(-g)) * u;
        }
        consumers_sync();
        // Per piece: the sum of its h (the zero points' term) and h as f16x2 pairs in dot8h's order, packed
        // over the piece's floats: [word][k] = (h[8 word + k], h[8 word + k + 4]); neighbours (h[8 word + 2 k],
        // h[8 word + 2 k + 1]) for the formats of 16-entry codes (dot8nf4, dot8f4). E2M1 device layout: h
        // times 2^(14 - e), 2^(e - 1) <= the piece's largest |h| < 2^e (below 2^14 in f16, exact), so the
        // products come out 2^-e small and hs keeps 2^e for the piece's sums instead.
        if (threadIdx.x < fs / 16) {
            float* hp = hsh + threadIdx.x * 16;
            float t = 0.0f;
            u32 pk[8];
#if E2M1_SCALED
            float mx = 0.0f;
#pragma unroll
            for (int e = 0; e < 16; ++e) mx = fmaxf(mx, fabsf(hp[e]));
            const int ex = unit_exp(mx);
            const float hup = ldexpf(1.0f, 14 - ex);
            t = ldexpf(1.0f, ex);  // h 2^(14 - ex) times the decode's w 2^-14
#else
            const float hup = 1.0f;
#pragma unroll
            for (int e = 0; e < 16; ++e) t += hp[e];
#endif
#pragma unroll
            for (int wd = 0; wd < 2; ++wd)
#pragma unroll
                for (int k = 0; k < 4; ++k)
                    pk[4 * wd + k] = FMT >= 5 ? f2x2h(hp[8 * wd + 2 * k] * hup, hp[8 * wd + 2 * k + 1] * hup)  // 16-entry codes: neighbours
                                              : f2x2h(hp[8 * wd + k], hp[8 * wd + k + 4]);
#pragma unroll
            for (int e = 0; e < 8; ++e) ((u32*)hp)[e] = pk[e];
            hs[threadIdx.x] = t;
        }
        consumers_sync();

        // ---- Phase B: stage steps_a + 2 b + hb is half hb of piece p0 + b, taken by every consumer ----
        float acc0[2][NPS], acc1[2][NPS], gp0[2][NPS], gp1[2][NPS];
#pragma unroll
        for (int hb = 0; hb < 2; ++hb)
#pragma unroll
            for (int i = 0; i < NPS; ++i) acc0[hb][i] = acc1[hb][i] = gp0[hb][i] = gp1[hb][i] = 0.0f;
        float hsum = 0.0f;
        int g = g0;
        for (int p = p0; p < p1; ++p) {
            u32 h[2][4];
            {
                const uint4* h4 = (const uint4*)(hsh + (p - p0) * 16);
#pragma unroll
                for (int wd = 0; wd < 2; ++wd) {
                    const uint4 v = h4[wd];
                    h[wd][0] = v.x, h[wd][1] = v.y, h[wd][2] = v.z, h[wd][3] = v.w;
                }
            }
            hsum += hs[p - p0];
            const float pf = E2M1_SCALED ? hs[p - p0] : 1.0f;  // the piece's factor back (E2M1 device layout)
#pragma unroll
            for (int hb = 0; hb < 2; ++hb) {
                const int s = steps_a + 2 * (p - p0) + hb;
                const int slot = s % NST;
                if (!EXP_FFN_NOLOAD) mbar_wait(full_s + 8 * slot, (u32)((s / NST) & 1));
                const uint4* sp = (const uint4*)(smem + slot * STAGE);
#pragma unroll
                for (int i = 0; i < NPS; ++i) {
                    const int ql = threadIdx.x + i * NC;
                    if (ql < QPAIRS && !EXP_FFN_LOADONLY) {
                        const uint4 q = sp[ql];
                        u32 e0 = 0u, o0 = 0u, e1 = 0u, o1 = 0u;
#if FMT == 4
                        dot8h(q.x, h[0], e0, o0);  // row 2 pr
                        dot8h(q.y, h[1], e0, o0);
                        dot8h(q.z, h[0], e1, o1);  // row 2 pr + 1
                        dot8h(q.w, h[1], e1, o1);
                        gp0[hb][i] += hsum4(e0, o0);
                        gp1[hb][i] += hsum4(e1, o1);
#elif FMT == 5
                        dot8nf4_any(q.x, h[0], nf4t, e0, o0);  // row 2 pr
                        dot8nf4_any(q.y, h[1], nf4t, e0, o0);
                        dot8nf4_any(q.z, h[0], nf4t, e1, o1);  // row 2 pr + 1
                        dot8nf4_any(q.w, h[1], nf4t, e1, o1);
#else
                        dot8f4(q.x, h[0], e0, o0);  // row 2 pr
                        dot8f4(q.y, h[1], e0, o0);
                        dot8f4(q.z, h[0], e1, o1);  // row 2 pr + 1
                        dot8f4(q.w, h[1], e1, o1);
#endif
#if FMT != 4
                        // Rows 2 pr and 2 pr + 1's scales of this piece's group, MB_SB bytes each.
                        const u8* mr = mb_s + ((size_t)(p / PB_GROUP - g0) * FD + 2 * (hb * QPAIRS + ql)) * MB_SB;
#endif
#if FMT == 5
                        // Their f16 absmax (one u32).
                        float s0, s1;
                        h2x2f(*(const u32*)mr, s0, s1);
                        acc0[hb][i] = fmaf(s0, hsum4(e0, o0), acc0[hb][i]);
                        acc1[hb][i] = fmaf(s1, hsum4(e1, o1), acc1[hb][i]);
#elif FMT == 6
                        // Their E8M0 scales (one u16).
                        const u32 eb = *(const unsigned short*)mr;
                        acc0[hb][i] = fmaf(e8m0f(eb & 0xffu) * pf, hsum4(e0, o0), acc0[hb][i]);
                        acc1[hb][i] = fmaf(e8m0f(eb >> 8) * pf, hsum4(e1, o1), acc1[hb][i]);
#elif FMT == 7
                        // Their E4M3 pairs of this piece's chunk (one u32), the byte of this piece (the chunk's
                        // first or second 16 values) from each.
                        const u32 eb = *(const u32*)mr;
                        float s0, s1;
                        e4m3x2_to_f(prmt(eb, 0u, (p & 1) ? 0x31u : 0x20u), s0, s1);  // bytes (p&1, 2 + (p&1))
                        acc0[hb][i] = fmaf(s0 * pf, hsum4(e0, o0), acc0[hb][i]);
                        acc1[hb][i] = fmaf(s1 * pf, hsum4(e1, o1), acc1[hb][i]);
#endif
                    }
                }
                __syncwarp();
                if (lane == 0) mbar_arrive(empty_s + 8 * slot, 1);
            }
#if FMT == 4
            if (p + 1 == p1 || ((p + 1) & 7) == 0) {
                // The group ends: sum (q - z) h = sum (q - 8) h + (8 - z) sum h, times the scale.
                const bool first = g == g0;
#pragma unroll
                for (int hb = 0; hb < 2; ++hb)
#pragma unroll
                    for (int i = 0; i < NPS; ++i) {
                        const u32 sc = first ? sca[hb][i] : scb[hb][i], zb = first ? zba[hb][i] : zbb[hb][i];
                        float s0, s1;
                        h2x2f(sc, s0, s1);
                        acc0[hb][i] = fmaf(s0, fmaf(8.0f - (float)(zb & 15u), hsum, gp0[hb][i]), acc0[hb][i]);
                        acc1[hb][i] = fmaf(s1, fmaf(8.0f - (float)((zb >> 4) & 15u), hsum, gp1[hb][i]), acc1[hb][i]);
                        gp0[hb][i] = gp1[hb][i] = 0.0f;
                    }
                hsum = 0.0f;
                ++g;
                // A third group (more than 8 pieces per CTA): its scales are loaded when it starts.
                if (g > g0 + 1 && p + 1 < p1)
                    load_group(dn_s + (size_t)g * FD * 2, dn_z + (size_t)g * (FD / 2), scb, zbb);
            }
#endif
        }
#pragma unroll
        for (int hb = 0; hb < 2; ++hb)
#pragma unroll
            for (int i = 0; i < NPS; ++i) {
                const int ql = threadIdx.x + i * NC;
                if (ql < QPAIRS) {
                    // A vector float RED (sm_90); none when the tail is left out.
                    if (!EXP_FFN_NOTAIL)
                        atomicAdd((float2*)acc + hb * QPAIRS + ql,
                                  make_float2(gs_dn * acc0[hb][i], gs_dn * acc1[hb][i]));
                }
            }
    }
    if (EXP_FFN_NOTAIL || EXP_FFN_RED) return;
    // ---- The last CTA to finish folds the accumulator into x ----
    // Each thread's FOLD groups of 4 values of x are read first, while the count's atomic is in flight (x
    // does not change before the fold; the CTAs that are not last drop them), and the accumulator's all at
    // once after it: the fold is one L2 round trip after the count, not one per group.
    constexpr int FOLD = (FD / 4 + FFN_THREADS - 1) / FFN_THREADS;
    uint2 xv[FOLD];
#pragma unroll
    for (int u = 0; u < FOLD; ++u) {
        const int i = threadIdx.x + u * FFN_THREADS;
        xv[u] = i < FD / 4 ? __ldcg((const uint2*)x + i) : make_uint2(0u, 0u);
    }
    __shared__ int is_last;
    __syncthreads();
    if (threadIdx.x == 0) {
        // One 64-bit count that only grows (launch k of this FfnWeights ends at k x gridDim.x): the acq_rel
        // add orders this CTA's atomics (before the CTA barrier) before it, and makes every earlier CTA's
        // visible to the one that finds itself last.
        unsigned long long old;
        asm volatile("atom.add.acq_rel.gpu.global.u64 %0, [%1], 1;" : "=l"(old) : "l"(bar) : "memory");
        is_last = old % gridDim.x == gridDim.x - 1;
    }
    __syncthreads();
    if (!is_last) return;
    float4 t[FOLD];
#pragma unroll
    for (int u = 0; u < FOLD; ++u) {
        const int i = threadIdx.x + u * FFN_THREADS;
        t[u] = i < FD / 4 ? __ldcg((const float4*)acc + i) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
#pragma unroll
    for (int u = 0; u < FOLD; ++u) {
        const int i = threadIdx.x + u * FFN_THREADS;
        if (i >= FD / 4) continue;
        float x0, x1, x2, x3;
        x2f(xv[u].x, x0, x1);
        x2f(xv[u].y, x2, x3);
        const u32 lo = (u32)f2out(x0 + t[u].x) | ((u32)f2out(x1 + t[u].y) << 16);
        const u32 hi = (u32)f2out(x2 + t[u].z) | ((u32)f2out(x3 + t[u].w) << 16);
        ((uint2*)x)[i] = make_uint2(lo, hi);
        __stcg((float4*)acc + i, make_float4(0.0f, 0.0f, 0.0f, 0.0f));
    }
}

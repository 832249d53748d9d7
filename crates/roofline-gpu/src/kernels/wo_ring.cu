// The ring GEMV (batch 1, or RW_M = 2-3 rows of x, below; INT4 g128, NF4, MXFP4, NVFP4, FP8 E4M3, INT8, FP16 or
// BF16 weights, FP16 or BF16 x
// (XBF16: BF16 x scaled into [-1, 1) is exact in f16 from 2^-16 of max|x|), sm_90+):
//   y = W . rmsnorm(x)        (NORM 1; the norm's weight folded into W by the host)
//   y (+)= W . x              (NORM 0; ADD 1 adds into y, the residual stream)
//   y (+)= W . (silu(g) * u)  (SILU_X 1, NORM 0: SwiGLU on load, x the gate_up row [g | u] of 2 FD values)
// Appended by the host to weight_only_xreg.cu's source and wo_stream.cuh, compiled with FD = K (a multiple of
// 1024, at most 31744), RW_GROUPS (row groups of KSL warps), RW_KH (K parts of a row step, below), RW_STEPS
// (ring slots, at least RW_GROUPS x RW_KH; below) and RW_ROWS (the most rows one CTA takes: its scale tables are
// staged in shared memory, unless RW_SSTREAM).
//
// One producer warp streams the CTA's row steps (8 rows, 8 ROWB bytes: 4 FD for 4-bit codes, 8 FD for 8-bit, 16 FD
// for FP16 and BF16, whose FD is at most 15360 and whose lanes take 32-byte chunks: wo_stream.cuh's LCB) with bulk copies (`cp.async.bulk`,
// an mbarrier per slot) into a ring of RW_STEPS slots from the CTA's first instruction, before
// griddepcontrol.wait (the weights depend on no kernel): a CTA resident beside the previous kernel has its
// first slots filled by the time x is ready; where the ring holds all its steps, all of them. Unit u (K part
// u % RW_KH of row step u / RW_KH) goes to slot u % RW_STEPS and is consumed by the warps of row group
// (u / RW_KH) % RW_GROUPS whose K slices fall in its part: consumer class u % C, C = RW_GROUPS x RW_KH.
//
// The parity waits. A parity wait passes once the phase of that parity has completed, so it tells a barrier's
// current phase only from the one before it: each `full` barrier must have a single consumer class, which
// consumed its previous phase itself before it waits for the next. Where RW_STEPS is a multiple of C, a slot
// always serves one class: a `full` barrier per slot, unit u its phase u / RW_STEPS. Otherwise (RW_MIXED:
// any count of at least C slots, more where a multiple of C does not fit, e.g. Llama-3-70B's down_proj in 7 K
// parts: 11 slots of 16 KB) a `full` barrier per slot and class, unit u phase u / lcm(RW_STEPS, C) of its class's
// (RW_PERIOD): the producer arms the one of the unit's class. The `empty` barriers stay one per slot (the
// producer alone waits on them, in order, and a slot's next unit is filled only once its last was released).
// Session 34's first try kept a barrier per slot and had consumers wait for its previous phase first: that
// deadlocks when both phases have completed by then (bench/RESULTS.md).
// Without the producer warp (RW_PRODUCER 0) a group's first warp refills its slots: a multiple of C.
//
// Layouts (host: weight_only/ring/plan.rs, mod.rs): w [N][FD] codes row-major; INT4: w_s [FD/128][N] f16 scales and
// w_z [FD/128][N/2] zero points, NF4: w_s [FD/64][N] f16, MXFP4: w_s [FD/32][N] E8M0 bytes, NVFP4: w_s [FD/32][N][2] E4M3 bytes and
// the FP32 tensor scale `gscale` (1 for the others; pack::xreg_tables), FP8 / INT8: w_s [N] FP32 row scales (applied
// to the row sums; w_z unread), FP16: no tables (w_s, w_z unread; `gscale` a power of two x is scaled down by, ring/plan.rs
// `kernel_scale`), BF16: no tables (`gscale` 1); with RW_SSTREAM (4-bit only) the same entries step-major,
// w_s [N/8][RS_COLS][RS_SB bytes: the step's 8 rows] and w_z [N/8][RS_COLS][4] (pack::ring_step_tables). CTA c takes
// row steps [c S / G, (c + 1) S / G), S = N / 8, G = gridDim.x.

#ifndef RW_GROUPS
#define RW_GROUPS 2
#endif
#if !defined(RW_STEPS) || !defined(RW_ROWS)
#error "RW_STEPS (ring slots) and RW_ROWS (most rows per CTA) must be defined"
#endif
// RW_KH (wo_stream.cuh): K parts a row step is streamed in; a ring slot holds one part (8 rows of FD / RW_KH
// values, 8 bulk copies of RW_PART_ROW bytes), consumed by the KSL / RW_KH warps of the row group whose K
// slices fall in it. With few row steps of a long K (down_proj, 4 steps of 57 KB a CTA) the ring then holds
// more of the CTA's bytes and each refill starts a part sooner.
#if KSL % RW_KH != 0
#error "RW_KH must divide the K slices (KSL)"
#endif
#define RW_CLASSES (RW_GROUPS * RW_KH)  // consumer classes (a row group's warps of one K part)
// Fewer slots than consumer classes (16-bit rows past K = 12288, whose row step is more than the ring holds: one row
// group in K parts, ring/plan.rs `least_slots`) are RW_MIXED's (so need the producer warp, below): a `full` barrier per
// slot and class, the producer filling units in order, each once the unit RW_STEPS before it was released, which
// waits for no later unit.
#define RW_MIXED (RW_STEPS % RW_CLASSES != 0)  // a slot serves several classes: a `full` barrier per class
#define RW_FB (RW_MIXED ? RW_CLASSES : 1)      // `full` barriers per slot
__host__ __device__ constexpr int rw_gcd(int a, int b) { return b ? rw_gcd(b, a % b) : a; }
// Units between two uses of one `full` barrier: lcm(RW_STEPS, C) where mixed, else RW_STEPS.
constexpr int RW_PERIOD = RW_MIXED ? RW_STEPS / rw_gcd(RW_STEPS, RW_CLASSES) * RW_CLASSES : RW_STEPS;
#ifndef NORM
#define NORM 0
#endif
// NF4_WIDE: where NF4's 64 KB pair table sits in the dynamic shared memory (after the ring and the tables;
// host: ring/plan.rs `layout`).
#ifndef RW_NF4_OFF
#define RW_NF4_OFF 0
#endif
#ifndef ADD
#define ADD 0
#endif
// RW_SSTREAM 1: the scales streamed with the weights instead of staged: each ring slot has beside it the block
// scales (and INT4's zero points) of its K part's columns for its 8 rows, one run of the step-major tables
// (pack::ring_step_tables) that the producer copies with one bulk copy (INT4: two) on the slot's `full`
// mbarrier with its weights; the consumers read them once the slot is full (row_step's SCALES_IN_STAGE). The
// scales then come in the order of the weights and as early (host: ring/plan.rs `wants_streamed_scales`). Session
// 33's first streamed layout copied each column's 16-byte entry from the transposed tables (a DRAM page
// apart) and cost more than its bytes; requested two steps ahead by the consumers they queued behind the
// ring's weights.
#ifndef RW_SSTREAM
#define RW_SSTREAM 0
#endif
// RW_AHEAD n > 0: the producer issues unit u only once unit u - n has landed, so at most n units are in flight
// however deep the ring (the ring still buffers what has landed and is not yet consumed): bulk copies issued
// together land together, so a ring filled at once has its first slot land about with its last and the decode
// waits for all of them; n in flight land in order and the decode runs under the stream (host: ring/plan.rs
// `units_in_flight`, short shapes on fast memory). 0, or RW_STEPS and more: only the ring's depth bounds them.
#ifndef RW_AHEAD
#define RW_AHEAD 0
#endif
#if RW_AHEAD < 0
#error "RW_AHEAD must be 0 (off) or more"
#endif
#define RW_SCOLS (RS_COLS / RW_KH)             // scale columns of one K part
#define RW_SCB (RW_SCOLS * (RS_SB + RS_ZB))  // bytes of a slot's scales and zero points (RW_SSTREAM)
#ifndef SILU_X
#define SILU_X 0
#endif
#ifndef EXP_RING_SKIPLAST
#define EXP_RING_SKIPLAST 0
#endif
// EXP_RING_TRACE 1 (profiling, wrong results by design; the CUDA-core row steps at one row of x, host: the ring_trace
// example): y holds a timeline instead of the product, each CTA's RT_WORDS = (n / 2) / gridDim.x 32-bit words of it
// (`rt_*`): the globaltimer (ns, low 32 bits) at its start and end (words 0, 3), then the SM's clock (%clock, raw: one
// counter for all the CTA's warps, which start apart) at x packed (consumer warp 0; word 1), at the end (after the
// consumers' last sync; 2), at the barriers initialized (4), at the scale tables' copies issued (thread 0; 5), at the
// CTA's barrier passed (the producer's lane 0; 6), at thread 0's share of the scales landed (7) and at the CTA's start
// (thread 0; 8), its SM (%smid; 9), then for each unit u < (RT_WORDS - 10) / 3 the clock at its copies issued (the
// producer), at its `full` barrier passed and at its decode done (the first warp of its consumer class; 10 + 3u, 11 +
// 3u, 12 + 3u). Host: weight_only/trace.rs parses it.
#ifndef EXP_RING_TRACE
#define EXP_RING_TRACE 0
#endif
// RW_EARLY 1 (the default where ring/plan.rs `early_copies` takes it since session 64: INT4 and NF4 at one row of x):
// the producer warp initializes the barriers and issues its first copies without waiting for the other warps to issue
// the scale tables' copies (the CUDA-core row steps, one CTA; session 62's trace: the first copies went out 0.67 us
// after a CTA's start at 1x14336x4096, 2.05 us at the LM head's 122 row steps).
#ifndef RW_EARLY
#define RW_EARLY 0
#endif
#if EXP_RING_TRACE
__device__ __forceinline__ u32 rt_gtime() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return (u32)t;
}
__device__ __forceinline__ u32 rt_smid() {
    u32 s;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(s));
    return s;
}
__device__ __forceinline__ u32 rt_clock() {
    u32 c;
    asm volatile("mov.u32 %0, %%clock;" : "=r"(c));
    return c;
}
#endif
// EXP_MMA_NOX 1 (probe, wrong results): the tensor-core row step's x fragments made up instead of loaded, what x's
// prologue loads cost (session 53: 16x14336x4096 15.3 -> 14.2 us).
#ifndef EXP_MMA_NOX
#define EXP_MMA_NOX 0
#endif
// EXP_MMA_NF4REG 1 (probe): the tensor-core row step decodes NF4 through the byte tables in registers (`nf4_pairs`,
// about 20 instructions a word) instead of the shared-memory pair table (its ring keeps the table's layout). Session 54
// (r3, before the rows' padding): 16x14336x4096 21.4 us against the table's 18.5, 16x4096x4096 8.7 against 7.75.
#ifndef EXP_MMA_NF4REG
#define EXP_MMA_NF4REG 0
#endif
#if SILU_X && NORM
#error "SwiGLU on load (SILU_X) takes no fused norm"
#endif
// RW_MMA 1 (INT4 g128, NF4, MXFP4 and NVFP4 weights with FP16 or BF16 x, RW_MMA_XF16; 9 to 16 rows of x, a store, a
// residual add or a fused RMSNorm (its factor on the row sums); host: ring/plan.rs `mma_plan`): the tensor cores take the
// row steps. Every unit (a row step, RW_KH 1, RW_GROUPS 1) is consumed by FD / 256 warps, warp ks taking K values [256
// ks, 256 ks + 256) of its 8 rows in the ring's own layout: lane (g, t) reads 8 words of row g, decodes each to q - z
// in f16 (dot8hz's decode without its products: 9 instructions a word of 8 codes; with BF16 x in bf16,
// int4_pairs_z_bf16: 11, and bf16 products; MXFP4 / NVFP4: the E2M1 pairs times the block's scale, below; NF4: its
// pairs from the wide pair table) and runs 2 mma.sync.m16n8k16 a word, x the A operand (rows g and g + 8 of x, in
// registers for the whole call, in the K order the words' codes give, below) and the step's 8 rows the n8 columns. Each
// 128-value group (NF4: 64-value block) accumulates on its own and is scaled into the lane's sums of weight rows 2t, 2t
// + 1 (MXFP4's and NVFP4's sums need no scale); every warp's sums go to shared memory (its own, so the result has the
// same bits every run), which the epilogue warp (RW_EPI) adds and stores chunk by chunk (RW_MMA_CH). Each weight is
// decoded once for all rows of x, the stream is the M = 1 ring's (session 51: the bulk ring's loads alone took 13.0 us
// at 16x14336x4096 against the M = 1 ring's 8.3), and x crosses from L2 once, 16 bytes a load.
#ifndef RW_MMA
#define RW_MMA 0
#endif
#if RW_MMA && (FD % 256 != 0 || FD / 256 > 31)
#error "RW_MMA needs K a multiple of 256, at most 31 slices of 256"
#endif
// RW_SPLITS s > 1 (the tensor-core row step past K = 4096; host: ring/plan.rs `mma_splits`): K in s splits of FD values (a
// multiple of 256, at most 4096: x's A fragments of 16 warps), each taken by one CTA of a cluster of s along x: the
// CTA of cluster rank p takes split p of its cluster's row block (the grid's clusters share the rows as the CTAs do
// without splits). Each CTA streams its split of the rows (a bulk copy a row of the slot, FD codes from split p's
// first), stages its split's scale columns and loads its split of x; its epilogue warp adds the chunks' sums into the
// CTA's table of its rows (`csum`, after the sums' buffers) instead of storing y. At the end each epilogue warp signals
// every CTA of the cluster (`cdone`, a remote mbarrier arrive), then takes a 1 / s share of the row block's outputs,
// adds the s tables' entries in split order through distributed shared memory (the same bits every run), applies the
// epilogue (NORM: the splits' sums of squares of x added so) and stores y; no CTA leaves while another may read its
// table (`cfree`). (Session 59's first version went through a global workspace and a last-CTA count a chunk: a fence
// and an atomic round trip a chunk held the epilogue warp, 16x4096x14336 20.3 us against the bulk ring's 17.8.)
#ifndef RW_SPLITS
#define RW_SPLITS 1
#endif
#if RW_SPLITS < 1 || (RW_SPLITS > 1 && !RW_MMA)
#error "RW_SPLITS (K splits across CTAs) takes the tensor-core row step (RW_MMA)"
#endif
#define RW_WROW (ROWB * RW_SPLITS)  // bytes of a whole weight row in global memory
#define RW_WARPS (RW_MMA ? FD / 256 : KSL * RW_GROUPS)  // consumer warps
// RW_MMA_CH: units (row steps) whose row sums the tensor-core row step keeps in one of its two buffers, [x row][warp]
// [CH x 8 rows] floats (host: ring/plan.rs MMA_CHUNK), added up and stored by the epilogue warp once every consumer warp
// has arrived on the buffer's `sfull` barrier, while the warps go on into the other buffer (a buffer is written again
// only once the epilogue warp has arrived on its `sempty`).
#ifndef RW_MMA_CH
#define RW_MMA_CH 2
#endif
#define RW_MMA_RS (RW_WARPS * RW_MMA_CH * R)  // floats of one x row's sums
#define RW_NC (RW_WARPS * 32)
// RW_M: rows of x (and of y) a call multiplies, 1 to RW_MAX_M (ring/plan.rs `MAX_M`): each decoded weight goes into RW_M
// products (wo_stream.cuh's row_step_m), so M = 2 costs far less than two calls (session 50); x row r at x + r
// RW_XK (the gate_up rows with SILU_X), y row r at y + r n; the row sums (psum) are RW_M times the M = 1 build's.
#ifndef RW_M
#define RW_M 1
#endif
#define RW_MAX_M (RW_MMA ? 16 : 3)  // ring/plan.rs MAX_M (at 4 the 4-bit builds spill), MMA_MAX_M on the tensor cores
#if RW_M < 1 || RW_M > RW_MAX_M
#error "RW_M (rows of x) must be 1 to RW_MAX_M"
#endif
#define RW_XK (SILU_X ? 2 * FD : FD)  // values of one row of x
// RW_PRODUCER 1 (wo_ring): a producer warp refills the ring; 0 (attn_qkv, whose two CTAs per SM need the
// registers of a warp fewer): thread 0 fills the first slots, and the first warp of a row group refills a
// slot once the group has released it.
#ifndef RW_PRODUCER
#define RW_PRODUCER 1
#endif
// RW_EPI: the tensor-core row step's epilogue warp (after the producer warp), which adds up the consumer warps' row
// sums chunk by chunk and stores y, so that the consumers never wait for each other (session 52: a barrier of all
// consumer warps a chunk, then half of them adding, took a quarter of the warps' stall samples at 16x14336x4096).
#define RW_EPI (RW_MMA ? 1 : 0)
#define RW_THREADS (RW_NC + 32 * RW_PRODUCER + 32 * RW_EPI)
#if RW_MMA && (FMT < 4 || SILU_X || RW_KH != 1 || RW_GROUPS != 1 || (RW_SSTREAM && FMT <= 5) || !RW_PRODUCER)
#error "RW_MMA takes 4-bit weights (no SwiGLU on load), whole row steps in one row group, INT4's / NF4's scales staged"
#endif
// RW_MMA_XF16 1 (the tensor-core row step with BF16 x; host: ring/plan.rs `mma_xf16`): x's A fragments are converted to f16
// once, after the prologue's loads, each warp's rows times the power of two 2^(141 - E) that puts their largest |x| in
// the warp's K slice (E: that value's exponent field) into [2^14, 2^15); the products are then the FP16-x build's, and
// the epilogue warp takes each warp's factor back from its row sums as it adds them (`xdn`; `xf16_up`,
// `bf2_to_h2_times`: a bf16 product and a bit move, four instructions a pair). Exact for every x value from 2^-28 of
// the largest |x| of its row in its warp's 256 values (BF16's 8 significant bits in f16's 11, normal); smaller ones
// are rounded to 2^-35 of it. Rows with |x| from 2^36 on give NaN (`xf16_down`).
// 0: BF16 x multiplies as bf16 (INT4 only: its codes decoded to exact bf16 pairs, int4_pairs_z_bf16).
#ifndef RW_MMA_XF16
#define RW_MMA_XF16 0
#endif
// EXP_XF16 (probes, wrong results): 1 the conversion left out, 2 the rows' largest |x| left out (every row's factor as
// for a zero row).
#ifndef EXP_XF16
#define EXP_XF16 0
#endif
#if RW_MMA_XF16 && !(RW_MMA && XBF16)
#error "RW_MMA_XF16 converts BF16 x on the tensor-core row step (RW_MMA, XBF16)"
#endif
#define RW_MMA_BF16 (RW_MMA && XBF16 && !RW_MMA_XF16)  // bf16 products
#if RW_MMA_BF16 && FMT >= 5
#error "RW_MMA takes NF4, MXFP4 and NVFP4 weights with FP16 x, or BF16 x converted to f16 (RW_MMA_XF16)"
#endif
#if RW_MMA && FMT == 5 && !(NF4_PAIRS && NF4_WIDE)
#error "RW_MMA decodes NF4 through the wide pair table (NF4_PAIRS, NF4_WIDE)"
#endif
// MXFP4 on the tensor cores: block scale 2^(e - 127) goes into the decoded pairs as the f16 2^(e - 127 + RW_MX_SHIFT),
// its exponent field min(max(e - RW_MX_BIAS, 0), 30) (0: the f16 zero, for the blocks of zero codes whatever their
// scale; one DPX instruction). The products E2M1 x 2^-14 x 2^(e - 127 + 8) are exact in f16 for scales 2^-17 to 2^7
// (ring/plan.rs `mxfp4_mma_window`; the host refuses weights with a block of nonzero codes outside it).
#define RW_MX_SHIFT 8
#define RW_MX_BIAS (127 - 15 - RW_MX_SHIFT)
// The tensor-core row step's factor on its sums: the E2M1 decode (e2m1_dev_pairs) gives the values times 2^-14,
// MXFP4's scales are 2^RW_MX_SHIFT times theirs.
#define RW_MMA_UP (FMT == 7 ? E2M1_UP : FMT == 6 ? E2M1_UP / (1 << RW_MX_SHIFT) : 1.0f)
#define RW_MMA_E2M1 (FMT == 6 || FMT == 7)  // E2M1 codes (MXFP4, NVFP4): their scales in the pairs
// Codes decoded to neighbour pairs (NF4, MXFP4, NVFP4: (0, 1), (2, 3) of a word), not INT4's (0, 4), (2, 6).
#define RW_MMA_NEIGHBOURS (FMT >= 5)
#if RW_MMA && RW_MMA_E2M1
// The tensor-core row step's block scale at shared address `a` as an f16 pair, the same in both halves: MXFP4's E8M0
// byte as 2^(e - 127 + RW_MX_SHIFT) (its exponent field clamped by one DPX instruction, RW_MX_BIAS, times 0x04000400);
// NVFP4's E4M3 byte pair converted and the lane's byte splatted (`sel`: 0x1010 the low one, 0x3232 the high).
__device__ __forceinline__ u32 mma_scale_h2(u32 a, u32 sel) {
    u32 b;
#if FMT == 6
    asm("ld.shared.u8 %0, [%1];" : "=r"(b) : "r"(a));
    return (u32)__viaddmin_s32_relu((int)b, -RW_MX_BIAS, 30) * 0x04000400u;
#else
    asm("ld.shared.u16 %0, [%1];" : "=r"(b) : "r"(a));
    return prmt(e4m3x2_to_h2(b), 0u, sel);
#endif
}
#endif
#if RW_MMA_XF16
// A row's power of two 2^(141 - E), E the exponent field of its largest |x| `mx` (a float of a BF16 value), puts that
// value into [2^14, 2^15). It is applied as up x 2^112: `up` = 2^(29 - E) a bf16 pair (returned; a subnormal from E =
// 156, |x| from 2^29, down to 2^-133 at E = 162), the 2^112 by bf2_to_h2_times' bit move.
__device__ __forceinline__ u32 xf16_up(float mx) {
    const int f = 156 - (int)(__float_as_uint(mx) >> 23);  // up's exponent field
    return (f >= 1 ? (u32)f << 7 : 0x40u >> min(-f, 7)) * 0x00010001u;
}

// 2^(E - 141): xf16_up's power of two taken back from the row's sums (the epilogue warp); NaN past its range (|x| from
// 2^36 on, where `up` would be below BF16's smallest subnormal): such a row of y is NaN, not wrong.
__device__ __forceinline__ float xf16_down(float mx) {
    const int e = (int)(__float_as_uint(mx) >> 23);
    return e > 162 ? __uint_as_float(0x7fc00000u) : ldexpf(1.0f, e - 141);
}

// A bf16x2 pair of x as the f16x2 pair of its values times `up2` times 2^112 (xf16_up): the product in bf16 (exact: a
// power of two's, the values from 2^-98 of a row's largest down to BF16's subnormals), whose bits are then the f16's
// three places up (its exponent field, at most 29, is f16's: BF16 2^-112 times an f16 value; subnormals too, both
// formats' being linear in their bits). Four instructions a pair, as fast as widening to FP32 and rounding to f16 (cvt,
// F2FP; session 55 r1, r2), but the bits wait for the factor: widened first, the compiler widened all 64 registers'
// pairs at once while the factor was read, and spilled (MXFP4 9x28672x4096).
__device__ __forceinline__ void bf2_to_h2_times(u32& v, u32 up2) {
    asm("fma.rn.bf16x2 %0, %0, %1, %2;" : "+r"(v) : "r"(up2), "r"(0x80008000u));
    v = ((v & 0x7fff7fffu) << 3) | (v & 0x80008000u);
}
#endif
// The tensor-core row step's MMA: f16 products, or bf16 with BF16 x unconverted (the codes decoded to bf16 pairs, x as
// it is).
#if RW_MMA_BF16
#define RW_MMA_OP "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
#else
#define RW_MMA_OP "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
#endif
#define RW_STAGE (8 * ROWB)  // bytes of one row step (8 rows)
#define RW_KSP (RW_MMA ? RW_WARPS : KSL / RW_KH)  // K-slice warps a K part serves
#define RW_PART_ROW (ROWB / RW_KH)  // bytes of one row in one K part
#define RW_UNIT (RW_STAGE / RW_KH)    // bytes of a ring slot: one K part of a row step
// RW_MMA_PAD: bytes after each row of a slot on the tensor cores (host: ring/plan.rs `mma_pad`, 32), copied row by row.
// Without them the 8 rows of a slot start on the same bank (ROWB a multiple of 128 bytes), so a warp's 8-byte code
// loads (rows g = 0..7, 32 bytes each) fall 8 to a bank, 8 wavefronts where 32 bytes of padding leave 2 (session 54:
// NF4, whose pair-table lookups share the shared-memory pipe, 16x14336x4096 18.5 -> 16.2 us; INT4 14.55 -> 14.0).
#ifndef RW_MMA_PAD
#define RW_MMA_PAD 0
#endif
#if RW_MMA_PAD % 16 != 0 || (RW_MMA_PAD > 0 && !RW_MMA)
#error "RW_MMA_PAD: a multiple of 16 bytes, on the tensor cores only"
#endif
#define RW_ROWP (RW_PART_ROW + RW_MMA_PAD)  // a slot's row stride
#define RW_SLOT (R * RW_ROWP)              // bytes of a slot (RW_UNIT unless padded)
#if RW_KH > 1 && !RW_PRODUCER
#error "K parts (RW_KH > 1) need the producer warp"
#endif
#if RW_MIXED && !RW_PRODUCER
#error "without the producer warp the ring's slots must be a multiple of the row groups (each group refills its own)"
#endif
#if RW_SSTREAM && RS_COLS == 0
#error "RW_SSTREAM streams block scales; FP8 / INT8 have none"
#endif
#if RW_SSTREAM && !RW_PRODUCER
#error "streamed scales (RW_SSTREAM) need the producer warp"
#endif
#define RW_EARLY_ON (RW_EARLY && RW_PRODUCER && !RW_MMA && RW_SPLITS == 1)
#if EXP_RING_TRACE && (RW_MMA || RW_M != 1 || !RW_PRODUCER || RW_SPLITS > 1)
#error "EXP_RING_TRACE traces the CUDA-core row steps at one row of x, filled by the producer warp"
#endif

// The lane's chunk of x = silu(gate) * up (LV values from cbase x LV) from the gate_up row [2 FD] at
// `x`, as floats; returns their sum of squares (load_chunk's contract).
__device__ __forceinline__ float load_chunk_silu(const u16* x, int cbase, float xr[LV]) {
    const uint4* gp = (const uint4*)(x + (size_t)cbase * LV);
    const uint4* up = (const uint4*)(x + FD + (size_t)cbase * LV);
#pragma unroll
    for (int s = 0; s < LV / 8; ++s) {
        const uint4 gv = gp[s], uv = up[s];  // plain loads: the gate_up row is an earlier kernel's output
        const u32 gw[4] = {gv.x, gv.y, gv.z, gv.w}, uw[4] = {uv.x, uv.y, uv.z, uv.w};
#pragma unroll
        for (int h = 0; h < 4; ++h) silu_mul2(gw[h], uw[h], xr[8 * s + 2 * h], xr[8 * s + 2 * h + 1]);
    }
    return chunk_sum_sq(xr);
}

// The `full` barrier of unit u (shared address; `full_s` the first) and the parity of its phase (see "The
// parity waits" above).
__device__ __forceinline__ u32 rw_full(u32 full_s, int u) {
    return full_s + 8 * ((u % RW_STEPS) * RW_FB + (RW_MIXED ? u % RW_CLASSES : 0));
}
__device__ __forceinline__ u32 rw_parity(int u) { return (u32)((u / RW_PERIOD) & 1); }

// Consumer-only barrier (named barrier 1): the producer warp has left.
__device__ __forceinline__ void consumers_sync_rw() { asm volatile("bar.sync 1, %0;" ::"n"(RW_NC) : "memory"); }

// The GEMV of one CTA for RW_M rows of x: its `ns` row steps, step j (< ns) being row step step_of(j) of W (rows 8
// step_of(j) .. + 7) and of each row of y (n apart), through the ring at `smem` (dynamic shared memory: RW_STEPS
// slots, the scale tables, the row sums). Every thread of the CTA calls it; the producer warp (RW_PRODUCER) returns
// once it has issued its copies, the consumers once they have written y. Used by wo_ring (contiguous steps) and
// attn_qkv.cu (the q, k and v rows of one KV head, RW_M = 1).
#if RW_SPLITS > 1
// A remote mbarrier arrive (release, cluster scope) on the barrier at shared address `a` in CTA `rank` of the cluster.
__device__ __forceinline__ void mbar_arrive_rank(u32 a, u32 rank) {
    u32 ra;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(ra) : "r"(a), "r"(rank));
    asm volatile("mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%0];" ::"r"(ra) : "memory");
}

// Waits for phase parity `par` of the CTA's own barrier at `a`, acquiring what the cluster's arrivals released.
__device__ __forceinline__ void mbar_wait_cluster(u32 a, u32 par) {
    u32 done = 0u;
    while (!done) {
        asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
                     : "=r"(done)
                     : "r"(a), "r"(par)
                     : "memory");
    }
}

// The float4 at shared::cta address `a` in CTA `rank` of the cluster (its loads issued in program order, each not
// waited for until its value is used).
__device__ __forceinline__ float4 ld_dsmem4(u32 a, u32 rank) {
    u32 ra;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(ra) : "r"(a), "r"(rank));
    float4 v;
    asm volatile("ld.shared::cluster.v4.f32 {%0, %1, %2, %3}, [%4];" : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "r"(ra)
                 : "memory");
    return v;
}

// The K splits' end (the epilogue warp of each CTA of the cluster, RW_SPLITS): every split's table of the row block's
// sums (`csum`, [x row][RW_ROWS], `rows` of them) in; this CTA's 1 / RW_SPLITS share of the outputs added over the
// tables in split order through distributed shared memory (NORM: the splits' sums of squares `css` so, the rows'
// factors into `ninv`), scaled, stored to y (y + with ADD); then no CTA leaves while another may still read its table.
template <typename StepOf>
__device__ __forceinline__ void split_sums_store(const float* csum, const float* css, float* ninv, u16* y, int n,
                                                 int rows, int kp, StepOf step_of, float eps, float gscale, u32 cdone,
                                                 u32 cfree) {
    const int lane = threadIdx.x & 31;
    asm volatile("fence.acq_rel.cluster;" ::: "memory");  // this warp's table entries before the signals
    __syncwarp();
    asm volatile("barrier.cluster.wait.aligned;" ::: "memory");  // every CTA's barriers initialized
    if (lane < RW_SPLITS) mbar_arrive_rank(cdone, (u32)lane);
    mbar_wait_cluster(cdone, 0u);
#if NORM
    if (lane < RW_M) {
        float tot = 0.0f;
        for (int q = 0; q < RW_SPLITS; ++q) tot += ld_dsmem(css + lane, (u32)q);
        ninv[lane] = rsqrtf(tot / (float)(FD * RW_SPLITS) + eps);
    }
    __syncwarp();
#endif
    // In 4-row groups (a float4 of a table; `rows` is a multiple of 8), every split's loads of a group issued before the
    // first is added (loads one after another, each waiting for the one before, cost 16x4096x14336 ~16 us; session 59
    // r2).
    const int groups = rows / 4, total = RW_M * groups, share = (total + RW_SPLITS - 1) / RW_SPLITS;
    const int i1 = min(total, (kp + 1) * share);
    const u32 cs = smem_addr(csum);
    for (int i = kp * share + lane; i < i1; i += 32) {
        const int r = i / groups, g4 = i - r * groups;
        float4 t[RW_SPLITS];
#pragma unroll
        for (int q = 0; q < RW_SPLITS; ++q) t[q] = ld_dsmem4(cs + (u32)(r * RW_ROWS + 4 * g4) * 4u, (u32)q);
        float4 v = t[0];
#pragma unroll
        for (int q = 1; q < RW_SPLITS; ++q) v.x += t[q].x, v.y += t[q].y, v.z += t[q].z, v.w += t[q].w;
#if NORM
        const float f = ninv[r] * (gscale * RW_MMA_UP);
#else
        const float f = gscale * RW_MMA_UP;
#endif
        const float vv[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const int row = 4 * g4 + e;
            const size_t at = (size_t)r * n + (size_t)step_of(row / R) * R + row % R;
            y[at] = f2out((ADD ? io2f(y[at]) : 0.0f) + vv[e] * f);
        }
    }
    __syncwarp();
    if (lane < RW_SPLITS) mbar_arrive_rank(cfree, (u32)lane);
    mbar_wait_cluster(cfree, 0u);
}
#endif

template <typename StepOf>
__device__ __forceinline__ void ring_gemv(u8* smem, const uint4* __restrict__ w, const u8* __restrict__ w_s,
                                          const u8* __restrict__ w_z, const u16* x, u16* y, int n, int ns,
                                          StepOf step_of, float eps, float gscale) {
    __shared__ __align__(8) unsigned long long full[RW_STEPS * RW_FB], empty[RW_STEPS];
    __shared__ float red[RW_M][RW_WARPS];
#if RW_MMA
    // The row sums' buffers (two, of RW_MMA_CH units each): sfull[b] completes once every consumer warp has written
    // its sums of the chunk in buffer b, sempty[b] once the epilogue warp has read them.
    __shared__ __align__(8) unsigned long long sfull[2], sempty[2];
#if NORM
    __shared__ float nss[16][RW_WARPS], ninv[16];  // each warp's sums of squares of x rows; the rows' factors
#endif
#if RW_MMA_XF16
    __shared__ float xdn[16][RW_WARPS];  // each warp's factors taking x's powers of two back (RW_MMA_XF16)
#endif
#if RW_SPLITS > 1
    // K splits: every CTA of the cluster has added its table (cdone), and has read the others' (cfree); this split's sums
    // of squares of x rows (NORM).
    __shared__ __align__(8) unsigned long long cdone, cfree;
    __shared__ float css[16];
#endif
#endif
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int rows = ns * R;
    const int kp = RW_SPLITS > 1 ? (int)(blockIdx.x % RW_SPLITS) : 0;  // the CTA's K split (RW_SPLITS): its cluster rank
    // After the ring: the staged tables (scales, zero points) of the CTA's rows, or with RW_SSTREAM each slot's
    // scales (RW_SCOLS entries of RS_SB bytes, then as many of RS_ZB bytes of zero points); then the row sums.
    u8* ms = smem + RW_STEPS * RW_SLOT;
#if RW_SSTREAM
    float* psum = (float*)(ms + RW_STEPS * RW_SCB);
#else
    u8* mz = ms + RS_COLS * RW_ROWS * (RS_SB / R);
    // (16-byte aligned for the tensor-core row step's epilogue warp, which reads it in 16-byte loads: ring/plan.rs
    // `mma_layout` gives the 16 bytes more.)
    const size_t sums_at = (size_t)(mz + RS_COLS * RW_ROWS * RS_ZB / R - smem);
    float* psum = (float*)(smem + (RW_MMA ? (sums_at + 15) / 16 * 16 : sums_at));
#endif
#if RW_SPLITS > 1
    float* csum = psum + 2 * RW_M * RW_MMA_RS;  // K splits: the CTA's sums of all its rows (ring/plan.rs `mma_layout`)
#endif
    const u32 full_s = smem_addr(full), empty_s = smem_addr(empty);
#if EXP_RING_TRACE
    const int rt_words = (n / 2) / (int)gridDim.x, rt_units = (rt_words - 10) / 3;
    __shared__ u32 rt_none[10];  // where a CTA's words of y cannot hold the timeline's first 10, they go here
    u32* const rt = rt_words >= 10 ? (u32*)y + (size_t)blockIdx.x * rt_words : rt_none;  // the CTA's timeline
    if (threadIdx.x == 0) rt[0] = rt_gtime(), rt[8] = rt_clock(), rt[9] = rt_smid();
#endif

    // RW_EARLY: the producer warp initializes the barriers and starts its copies at once; the others stage the scales
    // and meet it at named barrier 3 (it arrives, they wait; 1 is the consumers', 2 the cluster attention's), where
    // without it every thread meets at __syncthreads.
    if (threadIdx.x == (RW_EARLY_ON ? RW_WARPS * 32 : 0)) {
        for (int i = 0; i < RW_STEPS * RW_FB; ++i) mbar_init(full_s + 8 * i, 1);  // the producer's expect_tx
        for (int i = 0; i < RW_STEPS; ++i) {
            mbar_init(empty_s + 8 * i, RW_KSP);  // the warps of the slot's row group and K part
        }
#if RW_MMA
        for (int b = 0; b < 2; ++b) mbar_init(smem_addr(&sfull[b]), RW_WARPS), mbar_init(smem_addr(&sempty[b]), 1);
#endif
#if RW_SPLITS > 1
        mbar_init(smem_addr(&cdone), RW_SPLITS), mbar_init(smem_addr(&cfree), RW_SPLITS);
#endif
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
        asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
#if EXP_RING_TRACE
        rt[4] = rt_clock();
#endif
    }
#if !RW_SSTREAM && RS_COLS > 0
    // The scales first (no kernel writes them), ahead of the weights in the DRAM queue.
    for (int t = threadIdx.x; warp < RW_WARPS && t < RS_COLS * ns; t += RW_NC) {
        const int c = t / ns, j = t % ns;  // scale column c, row step j: RS_SB bytes of scales, RS_ZB of zeros
        const size_t gc = (size_t)kp * RS_COLS + c;  // the column in the whole tables (its K split's, RW_SPLITS)
        cp_async<RS_SB>(smem_addr(ms + ((size_t)c * rows + j * R) * (RS_SB / R)),
                        w_s + (gc * n + (size_t)step_of(j) * R) * (RS_SB / R), true);
#if RS_ZB > 0
        cp_async<RS_ZB>(smem_addr(mz + (size_t)c * (rows / 2) + j * R / 2), w_z + gc * (n / 2) + step_of(j) * R / 2,
                        true);
#endif
    }
    asm volatile("cp.async.commit_group;" ::: "memory");
#endif
#if EXP_RING_TRACE
    if (threadIdx.x == 0) rt[5] = rt_clock();
#endif
#if !RW_PRODUCER
    // No producer warp: thread 0 (which initialized the barriers) fills the first slots, behind its scales.
    if (threadIdx.x == 0) {
        for (int s = 0; s < ns && s < RW_STEPS; ++s) {
            mbar_expect_tx(full_s + 8 * s, RW_STAGE);
            bulk_copy(smem_addr(smem + s * RW_STAGE), (const u8*)w + (size_t)step_of(s) * RW_STAGE, RW_STAGE,
                      full_s + 8 * s);
        }
    }
#endif
    const u8* nf4t = nf4_pair_table(smem + RW_NF4_OFF);  // NF4's pair table, filled before x is ready
#if RW_EARLY_ON
    if (warp == RW_WARPS) {
        __syncwarp();  // (lane 0 initialized the barriers)
        asm volatile("bar.arrive 3, %0;" ::"n"(RW_THREADS) : "memory");
    } else {
        asm volatile("bar.sync 3, %0;" ::"n"(RW_THREADS) : "memory");
    }
#else
    __syncthreads();
#endif
#if EXP_RING_TRACE
    if (threadIdx.x == RW_WARPS * 32) rt[6] = rt_clock();
#endif
#if RW_SPLITS > 1
    // Every thread of the cluster once: the barriers initialized (the epilogue warp waits on it before it signals the
    // other CTAs).
    asm volatile("barrier.cluster.arrive.release.aligned;" ::: "memory");
#endif
    if (RW_PRODUCER && warp == RW_WARPS) {
        // ---- Producer: every row step of the CTA (K part by K part), in order, as ring slots free up ----
        // Unit u: K part u % RW_KH of row step u / RW_KH. Lane 0 waits for the slot, arms its barrier with the
        // unit's bytes (and its scales', RW_SSTREAM), copies the scales and, in whole steps, the step; in K
        // parts lane r < 8 then copies its row's part. (EXP_FFN_NOLOAD, wo_stream.cuh: no copies at all.)
        for (int u = 0; u < (EXP_FFN_NOLOAD ? 0 : ns * RW_KH); ++u) {
            const int slot = u % RW_STEPS;
            const size_t step = (size_t)step_of(u / RW_KH);
            const u32 fb = rw_full(full_s, u);
            if (lane == 0) {
                if (u >= RW_STEPS) mbar_wait(empty_s + 8 * slot, (u32)((u / RW_STEPS - 1) & 1));
                // RW_AHEAD: unit u - RW_AHEAD landed. Its barrier's next phase is a unit past u (RW_AHEAD < RW_STEPS
                // <= the period), not armed yet, so this parity wait reads the right phase.
                if (RW_AHEAD > 0 && RW_AHEAD < RW_STEPS && u >= RW_AHEAD) mbar_wait(rw_full(full_s, u - RW_AHEAD), rw_parity(u - RW_AHEAD));
                mbar_expect_tx(fb, RW_UNIT + RW_SSTREAM * RW_SCB);
#if RW_SSTREAM
                // The unit's scale columns of the step: one run of the step-major tables, then INT4's zero points.
                const size_t e0 = (step * RW_SPLITS + kp) * RS_COLS + (size_t)(u % RW_KH) * RW_SCOLS;
                bulk_copy(smem_addr(ms + slot * RW_SCB), w_s + e0 * RS_SB, RW_SCOLS * RS_SB, fb);
#if RS_ZB > 0
                bulk_copy(smem_addr(ms + slot * RW_SCB + RW_SCOLS * RS_SB), w_z + e0 * RS_ZB, RW_SCOLS * RS_ZB, fb);
#endif
#endif
                if (RW_KH == 1 && RW_MMA_PAD == 0 && RW_SPLITS == 1) {
                    bulk_copy(smem_addr(smem + slot * RW_STAGE), (const u8*)w + step * RW_STAGE, RW_STAGE, fb);
                }
#if EXP_RING_TRACE
                if (u < rt_units) rt[10 + 3 * u] = rt_clock();
#endif
            }
            if (RW_KH > 1 || RW_MMA_PAD > 0 || RW_SPLITS > 1) {
                __syncwarp();
                if (lane < R) {
                    const u8* src = (const u8*)w + (step * R + lane) * RW_WROW + (size_t)kp * ROWB +
                                    (u % RW_KH) * RW_PART_ROW;
                    bulk_copy(smem_addr(smem + slot * RW_SLOT + lane * RW_ROWP), src, RW_PART_ROW, fb);
                }
            }
        }
        return;
    }
#if RW_MMA
    if (warp == RW_WARPS + RW_PRODUCER) {
        // ---- Epilogue warp: chunk c's row sums (buffer c & 1), every consumer warp's added in warp order (the same
        // bits every run), the buffer released, then y's rows stored ----
        pdl_wait();  // y (when adding) is the previous kernels' output
        constexpr int CR = RW_MMA_CH * R;               // rows of a whole chunk
        constexpr int NQ = (RW_M * CR / 4 + 31) / 32;   // a lane's quads of sums of a chunk (below)
        const int nch = (ns + RW_MMA_CH - 1) / RW_MMA_CH;
        for (int c = 0; c < nch; ++c) {
            const int b = c & 1, crows = min(RW_MMA_CH, ns - c * RW_MMA_CH) * R;
            mbar_wait(smem_addr(&sfull[b]), (u32)((c >> 1) & 1));
#if NORM
            if (c == 0) {  // the consumers' sums of squares landed before their first arrival
                if (lane < RW_M) {
                    float tot = 0.0f;
                    for (int w = 0; w < RW_WARPS; ++w) tot += nss[lane][w];
#if RW_SPLITS > 1
                    css[lane] = tot;  // the split's share, added across the cluster at the end
#else
                    ninv[lane] = rsqrtf(tot / (float)FD + eps);
#endif
                }
                __syncwarp();
            }
#endif
            // Lane quad i = lane + 32 q: x row i / 4, the chunk's rows 4 (i % 4) .. + 3, one 16-byte load a warp's sums.
            const float* pbuf = psum + b * (RW_M * RW_MMA_RS);
            float4 v[NQ];
#pragma unroll
            for (int q = 0; q < NQ; ++q) {
                const int i = lane + 32 * q, r = i / (CR / 4), rr = i % (CR / 4) * 4;
                v[q] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
                if (i < RW_M * (CR / 4) && rr < crows) {
                    const float4* pr = (const float4*)(pbuf + (size_t)r * RW_MMA_RS + rr);
#pragma unroll
                    for (int w = 0; w < RW_WARPS; ++w) {
                        const float4 s4 = pr[w * (CR / 4)];
#if RW_MMA_XF16
                        // Each warp's sums times its factor for row r (written before its first arrival on sfull).
                        const float d = xdn[r][w];
                        v[q].x = fmaf(s4.x, d, v[q].x), v[q].y = fmaf(s4.y, d, v[q].y);
                        v[q].z = fmaf(s4.z, d, v[q].z), v[q].w = fmaf(s4.w, d, v[q].w);
#else
                        v[q].x += s4.x, v[q].y += s4.y, v[q].z += s4.z, v[q].w += s4.w;
#endif
                    }
                }
            }
            __syncwarp();
            if (lane == 0) mbar_arrive(smem_addr(&sempty[b]), 1);
#if RW_SPLITS > 1
            // K splits: the chunk's sums into the CTA's table of its rows ([x row][RW_ROWS]).
#pragma unroll
            for (int q = 0; q < NQ; ++q) {
                const int i = lane + 32 * q, r = i / (CR / 4), rr = i % (CR / 4) * 4;
                if (i < RW_M * (CR / 4) && rr < crows) *(float4*)(csum + r * RW_ROWS + c * CR + rr) = v[q];
            }
            continue;
#endif
#pragma unroll
            for (int q = 0; q < NQ; ++q) {
                const int i = lane + 32 * q, r = i / (CR / 4), rr = i % (CR / 4) * 4;
                if (i < RW_M * (CR / 4) && rr < crows) {
                    const float vv[4] = {v[q].x, v[q].y, v[q].z, v[q].w};
#pragma unroll
                    for (int e = 0; e < 4; ++e) {
                        const int row = c * CR + rr + e;
                        const size_t at = (size_t)r * n + (size_t)step_of(row / R) * R + row % R;
#if NORM
                        const float f = vv[e] * ninv[r];
#else
                        const float f = vv[e];
#endif
                        y[at] = f2out((ADD ? io2f(y[at]) : 0.0f) + f * (gscale * RW_MMA_UP));
                    }
                }
            }
        }
#if RW_SPLITS > 1
#if NORM
        split_sums_store(csum, css, ninv, y, n, rows, kp, step_of, eps, gscale, smem_addr(&cdone), smem_addr(&cfree));
#else
        split_sums_store(csum, css, nullptr, y, n, rows, kp, step_of, eps, gscale, smem_addr(&cdone),
                         smem_addr(&cfree));
#endif
#endif
        return;
    }
#endif

    pdl_wait();  // x (and y, when adding) are the previous kernels' outputs
#if RW_MMA
    {
        const int ks = warp, g = lane >> 2, t = lane & 3;
        // The MMA's K order (the same for x and W, so the products are the row's): lane t's word w = 2m + e of a
        // unit is the row's 32-bit word 8m + 2t + e of the warp's 256 values (codes 64m + 16t + 8e + i, i = 0..7, as
        // the ring's row-major layout holds them), whose f16x2 pairs of codes (0, 4), (2, 6) are b0, b1 of block 2w
        // and (1, 5), (3, 7) b0, b1 of block 2w + 1 (dot8hz's decode). Each block so lies in one 128-value group
        // (w < 4: the first). x's A fragments follow: rows g and g + 8 at k 64m + 16t + 8e + (0, 4 | 2, 6) for block
        // 2w and (1, 5 | 3, 7) for 2w + 1, one 16-byte load and four byte permutes a row and word.
        // Rows past M: row g's values again where g + 8 is past it (no zero registers: their sums go unused, and so
        // the build needs no more registers than at 16), zeros where g is.
        u32 xa[16][4];
        // Rows g + 8 are past M in every lane from 8 rows down; the compiler, knowing so, kept one copy of row g's
        // fragments and moved them into each MMA's register quad, and spilled (96 registers, 4-92 bytes; session 51's
        // MMA_MIN_M). A bound it cannot fold (blockDim.x < 2^16 leaves it RW_M) keeps the copies as at 9-15 rows.
#if RW_M <= 8
        const int m8 = RW_M + (int)(blockDim.x >> 16);
#else
        const int m8 = RW_M;
#endif
#pragma unroll
        for (int w = 0; w < 8; ++w) {
            const int k0 = ks * 256 + 64 * (w >> 1) + 16 * t + 8 * (w & 1);
#if EXP_MMA_NOX  // probe: x's prologue loads left out (fragments made of the lane's indices; wrong results)
            const u32 fx = 0x3c003c00u ^ (u32)(k0 + g);
            const uint4 v0 = make_uint4(fx, fx ^ 1u, fx ^ 2u, fx ^ 3u), v1 = make_uint4(fx ^ 4u, fx ^ 5u, fx ^ 6u, fx ^ 7u);
#else
            // (x's rows are RW_SPLITS FD values long, the CTA's split kp FD values on.)
            const u16* xs = x + (size_t)kp * FD + k0;
            const uint4 v0 = g < RW_M ? *(const uint4*)(xs + (size_t)g * FD * RW_SPLITS) : make_uint4(0u, 0u, 0u, 0u);
            const uint4 v1 = g + 8 < m8 ? *(const uint4*)(xs + (size_t)(g + 8) * FD * RW_SPLITS) : v0;
#endif
#if RW_MMA_NEIGHBOURS
            // NF4 / MXFP4 / NVFP4: nf4t_pairs / e2m1_dev_pairs give the codes in order, (0, 1), (2, 3) for block 2w,
            // (4, 5), (6, 7) for 2w + 1.
            xa[2 * w][0] = v0.x, xa[2 * w][2] = v0.y, xa[2 * w + 1][0] = v0.z, xa[2 * w + 1][2] = v0.w;
            xa[2 * w][1] = v1.x, xa[2 * w][3] = v1.y, xa[2 * w + 1][1] = v1.z, xa[2 * w + 1][3] = v1.w;
#else
            xa[2 * w][0] = __byte_perm(v0.x, v0.z, 0x5410), xa[2 * w][2] = __byte_perm(v0.y, v0.w, 0x5410);
            xa[2 * w + 1][0] = __byte_perm(v0.x, v0.z, 0x7632), xa[2 * w + 1][2] = __byte_perm(v0.y, v0.w, 0x7632);
            xa[2 * w][1] = __byte_perm(v1.x, v1.z, 0x5410), xa[2 * w][3] = __byte_perm(v1.y, v1.w, 0x5410);
            xa[2 * w + 1][1] = __byte_perm(v1.x, v1.z, 0x7632), xa[2 * w + 1][3] = __byte_perm(v1.y, v1.w, 0x7632);
#endif
        }
#if NORM
        // RMSNorm: each warp's sums of squares of its K slice of x rows g and g + 8 (past M: unused), added up below;
        // the factor goes onto the row sums (W (x inv) = (W x) inv; the norm's weight is folded into W by the host),
        // by the epilogue warp.
        {
            float s0 = 0.0f, s1 = 0.0f;
#pragma unroll
            for (int b = 0; b < 16; ++b) {
#pragma unroll
                for (int i = 0; i < 4; ++i) {
                    float a, c;
                    x2f(xa[b][i], a, c);
                    if (i & 1) {
                        s1 = fmaf(a, a, fmaf(c, c, s1));
                    } else {
                        s0 = fmaf(a, a, fmaf(c, c, s0));
                    }
                }
            }
#pragma unroll
            for (int o = 1; o < 4; o <<= 1) {
                s0 += __shfl_xor_sync(FULL, s0, o);
                s1 += __shfl_xor_sync(FULL, s1, o);
            }
            if (t == 0) nss[g][ks] = s0, nss[g + 8][ks] = s1;
        }
#endif
        asm volatile("cp.async.wait_all;" ::: "memory");  // this thread's share of the scales landed
        consumers_sync_rw();
#if RW_MMA_XF16
        {
            // BF16 x to f16 (RW_MMA_XF16), after the barrier (x's loads land behind it, as FP16 x's do): the largest |x|
            // of rows g and g + 8 in the warp's K slice (bf16 magnitudes order as their bits; rows past M copy row g's
            // values or are zeros, so their factors need no case of their own), its power of two into the epilogue
            // warp's table, then each pair converted.
            u32 m0 = 0u, m1 = 0u;
            if (EXP_XF16 != 2) {
#pragma unroll
                for (int b = 0; b < 16; ++b) {
                    m0 = __vimax3_u16x2(m0, xa[b][0] & 0x7fff7fffu, xa[b][2] & 0x7fff7fffu);
                    m1 = __vimax3_u16x2(m1, xa[b][1] & 0x7fff7fffu, xa[b][3] & 0x7fff7fffu);
                }
                m0 = max(m0 & 0xffffu, m0 >> 16), m1 = max(m1 & 0xffffu, m1 >> 16);
#pragma unroll
                for (int o = 1; o < 4; o <<= 1) {
                    m0 = max(m0, __shfl_xor_sync(FULL, m0, o));
                    m1 = max(m1, __shfl_xor_sync(FULL, m1, o));
                }
            }
            const float x0 = as_float(m0 << 16), x1 = as_float(m1 << 16);
            if (t == 0 && g < RW_M) xdn[g][ks] = xf16_down(x0);
            if (t == 0 && g + 8 < RW_M) xdn[g + 8][ks] = xf16_down(x1);
            const u32 u0 = xf16_up(x0), u1 = xf16_up(x1);
#pragma unroll
            for (int b = 0; b < 16; ++b) {
#pragma unroll
                for (int i = 0; i < 4; ++i) if (EXP_XF16 != 1) bf2_to_h2_times(xa[b][i], i & 1 ? u1 : u0);
            }
        }
#endif
        // Shared-memory addresses (32-bit, advanced unit by unit): the lane's first word pair of a slot's row g (pair
        // m 32 bytes on); the warp's scale columns 2 ks and 2 ks + 1 (its two groups): rows 2t, 2t + 1's scales (4
        // bytes, 16 a unit on; the second column 2 rows bytes on) and row g's zero-point byte (4 a unit on; the second
        // column rows / 2 on); the lane's row sums in the chunk's buffer.
        const u32 code_s = smem_addr(smem) + g * RW_ROWP + ks * 128 + t * 8;
        // A scale column's bytes: staged, the CTA's rows of it (RS_SB a unit on); streamed (RW_SSTREAM, MXFP4 / NVFP4
        // where their M = 1 build streams them), the unit's 8 rows beside its slot (RW_SCB a slot on, below).
        const u32 cs = RW_SSTREAM ? RS_SB : rows * (RS_SB / R);
#if FMT == 6
        // MXFP4: row g's E8M0 byte of column 8 ks + 2m + t / 2 (column 2m 2m cs bytes on), the lane's 16-value block
        // 4m + t in its 32-value block 2m + t / 2.
        u32 sc_s = smem_addr(ms) + (8 * ks + (t >> 1)) * cs + g;
        u32 zc_s = 0u;
        const u32 ssel = 0u;  // (NVFP4's byte select; unread)
#elif FMT == 5
        // NF4: the f16 absmax scales of rows 2t, 2t + 1 of column 4 ks + m (one 32-bit word; column m m cs bytes on);
        // the lane's offset into the pair table's copies.
        u32 sc_s = smem_addr(ms) + (4 * ks) * cs + 2 * t * 2;
        u32 zc_s = 0u;
        const u32 lane4 = 4u * lane;
#elif FMT == 7
        // NVFP4: row g's E4M3 byte pair of column 8 ks + 2m + t / 2 (column 2m 2m cs bytes on), the lane's block 4m + t
        // the byte t & 1 of it (`ssel` splats it into both f16 halves).
        u32 sc_s = smem_addr(ms) + (8 * ks + (t >> 1)) * cs + g * 2;
        u32 zc_s = 0u;
        const u32 ssel = (t & 1) ? 0x3232u : 0x1010u;
#else
        u32 sc_s = smem_addr(ms) + (2 * ks) * cs + 2 * t * 2;
        u32 zc_s = smem_addr(mz) + (2 * ks) * (rows / 2) + g / 2;
        const u32 zsh = 4 * (g & 1);
#endif
        const u32 sums_s = smem_addr(psum) + (ks * (RW_MMA_CH * R) + 2 * t) * 4;
        // The chunk buffers' barriers (buffer b's 8 b bytes on), their addresses taken once: taken in the loop, ptxas
        // rebuilt each from the CTA's shared window every pass (S2UR, UMOV; 203 -> 183 instructions a unit).
        const u32 sfull_s = smem_addr(sfull), sempty_s = smem_addr(sempty);
        u32 ps_s = sums_s;
        int slot = 0, c0 = 0;  // the unit's slot; the first unit of the row sums' current chunk
        int buf = 0;           // the current chunk's buffer (0 or 1)
        int chunk = 0;         // the current chunk
        u32 par = 0u;
        // Two units a pass (session 53, h200-2026-11-30-session53 r3-r5: with the addresses above, 16x14336x4096 15.3
        // -> 14.6 us, 9x 14.7 -> 13.9, 16x28672x4096 26.2 -> 24.7; a loop of chunks with its units unrolled, fewer
        // instructions a unit (165 against 175), measured slower at 9-12 rows: 9x14336x4096 14.2, 12x10240x4096 11.5
        // against 11.2; unrolled by 4 the build spills).
        // A CTA of one row step (RW_ROWS 8) runs its one unit as straight code, no loop (session 56): as a loop a unit a
        // pass NVRTC 13.0 kept an address across it and spilled 4 bytes at 96 registers (NF4 16x1024x4096, FP16 x), and
        // with two units a pass the second is dead code (INT4 16x1024x4096 spilled so under NVRTC 12.9, session 55).
        // EXP_ONESTEP_LOOP (probe): the loop of a unit a pass, session 55's build.
#ifndef EXP_ONESTEP_LOOP
#define EXP_ONESTEP_LOOP 0
#endif
#define RW_ONESTEP (RW_ROWS <= 8 && !EXP_ONESTEP_LOOP)
#if RW_ONESTEP
#pragma unroll
#elif FMT == 5 || RW_ROWS <= 8
        // NF4 a unit a pass: two spilled 4-12 bytes at 96 registers (9x4224x4096 with the residual add, 16x1024x4096).
#pragma unroll 1
#else
#pragma unroll 2
#endif
        for (int j = 0; j < (RW_ONESTEP ? 1 : ns); ++j, sc_s += RW_SSTREAM ? 0 : RS_SB, zc_s += 4, ps_s += R * 4) {
            if (RW_ONESTEP && j >= ns) break;
#if RW_SSTREAM
            // The scales came with the slot: wait for it first, read them beside it.
            if (!EXP_FFN_NOLOAD) mbar_wait(full_s + 8 * slot, par);
            const u32 scu = sc_s + slot * RW_SCB;
#else
            const u32 scu = sc_s;
#endif
#if RW_MMA_E2M1
            // The lane's four block scales as f16 pairs (words 2m, 2m + 1 of row g: MXFP4's 32-value block 2m + t / 2,
            // NVFP4's 16-value block 4m + t).
            u32 s2[4];
#pragma unroll
            for (int m = 0; m < 4; ++m) s2[m] = mma_scale_h2(scu + m * 2 * cs, ssel);
#elif FMT == 5
            // The four 64-value blocks' scales of weight rows 2t, 2t + 1 (f16 pairs, widened where each block's sums
            // take them: as floats here, the 1-step build spilled).
            u32 sc2[4];
#pragma unroll
            for (int m = 0; m < 4; ++m) asm("ld.shared.u32 %0, [%1];" : "=r"(sc2[m]) : "r"(scu + m * cs));
#else
            float sc[2][2];
            u32 zlo[2], zhi[2];
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                u32 s2, zb;
                asm("ld.shared.u32 %0, [%1];" : "=r"(s2) : "r"(scu + h * cs));
                asm("ld.shared.u8 %0, [%1];" : "=r"(zb) : "r"(zc_s + h * (rows / 2)));
                sc[h][0] = h2f((u16)(s2 & 0xffffu));
                sc[h][1] = h2f((u16)(s2 >> 16));
                // int4_zero_pair's (1024 + z) pair as one multiply (the OR of its halves schedules this loop
                // otherwise; this is the measured build's SASS).
#if RW_MMA_BF16
                int4_zero_pairs_bf16((zb >> zsh) & 15u, zlo[h], zhi[h]);
#else
                zlo[h] = (0x6400u | ((zb >> zsh) & 15u)) * 0x10001u;
                zhi[h] = int4_zero_hi(zlo[h]);
#endif
            }
#endif
#if !RW_SSTREAM
            if (!EXP_FFN_NOLOAD) mbar_wait(full_s + 8 * slot, par);  // (the decode alone: no wait)
#endif
            // The slot back to the producer (session 51: warp 0 refilling it instead, with no producer warp and so
            // 128 registers a thread, was slower: 16x14336x4096 17.2 -> 19.5 us, 4x 15.1 -> 18.7).
            const auto release = [&]() {
                __syncwarp();
                if (lane == 0) mbar_arrive(empty_s + 8 * slot, 1);
            };
            // A chunk's first sums wait for its buffer's sums of two chunks before to have been read.
            const auto buffer_free = [&]() {
                if (j == c0 && chunk >= 2) mbar_wait(sempty_s + 8 * buf, (u32)(((chunk >> 1) - 1) & 1));
            };
            // The lane's sums of x row r at ps_s + 4 r RW_MMA_RS (the pair of weight rows 2t, 2t + 1).
            const auto store = [&](int r, float a, float b) {
                asm volatile("st.shared.v2.f32 [%0], {%1, %2};" ::"r"(ps_s + r * (RW_MMA_RS * 4)), "f"(a), "f"(b)
                             : "memory");
            };
            if (EXP_FFN_LOADONLY) {  // the stream alone (wo_stream.cuh): each unit released undecoded, the sums zero
                release();
                buffer_free();
                for (int r = g; r < RW_M; r += 8) store(r, 0.0f, 0.0f);
            } else {
                // Words w = 2m, 2m + 1 of the lane: the word pair m (q[h] holds words 4h .. 4h + 3).
                uint4 q[2];
                const u32 sp = code_s + slot * RW_SLOT;
#pragma unroll
                for (int m = 0; m < 4; ++m) {
                    u32& lo = m & 1 ? q[m >> 1].z : q[m >> 1].x;
                    u32& hi = m & 1 ? q[m >> 1].w : q[m >> 1].y;
                    asm volatile("ld.shared.v2.u32 {%0, %1}, [%2];" : "=r"(lo), "=r"(hi) : "r"(sp + 32 * m));
                }
#if FMT == 5
                // NF4: each 64-value block m (word pair m: words 2m, 2m + 1, of q[m / 2]) in a chain of its own, one
                // after another (two at once, 4 registers more, spilled at 96), its sums times its scales into the
                // lane's (o).
                const u8* nf4tab = nf4t;
                float o[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
                for (int m = 0; m < 4; ++m) {
                    const int h = m >> 1;
                    float d[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
                    for (int wd = 2 * (m & 1); wd < 2 * (m & 1) + 2; ++wd) {
                        u32 p[4];
#if EXP_MMA_NF4REG
                        nf4_pairs(word(q[h], wd), p);
#else
                        nf4t_pairs<true>(word(q[h], wd), nf4tab, lane4, p);
#endif
                        const u32* a0 = xa[8 * h + 2 * wd];
                        const u32* a1 = xa[8 * h + 2 * wd + 1];
                        asm(RW_MMA_OP "{%0, %1, %2, %3}, {%4, %5, %6, %7}, "
                            "{%8, %9}, {%0, %1, %2, %3};"
                            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                            : "r"(a0[0]), "r"(a0[1]), "r"(a0[2]), "r"(a0[3]), "r"(p[0]), "r"(p[1]));
                        asm(RW_MMA_OP "{%0, %1, %2, %3}, {%4, %5, %6, %7}, "
                            "{%8, %9}, {%0, %1, %2, %3};"
                            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                            : "r"(a1[0]), "r"(a1[1]), "r"(a1[2]), "r"(a1[3]), "r"(p[2]), "r"(p[3]));
                    }
                    float s0, s1;
                    h2x2f(sc2[m], s0, s1);
                    o[0] = fmaf(s0, d[0], o[0]), o[1] = fmaf(s1, d[1], o[1]);
                    o[2] = fmaf(s0, d[2], o[2]), o[3] = fmaf(s1, d[3], o[3]);
                }
                release();
                buffer_free();
                if (g < RW_M) store(g, o[0], o[1]);
                if (g + 8 < RW_M) store(g + 8, o[2], o[3]);
#else
                // The two groups' sums in chains of their own (d[h]), word by word of both.
                float d[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}};
#pragma unroll
                for (int wd = 0; wd < 4; ++wd) {
#pragma unroll
                    for (int h = 0; h < 2; ++h) {
                        // Blocks 8h + 2wd (codes 0, 4 | 2, 6: p[0], p[1]) and 8h + 2wd + 1 (codes 1, 5 | 3, 7), as q - z.
                        u32 p[4];
#if RW_MMA_E2M1
                        // NVFP4: the E2M1 values times 2^-14 (the epilogue's RW_MMA_UP takes it back), times the
                        // block's E4M3 scale, exact in f16: 5 significant bits at most, 2^-24 to 0.17. MXFP4: times
                        // 2^(e - 127 + RW_MX_SHIFT), exact in the host's window (2 significant bits, 2^-24 to 12).
                        e2m1_dev_pairs(word(q[h], wd), p);
#pragma unroll
                        for (int i = 0; i < 4; ++i) p[i] = hmul2(p[i], s2[2 * h + (wd >> 1)]);
#elif RW_MMA_BF16
                        int4_pairs_z_bf16(word(q[h], wd), zlo[h], zhi[h], p);
#else
                        int4_pairs_z(word(q[h], wd), zlo[h], zhi[h], p);
#endif
                        const u32* a0 = xa[8 * h + 2 * wd];
                        const u32* a1 = xa[8 * h + 2 * wd + 1];
                        asm(RW_MMA_OP "{%0, %1, %2, %3}, {%4, %5, %6, %7}, "
                            "{%8, %9}, {%0, %1, %2, %3};"
                            : "+f"(d[h][0]), "+f"(d[h][1]), "+f"(d[h][2]), "+f"(d[h][3])
                            : "r"(a0[0]), "r"(a0[1]), "r"(a0[2]), "r"(a0[3]), "r"(p[0]), "r"(p[1]));
                        asm(RW_MMA_OP "{%0, %1, %2, %3}, {%4, %5, %6, %7}, "
                            "{%8, %9}, {%0, %1, %2, %3};"
                            : "+f"(d[h][0]), "+f"(d[h][1]), "+f"(d[h][2]), "+f"(d[h][3])
                            : "r"(a1[0]), "r"(a1[1]), "r"(a1[2]), "r"(a1[3]), "r"(p[2]), "r"(p[3]));
                    }
                }
                release();
                // C fragment: d0 (x row g, weight row 2t), d1 (g, 2t + 1), d2 (g + 8, 2t), d3 (g + 8, 2t + 1); each
                // group times its scales, into the warp's own sums (added in order by the epilogue warp).
                buffer_free();
#if RW_MMA_E2M1
                // MXFP4 / NVFP4: the block scales are in the products; the two chains' sums added.
                if (g < RW_M) store(g, d[0][0] + d[1][0], d[0][1] + d[1][1]);
                if (g + 8 < RW_M) store(g + 8, d[0][2] + d[1][2], d[0][3] + d[1][3]);
#else
                if (g < RW_M) {
                    store(g, fmaf(sc[1][0], d[1][0], sc[0][0] * d[0][0]), fmaf(sc[1][1], d[1][1], sc[0][1] * d[0][1]));
                }
                if (g + 8 < RW_M) {
                    store(g + 8, fmaf(sc[1][0], d[1][2], sc[0][0] * d[0][2]), fmaf(sc[1][1], d[1][3], sc[0][1] * d[0][3]));
                }
#endif
#endif  // FMT == 5
            }
            if (++slot == RW_STEPS) slot = 0, par ^= 1u;
            if (j - c0 == RW_MMA_CH - 1 || j == ns - 1) {
                // The chunk's sums are in: to the epilogue warp.
                __syncwarp();
                if (lane == 0) mbar_arrive(sfull_s + 8 * buf, 1);
                c0 = j + 1;
                buf ^= 1;
                ++chunk;
                ps_s = sums_s + buf * (RW_M * RW_MMA_RS * 4) - R * 4;  // the loop's increment brings it to the chunk's start
            }
        }
    }
#else
    const int ks = warp % KSL, rg = warp / KSL;
    const int cbase = ks * 32 + lane;          // the lane's chunk of every row (LV values)
    const size_t col = (size_t)RS_COL(cbase);  // its scale column
    // The lane's chunk of each of the RW_M rows of x (rows RW_XK values apart).
    float xr[RW_M][LV];
#pragma unroll
    for (int r = 0; r < RW_M; ++r) {
        const u16* xrow = x + (size_t)r * RW_XK;
        const float ss = SILU_X ? load_chunk_silu(xrow, cbase, xr[r]) : load_chunk(xrow, cbase, xr[r]);
        // NORM: the sum of squares; else the largest |x| (x is scaled by a power of two near its inverse so the
        // f16x2 products and their sums stay far from f16's range whatever x's size; the scale is exact).
        float m = 0.0f;
#pragma unroll
        for (int e = 0; e < LV; ++e) m = fmaxf(m, fabsf(xr[r][e]));
        float v = NORM ? ss : m;
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) {
            v = NORM ? v + __shfl_xor_sync(FULL, v, o) : fmaxf(v, __shfl_xor_sync(FULL, v, o));
        }
        if (lane == 0) red[r][warp] = v;
    }
    // The residual this thread adds at the end, read now (its latency overlaps the products).
    float yold[RW_M][(RW_ROWS + RW_NC - 1) / RW_NC];
#pragma unroll
    for (int u = 0; u < (RW_ROWS + RW_NC - 1) / RW_NC; ++u) {
        const int i = threadIdx.x + u * RW_NC;
#pragma unroll
        for (int r = 0; r < RW_M; ++r) {
            yold[r][u] = ADD && i < rows ? io2f(y[(size_t)r * n + (size_t)step_of(i / R) * R + i % R]) : 0.0f;
        }
    }
#if !RW_SSTREAM && RS_COLS > 0
    asm volatile("cp.async.wait_all;" ::: "memory");  // this thread's share of the scales landed
#endif
#if EXP_RING_TRACE
    if (threadIdx.x == 0) rt[7] = rt_clock();
#endif
    consumers_sync_rw();
    float out_scale[RW_M];
    u32 xh[RW_M][4][4];
    float xsum[RW_M];  // RW_SUBN: the lane's sum of x, each row's (`pack_x_subn`)
#pragma unroll
    for (int r = 0; r < RW_M; ++r) {
        float inv;
        if (NORM) {
            float t = 0.0f;
#pragma unroll
            for (int s = 0; s < KSL; ++s) t += red[r][s];  // the first row group's K slices
            inv = rsqrtf(t / (float)FD + eps);
            out_scale[r] = gscale;
#if FMT == 2 || FMT == 3 || (FMT == 4 && RW_SUBN)
            // Normalized x is at most sqrt(FD) in magnitude; FP8's 448 (INT8's 127) times that would leave f16's
            // range in 8 products: x goes down by 2^-ceil(log2(FD) / 2) (into [-1, 1]), the sums back up. (FP16
            // weights are small: so scaled, their products would go subnormal; see below. RW_SUBN's x goes up by
            // 2^15 below, so it needs x within [-1, 1] too.)
            const float down = norm_down();
            inv *= down;
            out_scale[r] /= down;
#endif
        } else {
            float mx = 0.0f;
#pragma unroll
            for (int s = 0; s < KSL; ++s) mx = fmaxf(mx, red[r][s]);
            // 2^-e with 2^(e-1) <= mx < 2^e: x scaled into [-1, 1) (x = 0: no scaling).
            const int e = unit_exp(mx);
            inv = ldexpf(1.0f, -e);
            out_scale[r] = ldexpf(gscale, e);
        }
#if E2M1_SCALED
        {
            // The E2M1 decode's 2^-14 (wo_common.cuh E2M1_UP) cancelled on x: x in [-1, 1) goes up by 2^14; with
            // the norm only by `e2m1_norm_up`, and the rest of 2^14 goes onto the output.
            const float up = NORM ? e2m1_norm_up() : E2M1_UP;
            inv *= up;
            out_scale[r] *= E2M1_UP / up;
        }
#endif
#if FMT == 0
        // FP16: x down by the host's power of two `gscale` (ring/plan.rs `kernel_scale`: 2^t with 4 max|w| sqrt(FD) 2^-t
        // within half of f16's range, so the f16x2 sums of four products stay in range whatever x; 1 for weights
        // of the usual size, which keeps their products clear of f16's subnormals), the sums back up (out_scale
        // holds gscale).
        inv /= gscale;
#endif
#if FMT == 1
        // BF16 weights: x stays in FP32, its bits in xh ([e / 4][e % 4] = x[e] inv; wo_stream.cuh's row_step_m).
#pragma unroll
        for (int e = 0; e < LV; ++e) xh[r][e >> 2][e & 3] = __float_as_uint(xr[r][e] * inv);
#elif FMT == 4 && RW_SUBN
        // x in [-1, 1] up by 2^15 for the subnormal codes (their 2^-24 on the sums: 2^-9 back on the output).
        xsum[r] = pack_x_subn<LV>(xr[r], inv * 32768.0f, xh[r]);
        out_scale[r] *= 512.0f;
#else
        pack_x<LV>(xr[r], inv, xh[r]);  // (its sum of x unused: the zero points are folded into the decode)
#endif
    }

#if EXP_RING_TRACE
    if (threadIdx.x == 0) rt[1] = rt_clock();
#endif
    const int part = ks / RW_KSP;                           // the K part holding the lane's chunk
    const int pbase = (cbase - part * RW_KSP * 32) * LCB;   // the chunk's offset in a row of the part
    for (int j = rg; j < ns; j += RW_GROUPS) {
        const int u = j * RW_KH + part;  // the ring's unit
        const int slot = u % RW_STEPS;
        float sum[RW_M];
#if EXP_RING_SKIPLAST
        // Profiling experiment (wrong results): the CTA's last EXP_RING_SKIPLAST units are waited for and
        // released undecoded; what the decode after the stream's last bytes costs.
        if (u >= ns * RW_KH - EXP_RING_SKIPLAST) {
            mbar_wait(rw_full(full_s, u), rw_parity(u));
            __syncwarp();
            if (lane == 0) mbar_arrive(empty_s + 8 * slot, 1);
#pragma unroll
            for (int r = 0; r < RW_M; ++r) {
                if ((lane & 3) == 0) psum[(r * KSL + ks) * rows + j * R + ((lane >> 2) & 7)] = 0.0f;
            }
            continue;
        }
#endif
#if EXP_RING_TRACE
        const bool rt_first = ks % RW_KSP == 0 && lane == 0 && u < rt_units;  // the first warp of the unit's class
        mbar_wait(rw_full(full_s, u), rw_parity(u));
        if (rt_first) rt[11 + 3 * u] = rt_clock();
#endif
#if RW_SSTREAM
        // The slot's scales come with it: read once it is full.
        const int sc = (int)col - part * RW_SCOLS;  // the lane's column within the K part
        row_step_m<RW_M, true>(smem + slot * RW_UNIT + pbase, ms + slot * RW_SCB + sc * RS_SB,
                               ms + slot * RW_SCB + RW_SCOLS * RS_SB + sc * RS_ZB, rw_full(full_s, u), rw_parity(u),
                               xh, sum, nf4t, xsum, RS_SB);
#else
        row_step_m<RW_M>(smem + slot * RW_UNIT + pbase, ms + (col * rows + j * R) * (RS_SB / R),
                         mz + col * (rows / 2) + j * R / 2, rw_full(full_s, u), rw_parity(u), xh, sum, nf4t,
                         xsum, rows * (RS_SB / R));
#endif
        __syncwarp();
#if EXP_RING_TRACE
        if (rt_first) rt[12 + 3 * u] = rt_clock();
#endif
        if (lane == 0) mbar_arrive(empty_s + 8 * slot, 1);
#if !RW_PRODUCER
        // The group's first warp refills the slot with step j + RW_STEPS once all its warps released it.
        if (ks == 0 && lane == 0 && j + RW_STEPS < ns) {
            mbar_wait(empty_s + 8 * slot, (u32)((j / RW_STEPS) & 1));
            mbar_expect_tx(full_s + 8 * slot, RW_STAGE);
            bulk_copy(smem_addr(smem + slot * RW_STAGE), (const u8*)w + (size_t)step_of(j + RW_STEPS) * RW_STAGE,
                      RW_STAGE, full_s + 8 * slot);
        }
#endif
#pragma unroll
        for (int r = 0; r < RW_M; ++r) {
            if ((lane & 3) == 0) psum[(r * KSL + ks) * rows + j * R + ((lane >> 2) & 7)] = sum[r];
        }
    }
    consumers_sync_rw();
#if EXP_RING_TRACE
    if (threadIdx.x == 0) rt[2] = rt_clock(), rt[3] = rt_gtime();
    return;  // y holds the timeline
#endif
#pragma unroll
    for (int u = 0; u < (RW_ROWS + RW_NC - 1) / RW_NC; ++u) {
        const int i = threadIdx.x + u * RW_NC;
        if (i < rows) {
            const size_t row = (size_t)step_of(i / R) * R + i % R;
#if ROW_SCALED
            const float rs = ((const float*)w_s)[row];  // FP8 / INT8: the row's scale (weights: readable at any time)
#endif
#pragma unroll
            for (int r = 0; r < RW_M; ++r) {
                float t = 0.0f;
#pragma unroll
                for (int s = 0; s < KSL; ++s) t += psum[(r * KSL + s) * rows + i];
#if ROW_SCALED
                t *= rs;
#endif
                y[(size_t)r * n + row] = f2out(yold[r][u] + t * out_scale[r]);
            }
        }
    }
#endif  // RW_MMA
}

#ifndef RING_NO_KERNEL
// RW_INTERLEAVE 1 (an experiment: ROOFLINE_NVRTC_EXTRA=-DRW_INTERLEAVE=1; results stay right): CTA c of G takes
// row steps c, c + G, c + 2G, ... instead of a contiguous run (the same count, at most RW_ROWS / 8).
#ifndef RW_INTERLEAVE
#define RW_INTERLEAVE 0
#endif
// RW_MINB: CTAs per SM the registers must allow (ring/plan.rs `ctas_per_sm`, an experiment; 1 by default).
#ifndef RW_MINB
#define RW_MINB 1
#endif
#ifdef RW_SPLIT_TABLE
__constant__ int rw_split_table[] = {RW_SPLIT_TABLE};  // the CTAs' first row steps, then the last's end
#endif
extern "C" __global__ void __launch_bounds__(RW_THREADS, RW_MINB)
wo_ring(const uint4* __restrict__ w, const u8* __restrict__ w_s, const u8* __restrict__ w_z, const u16* x, u16* y,
        int n, float eps, float gscale) {
    pdl_trigger();
    extern __shared__ __align__(128) u8 smem[];
    const int steps = n / R;
#if RW_INTERLEAVE && RW_SPLITS > 1
#error "RW_INTERLEAVE takes no K splits"
#elif RW_INTERLEAVE
    // Row steps c, c + G, ...: at any time the CTAs stream neighbouring steps, as a grid-stride read does.
    const int c = blockIdx.x, g = gridDim.x;
    ring_gemv(smem, w, w_s, w_z, x, y, n, (steps - c + g - 1) / g, [c, g](int j) { return c + j * g; }, eps, gscale);
#elif defined(RW_SPLIT_TABLE) && RW_SPLITS == 1
    // RW_SPLIT_TABLE (an experiment; host: ring/plan.rs `split_override`, ROOFLINE_RING_SPLIT): CTA c takes row steps
    // [t[c], t[c + 1]) of the table's gridDim.x + 1 prefix sums instead of an even share, so that CTAs that stream
    // slower can be given fewer.
    const int s0 = rw_split_table[blockIdx.x], ns = rw_split_table[blockIdx.x + 1] - s0;
    ring_gemv(smem, w, w_s, w_z, x, y, n, ns, [s0](int j) { return s0 + j; }, eps, gscale);
#else
    // Row block b of the grid's (each taken by the RW_SPLITS CTAs of a cluster, one a K split).
    const int b = (int)(blockIdx.x / RW_SPLITS), blocks = (int)(gridDim.x / RW_SPLITS);
    const int s0 = (int)(((long long)b * steps) / blocks);
    const int ns = (int)(((long long)(b + 1) * steps) / blocks) - s0;
    ring_gemv(smem, w, w_s, w_z, x, y, n, ns, [s0](int j) { return s0 + j; }, eps, gscale);
#endif
}
#endif

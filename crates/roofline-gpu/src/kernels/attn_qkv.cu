// attn_qkv: the decode step's qkv projection fused into the cluster attention (batch 1, sm_90+):
//   qkv = W_qkv . rmsnorm(x)   (the input norm's weight folded into W by the host), then
//   out = attention(RoPE(q), cache + RoPE(k), v)   as attn_cluster (attn_cluster.cuh)
// in one launch. Appended by the host to weight_only_xreg.cu's source, wo_stream.cuh, wo_ring.cu (compiled
// with RING_NO_KERNEL: its `ring_gemv`) and attn_cluster.cuh.
//
// Why: the attention of one (b, KV head) needs only that head's GQA q rows, its k row and its v row of qkv
// ((GQA + 2) x HD rows of W), so a thread-block cluster per KV head can compute them itself and the kernel
// boundary between the projection and the attention (the projection's drain, the attention's launch and
// griddepcontrol.wait: a grid-wide dependency) becomes a cluster barrier. The cache rows of the attention
// are requested first, then the weights stream through the ring (their bytes overlap), then x is read.
//
// Grid (CL, B * Hkv) in clusters of CL CTAs, CW x 32 threads: the ring's consumer warps are the attention's
// warps (thread 0 fills the ring, each row group's first warp refills it). CTA r of cluster kh takes
// row steps [r AQ_STEPS, (r + 1) AQ_STEPS) of the cluster's block (q heads kh GQA .. kh GQA + GQA - 1, then
// k head kh, then v head kh, 8 rows per step). Dynamic shared memory: the attention's two K / V stages,
// then the ring (wo_ring.cu's layout).

#if !defined(AQ_STEPS)
#error "AQ_STEPS (row steps per CTA) must be defined"
#endif
#if RW_PRODUCER
#error "attn_qkv is built without the ring's producer warp (RW_PRODUCER=0)"
#endif
#if RW_WARPS != CW
#error "the ring's consumer warps must be the attention's CW warps (K / 1024 x row groups = 8)"
#endif
#if RW_ROWS != AQ_STEPS * R
#error "RW_ROWS must be AQ_STEPS x 8"
#endif
#define AQ_KV_BYTES (2 * KV_STAGE_BYTES)

// Two CTAs per SM (registers capped at 128): at one per SM only 7 clusters of 16 CTAs are resident on an
// H100 (its GPCs), fewer than Llama-3.1-8B's 8 KV heads. Hence no producer warp either (RW_PRODUCER 0:
// nine warps per CTA would cap the registers at 96 and spill).
#ifndef AQ_MINB
#define AQ_MINB 2
#endif

extern "C" __global__ void __launch_bounds__(RW_THREADS, AQ_MINB)
    attn_qkv(const uint4* __restrict__ w, const u8* __restrict__ w_s, const u8* __restrict__ w_z, const u16* x,
             u16* qkv, kv_t* __restrict__ kc, kv_t* __restrict__ vc, u16* __restrict__ out, int len, int hq, int hkv,
             int smax, float scale, float theta, float k_scale, float v_scale, float eps, float gscale) {
    pdl_trigger();
    attn_cluster_start(kc, vc, len, hkv, smax);
    const int kh = blockIdx.y % hkv;  // batch 1: blockIdx.y is the KV head
    const int r0 = (int)cluster_rank() * AQ_STEPS;
    // Row step j of this CTA -> the row step of W (and of qkv) it is.
    const auto step_of = [=](int j) {
        const int cr = (r0 + j) * R;  // row of the cluster's block
        const int row = cr < GQA * HD         ? kh * GQA * HD + cr
                        : cr < (GQA + 1) * HD ? (hq + kh) * HD + cr - GQA * HD
                                              : (hq + hkv + kh) * HD + cr - (GQA + 1) * HD;
        return row / R;
    };
    ring_gemv((u8*)kv_smem + AQ_KV_BYTES, w, w_s, w_z, x, qkv, (hq + 2 * hkv) * HD, AQ_STEPS, step_of, eps, gscale);
    // RoPE's angles while other CTAs of the cluster may still be multiplying.
    float cs[4], sn[4];
    rope_angles(len - 1, theta, cs, sn);
    // The cluster's rows of qkv are written: the release / acquire barrier makes them visible to its CTAs.
    cluster_sync();
    attn_cluster_finish(qkv, kc, vc, out, len, hq, hkv, smax, scale, cs, sn, k_scale, v_scale);
}

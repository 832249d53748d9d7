//! Real weights for `roofline model-bench` (`--checkpoint DIR`): the matrices one decode step runs, built from
//! a Hugging Face Llama-family checkpoint's tensors. q, k and v stack into the fused qkv matrix and gate and
//! up into gate_up (the row orders the decode kernels read); in the fused step each RMSNorm's weight is folded
//! into the columns of the linear after it (W diag(g), as the random-weight step does), otherwise it is kept
//! for the norm kernel. The LM head falls back to the embedding when the checkpoint ties them. MoE layers read
//! the router and each routed expert in the Mixtral layout (`block_sparse_moe.gate`, `experts.{e}.w1/w3/w2`)
//! or the Qwen-MoE one (`mlp.gate`, `mlp.experts.{e}.{gate,up,down}_proj`), one expert at a time. Every
//! tensor's shape is checked against the config the step is built for, and a missing or misshapen tensor is
//! an error that names it.

use roofline_quant::checkpoint::SourceModel;

use crate::model_bench::{BenchConfig, HEAD_DIM};
use crate::GpuError;

/// A tensor's values (f32, row-major) and shape.
pub type Tensor = (Vec<f32>, Vec<usize>);

/// Where the tensors come from: a checkpoint directory, or (in tests) a map.
pub trait TensorSource {
    /// The tensor `name` as f32 and its shape, `None` when the source has no such tensor.
    fn tensor(&self, name: &str) -> Result<Option<Tensor>, GpuError>;
}

impl TensorSource for SourceModel {
    fn tensor(&self, name: &str) -> Result<Option<Tensor>, GpuError> {
        self.read_f32(name).map_err(|e| GpuError::Weights(e.to_string()))
    }
}

/// The weights of one layer as the step runs them, row-major `[N, K]` f32.
#[derive(Debug, Clone, PartialEq)]
pub struct LayerMatrices {
    /// q, k, v stacked: `[(hq + 2 hkv) x 128, hidden]`.
    pub qkv: Vec<f32>,
    /// `[hidden, hq x 128]`.
    pub o: Vec<f32>,
    /// gate then up: `[2 x intermediate, hidden]` (empty in a MoE layer: see [`expert_matrices`]).
    pub gate_up: Vec<f32>,
    /// `[hidden, intermediate]` (empty in a MoE layer).
    pub down: Vec<f32>,
    /// Input RMSNorm weight (already folded into `qkv` when the step is fused).
    pub norm_in: Vec<f32>,
    /// Post-attention RMSNorm weight (already folded into `gate_up` when the step is fused).
    pub norm_post: Vec<f32>,
}

/// The LM head, the final norm and the embedding row the step starts from.
#[derive(Debug, Clone, PartialEq)]
pub struct HeadMatrices {
    /// `[vocab, hidden]` (the embedding when the checkpoint ties them); the final norm folded in when fused.
    pub lm_head: Vec<f32>,
    /// Final RMSNorm weight.
    pub final_norm: Vec<f32>,
    /// The embedding of token `token`: the residual stream the first layer reads.
    pub embedding: Vec<f32>,
}

/// Scales column `j` of every row of the row-major `w` (rows of `g.len()` values) by `g[j]`: W diag(g).
pub fn fold_columns(w: &mut [f32], g: &[f32]) {
    for row in w.chunks_exact_mut(g.len()) {
        row.iter_mut().zip(g).for_each(|(v, s)| *v *= s);
    }
}

/// A tensor that must exist with exactly this shape.
fn need(src: &dyn TensorSource, name: &str, shape: &[usize]) -> Result<Vec<f32>, GpuError> {
    match src.tensor(name)? {
        Some((v, s)) if s == shape => Ok(v),
        Some((_, s)) => Err(GpuError::Weights(format!("tensor {name} has shape {s:?}, the config makes it {shape:?}"))),
        None => Err(GpuError::Weights(format!("the checkpoint has no tensor {name} (a Llama-family layout is read)"))),
    }
}

/// Layer `l`'s matrices (`model.layers.{l}.*`: self_attn.{q,k,v,o}_proj, mlp.{gate,up,down}_proj,
/// input_layernorm, post_attention_layernorm).
pub fn layer_matrices(src: &dyn TensorSource, cfg: &BenchConfig, l: usize) -> Result<LayerMatrices, GpuError> {
    let (d, f) = (cfg.hidden, cfg.intermediate);
    let (q_rows, kv_rows) = (cfg.heads * HEAD_DIM, cfg.kv_heads * HEAD_DIM);
    let p = format!("model.layers.{l}");
    // Parts of other architectures the decode kernels do not compute: running without them would time the
    // right bytes but compute another model, so they are refused by name.
    for (part, what) in [
        ("self_attn.q_proj.bias", "q/k/v biases (Qwen2)"),
        ("self_attn.q_norm.weight", "per-head q/k RMSNorm (Qwen3)"),
        ("mlp.shared_expert_gate.weight", "gated shared experts (Qwen2-MoE)"),
    ] {
        let name = format!("{p}.{part}");
        if src.tensor(&name)?.is_some() {
            return Err(GpuError::Weights(format!(
                "the checkpoint has {name}: {what} are not in the decode kernels; benchmark its shapes with random weights (--config without --checkpoint)"
            )));
        }
    }
    let norm_in = need(src, &format!("{p}.input_layernorm.weight"), &[d])?;
    let norm_post = need(src, &format!("{p}.post_attention_layernorm.weight"), &[d])?;
    let mut qkv = need(src, &format!("{p}.self_attn.q_proj.weight"), &[q_rows, d])?;
    qkv.extend(need(src, &format!("{p}.self_attn.k_proj.weight"), &[kv_rows, d])?);
    qkv.extend(need(src, &format!("{p}.self_attn.v_proj.weight"), &[kv_rows, d])?);
    let o = need(src, &format!("{p}.self_attn.o_proj.weight"), &[d, q_rows])?;
    let (mut gate_up, mut down) = (Vec::new(), Vec::new());
    if cfg.moe.is_none() {
        gate_up = need(src, &format!("{p}.mlp.gate_proj.weight"), &[f, d])?;
        gate_up.extend(need(src, &format!("{p}.mlp.up_proj.weight"), &[f, d])?);
        down = need(src, &format!("{p}.mlp.down_proj.weight"), &[d, f])?;
    }
    if cfg.fuse {
        fold_columns(&mut qkv, &norm_in);
        fold_columns(&mut gate_up, &norm_post);
    }
    Ok(LayerMatrices { qkv, o, gate_up, down, norm_in, norm_post })
}

/// Where a checkpoint keeps its MoE tensors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MoeLayout {
    /// `block_sparse_moe.gate`, `block_sparse_moe.experts.{e}.w1` (gate), `w3` (up), `w2` (down).
    Mixtral,
    /// `mlp.gate`, `mlp.experts.{e}.gate_proj`, `up_proj`, `down_proj` (Qwen2/3-MoE, OLMoE).
    Qwen,
}

impl MoeLayout {
    /// The layout of layer `l`'s router in `src`; an error naming both names when it has neither.
    pub fn detect(src: &dyn TensorSource, l: usize) -> Result<MoeLayout, GpuError> {
        let p = format!("model.layers.{l}");
        if src.tensor(&format!("{p}.block_sparse_moe.gate.weight"))?.is_some() {
            return Ok(MoeLayout::Mixtral);
        }
        if src.tensor(&format!("{p}.mlp.gate.weight"))?.is_some() {
            return Ok(MoeLayout::Qwen);
        }
        Err(GpuError::Weights(format!(
            "the checkpoint has no MoE router for layer {l} ({p}.block_sparse_moe.gate.weight or {p}.mlp.gate.weight)"
        )))
    }

    fn router(self, l: usize) -> String {
        match self {
            MoeLayout::Mixtral => format!("model.layers.{l}.block_sparse_moe.gate.weight"),
            MoeLayout::Qwen => format!("model.layers.{l}.mlp.gate.weight"),
        }
    }

    /// The (gate, up, down) tensor names of expert `e` of layer `l`.
    fn expert(self, l: usize, e: usize) -> [String; 3] {
        match self {
            MoeLayout::Mixtral => {
                let p = format!("model.layers.{l}.block_sparse_moe.experts.{e}");
                [format!("{p}.w1.weight"), format!("{p}.w3.weight"), format!("{p}.w2.weight")]
            }
            MoeLayout::Qwen => {
                let p = format!("model.layers.{l}.mlp.experts.{e}");
                [format!("{p}.gate_proj.weight"), format!("{p}.up_proj.weight"), format!("{p}.down_proj.weight")]
            }
        }
    }
}

/// Layer `l`'s router `[experts, hidden]`, with the post-attention norm `norm_post` folded in when the step
/// is fused (the router GEMV computes the row norm, as the experts' gate_up GEMVs do).
pub fn router_matrix(
    src: &dyn TensorSource,
    cfg: &BenchConfig,
    layout: MoeLayout,
    l: usize,
    norm_post: &[f32],
) -> Result<Vec<f32>, GpuError> {
    let m = cfg.moe.ok_or_else(|| GpuError::Weights("not a MoE model".into()))?;
    let mut w = need(src, &layout.router(l), &[m.experts, cfg.hidden])?;
    if cfg.fuse {
        fold_columns(&mut w, norm_post);
    }
    Ok(w)
}

/// Expert `e` of layer `l`: gate then up `[2 x expert_intermediate, hidden]` (`norm_post` folded in when
/// fused) and down `[hidden, expert_intermediate]`.
pub fn expert_matrices(
    src: &dyn TensorSource,
    cfg: &BenchConfig,
    layout: MoeLayout,
    l: usize,
    e: usize,
    norm_post: &[f32],
) -> Result<(Vec<f32>, Vec<f32>), GpuError> {
    let m = cfg.moe.ok_or_else(|| GpuError::Weights("not a MoE model".into()))?;
    let (d, ei) = (cfg.hidden, m.expert_intermediate);
    let [g, u, dn] = layout.expert(l, e);
    let mut gate_up = need(src, &g, &[ei, d])?;
    gate_up.extend(need(src, &u, &[ei, d])?);
    if cfg.fuse {
        fold_columns(&mut gate_up, norm_post);
    }
    Ok((gate_up, need(src, &dn, &[d, ei])?))
}

/// The LM head (`lm_head.weight`, else the tied `model.embed_tokens.weight`), `model.norm.weight` and the
/// embedding row of `token`.
pub fn head_matrices(src: &dyn TensorSource, cfg: &BenchConfig, token: usize) -> Result<HeadMatrices, GpuError> {
    let (d, v) = (cfg.hidden, cfg.vocab);
    if token >= v {
        return Err(GpuError::Weights(format!("token {token} is outside the vocabulary of {v}")));
    }
    let final_norm = need(src, "model.norm.weight", &[d])?;
    let embed = need(src, "model.embed_tokens.weight", &[v, d])?;
    let embedding = embed[token * d..][..d].to_vec();
    let mut lm_head = match src.tensor("lm_head.weight")? {
        Some(_) => need(src, "lm_head.weight", &[v, d])?,
        None => embed,
    };
    if cfg.fuse {
        fold_columns(&mut lm_head, &final_norm);
    }
    Ok(HeadMatrices { lm_head, final_norm, embedding })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model_bench::AttnKernel;
    use crate::weight_only::WoFormat;
    use std::collections::HashMap;

    struct Map(HashMap<String, Tensor>);

    impl TensorSource for Map {
        fn tensor(&self, name: &str) -> Result<Option<Tensor>, GpuError> {
            Ok(self.0.get(name).cloned())
        }
    }

    fn cfg(fuse: bool) -> BenchConfig {
        BenchConfig {
            hidden: 256,
            heads: 2,
            kv_heads: 1,
            intermediate: 64,
            vocab: 10,
            layers: 1,
            layers_built: 1,
            batch: 1,
            seq: 8,
            weights: WoFormat::Fp16,
            rope_theta: 10_000.0,
            fuse,
            attention: AttnKernel::Auto,
            kv: crate::model_bench::KvFormat::F16,
            checkpoint: None,
            moe: None,
            gemv: Default::default(),
            ffn: Default::default(),
            qkv: Default::default(),
        }
    }

    /// A tensor whose element i is `base + i` (each tensor distinguishable, every element too).
    fn t(base: f32, shape: &[usize]) -> Tensor {
        let n: usize = shape.iter().product();
        ((0..n).map(|i| base + i as f32).collect(), shape.to_vec())
    }

    fn llama(tied: bool) -> Map {
        let (d, f, q, kv, v) = (256, 64, 256, 128, 10);
        let mut m = HashMap::new();
        let p = "model.layers.0";
        for (name, base, shape) in [
            (format!("{p}.input_layernorm.weight"), 2.0, vec![d]),
            (format!("{p}.post_attention_layernorm.weight"), 3.0, vec![d]),
            (format!("{p}.self_attn.q_proj.weight"), 1e3, vec![q, d]),
            (format!("{p}.self_attn.k_proj.weight"), 1e6, vec![kv, d]),
            (format!("{p}.self_attn.v_proj.weight"), 2e6, vec![kv, d]),
            (format!("{p}.self_attn.o_proj.weight"), 3e6, vec![d, q]),
            (format!("{p}.mlp.gate_proj.weight"), 4e6, vec![f, d]),
            (format!("{p}.mlp.up_proj.weight"), 5e6, vec![f, d]),
            (format!("{p}.mlp.down_proj.weight"), 6e6, vec![d, f]),
            ("model.norm.weight".into(), 4.0, vec![d]),
            ("model.embed_tokens.weight".into(), 7e6, vec![v, d]),
        ] {
            m.insert(name, t(base, &shape));
        }
        if !tied {
            m.insert("lm_head.weight".into(), t(8e6, &[v, d]));
        }
        Map(m)
    }

    #[test]
    fn layers_stack_q_k_v_and_gate_up_and_fold_the_norms_when_fused() {
        let src = llama(false);
        let plain = layer_matrices(&src, &cfg(false), 0).unwrap();
        // qkv: q rows, then k, then v; gate_up: gate rows, then up.
        assert_eq!(plain.qkv.len(), (256 + 2 * 128) * 256);
        assert_eq!((plain.qkv[0], plain.qkv[256 * 256], plain.qkv[384 * 256]), (1e3, 1e6, 2e6));
        assert_eq!((plain.gate_up[0], plain.gate_up[64 * 256]), (4e6, 5e6));
        assert_eq!((plain.o[0], plain.down[0], plain.norm_in[1], plain.norm_post[0]), (3e6, 6e6, 3.0, 3.0));
        // Fused: column j of qkv scaled by the input norm's g[j], of gate_up by the post-attention norm's.
        let fused = layer_matrices(&src, &cfg(true), 0).unwrap();
        for (row, col) in [(0, 0), (0, 255), (300, 7), (511, 100)] {
            let i = row * 256 + col;
            assert_eq!(fused.qkv[i], plain.qkv[i] * (2.0 + col as f32));
        }
        assert_eq!(fused.gate_up[127 * 256 + 9], plain.gate_up[127 * 256 + 9] * 12.0);
        assert_eq!((fused.o, fused.down), (plain.o, plain.down));
    }

    #[test]
    fn the_head_falls_back_to_the_tied_embedding() {
        let own = head_matrices(&llama(false), &cfg(false), 3).unwrap();
        assert_eq!(own.lm_head[0], 8e6);
        assert_eq!(own.embedding[0], 7e6 + 3.0 * 256.0);
        let tied = head_matrices(&llama(true), &cfg(true), 0).unwrap();
        // The embedding, with the final norm (4 + j) folded into column j.
        assert_eq!(tied.lm_head[5], (7e6 + 5.0) * 9.0);
        assert!(head_matrices(&llama(false), &cfg(false), 10).is_err());
    }

    fn moe_cfg() -> BenchConfig {
        let moe =
            crate::model_bench::MoeShape { experts: 2, top_k: 1, expert_intermediate: 32, shared_intermediate: 0 };
        BenchConfig { moe: Some(moe), intermediate: 0, ..cfg(true) }
    }

    /// A one-layer MoE checkpoint in `layout` (attention and norms as `llama`, no dense FFN).
    fn moe(layout: MoeLayout) -> Map {
        let mut m = llama(false).0;
        m.retain(|k, _| !k.contains(".mlp."));
        m.insert(layout.router(0), t(9e6, &[2, 256]));
        for e in 0..2 {
            let [g, u, dn] = layout.expert(0, e);
            let base = 1e7 * (e + 1) as f32;
            m.insert(g, t(base, &[32, 256]));
            m.insert(u, t(base + 1e5, &[32, 256]));
            m.insert(dn, t(base + 2e5, &[256, 32]));
        }
        Map(m)
    }

    #[test]
    fn moe_layers_read_the_router_and_each_expert_in_either_layout() {
        for layout in [MoeLayout::Mixtral, MoeLayout::Qwen] {
            let src = moe(layout);
            let c = moe_cfg();
            assert_eq!(MoeLayout::detect(&src, 0).unwrap(), layout);
            // The layer itself: attention only (the dense FFN names are absent and not read).
            let l = layer_matrices(&src, &c, 0).unwrap();
            assert!(l.gate_up.is_empty() && l.down.is_empty());
            let g: Vec<f32> = (0..256).map(|j| 3.0 + j as f32).collect();
            let r = router_matrix(&src, &c, layout, 0, &g).unwrap();
            assert_eq!((r.len(), r[0], r[256 + 2]), (512, 9e6 * 3.0, (9e6 + 258.0) * 5.0));
            let (gu, dn) = expert_matrices(&src, &c, layout, 0, 1, &g).unwrap();
            // Expert 1: gate rows then up rows, the norm folded into gate_up only.
            assert_eq!((gu.len(), dn.len()), (64 * 256, 256 * 32));
            assert_eq!((gu[0], gu[32 * 256]), (2e7 * 3.0, (2e7 + 1e5) * 3.0));
            assert_eq!(dn[0], 2e7 + 2e5);
            let e = expert_matrices(&src, &c, layout, 0, 2, &g).unwrap_err().to_string();
            assert!(e.contains("experts.2"), "{e}");
        }
        let e = MoeLayout::detect(&llama(false), 0).unwrap_err().to_string();
        assert!(e.contains("block_sparse_moe.gate") && e.contains("mlp.gate"), "{e}");
    }

    #[test]
    fn a_missing_or_misshapen_tensor_is_named() {
        let mut src = llama(false);
        src.0.remove("model.layers.0.mlp.up_proj.weight");
        let e = layer_matrices(&src, &cfg(false), 0).unwrap_err().to_string();
        assert!(e.contains("model.layers.0.mlp.up_proj.weight"), "{e}");
        let mut src = llama(false);
        src.0.insert("model.layers.0.self_attn.k_proj.weight".into(), t(0.0, &[256, 256]));
        let e = layer_matrices(&src, &cfg(false), 0).unwrap_err().to_string();
        assert!(e.contains("k_proj") && e.contains("[256, 256]") && e.contains("[128, 256]"), "{e}");
        // Layer 1 does not exist in a one-layer checkpoint.
        assert!(layer_matrices(&llama(false), &cfg(false), 1).is_err());
        // Parts the kernels do not compute are refused by name, not silently dropped.
        for (part, what) in [("self_attn.q_proj.bias", "biases"), ("self_attn.q_norm.weight", "q/k RMSNorm")] {
            let mut src = llama(false);
            src.0.insert(format!("model.layers.0.{part}"), t(0.0, &[128]));
            let e = layer_matrices(&src, &cfg(false), 0).unwrap_err().to_string();
            assert!(e.contains(part) && e.contains(what) && e.contains("random weights"), "{e}");
        }
    }
}

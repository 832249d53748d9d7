//! A Llama-family decoder (RMSNorm, GQA attention with RoPE, SwiGLU MLP) held as plain f32 matrices, and its
//! forward pass on the CPU with candle. Weights stay `Vec<f32>` so codecs and AWQ can rewrite them; the
//! forward pass builds candle tensors from them once per [`Model`].

use candle_core::{DType, Device, Tensor, D};
use serde::{Deserialize, Serialize};

use crate::EvalError;

/// Shape and constants of a Llama-family model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LlamaConfig {
    /// Hidden size.
    pub hidden: usize,
    /// Decoder layers.
    pub layers: usize,
    /// Query heads.
    pub heads: usize,
    /// Key/value heads (GQA when fewer than `heads`).
    pub kv_heads: usize,
    /// Dimension of one head.
    pub head_dim: usize,
    /// MLP intermediate size.
    pub ffn: usize,
    /// Vocabulary size.
    pub vocab: usize,
    /// RMSNorm epsilon.
    pub rms_eps: f64,
    /// RoPE base frequency.
    pub rope_theta: f64,
    /// RoPE on adjacent pairs (GGUF / GGML "normal" mode, the q/k rows are permuted on conversion) instead of
    /// the two halves of a head (Hugging Face `rotate_half`).
    pub rope_interleaved: bool,
    /// Training context length.
    pub context: usize,
}

impl LlamaConfig {
    /// Checks that the dimensions agree with each other.
    pub fn validate(&self) -> Result<(), EvalError> {
        let pos = |f: &'static str, v: usize| {
            if v == 0 {
                Err(EvalError::invalid(f, v, "a positive integer"))
            } else {
                Ok(())
            }
        };
        pos("hidden", self.hidden)?;
        pos("layers", self.layers)?;
        pos("heads", self.heads)?;
        pos("kv_heads", self.kv_heads)?;
        pos("ffn", self.ffn)?;
        pos("vocab", self.vocab)?;
        if self.head_dim == 0 || self.head_dim % 2 != 0 {
            return Err(EvalError::invalid("head_dim", self.head_dim, "a positive even integer"));
        }
        if self.heads % self.kv_heads != 0 {
            return Err(EvalError::invalid("kv_heads", self.kv_heads, format!("a divisor of heads = {}", self.heads)));
        }
        Ok(())
    }
}

/// A linear layer `y = x W^T` with `W` of `rows` (outputs) x `cols` (inputs), row-major.
#[derive(Debug, Clone, PartialEq)]
pub struct Linear {
    /// Weights, `rows x cols`.
    pub w: Vec<f32>,
    /// Output features.
    pub rows: usize,
    /// Input features.
    pub cols: usize,
}

impl Linear {
    /// A linear layer, checking the length.
    pub fn new(w: Vec<f32>, rows: usize, cols: usize) -> Result<Self, EvalError> {
        if w.len() != rows * cols {
            return Err(EvalError::invalid("linear weight length", w.len(), format!("{rows} x {cols}")));
        }
        Ok(Linear { w, rows, cols })
    }

    /// Multiplies input column `j` by `s[j]`.
    pub fn scale_cols(&mut self, s: &[f32]) {
        for row in self.w.chunks_mut(self.cols) {
            for (v, f) in row.iter_mut().zip(s) {
                *v *= f;
            }
        }
    }

    /// Multiplies output row `i` by `s[i]`.
    pub fn scale_rows(&mut self, s: &[f32]) {
        for (row, f) in self.w.chunks_mut(self.cols).zip(s) {
            for v in row {
                *v *= f;
            }
        }
    }
}

/// The seven linear layers of a decoder layer, by role.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Proj {
    /// Query projection.
    Q,
    /// Key projection.
    K,
    /// Value projection.
    V,
    /// Attention output projection.
    O,
    /// MLP gate projection.
    Gate,
    /// MLP up projection.
    Up,
    /// MLP down projection.
    Down,
}

impl Proj {
    /// All seven, in forward order.
    pub const ALL: [Proj; 7] = [Proj::Q, Proj::K, Proj::V, Proj::O, Proj::Gate, Proj::Up, Proj::Down];

    /// Hugging Face name (`q_proj`).
    pub fn name(self) -> &'static str {
        match self {
            Proj::Q => "q_proj",
            Proj::K => "k_proj",
            Proj::V => "v_proj",
            Proj::O => "o_proj",
            Proj::Gate => "gate_proj",
            Proj::Up => "up_proj",
            Proj::Down => "down_proj",
        }
    }
}

/// One decoder layer.
#[derive(Debug, Clone, PartialEq)]
pub struct Layer {
    /// RMSNorm weight before attention.
    pub attn_norm: Vec<f32>,
    /// Query projection (`heads * head_dim x hidden`).
    pub q: Linear,
    /// Key projection.
    pub k: Linear,
    /// Value projection.
    pub v: Linear,
    /// Output projection (`hidden x heads * head_dim`).
    pub o: Linear,
    /// RMSNorm weight before the MLP.
    pub ffn_norm: Vec<f32>,
    /// Gate projection.
    pub gate: Linear,
    /// Up projection.
    pub up: Linear,
    /// Down projection.
    pub down: Linear,
}

impl Layer {
    /// A linear layer by role.
    pub fn proj(&self, p: Proj) -> &Linear {
        match p {
            Proj::Q => &self.q,
            Proj::K => &self.k,
            Proj::V => &self.v,
            Proj::O => &self.o,
            Proj::Gate => &self.gate,
            Proj::Up => &self.up,
            Proj::Down => &self.down,
        }
    }

    /// A linear layer by role, mutable.
    pub fn proj_mut(&mut self, p: Proj) -> &mut Linear {
        match p {
            Proj::Q => &mut self.q,
            Proj::K => &mut self.k,
            Proj::V => &mut self.v,
            Proj::O => &mut self.o,
            Proj::Gate => &mut self.gate,
            Proj::Up => &mut self.up,
            Proj::Down => &mut self.down,
        }
    }
}

/// All weights of a model.
#[derive(Debug, Clone, PartialEq)]
pub struct LlamaWeights {
    /// Shape.
    pub config: LlamaConfig,
    /// Token embeddings, `vocab x hidden`.
    pub embed: Vec<f32>,
    /// Decoder layers.
    pub layers: Vec<Layer>,
    /// Final RMSNorm weight.
    pub final_norm: Vec<f32>,
    /// LM head, `vocab x hidden`; `None` = tied to the embeddings.
    pub lm_head: Option<Vec<f32>>,
}

impl LlamaWeights {
    /// Parameters in the decoder layers' linear layers (what the codecs quantize).
    pub fn linear_params(&self) -> usize {
        self.layers.iter().map(|l| Proj::ALL.iter().map(|p| l.proj(*p).w.len()).sum::<usize>()).sum()
    }

    /// A small model with deterministic pseudo-random weights, for tests.
    pub fn random(config: LlamaConfig, seed: u64) -> Result<Self, EvalError> {
        config.validate()?;
        let mut state = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        let mut next = move |scale: f32| {
            state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            let u = ((state >> 40) as f32) / (1u64 << 24) as f32;
            (u * 2.0 - 1.0) * scale
        };
        let c = &config.clone();
        let mut mat = |r: usize, k: usize| {
            let s = 1.0 / (k as f32).sqrt();
            Linear::new((0..r * k).map(|_| next(s)).collect(), r, k)
        };
        let qd = c.heads * c.head_dim;
        let kvd = c.kv_heads * c.head_dim;
        let mut layers = Vec::new();
        for _ in 0..c.layers {
            layers.push(Layer {
                attn_norm: vec![0.0; c.hidden],
                q: mat(qd, c.hidden)?,
                k: mat(kvd, c.hidden)?,
                v: mat(kvd, c.hidden)?,
                o: mat(c.hidden, qd)?,
                ffn_norm: vec![0.0; c.hidden],
                gate: mat(c.ffn, c.hidden)?,
                up: mat(c.ffn, c.hidden)?,
                down: mat(c.hidden, c.ffn)?,
            });
        }
        let embed = mat(c.vocab, c.hidden)?.w.iter().map(|v| v * 4.0).collect();
        let mut w = LlamaWeights { config, embed, layers, final_norm: vec![1.0; c.hidden], lm_head: None };
        // Norm weights around 1 with some spread (some channels large), as trained models have.
        for l in &mut w.layers {
            for (i, g) in l.attn_norm.iter_mut().chain(l.ffn_norm.iter_mut()).enumerate() {
                *g = 1.0 + next(0.5) + if i % 7 == 3 { 2.0 } else { 0.0 };
            }
        }
        Ok(w)
    }
}

/// Inputs of each linear layer seen during one forward pass, per layer: what AWQ calibrates on.
#[derive(Debug, Clone, Default)]
pub struct Activations {
    /// Per layer: the input of q/k/v (attention RMSNorm output), `tokens x hidden`.
    pub attn_in: Vec<Vec<f32>>,
    /// Per layer: the input of o_proj (attention output), `tokens x heads*head_dim`.
    pub o_in: Vec<Vec<f32>>,
    /// Per layer: the input of gate/up (MLP RMSNorm output), `tokens x hidden`.
    pub mlp_in: Vec<Vec<f32>>,
    /// Per layer: the input of down_proj (`silu(gate) * up`), `tokens x ffn`.
    pub down_in: Vec<Vec<f32>>,
    /// Tokens recorded.
    pub tokens: usize,
}

/// A model ready to run: the weights as candle tensors on the CPU.
pub struct Model {
    config: LlamaConfig,
    embed: Tensor,
    layers: Vec<LayerT>,
    final_norm: Tensor,
    lm_head: Tensor,
}

struct LayerT {
    attn_norm: Tensor,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    o: Tensor,
    ffn_norm: Tensor,
    gate: Tensor,
    up: Tensor,
    down: Tensor,
}

fn mat(l: &Linear) -> Result<Tensor, EvalError> {
    Ok(Tensor::from_slice(&l.w, (l.rows, l.cols), &Device::Cpu)?)
}

fn vec1(v: &[f32]) -> Result<Tensor, EvalError> {
    Ok(Tensor::from_slice(v, v.len(), &Device::Cpu)?)
}

fn rms_norm(x: &Tensor, w: &Tensor, eps: f64) -> Result<Tensor, EvalError> {
    let ms = x.sqr()?.mean_keepdim(D::Minus1)?;
    let y = x.broadcast_div(&(ms + eps)?.sqrt()?)?;
    Ok(y.broadcast_mul(w)?)
}

fn linear(x: &Tensor, w: &Tensor) -> Result<Tensor, EvalError> {
    Ok(x.matmul(&w.t()?)?)
}

fn to_vec2(t: &Tensor) -> Result<Vec<f32>, EvalError> {
    Ok(t.flatten_all()?.to_vec1::<f32>()?)
}

impl Model {
    /// Builds the tensors of `w`.
    pub fn new(w: &LlamaWeights) -> Result<Self, EvalError> {
        w.config.validate()?;
        let c = &w.config;
        let embed = Tensor::from_slice(&w.embed, (c.vocab, c.hidden), &Device::Cpu)?;
        let lm_head = match &w.lm_head {
            Some(h) => Tensor::from_slice(h, (c.vocab, c.hidden), &Device::Cpu)?,
            None => embed.clone(),
        };
        let layers = w
            .layers
            .iter()
            .map(|l| {
                Ok(LayerT {
                    attn_norm: vec1(&l.attn_norm)?,
                    q: mat(&l.q)?,
                    k: mat(&l.k)?,
                    v: mat(&l.v)?,
                    o: mat(&l.o)?,
                    ffn_norm: vec1(&l.ffn_norm)?,
                    gate: mat(&l.gate)?,
                    up: mat(&l.up)?,
                    down: mat(&l.down)?,
                })
            })
            .collect::<Result<Vec<_>, EvalError>>()?;
        Ok(Model { config: c.clone(), embed, layers, final_norm: vec1(&w.final_norm)?, lm_head })
    }

    /// The configuration.
    pub fn config(&self) -> &LlamaConfig {
        &self.config
    }

    /// Logits (`tokens x vocab`, row-major) of one causal pass over `tokens` starting at position 0; with
    /// `capture`, the inputs of every linear layer are appended to it.
    pub fn forward(&self, tokens: &[u32], mut capture: Option<&mut Activations>) -> Result<Vec<f32>, EvalError> {
        let c = &self.config;
        let t = tokens.len();
        if t == 0 {
            return Err(EvalError::invalid("tokens", 0, "at least one token"));
        }
        if let Some(&bad) = tokens.iter().find(|&&id| id as usize >= c.vocab) {
            return Err(EvalError::invalid("token id", bad, format!("< vocab size {}", c.vocab)));
        }
        let dev = Device::Cpu;
        let ids = Tensor::from_slice(tokens, t, &dev)?;
        let mut x = self.embed.index_select(&ids, 0)?;
        let (cos, sin) = rope_tables(c, t)?;
        let mask = causal_mask(t)?;
        if let Some(cap) = capture.as_deref_mut() {
            if cap.attn_in.is_empty() {
                *cap = Activations {
                    attn_in: vec![Vec::new(); c.layers],
                    o_in: vec![Vec::new(); c.layers],
                    mlp_in: vec![Vec::new(); c.layers],
                    down_in: vec![Vec::new(); c.layers],
                    tokens: 0,
                };
            }
        }
        for (li, l) in self.layers.iter().enumerate() {
            let h = rms_norm(&x, &l.attn_norm, c.rms_eps)?;
            let a = attention_mix(c, &h, &l.q, &l.k, &l.v, &cos, &sin, &mask)?;
            let attn = linear(&a, &l.o)?;
            x = (x + attn)?;
            let h2 = rms_norm(&x, &l.ffn_norm, c.rms_eps)?;
            let g = linear(&h2, &l.gate)?;
            let u = linear(&h2, &l.up)?;
            let m = (silu(&g)? * u)?;
            let d = linear(&m, &l.down)?;
            if let Some(cap) = capture.as_deref_mut() {
                cap.attn_in[li].extend(to_vec2(&h)?);
                cap.o_in[li].extend(to_vec2(&a)?);
                cap.mlp_in[li].extend(to_vec2(&h2)?);
                cap.down_in[li].extend(to_vec2(&m)?);
            }
            x = (x + d)?;
        }
        if let Some(cap) = capture {
            cap.tokens += t;
        }
        let x = rms_norm(&x, &self.final_norm, c.rms_eps)?;
        to_vec2(&linear(&x, &self.lm_head)?)
    }
}

/// Causal self-attention of the normed input `h` (`t x hidden`) up to, not including, o_proj: `t x heads*hd`.
#[allow(clippy::too_many_arguments)] // the layer's three projections and the position tables
fn attention_mix(
    c: &LlamaConfig,
    h: &Tensor,
    wq: &Tensor,
    wk: &Tensor,
    wv: &Tensor,
    cos: &Tensor,
    sin: &Tensor,
    mask: &Tensor,
) -> Result<Tensor, EvalError> {
    let t = h.dim(0)?;
    let hd = c.head_dim;
    let group = c.heads / c.kv_heads;
    let q = linear(h, wq)?.reshape((t, c.heads, hd))?.transpose(0, 1)?.contiguous()?;
    let k = linear(h, wk)?.reshape((t, c.kv_heads, hd))?.transpose(0, 1)?.contiguous()?;
    let v = linear(h, wv)?.reshape((t, c.kv_heads, hd))?.transpose(0, 1)?.contiguous()?;
    let q = rope(&q, cos, sin, c.rope_interleaved)?;
    let k = rope(&k, cos, sin, c.rope_interleaved)?;
    let (k, v) = if group > 1 { (repeat_kv(&k, group)?, repeat_kv(&v, group)?) } else { (k, v) };
    let scores = (q.matmul(&k.t()?)? / (hd as f64).sqrt())?.broadcast_add(mask)?;
    let p = softmax_last(&scores)?;
    Ok(p.matmul(&v)?.transpose(0, 1)?.contiguous()?.reshape((t, c.heads * hd))?)
}

/// Output of a layer's attention block (o_proj included) for the normed input `h` (`t x hidden`, one causal
/// sequence from position 0) with the given q/k/v/o weights: what AWQ's q/k/v search compares.
pub fn attention_block(c: &LlamaConfig, h: &[f32], t: usize, w: [&Linear; 4]) -> Result<Vec<f32>, EvalError> {
    let ht = Tensor::from_slice(h, (t, c.hidden), &Device::Cpu)?;
    let (cos, sin) = rope_tables(c, t)?;
    let mask = causal_mask(t)?;
    let a = attention_mix(c, &ht, &mat(w[0])?, &mat(w[1])?, &mat(w[2])?, &cos, &sin, &mask)?;
    to_vec2(&linear(&a, &mat(w[3])?)?)
}

/// Output of a layer's MLP block (`down(silu(gate h) * up h)`) for the normed input `h` (`t x hidden`).
pub fn mlp_block(h: &[f32], t: usize, hidden: usize, w: [&Linear; 3]) -> Result<Vec<f32>, EvalError> {
    let ht = Tensor::from_slice(h, (t, hidden), &Device::Cpu)?;
    let m = (silu(&linear(&ht, &mat(w[0])?)?)? * linear(&ht, &mat(w[1])?)?)?;
    to_vec2(&linear(&m, &mat(w[2])?)?)
}

fn silu(x: &Tensor) -> Result<Tensor, EvalError> {
    Ok(x.silu()?)
}

fn softmax_last(x: &Tensor) -> Result<Tensor, EvalError> {
    let m = x.max_keepdim(D::Minus1)?;
    let e = x.broadcast_sub(&m)?.exp()?;
    let s = e.sum_keepdim(D::Minus1)?;
    Ok(e.broadcast_div(&s)?)
}

fn causal_mask(t: usize) -> Result<Tensor, EvalError> {
    let m: Vec<f32> = (0..t).flat_map(|i| (0..t).map(move |j| if j > i { f32::NEG_INFINITY } else { 0.0 })).collect();
    Ok(Tensor::from_vec(m, (t, t), &Device::Cpu)?)
}

fn repeat_kv(x: &Tensor, n: usize) -> Result<Tensor, EvalError> {
    let (kvh, t, hd) = x.dims3()?;
    Ok(x.unsqueeze(1)?.expand((kvh, n, t, hd))?.reshape((kvh * n, t, hd))?)
}

/// `cos` and `sin` tables, `t x head_dim/2`.
fn rope_tables(c: &LlamaConfig, t: usize) -> Result<(Tensor, Tensor), EvalError> {
    let half = c.head_dim / 2;
    let mut cos = Vec::with_capacity(t * half);
    let mut sin = Vec::with_capacity(t * half);
    for p in 0..t {
        for i in 0..half {
            let freq = c.rope_theta.powf(-2.0 * i as f64 / c.head_dim as f64);
            let a = p as f64 * freq;
            cos.push(a.cos() as f32);
            sin.push(a.sin() as f32);
        }
    }
    Ok((Tensor::from_vec(cos, (t, half), &Device::Cpu)?, Tensor::from_vec(sin, (t, half), &Device::Cpu)?))
}

/// Rotary embedding of `x` (`heads x t x head_dim`).
fn rope(x: &Tensor, cos: &Tensor, sin: &Tensor, interleaved: bool) -> Result<Tensor, EvalError> {
    let (h, t, hd) = x.dims3()?;
    let half = hd / 2;
    if interleaved {
        let xr = x.reshape((h, t, half, 2))?;
        let x0 = xr.narrow(3, 0, 1)?.squeeze(3)?;
        let x1 = xr.narrow(3, 1, 1)?.squeeze(3)?;
        let y0 = (x0.broadcast_mul(cos)? - x1.broadcast_mul(sin)?)?;
        let y1 = (x0.broadcast_mul(sin)? + x1.broadcast_mul(cos)?)?;
        Ok(Tensor::stack(&[y0, y1], 3)?.reshape((h, t, hd))?)
    } else {
        let x0 = x.narrow(2, 0, half)?;
        let x1 = x.narrow(2, half, half)?;
        let y0 = (x0.broadcast_mul(cos)? - x1.broadcast_mul(sin)?)?;
        let y1 = (x0.broadcast_mul(sin)? + x1.broadcast_mul(cos)?)?;
        Ok(Tensor::cat(&[y0, y1], 2)?)
    }
}

/// `x W^T` for `x` of `tokens x k` and `w` of `n x k`, on candle's CPU matmul.
pub fn matmul_t(x: &[f32], tokens: usize, w: &[f32], n: usize, k: usize) -> Result<Vec<f32>, EvalError> {
    let xt = Tensor::from_slice(x, (tokens, k), &Device::Cpu)?;
    let wt = Tensor::from_slice(w, (n, k), &Device::Cpu)?;
    to_vec2(&xt.matmul(&wt.t()?)?.to_dtype(DType::F32)?)
}

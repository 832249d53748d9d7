//! The codecs against ../shared/golden (NumPy / ml_dtypes references).

use roofline_quant::codec::{FloatKind, MxElement};
use roofline_quant::minifloat::{BF16, E2M1, E2M3, E3M2, E4M3, E5M2};
use roofline_quant::{dequantize, quantize, Codec, ErrorMetrics};
use serde_json::Value;

fn golden(name: &str) -> Value {
    let path = format!("{}/../../../shared/golden/{name}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    serde_json::from_str(&text).expect("golden JSON")
}

fn floats(v: &Value) -> Vec<f32> {
    fn walk(v: &Value, out: &mut Vec<f32>) {
        match v {
            Value::Array(a) => a.iter().for_each(|x| walk(x, out)),
            x => out.push(x.as_f64().expect("number") as f32),
        }
    }
    let mut out = Vec::new();
    walk(v, &mut out);
    out
}

fn assert_close(name: &str, got: &[f32], want: &[f32]) {
    assert_eq!(got.len(), want.len(), "{name}: length");
    let mut bad = 0;
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let tol = 1e-6 * w.abs().max(1e-30);
        if (g - w).abs() > tol {
            if bad < 5 {
                eprintln!("{name}[{i}]: got {g:e}, want {w:e}");
            }
            bad += 1;
        }
    }
    assert_eq!(bad, 0, "{name}: {bad} of {} elements differ", want.len());
}

#[test]
fn element_codecs_match_golden() {
    let g = golden("element_codecs.json");
    for (name, mf) in [
        ("FP8_E4M3", E4M3),
        ("FP8_E5M2", E5M2),
        ("FP6_E3M2", E3M2),
        ("FP6_E2M3", E2M3),
        ("FP4_E2M1", E2M1),
        ("BF16", BF16),
    ] {
        let c = &g["codecs"][name];
        let input = floats(&c["input"]);
        let got: Vec<f32> = input.iter().map(|&x| mf.decode(mf.encode(mf.round(x)))).collect();
        assert_close(name, &got, &floats(&c["expected"]));
    }
}

#[test]
fn block_formats_match_golden() {
    let g = golden("block_formats.json");
    let cases = [
        ("MXFP4", Codec::Mx(MxElement::E2M1)),
        ("MXFP8_E4M3", Codec::Mx(MxElement::E4M3)),
        ("NVFP4", Codec::Nvfp4),
        ("NF4", Codec::Nf4 { block: 64 }),
        ("INT4_G128_ASYM", Codec::IntGroupAsym { bits: 4, group: 128 }),
        ("INT8_PER_CHANNEL", Codec::Int8PerChannel),
        ("FP8_E4M3_PER_TENSOR", Codec::Fp8PerTensor(FloatKind::E4M3)),
    ];
    for (name, codec) in cases {
        let f = &g["formats"][name];
        let shape: Vec<usize> = f["shape"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap() as usize).collect();
        let input = floats(&f["input"]);
        let q = quantize(codec, &input, shape[0], shape[1]).unwrap();
        let got = dequantize(&q);
        assert_close(name, &got, &floats(&f["expected"]));
        let sqnr = ErrorMetrics::of(&input, &got).sqnr_db;
        let want = f["sqnr_db"].as_f64().unwrap();
        assert!((sqnr - want).abs() < 1e-3, "{name}: SQNR {sqnr} vs {want}");
    }
}

//! API tests against the real router (every layer included), driven with `tower::ServiceExt::oneshot`.

use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::{header, HeaderMap, Method, Request, StatusCode};
use axum::routing::get;
use axum::Router;
use http_body_util::BodyExt;
use roofline_core::model::{analyze_model, ModelConfig, ModelReport, ModelRequest};
use roofline_core::recommend::{recommend, RecommendReport, RecommendRequest};
use roofline_core::{predict_report, Format, HardwareProfile, PredictReport, PredictRequest, Scheme};
use roofline_server::{router, with_layers, AppState, ErrorBody, ServerConfig};
use serde_json::{json, Value};
use tower::ServiceExt;

fn app() -> Router {
    router(AppState::new(ServerConfig::default())).expect("router")
}

struct Resp {
    status: StatusCode,
    headers: HeaderMap,
    body: Bytes,
}

impl Resp {
    fn json<T: serde::de::DeserializeOwned>(&self) -> T {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| {
            panic!(
                "status {}: body is not the expected JSON ({e}): {}",
                self.status,
                String::from_utf8_lossy(&self.body)
            )
        })
    }
    fn error(&self) -> ErrorBody {
        let e: ErrorBody = self.json();
        assert_eq!(e.status, self.status.as_u16(), "status repeated in the body");
        assert!(!e.error.is_empty());
        e
    }
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
    fn content_type(&self) -> &str {
        self.headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("")
    }
}

async fn send(app: &Router, method: Method, uri: &str, body: Option<&str>) -> Resp {
    let mut req = Request::builder().method(method).uri(uri);
    if body.is_some() {
        req = req.header(header::CONTENT_TYPE, "application/json");
    }
    let req = req.body(body.map(|b| Body::from(b.to_string())).unwrap_or_else(Body::empty)).expect("request");
    let resp = app.clone().oneshot(req).await.expect("infallible");
    let status = resp.status();
    let headers = resp.headers().clone();
    let body = resp.into_body().collect().await.expect("body").to_bytes();
    Resp { status, headers, body }
}

async fn post(uri: &str, body: &str) -> Resp {
    send(&app(), Method::POST, uri, Some(body)).await
}

async fn get_(uri: &str) -> Resp {
    send(&app(), Method::GET, uri, None).await
}

/// Asserts a 422 naming `field`.
async fn rejects(uri: &str, body: &str, field: &str) {
    let r = post(uri, body).await;
    assert_eq!(r.status, StatusCode::UNPROCESSABLE_ENTITY, "{body}: {}", r.text());
    let e = r.error();
    assert_eq!(e.field.as_deref(), Some(field), "{body}: {}", e.error);
}

#[tokio::test]
async fn seeds_example_matches_the_cli_path() {
    let r = post("/api/analyze?hardware_key=b10", r#"{"M":1,"N":4096,"K":4096,"precision":"FP16"}"#).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    assert!(r.content_type().starts_with("application/json"));
    let got: PredictReport = r.json();
    // Exactly what `roofline predict --hw b10 --precision fp16 --json` computes.
    let hw = HardwareProfile::preset("b10").unwrap();
    let req = PredictRequest { m: 1, n: 4096, k: 4096, batch: 1, schemes: vec![Scheme::uniform(Format::FP16)] };
    assert_eq!(got, predict_report(&req, &hw).unwrap());
    assert_eq!(got.hardware, "seed-gb10");
    assert_eq!(got.rows.len(), 1);
    let p = &got.rows[0].prediction;
    // W 4096x4096 FP16 + x 1x4096 + y 1x4096, FP16: 2 bytes each.
    assert_eq!(p.bytes, (4096 * 4096 + 4096 + 4096) * 2);
    assert_eq!(p.flops, 2 * 4096 * 4096);
    assert!((p.time_us - p.bytes as f64 / (hw.memory_bandwidth_gb_s * 1e3)).abs() < 1e-9);
    assert_eq!(p.bound.as_str(), "memory");
}

#[tokio::test]
async fn seeds_hardware_keys_and_defaults() {
    for key in ["b10", "gb10", "b200", "h100", "a100"] {
        let r = post(&format!("/api/analyze?hardware_key={key}"), r#"{"M":1,"N":4096,"K":4096}"#).await;
        assert_eq!(r.status, StatusCode::OK, "{key}: {}", r.text());
        let rep: PredictReport = r.json();
        let hw = HardwareProfile::preset(key).unwrap();
        assert_eq!(rep.hardware, hw.key);
        // No scheme given: one row per native format, the fastest marked best.
        assert_eq!(rep.rows.len(), hw.native_formats().len(), "{key}");
        assert_eq!(rep.rows.iter().filter(|r| r.best).count(), 1);
    }
    // The body may name the hardware too; the query parameter wins.
    let r = post("/api/analyze?hardware_key=h100", r#"{"m":1,"n":8,"k":8,"hardware_key":"b200"}"#).await;
    assert_eq!(r.json::<PredictReport>().hardware, "h100-sxm");
    let r = post("/api/analyze", r#"{"m":1,"n":8,"k":8,"hardware_key":"b200"}"#).await;
    assert_eq!(r.json::<PredictReport>().hardware, "b200");
}

#[tokio::test]
async fn analyze_schemes_in_every_spelling() {
    let body = json!({"m": 16, "n": 4096, "k": 4096, "precision": "fp8",
        "schemes": ["W:INT4_G128 A:FP16", {"weights": "NVFP4", "activations": "NVFP4"}, "fp8"]});
    let r = post("/api/analyze?hardware_key=b200", &body.to_string()).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    let rep: PredictReport = r.json();
    let labels: Vec<_> = rep.rows.iter().map(|r| r.label.as_str()).collect();
    // Duplicates (fp8 twice) are dropped; order is precision first, then the list.
    assert_eq!(labels, ["FP8_E4M3", "W:INT4_G128 A:FP16", "NVFP4"]);
    assert_eq!(rep.m, 16);
}

#[tokio::test]
async fn validation_errors_name_the_field() {
    let a = "/api/analyze";
    rejects(a, r#"{"M":0,"N":4096,"K":4096}"#, "m").await;
    rejects(a, r#"{"M":1,"K":4096}"#, "n").await;
    rejects(a, r#"{"M":"x","N":4096,"K":4096}"#, "m").await;
    rejects(a, r#"{"M":-3,"N":4096,"K":4096}"#, "m").await;
    rejects(a, r#"{"M":1,"N":4096,"K":99999999999}"#, "k").await;
    rejects(a, r#"{"M":1,"N":4096,"K":4096,"batch":0}"#, "batch").await;
    rejects(a, r#"{"M":1,"N":4096,"K":4096,"precision":"FP7"}"#, "precision").await;
    rejects(a, r#"{"M":1,"N":4096,"K":4096,"schemes":["FP16","bogus"]}"#, "schemes[1]").await;
    rejects(
        a,
        r#"{"M":1,"N":4096,"K":4096,"schemes":[{"weights":"INT4","activations":"nope"}]}"#,
        "schemes[0].activations",
    )
    .await;
    rejects(a, r#"{"M":1,"N":4096,"K":4096,"colour":"red"}"#, "colour").await;
    rejects(a, r#"{"M":1,"m":2,"N":4096,"K":4096}"#, "m").await;
    rejects("/api/analyze?hardware_key=tpu9", r#"{"M":1,"N":4096,"K":4096}"#, "hardware_key").await;
    let r = post(a, r#"{"M":1,"N":4096,"K":4096,"precision":"FP7"}"#).await;
    assert!(r.error().error.contains("FP16"), "an unknown format lists the known ones");

    // Not JSON at all: 400; empty body: 400.
    for bad in ["{nope", "", "   "] {
        let r = post(a, bad).await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{bad:?}");
        r.error();
    }
    // Query parameters are checked the same way.
    let r = get_("/api/plot.svg?m=abc").await;
    assert_eq!(r.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(r.error().field.as_deref(), Some("m"));
    let r = get_("/api/plot.svg?width=5").await;
    assert_eq!(r.error().field.as_deref(), Some("width"));
}

#[tokio::test]
async fn body_limit_answers_413() {
    let config = ServerConfig { body_limit_bytes: 256, ..ServerConfig::default() };
    let app = router(AppState::new(config)).unwrap();
    let big = json!({"m": 1, "n": 4096, "k": 4096, "precision": "x".repeat(1000)}).to_string();
    let r = send(&app, Method::POST, "/api/analyze", Some(&big)).await;
    assert_eq!(r.status, StatusCode::PAYLOAD_TOO_LARGE);
    assert!(r.error().error.contains("limit"));
    let r = send(&app, Method::POST, "/api/analyze", Some(r#"{"M":1,"N":4096,"K":4096}"#)).await;
    assert_eq!(r.status, StatusCode::OK);
}

#[tokio::test]
async fn hardware_endpoints() {
    let r = get_("/api/hardware").await;
    assert_eq!(r.status, StatusCode::OK);
    let list: Vec<Value> = r.json();
    assert_eq!(list.len(), HardwareProfile::presets().unwrap().len());
    let seed = list.iter().find(|h| h["key"] == "seed-gb10").expect("seed-gb10 listed");
    assert!(seed["aliases"].as_array().unwrap().iter().any(|a| a == "b10"));

    let r = get_("/api/hardware/b10").await;
    assert_eq!(r.status, StatusCode::OK);
    let hw: HardwareProfile = r.json();
    assert_eq!(hw, HardwareProfile::preset("seed-gb10").unwrap());

    let r = get_("/api/hardware/tpu9").await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    assert_eq!(r.error().field.as_deref(), Some("key"));

    let body = json!({"hardware": {"memory_bandwidth_gb_s": 500, "peak_tflops": {"FP16": 50, "INT8": 100}},
        "m": 1, "n": 4096, "k": 4096, "precision": "INT8"});
    let r = post("/api/hardware", &body.to_string()).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    let rep: PredictReport = r.json();
    let p = &rep.rows[0].prediction;
    assert_eq!(p.bandwidth_gb_s, 500.0);
    assert_eq!(p.peak_tflops, 100.0);
    assert!((p.time_us - p.bytes as f64 / 500e3).abs() < 1e-9);

    // A read-stream bandwidth: the GEMV's reads move at 600 GB/s, its written output at 2/500 - 1/600.
    let body = json!({"hardware": {"memory_bandwidth_gb_s": 500, "read_bandwidth_gb_s": 600,
        "peak_tflops": {"FP16": 50, "INT8": 100}}, "m": 1, "n": 4096, "k": 4096, "precision": "INT8"});
    let r = post("/api/hardware", &body.to_string()).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    let rep: PredictReport = r.json();
    let p = &rep.rows[0].prediction;
    let written = 8192.0; // one output row of 16-bit values (the INT8 scheme writes FP16)
    let read = p.bytes as f64 - written;
    let expected = read / 600e3 + written * (2.0 / 500e3 - 1.0 / 600e3);
    assert!((p.time_us - expected).abs() < 1e-9, "{} vs {expected}", p.time_us);
    assert!(p.bandwidth_gb_s > 599.0 && p.bandwidth_gb_s < 600.0, "{}", p.bandwidth_gb_s);
    let bad = json!({"hardware": {"memory_bandwidth_gb_s": 5, "read_bandwidth_gb_s": 0, "peak_tflops": {"FP16": 50}},
        "m": 1, "n": 8, "k": 8});
    rejects("/api/hardware", &bad.to_string(), "hardware.read_bandwidth_gb_s").await;

    let bad = json!({"hardware": {"memory_bandwidth_gb_s": -1, "peak_tflops": {"FP16": 50}}, "m": 1, "n": 8, "k": 8});
    rejects("/api/hardware", &bad.to_string(), "hardware.memory_bandwidth_gb_s").await;
    let bad = json!({"hardware": {"memory_bandwidth_gb_s": 5, "peak_tflops": {"FP99": 50}}, "m": 1, "n": 8, "k": 8});
    rejects("/api/hardware", &bad.to_string(), "hardware.peak_tflops.FP99").await;
    let bad = json!({"hardware": {"peak_tflops": {"FP16": 50}}, "m": 1, "n": 8, "k": 8});
    rejects("/api/hardware", &bad.to_string(), "hardware.memory_bandwidth_gb_s").await;
}

#[tokio::test]
async fn formats_catalog() {
    let r = get_("/api/formats?hardware_key=b200").await;
    assert_eq!(r.status, StatusCode::OK);
    let list: Vec<Value> = r.json();
    assert_eq!(list.len(), Format::ALL.len());
    let native = |name: &str| list.iter().find(|f| f["name"] == name).unwrap()["native"].as_bool().unwrap();
    assert!(native("NVFP4"), "B200 runs NVFP4 natively");
    let r = get_("/api/formats?hardware_key=h100").await;
    let list: Vec<Value> = r.json();
    assert!(!list.iter().find(|f| f["name"] == "NVFP4").unwrap()["native"].as_bool().unwrap());
}

#[tokio::test]
async fn model_matches_the_core_analysis() {
    let r =
        post("/api/model?hardware_key=h100", r#"{"model":"llama-3.1-8b","phase":"decode","batch":4,"seq":2048}"#).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    let got: ModelReport = r.json();
    let cfg = ModelConfig::presets().unwrap().into_iter().find(|(k, _)| k == "llama-3.1-8b").unwrap().1;
    let req = ModelRequest {
        phase: roofline_core::recommend::Phase::Decode,
        batch: 4,
        seq: 2048,
        tp: 1,
        weights: Format::BF16,
        activations: Format::BF16,
        kv: Format::BF16,
        roles: Default::default(),
        fused: false,
    };
    let want = analyze_model(&cfg, &req, &HardwareProfile::preset("h100").unwrap()).unwrap();
    assert_eq!(got, want);
    assert!(got.totals.tokens_per_s > 0.0);

    // A fused engine: the same analysis with `fused`, norms and residual adds marked where they run.
    let r = post(
        "/api/model?hardware_key=h100",
        r#"{"model":"llama-3.1-8b","phase":"decode","batch":4,"seq":2048,"fused":true}"#,
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    let fused: ModelReport = r.json();
    let want =
        analyze_model(&cfg, &ModelRequest { fused: true, ..req }, &HardwareProfile::preset("h100").unwrap()).unwrap();
    assert_eq!(fused, want);
    assert!(fused.ops.iter().any(|o| o.name == "input_layernorm" && o.fused_into.as_deref() == Some("qkv_proj")));
    assert!(fused.totals.time_us <= got.totals.time_us);

    let list = get_("/api/models").await;
    assert_eq!(list.status, StatusCode::OK);
    let models: Vec<Value> = list.json();
    assert!(models.iter().any(|m| m["key"] == "llama-3.1-8b"));

    rejects("/api/model", r#"{"model":"gpt-9"}"#, "model").await;
    rejects("/api/model", r#"{}"#, "model").await;
    rejects("/api/model", r#"{"model":"gpt2","phase":"training"}"#, "phase").await;
    rejects("/api/model", r#"{"model":"gpt2","batch":0}"#, "batch").await;
    rejects("/api/model", r#"{"model":"gpt2","kv":"fp7"}"#, "kv").await;
    rejects("/api/model", r#"{"config":{"hidden_size":4096}}"#, "config").await;
    rejects("/api/model", r#"{"config":"not json"}"#, "config").await;
}

#[tokio::test]
async fn model_from_pasted_config_json() {
    let config = json!({
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 2048,
        "intermediate_size": 8192, "num_hidden_layers": 16, "num_attention_heads": 32,
        "num_key_value_heads": 8, "vocab_size": 128256, "max_position_embeddings": 8192,
        "tie_word_embeddings": true, "torch_dtype": "bfloat16"
    });
    let body = json!({"config": config, "phase": "prefill", "seq": 512});
    let r = post("/api/model?hardware_key=b200", &body.to_string()).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    let got: ModelReport = r.json();
    let cfg = ModelConfig::from_json(&config.to_string()).unwrap();
    let req = ModelRequest {
        phase: roofline_core::recommend::Phase::Prefill,
        batch: 1,
        seq: 512,
        tp: 1,
        weights: Format::BF16,
        activations: Format::BF16,
        kv: Format::BF16,
        roles: Default::default(),
        fused: false,
    };
    assert_eq!(got, analyze_model(&cfg, &req, &HardwareProfile::preset("b200").unwrap()).unwrap());
    // The config may also come as text.
    let body = json!({"config": config.to_string(), "phase": "prefill", "seq": 512});
    let r2 = post("/api/model?hardware_key=b200", &body.to_string()).await;
    assert_eq!(r2.json::<ModelReport>(), got);
}

#[tokio::test]
async fn recommend_matches_the_core() {
    let r = post("/api/recommend?hardware_key=b10", r#"{"M":1,"N":4096,"K":4096}"#).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    let got: RecommendReport = r.json();
    let want = recommend(&RecommendRequest::new(1, 4096, 4096), &HardwareProfile::preset("b10").unwrap()).unwrap();
    assert_eq!(got, want);
    assert!(!got.reason.is_empty());
    rejects("/api/recommend", r#"{"M":1,"N":4096,"K":4096,"phase":"later"}"#, "phase").await;
    rejects("/api/recommend", r#"{"M":1,"N":4096,"K":4096,"memory_limit_gb":-2}"#, "memory_limit_gb").await;
}

#[tokio::test]
async fn tiling_and_sweep() {
    let r = post("/api/tiling?hardware_key=h100", r#"{"M":4096,"N":4096,"K":4096,"precision":"FP16"}"#).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    let v: Value = r.json();
    assert_eq!(v["m"], 4096);
    rejects("/api/tiling", r#"{"M":64,"N":64,"K":64,"tile":{"bm":0,"bn":64,"bk":32}}"#, "tile.bm").await;
    rejects("/api/tiling", r#"{"M":64,"N":64,"K":64,"precision":"FP16","scheme":"FP8"}"#, "scheme").await;

    let r = post("/api/sweep?hardware_key=h100", r#"{"m":[1,16,256,4096],"n":4096,"k":4096,"schemes":["FP16","FP8"]}"#)
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    let points: Vec<roofline_core::DualPoint> = r.json();
    assert_eq!(points.len(), 8);
    assert!(points.iter().all(|p| p.measurement.is_none()));
    // Arithmetic intensity grows with M for a fixed weight matrix.
    let fp16: Vec<f64> =
        points.iter().filter(|p| p.label == "FP16").map(|p| p.prediction.arithmetic_intensity).collect();
    assert!(fp16.windows(2).all(|w| w[0] < w[1]), "{fp16:?}");
    rejects("/api/sweep", r#"{"m":[1,0],"n":8,"k":8}"#, "m[1]").await;
    rejects("/api/sweep", r#"{"m":[],"n":8,"k":8}"#, "m").await;
    let huge = json!({"m": (1..=100).collect::<Vec<u64>>(), "n": (1..=100).collect::<Vec<u64>>(), "k": 8});
    rejects("/api/sweep", &huge.to_string(), "m").await;
}

#[tokio::test]
async fn plot_svg_is_the_report_chart() {
    let r = get_("/api/plot.svg?hardware_key=b200&m=1&n=4096&k=4096&formats=FP16,FP8_E4M3,NVFP4").await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    assert!(r.content_type().starts_with("image/svg+xml"));
    let svg = r.text();
    assert!(svg.starts_with("<svg"));
    for label in ["FP16", "FP8_E4M3", "NVFP4"] {
        assert!(svg.contains(&format!(r#"data-label="{label}""#)), "{label}");
    }
    assert_eq!(svg.matches(r#"<g class="point"#).count(), 3);
    // Only the roofs the points use (FP16, FP8, FP4), unless all are asked for.
    assert_eq!(svg.matches(r#"<g class="roof""#).count(), 3);
    let all = get_("/api/plot.svg?hardware_key=b200&formats=FP16&roofs=all").await.text();
    let b200 = HardwareProfile::preset("b200").unwrap();
    assert_eq!(all.matches(r#"<g class="roof""#).count(), b200.peak_tflops.iter().count());
    let r = get_("/api/plot.svg?roofs=some").await;
    assert_eq!(r.error().field.as_deref(), Some("roofs"));

    // The point's data-time-us is the prediction of /api/analyze for the same shape.
    let rep: PredictReport =
        post("/api/analyze?hardware_key=b200", r#"{"M":1,"N":4096,"K":4096,"precision":"NVFP4"}"#).await.json();
    let t = format!(r#"data-time-us="{:.3}""#, rep.rows[0].prediction.time_us);
    assert!(svg.contains(&t), "{t}");
}

#[tokio::test]
async fn plot_posted_points_with_a_measurement() {
    let body = json!({"hardware_key": "h100", "title": "measured", "points": [
        {"label": "FP16", "gemm": {"m": 4096, "n": 4096, "k": 4096, "batch": 1, "weights_shared": true,
            "scheme": {"weights": "FP16", "activations": "FP16", "output": "FP16"}},
         "measurement": {"device": "test", "time_us": 300.0, "time_us_min": 290.0, "time_us_max": 310.0,
            "runs": 10, "tflops": 458.0, "bandwidth_gb_s": 335.0, "kernel": "cublaslt"}},
        {"label": "FP8_E4M3", "gemm": {"m": 4096, "n": 4096, "k": 4096, "batch": 1, "weights_shared": true,
            "scheme": {"weights": "FP8_E4M3", "activations": "FP8_E4M3", "output": "FP16"}}}
    ]});
    let r = post("/api/plot.svg", &body.to_string()).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    let svg = r.text();
    assert_eq!(svg.matches(r#"data-measured-us="300.000""#).count(), 1);
    assert_eq!(svg.matches("data-measured-us=").count(), 1, "only the measured point carries a measurement");
    assert!(svg.contains(">measured</text>"));

    // Only the roofs the points use: FP16 and FP8 (not FP64, TF32, ...), unless all are asked for.
    assert_eq!(svg.matches(r#"<g class="roof""#).count(), 2, "{svg}");
    let mut all = body.clone();
    all["roofs"] = json!("all");
    let svg = post("/api/plot.svg", &all.to_string()).await.text();
    let h100 = HardwareProfile::preset("h100").unwrap();
    assert_eq!(svg.matches(r#"<g class="roof""#).count(), h100.peak_tflops.iter().count());

    let mut bad = body.clone();
    bad["points"][1]["gemm"]["m"] = json!(0);
    rejects("/api/plot.svg", &bad.to_string(), "points[1].gemm.m").await;
    let mut bad = body.clone();
    bad["points"][0]["measurement"]["time_us"] = json!(-1.0);
    rejects("/api/plot.svg", &bad.to_string(), "points[0].measurement.time_us").await;
}

/// Whether this machine has an NVIDIA driver (then the GPU endpoints answer 200 instead of 503).
fn has_driver() -> bool {
    roofline_gpu::probe_driver().is_ok()
}

#[tokio::test]
async fn nvml_status_503_without_a_driver() {
    let r = get_("/api/nvml/status").await;
    if has_driver() {
        assert_eq!(r.status, StatusCode::OK, "{}", r.text());
        let v: Value = r.json();
        assert!(!v["gpus"].as_array().unwrap().is_empty());
    } else {
        assert_eq!(r.status, StatusCode::SERVICE_UNAVAILABLE, "{}", r.text());
        assert!(r.error().error.contains("NVML"), "{}", r.text());
    }
}

#[tokio::test]
async fn measure_validates_then_needs_a_gpu() {
    rejects("/api/measure", r#"{"m":1,"n":4096,"k":4096,"precision":"NVFP4"}"#, "precision").await;
    rejects("/api/measure", r#"{"m":1,"n":4096,"k":100000}"#, "k").await;
    rejects("/api/measure", r#"{"m":0,"n":4096,"k":4096}"#, "m").await;
    rejects("/api/measure?hardware_key=nope", r#"{"m":1,"n":4096,"k":4096}"#, "hardware_key").await;
    // Weight-only: the formats roofline's GEMV kernels take, at most 16 rows, K a multiple of the block.
    rejects("/api/measure", r#"{"m":1,"n":4096,"k":4096,"weights":"MXINT8"}"#, "weights").await;
    rejects("/api/measure", r#"{"m":1,"n":4096,"k":4096,"weights":"bogus"}"#, "weights").await;
    rejects("/api/measure", r#"{"m":17,"n":4096,"k":4096,"weights":"INT4_G128"}"#, "m").await;
    rejects("/api/measure", r#"{"m":1,"n":4096,"k":4000,"weights":"INT4_G128"}"#, "k").await;
    rejects("/api/measure", r#"{"m":1,"n":4096,"k":4096,"weights":"NF4","activations":"FP8_E4M3"}"#, "activations")
        .await;
    rejects("/api/measure", r#"{"m":1,"n":4096,"k":4096,"weights":"NF4","precision":"FP16"}"#, "precision").await;
    rejects("/api/measure", r#"{"m":1,"n":4096,"k":4096,"precision":"FP16","graph":true}"#, "graph").await;
    rejects("/api/measure", r#"{"m":1,"n":4096,"k":4096,"activations":"BF16"}"#, "activations").await;
    if !has_driver() {
        let r = post("/api/measure", r#"{"m":1,"n":4096,"k":4096,"precision":"FP16"}"#).await;
        assert_eq!(r.status, StatusCode::SERVICE_UNAVAILABLE);
        assert!(r.error().error.contains("no NVIDIA GPU"), "{}", r.text());
        let r = post("/api/measure", r#"{"m":1,"n":4096,"k":4096,"weights":"NVFP4","graph":true}"#).await;
        assert_eq!(r.status, StatusCode::SERVICE_UNAVAILABLE, "{}", r.text());
    }
}

#[tokio::test]
#[ignore = "needs an NVIDIA GPU"]
async fn measure_on_gpu() {
    let r = post("/api/measure?hardware_key=h100", r#"{"m":4096,"n":4096,"k":4096,"precision":"FP16"}"#).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    let p: roofline_core::DualPoint = r.json();
    let m = p.measurement.expect("measured");
    assert!(m.time_us > 0.0 && m.tflops > 0.0);
    // A weight-only GEMV on roofline's kernels, with its CUDA-graph replay time.
    let r = post("/api/measure?hardware_key=h100", r#"{"m":1,"n":14336,"k":4096,"weights":"INT4_G128","graph":true}"#)
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    let p: roofline_core::DualPoint = r.json();
    assert_eq!(p.label, "W:INT4_G128 A:FP16");
    let m = p.measurement.expect("measured");
    assert!(m.time_us > 0.0 && m.graph_us.is_some_and(|g| g > 0.0) && m.host_us.is_some_and(|h| h > 0.0), "{m:?}");
    assert!(m.kernel.contains("roofline"), "{}", m.kernel);
}

#[tokio::test]
async fn page_and_assets_are_embedded() {
    let r = get_("/").await;
    assert_eq!(r.status, StatusCode::OK);
    assert!(r.content_type().starts_with("text/html"));
    let html = r.text();
    for id in [r#"id="chart""#, r#"id="predict-table""#, r#"id="model-panel""#, r#"id="nvml""#, "/app.js", "/app.css"] {
        assert!(html.contains(id), "{id}");
    }
    assert!(!html.contains("http://") && !html.contains("https://"), "no external resources");
    let js = get_("/app.js").await;
    assert!(js.content_type().starts_with("text/javascript"));
    assert!(js.text().contains("/api/plot.svg"));
    let css = get_("/app.css").await;
    assert!(css.content_type().starts_with("text/css"));
    let r = get_("/healthz").await;
    assert_eq!(r.json::<Value>()["status"], "ok");
}

#[tokio::test]
async fn unknown_routes_and_methods() {
    let r = get_("/api/nothing").await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    assert!(r.error().error.contains("openapi"));
    let r = get_("/api/analyze").await;
    assert_eq!(r.status, StatusCode::METHOD_NOT_ALLOWED);
}

/// Every route the server answers, as (method, OpenAPI path, a concrete URI, a valid body).
const ROUTES: &[(&str, &str, &str, Option<&str>)] = &[
    ("get", "/", "/", None),
    ("get", "/app.js", "/app.js", None),
    ("get", "/app.css", "/app.css", None),
    ("get", "/healthz", "/healthz", None),
    ("get", "/api/openapi.json", "/api/openapi.json", None),
    ("post", "/api/analyze", "/api/analyze", Some(r#"{"M":1,"N":64,"K":64}"#)),
    ("get", "/api/hardware", "/api/hardware", None),
    (
        "post",
        "/api/hardware",
        "/api/hardware",
        Some(r#"{"hardware":{"memory_bandwidth_gb_s":1,"peak_tflops":{"FP16":1}},"m":1,"n":8,"k":8}"#),
    ),
    ("get", "/api/hardware/{key}", "/api/hardware/h100", None),
    ("get", "/api/formats", "/api/formats", None),
    ("get", "/api/models", "/api/models", None),
    ("post", "/api/model", "/api/model", Some(r#"{"model":"gpt2"}"#)),
    ("post", "/api/recommend", "/api/recommend", Some(r#"{"M":1,"N":64,"K":64}"#)),
    ("post", "/api/tiling", "/api/tiling", Some(r#"{"M":64,"N":64,"K":64}"#)),
    ("post", "/api/sweep", "/api/sweep", Some(r#"{"m":1,"n":64,"k":64}"#)),
    ("get", "/api/plot.svg", "/api/plot.svg", None),
    ("post", "/api/plot.svg", "/api/plot.svg", Some(r#"{"points":[]}"#)),
    ("post", "/api/measure", "/api/measure", Some(r#"{"m":64,"n":64,"k":64}"#)),
    ("get", "/api/nvml/status", "/api/nvml/status", None),
];

#[tokio::test]
async fn openapi_document_covers_every_route() {
    let r = get_("/api/openapi.json").await;
    assert_eq!(r.status, StatusCode::OK);
    let doc: Value = r.json();
    assert!(doc["openapi"].as_str().unwrap().starts_with("3."));
    assert!(doc["info"]["title"].is_string() && doc["info"]["version"].is_string());
    let paths = doc["paths"].as_object().expect("paths");
    let mut documented = 0;
    for (path, item) in paths {
        for method in item.as_object().unwrap().keys() {
            documented += 1;
            assert!(
                ROUTES.iter().any(|(m, p, _, _)| m == method && p == path),
                "{method} {path} is documented but not in the route list"
            );
        }
    }
    assert_eq!(documented, ROUTES.len(), "every route documented once");
    let app = app();
    for (method, path, uri, body) in ROUTES {
        let op = &paths.get(*path).unwrap_or_else(|| panic!("{path} missing from the OpenAPI document"))[*method];
        assert!(op.is_object(), "{method} {path} missing from the OpenAPI document");
        assert!(op["responses"]["200"].is_object(), "{method} {path} documents its 200");
        assert!(op["operationId"].is_string() && op["summary"].is_string(), "{method} {path} is described");
        for (code, resp) in op["responses"].as_object().unwrap() {
            assert!(code.parse::<u16>().is_ok() && resp["description"].is_string(), "{method} {path} {code}");
            for (_, media) in resp["content"].as_object().into_iter().flatten() {
                let schema = &media["schema"];
                assert!(
                    schema.is_object() && !schema.as_object().unwrap().is_empty(),
                    "{method} {path} {code}: empty schema"
                );
            }
        }
        if *method == "post" {
            assert!(op["requestBody"].is_object(), "{method} {path} documents its body");
            let rendered = op.to_string();
            if path.starts_with("/api/") && *path != "/api/plot.svg" {
                assert!(rendered.contains("422"), "{method} {path} documents its 422");
            }
        }
        // ...and the router really answers it (GPU routes may say 503 here).
        let m = if *method == "get" { Method::GET } else { Method::POST };
        let r = send(&app, m, uri, *body).await;
        assert!(
            r.status == StatusCode::OK || r.status == StatusCode::SERVICE_UNAVAILABLE,
            "{method} {uri}: {} {}",
            r.status,
            r.text()
        );
    }
    // Schemas referenced by the documented types are present.
    let schemas = doc["components"]["schemas"].as_object().unwrap();
    for s in ["ErrorBody", "PredictReport", "AnalyzeBody", "ModelBody", "NvmlStatus"] {
        assert!(schemas.contains_key(s), "schema {s}");
    }
    // Every $ref resolves.
    let text = doc.to_string();
    for part in text.split("\"$ref\":\"#/components/schemas/").skip(1) {
        let name = &part[..part.find('"').unwrap()];
        assert!(schemas.contains_key(name), "dangling $ref {name}");
    }
}

#[tokio::test]
async fn a_panic_is_a_500_and_the_server_keeps_serving() {
    let routes = Router::new()
        .route("/boom", get(|| async { panic!("kaboom") as &'static str }))
        .route("/fine", get(|| async { "fine" }));
    let app = with_layers(routes, &ServerConfig::default()).unwrap();
    let r = send(&app, Method::GET, "/boom", None).await;
    assert_eq!(r.status, StatusCode::INTERNAL_SERVER_ERROR);
    assert!(r.error().error.contains("kaboom"));
    let r = send(&app, Method::GET, "/fine", None).await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.text(), "fine");
}

#[tokio::test]
async fn slow_requests_time_out_with_a_json_503() {
    let routes = Router::new().route(
        "/slow",
        get(|| async {
            tokio::time::sleep(Duration::from_secs(5)).await;
            "late"
        }),
    );
    let config = ServerConfig { request_timeout: Duration::from_millis(50), ..ServerConfig::default() };
    let app = with_layers(routes, &config).unwrap();
    let r = send(&app, Method::GET, "/slow", None).await;
    assert_eq!(r.status, StatusCode::SERVICE_UNAVAILABLE);
    assert!(r.error().error.contains("limit"));
}

#[tokio::test]
async fn cors_only_when_asked() {
    let origin_req = |app: Router| async move {
        let req = Request::builder()
            .uri("/healthz")
            .header(header::ORIGIN, "http://localhost:3000")
            .body(Body::empty())
            .unwrap();
        app.oneshot(req).await.unwrap()
    };
    let resp = origin_req(app()).await;
    assert!(resp.headers().get(header::ACCESS_CONTROL_ALLOW_ORIGIN).is_none(), "CORS is off by default");

    let config = ServerConfig { cors_origin: Some("http://localhost:3000".into()), ..ServerConfig::default() };
    let resp = origin_req(router(AppState::new(config)).unwrap()).await;
    assert_eq!(resp.headers().get(header::ACCESS_CONTROL_ALLOW_ORIGIN).unwrap(), "http://localhost:3000");

    for bad in ["*", "localhost:3000", "http://bad\norigin"] {
        let config = ServerConfig { cors_origin: Some(bad.into()), ..ServerConfig::default() };
        assert!(router(AppState::new(config)).is_err(), "{bad:?}");
    }
}

#[tokio::test]
async fn graceful_shutdown_finishes_and_returns() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(roofline_server::serve_on(listener, ServerConfig::default(), async {
        let _ = rx.await;
    }));
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n").await.unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).await.unwrap();
    assert!(out.starts_with("HTTP/1.1 200"), "{out}");
    tx.send(()).unwrap();
    let done = tokio::time::timeout(Duration::from_secs(5), server).await.expect("server stopped after the signal");
    done.unwrap().unwrap();
    assert!(tokio::net::TcpStream::connect(addr).await.is_err(), "no longer listening");
}

#[tokio::test]
async fn served_profiles_are_listed_first_and_chosen_by_key() {
    let measured = HardwareProfile::from_toml(
        include_str!("../../../bench/results/h200-measured.toml"),
        "bench/results/h200-measured.toml",
    )
    .unwrap();
    assert!(measured.read_bandwidth_gb_s.is_some());
    let config = ServerConfig { profiles: vec![measured.clone()], ..ServerConfig::default() };
    let app = router(AppState::new(config)).unwrap();

    let r = send(&app, Method::GET, "/api/hardware", None).await;
    assert_eq!(r.status, StatusCode::OK);
    let list: Vec<Value> = r.json();
    assert_eq!(list[0]["key"], measured.key.as_str());
    assert_eq!(list[0]["served"], true);
    assert_eq!(list[0]["read_bandwidth_gb_s"], measured.read_bandwidth_gb_s.unwrap());
    assert!(list[1..].iter().all(|h| h["served"] == false));

    let r = send(&app, Method::GET, &format!("/api/hardware/{}", measured.key), None).await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.json::<HardwareProfile>(), measured);

    // Predictions on it price the GEMV's reads at its read stream.
    let uri = format!("/api/analyze?hardware_key={}", measured.key.to_uppercase());
    let r = send(&app, Method::POST, &uri, Some(r#"{"M":1,"N":4096,"K":4096,"precision":"FP16"}"#)).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    let rep: PredictReport = r.json();
    let p = &rep.rows[0].prediction;
    assert!(p.bandwidth_gb_s > measured.memory_bandwidth_gb_s, "{} GB/s", p.bandwidth_gb_s);
    let gemv = roofline_core::Gemm::new(1, 4096, 4096, Scheme::uniform(Format::FP16)).unwrap();
    assert_eq!(*p, roofline_core::predict(&gemv, &measured).unwrap());

    // An unknown key names the served profiles too; a profile may not take a preset's key.
    let r = send(&app, Method::POST, "/api/analyze?hardware_key=tpu9", Some(r#"{"M":1,"N":8,"K":8}"#)).await;
    assert!(r.error().error.contains(&measured.key), "{}", r.text());
    let clash = HardwareProfile { key: "h100".into(), ..measured };
    let err = router(AppState::new(ServerConfig { profiles: vec![clash], ..ServerConfig::default() })).unwrap_err();
    assert!(err.to_string().contains("'h100' already names a preset"), "{err}");
}

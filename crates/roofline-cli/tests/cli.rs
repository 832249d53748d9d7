//! Runs the real `roofline` binary: seed tables, custom hardware, output formats and bad input.

use assert_cmd::Command;
use predicates::prelude::*;
use serde_json::Value;

fn roofline() -> Command {
    let mut c = Command::cargo_bin("roofline").expect("binary built");
    c.env_remove("ROOFLINE_HW");
    c
}

fn json(args: &[&str]) -> Value {
    let out = roofline().args(args).arg("--json").output().expect("runs");
    assert!(out.status.success(), "{:?}: {}", args, String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("valid JSON")
}

fn row<'a>(report: &'a Value, label: &str) -> &'a Value {
    report["rows"].as_array().unwrap().iter().find(|r| r["label"] == label).unwrap_or_else(|| panic!("row {label}"))
}

fn close(v: &Value, expected: f64, rel: f64) -> bool {
    let v = v.as_f64().unwrap();
    ((v - expected) / expected).abs() <= rel
}

#[test]
fn seed_gemv_table_on_placeholder_gb10() {
    let r = json(&["predict", "--hw", "seed-gb10"]);
    for (label, t, ai) in [("FP16", 33.6, 1.0), ("FP8_E4M3", 16.8, 2.0), ("INT8", 16.8, 2.0), ("INT4", 8.4, 4.0)] {
        let p = &row(&r, label)["prediction"];
        assert!(close(&p["time_us"], t, 0.01), "{label}: {}", p["time_us"]);
        assert!(close(&p["arithmetic_intensity"], ai, 0.01), "{label}");
        assert_eq!(p["bound"], "memory");
    }
    assert!(close(&row(&r, "NVFP4")["prediction"]["time_us"], 9.5, 0.01));
}

#[test]
fn seed_gemm_table_is_compute_bound() {
    let r =
        json(&["predict", "--hw", "seed-gb10", "--m", "2048", "-p", "fp16", "-p", "fp8", "-p", "int4", "-p", "nvfp4"]);
    for (label, t) in [("FP16", 343.6), ("FP8_E4M3", 171.8), ("INT4", 85.9), ("NVFP4", 85.9)] {
        let p = &row(&r, label)["prediction"];
        assert!(close(&p["time_us"], t, 0.01), "{label}: {}", p["time_us"]);
        assert_eq!(p["bound"], "compute");
    }
}

#[test]
fn weight_only_scheme_flags() {
    let r = json(&["predict", "--hw", "seed-gb10", "--weights", "int4", "--activations", "fp16"]);
    let p = &row(&r, "W:INT4 A:FP16")["prediction"];
    assert!(close(&p["time_us"], 8.4, 0.01), "{}", p["time_us"]);
    assert_eq!(p["mode"], "weight_only");
    let r = json(&["predict", "--hw", "seed-gb10", "--m", "2048", "--weights", "int4", "--activations", "fp16"]);
    let p = &row(&r, "W:INT4 A:FP16")["prediction"];
    assert!(close(&p["time_us"], 343.6, 0.01));
    assert_eq!(p["bound"], "compute");
}

#[test]
fn custom_asic_inline() {
    let r = json(&["predict", "--bandwidth-gb-s", "500", "--peak", "FP16=50", "--peak", "INT8=100"]);
    let labels: Vec<_> = r["rows"].as_array().unwrap().iter().map(|r| r["label"].as_str().unwrap()).collect();
    assert_eq!(labels, ["FP16", "INT8", "MXINT8"], "only the formats the ASIC computes natively");
    assert!(close(&row(&r, "INT8")["speedup_vs_fp16"], 2.0, 0.01));
}

#[test]
fn non_native_format_is_reported() {
    let r = json(&["predict", "--bandwidth-gb-s", "500", "--peak", "FP16=50", "-p", "fp8"]);
    let p = &row(&r, "FP8_E4M3")["prediction"];
    assert_eq!(p["mode"], "dequantized");
    assert!(p["note"].as_str().unwrap().contains("FP8"));
}

#[test]
fn table_marks_best_and_csv_has_header() {
    roofline()
        .args(["predict", "--hw", "seed-gb10"])
        .assert()
        .success()
        .stdout(predicate::str::contains("GEMV M=1 N=4096 K=4096").and(predicate::str::contains("* ┆ INT4")));
    roofline().args(["predict", "--hw", "seed-gb10", "--csv", "-p", "fp16"]).assert().success().stdout(
        predicate::str::starts_with("scheme,weights,activations,output,m,n,k")
            .and(predicate::str::contains("FP16,FP16,FP16,FP16,1,4096,4096")),
    );
}

#[test]
fn user_toml_profile() {
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("asic.toml");
    std::fs::write(
        &good,
        "key='asic'\nname='My ASIC'\nsource='user'\nmemory_bandwidth_gb_s=500\n[peak_tflops]\nFP16=50\nINT8=100\n",
    )
    .unwrap();
    let r = json(&["predict", "--hw", good.to_str().unwrap()]);
    assert_eq!(r["hardware"], "asic");
    let missing = dir.path().join("missing.toml");
    std::fs::write(&missing, "key='x'\nname='x'\nsource='user'\n[peak_tflops]\nFP16=50\n").unwrap();
    roofline()
        .args(["predict", "--hw", missing.to_str().unwrap()])
        .assert()
        .failure()
        .stderr(predicate::str::contains("memory_bandwidth_gb_s"));
    let negative = dir.path().join("negative.toml");
    std::fs::write(&negative, "key='x'\nname='x'\nsource='user'\nmemory_bandwidth_gb_s=100\n[peak_tflops]\nFP16=-50\n")
        .unwrap();
    roofline()
        .args(["predict", "--hw", negative.to_str().unwrap()])
        .assert()
        .failure()
        .stderr(predicate::str::contains("peak_tflops.FP16").and(predicate::str::contains("-50")));
    roofline()
        .args(["predict", "--hw", "/nonexistent/profile.toml"])
        .assert()
        .failure()
        .stderr(predicate::str::contains("/nonexistent/profile.toml"));
}

#[test]
fn bad_input_fails_with_one_clear_message() {
    let cases: &[(&[&str], &str)] = &[
        (&["predict", "--m", "0"], "--m"),
        (&["predict", "--m", "-5"], "must be an integer >= 1"),
        (&["predict", "--k", "abc"], "not an integer"),
        (&["predict", "--hw", "seed-gb10", "--m", "4294967296", "--n", "4294967296", "--k", "4294967296"], "overflows"),
        (&["predict", "-p", "fp7"], "known formats"),
        (&["predict", "--hw", "tpu9"], "unknown hardware 'tpu9'"),
        (&["predict", "--bandwidth-gb-s", "100"], "--peak"),
        (&["predict", "--hw", "seed-gb10", "--peak", "FP16=-1"], "must be a finite number > 0"),
        (&["predict", "--hw", "seed-gb10", "--peak", "FP9=1"], "FP9"),
        (&["hardware", "show", "nope"], "unknown hardware"),
        // --gemv sets the weight-only kernel: refused (before any GPU is opened) without it, bad keys named
        (&["compare", "--hw", "seed-gb10", "--gemv", "x_smem=true"], "needs --weight-only"),
        (&["measure", "--hw", "seed-gb10", "--gemv", "unroll=2"], "needs --weights"),
        (&["compare", "--weight-only", "--gemv", "colour=red"], "unknown key"),
        (&["measure", "--weights", "int4", "--gemv", "warps=5"], "4, 8 or 16"),
    ];
    for (args, needle) in cases {
        roofline().args(*args).assert().failure().stderr(predicate::str::contains(*needle));
    }
}

#[test]
fn gemv_help_lists_every_key_of_the_parser() {
    for cmd in ["measure", "compare", "model-bench"] {
        let out = roofline().args([cmd, "--help"]).output().expect("runs");
        let text = String::from_utf8_lossy(&out.stdout);
        for (key, _) in roofline_gpu::weight_only::GEMV_KEYS {
            assert!(text.contains(&format!("  {key}: ")), "{cmd} --help lacks {key}");
        }
    }
}

#[test]
fn hardware_list_and_show() {
    let out = roofline().args(["hardware", "list", "--json"]).output().unwrap();
    assert!(out.status.success());
    let list: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(list.as_array().unwrap().iter().any(|p| p["key"] == "seed-gb10"));
    roofline().args(["hardware", "list"]).assert().success().stdout(predicate::str::contains("seed-gb10"));
    roofline()
        .args(["hardware", "show", "b10"])
        .assert()
        .success()
        .stdout(predicate::str::contains("peak_tflops.FP16").and(predicate::str::contains("seed tables")));
    let toml = roofline().args(["hardware", "show", "seed-gb10", "--toml"]).output().unwrap();
    assert!(String::from_utf8_lossy(&toml.stdout).contains("memory_bandwidth_gb_s = 1000.0"));
}

#[test]
fn formats_catalog() {
    roofline().args(["formats"]).assert().success().stdout(
        predicate::str::contains("NVFP4").and(predicate::str::contains("4.5")).and(predicate::str::contains("MXINT8")),
    );
}

#[test]
fn bench_predict_reports_a_rate() {
    let out = roofline()
        .args(["bench", "predict", "--iterations", "100000", "--rounds", "1", "--hw", "seed-gb10", "--json"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(v["predictions_per_s_median"].as_f64().unwrap() > 0.0);
}

#[test]
fn recommend_seed_decisions() {
    let r = json(&["recommend", "--hw", "seed-gb10"]);
    assert_eq!(r["winner"], "W4A16 INT4_G128");
    assert!(r["reason"].as_str().unwrap().contains("memory-bound"));
    let r = json(&["recommend", "--hw", "seed-gb10", "--m", "2048"]);
    assert_eq!(r["winner"], "W4A4 NVFP4");
    let r = json(&["recommend", "--bandwidth-gb-s", "500", "--peak", "FP16=50", "--peak", "INT8=100"]);
    assert_eq!(r["winner"], "W8A8 INT8");
    assert!(r["candidates"].as_array().unwrap().len() >= 2, "every candidate is in the JSON");
    roofline()
        .args(["recommend", "--hw", "seed-gb10", "--max-accuracy-loss", "sometimes"])
        .assert()
        .failure()
        .stderr(predicate::str::contains("lossless"));
    roofline().args(["recommend", "--hw", "seed-gb10", "--memory-limit-gb", "-1"]).assert().failure();
}

#[test]
fn recommend_takes_measured_accuracy() {
    // The file `roofline eval ppl --accuracy-out` writes: INT4 AWQ measured at 9% puts it over a 5% tolerance.
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("acc.json");
    std::fs::write(
        &f,
        r#"[{"weights": "INT4_G128", "method": "awq", "loss_pct": 9.0, "source": "measured: test"},
            {"weights": "NF4", "method": "ptq", "loss_pct": 1.5, "source": "measured: test"}]"#,
    )
    .unwrap();
    let p = f.to_str().unwrap();
    let r = json(&["recommend", "--hw", "seed-gb10", "--max-accuracy-loss", "5", "--accuracy", p]);
    assert_eq!(r["winner"], "W4A16 NF4");
    let int4 = r["candidates"].as_array().unwrap().iter().find(|c| c["name"] == "W4A16 INT4_G128").unwrap();
    assert_eq!(int4["measured_accuracy_loss_pct"], 9.0);
    assert_eq!(int4["within_accuracy"], false);
    std::fs::write(&f, "{\"not\": \"a report\"}").unwrap();
    roofline()
        .args(["recommend", "--hw", "seed-gb10", "--accuracy", p])
        .assert()
        .failure()
        .stderr(predicate::str::contains("neither a list of measured losses"));
}

#[test]
fn tiling_hand_checked_wave_quantization() {
    let r = json(&["tiling", "--hw", "h100", "--tile", "128x128x64"]);
    let best = &r["candidates"][0];
    assert_eq!(best["tiles"], 1024);
    assert!((best["waves"].as_f64().unwrap() - 7.757).abs() < 0.01, "{}", best["waves"]);
    roofline().args(["tiling", "--hw", "seed-gb10"]).assert().failure().stderr(predicate::str::contains("sm_count"));
    roofline().args(["tiling", "--hw", "h100", "--tile", "128by128"]).assert().failure();
}

#[test]
fn model_presets_and_analysis() {
    roofline().args(["model", "list"]).assert().success().stdout(predicate::str::contains("deepseek-v3"));
    let r = json(&["model", "--config", "llama-3.1-8b", "--hw", "h100", "--batch", "1", "--seq", "1"]);
    let params = r["totals"]["params"].as_f64().unwrap();
    assert!((params / 8.03e9 - 1.0).abs() < 0.005);
    let r =
        json(&["model", "--config", "deepseek-v3", "--hw", "gb200", "--weights", "nvfp4", "--batch", "128", "--by-op"]);
    assert!(r["ops"].as_array().unwrap().iter().any(|o| o["name"] == "mla_decode_attention"));
    roofline()
        .args(["model", "--config", "llama-3.1-70b", "--hw", "h100", "--tp", "4", "--by-layer"])
        .assert()
        .success()
        .stdout(predicate::str::contains("communication"));
    let out = roofline().args(["model", "--config", "mixtral-8x7b", "--csv"]).output().unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("op,group,kind,count"));
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("config.json");
    std::fs::write(&bad, r#"{"model_type":"llama","hidden_size":4096}"#).unwrap();
    roofline()
        .args(["model", "--config", bad.to_str().unwrap()])
        .assert()
        .failure()
        .stderr(predicate::str::contains("num_attention_heads"));
    roofline().args(["model", "--config", "gpt-7"]).assert().failure().stderr(predicate::str::contains("llama-3.1-8b"));
    roofline().args(["model", "--config", "llama-3.1-8b", "--phase", "sideways"]).assert().failure();
}

#[test]
fn recommend_model_plan() {
    let p = json(&["recommend", "--config", "llama-3.1-8b", "--hw", "h100"]);
    let roles: Vec<_> =
        p["roles"].as_array().unwrap().iter().map(|r| r["role"].as_str().unwrap().to_string()).collect();
    assert_eq!(roles, ["attention", "ffn", "lm_head"]);
    assert!(p["speedup"].as_f64().unwrap() > 2.5);
    let p = json(&["recommend", "--config", "llama-3.1-70b", "--hw", "h100", "--memory-limit-gb", "10"]);
    assert_eq!(p["fits"], false);
    assert!(p["shortfall_gb"].as_f64().unwrap() > 0.0);
    roofline().args(["recommend", "--seq", "10"]).assert().failure().stderr(predicate::str::contains("--config"));
}

#[test]
fn quant_compare_and_bench() {
    let out = roofline().args(["quant", "compare", "--rows", "8", "--cols", "256", "--json"]).output().unwrap();
    assert!(out.status.success());
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let rows = v.as_array().unwrap();
    assert!(rows.len() >= 14);
    let nvfp4 = rows.iter().find(|r| r["format"] == "NVFP4").unwrap();
    assert!((15.0..30.0).contains(&nvfp4["metrics"]["sqnr_db"].as_f64().unwrap()));
    roofline()
        .args(["quant", "bench", "--rows", "64", "--cols", "256", "--reps", "1"])
        .assert()
        .success()
        .stdout(predicate::str::contains("GB/s"));
    roofline().args(["quant", "compare", "--rows", "0"]).assert().failure();
    roofline()
        .args(["quant", "compare", "--rows", "100000", "--cols", "100000"])
        .assert()
        .failure()
        .stderr(predicate::str::contains("too large"));
}

#[test]
fn plot_and_report_files() {
    let dir = tempfile::tempdir().unwrap();
    let svg = dir.path().join("decode.svg");
    roofline().args(["plot", "--hw", "seed-gb10", "--output", svg.to_str().unwrap()]).assert().success();
    let text = std::fs::read_to_string(&svg).unwrap();
    assert!(text.contains("<svg") && text.contains("class=\"roof\"") && text.contains("data-label=\"INT4\""));
    let png = dir.path().join("dsv3.png");
    roofline()
        .args(["plot", "--hw", "gb200", "--config", "deepseek-v3", "--output", png.to_str().unwrap()])
        .assert()
        .success();
    assert_eq!(&std::fs::read(&png).unwrap()[..8], b"\x89PNG\r\n\x1a\n");
    roofline()
        .args(["plot", "--hw", "h100", "--by-phase", "--output", dir.path().join("h.svg").to_str().unwrap()])
        .assert()
        .success();
    assert!(dir.path().join("h-decode.svg").exists() && dir.path().join("h-prefill.svg").exists());
    roofline()
        .args(["plot", "--output", dir.path().join("x.gif").to_str().unwrap()])
        .assert()
        .failure()
        .stderr(predicate::str::contains(".svg or .png"));
    // a report from a CSV of points
    let csv = dir.path().join("points.csv");
    std::fs::write(&csv, "label,m,n,k,batch,weights,activations,output,flops,bytes,ai,bound,predicted_us,measured_us,error\nFP16,1,4096,4096,1,FP16,FP16,FP16,0,0,0,memory,0,20.0,\n").unwrap();
    let md = dir.path().join("report.md");
    roofline()
        .args(["report", "--hw", "h100", "--input", csv.to_str().unwrap(), "--output", md.to_str().unwrap()])
        .assert()
        .success();
    let text = std::fs::read_to_string(&md).unwrap();
    assert!(text.contains("FP16") && dir.path().join("report.png").exists());
}

#[test]
fn sweep_writes_csv_and_json_and_gpu_commands_fail_cleanly_without_gpu() {
    let dir = tempfile::tempdir().unwrap();
    roofline()
        .args(["sweep", "--hw", "h100", "--shapes", "prefill", "--out-dir", dir.path().to_str().unwrap()])
        .assert()
        .success()
        .stdout(predicate::str::contains("20 points"));
    let csv = std::fs::read_to_string(dir.path().join("sweep.csv")).unwrap();
    assert!(csv.starts_with("label,m,n,k") && csv.lines().count() == 21);
    // FP8 is swept as the cuBLASLt scheme (BF16 output), INT8 with its 4-byte INT32 output.
    assert!(csv.contains("\nFP8_E4M3,512,4096,4096,1,FP8_E4M3,FP8_E4M3,BF16,"), "{csv}");
    assert!(csv.contains("\nINT8,512,4096,4096,1,INT8,INT8,FP32,"), "{csv}");
    let json: Value = serde_json::from_str(&std::fs::read_to_string(dir.path().join("sweep.json")).unwrap()).unwrap();
    assert_eq!(json.as_array().unwrap().len(), 20);
    if std::path::Path::new("/usr/lib/x86_64-linux-gnu/libcuda.so.1").exists() {
        return; // a GPU machine: the GPU commands would run
    }
    for args in [
        &["compare"][..],
        &["measure"],
        &["calibrate"],
        &["gpu", "info"],
        &["gpu", "gpcs"],
        &["sweep", "--measure", "--out-dir", "/tmp"],
    ] {
        roofline().args(args).assert().failure().stderr(predicate::str::contains("no NVIDIA GPU/driver found"));
    }
    roofline()
        .args(["model-bench", "--config", "llama-3.1-8b", "--scheme", "int4", "--layers", "2"])
        .assert()
        .failure()
        .stderr(predicate::str::contains("no NVIDIA GPU/driver found"));
    roofline()
        .args(["model-bench", "--config", "deepseek-v3", "--scheme", "int4"])
        .assert()
        .failure()
        .stderr(predicate::str::contains("MoE models with dense first layers are not benchmarked yet"));
    // Mixtral is benchmarked: it gets as far as the GPU.
    roofline()
        .args(["model-bench", "--config", "mixtral-8x7b", "--scheme", "int4", "--layers", "2"])
        .assert()
        .failure()
        .stderr(predicate::str::contains("no NVIDIA GPU/driver found"));
    roofline()
        .args(["model-bench", "--config", "llama-3.1-8b", "--scheme", "fp16", "--batch", "17"])
        .assert()
        .failure()
        .stderr(predicate::str::contains("batch must be 1..=16"));
    // The qkv projection inside the attention: 4-bit weights at batch 1 only, refused before the GPU is opened.
    roofline()
        .args(["model-bench", "--config", "llama-3.1-8b", "--scheme", "fp16", "--qkv", "fused"])
        .assert()
        .failure()
        .stderr(predicate::str::contains("--qkv fused: the fused qkv + attention kernel takes INT4 g128"));
    roofline()
        .args(["model-bench", "--config", "llama-3.1-8b", "--scheme", "int4", "--batch", "2", "--qkv", "fused"])
        .assert()
        .failure()
        .stderr(predicate::str::contains("decodes one token, not a batch of 2"));
    for args in [&["gpu", "status"][..], &["gpu", "watch", "--count", "1"], &["gpu", "status", "--json"]] {
        roofline().args(args).assert().failure().stderr(predicate::str::contains("NVML not available"));
    }
    roofline()
        .args(["measure", "-p", "nf4"])
        .assert()
        .failure()
        .stderr(predicate::str::contains("dense GEMM formats are FP32, TF32, FP16, BF16"));
    roofline()
        .args(["measure", "-p", "nvfp4"])
        .assert()
        .failure()
        .stderr(predicate::str::contains("needs a Blackwell GPU").and(predicate::str::contains("--weights NVFP4")));
}

#[test]
fn version_names_the_cuda_sources_it_carries() {
    let out = roofline().arg("--version").output().expect("runs");
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    let want = format!("(CUDA kernel sources {})", roofline_gpu::kernel_sources_hash());
    assert!(text.starts_with(concat!("roofline ", env!("CARGO_PKG_VERSION"))), "{text}");
    assert!(text.contains(&want), "{text}");
}

#[test]
fn read_calibrated_profile_prices_reads_and_bandwidth_override_drops_it() {
    let h200 = concat!(env!("CARGO_MANIFEST_DIR"), "/../../bench/results/h200-measured.toml");
    let gemv = |extra: &[&str]| {
        let mut args = vec!["predict", "--hw", h200, "--m", "1", "--n", "14336", "--k", "4096", "-p", "fp16"];
        args.extend_from_slice(extra);
        json(&args)["rows"][0]["prediction"].clone()
    };
    let read = gemv(&[]);
    let shown = json(&["hardware", "show", h200]);
    let (copy_bw, read_bw) =
        (shown["memory_bandwidth_gb_s"].as_f64().unwrap(), shown["read_bandwidth_gb_s"].as_f64().unwrap());
    assert!(read_bw > copy_bw);
    // A GEMV is almost all reads: it streams just under the read rate.
    let bw = read["bandwidth_gb_s"].as_f64().unwrap();
    assert!(bw > copy_bw && bw <= read_bw, "{bw} vs copy {copy_bw}, read {read_bw}");
    // Overriding the bandwidth drops the read stream: every byte at the given rate.
    let over = gemv(&["--bandwidth-gb-s", "4000"]);
    assert_eq!(over["bandwidth_gb_s"], 4000.0);
    // A profile to serve that does not exist is an error naming it, before anything listens.
    roofline()
        .args(["serve", "--addr", "127.0.0.1:0", "--profile", "/nonexistent/measured.toml"])
        .assert()
        .failure()
        .stderr(predicate::str::contains("reading hardware profile /nonexistent/measured.toml"));
}

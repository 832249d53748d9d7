//! `GET /api/hardware`, `GET /api/hardware/{key}`, `POST /api/hardware` (analyze on an inline custom profile).

use std::collections::BTreeMap;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;
use roofline_core::{ComputeClass, Format, HardwareProfile, PredictReport, PredictRequest};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::api::analyze::run;
use crate::common::{schemes, served, shape, SchemeSpec};
use crate::error::{ApiError, ErrorBody};
use crate::extract::ApiJson;
use crate::AppState;

/// One preset in the hardware list.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct HardwareSummary {
    /// Key (`h100-sxm`).
    pub key: String,
    /// Other keys accepted for it (`h100`).
    pub aliases: Vec<String>,
    /// Name.
    pub name: String,
    /// Where the numbers come from.
    pub source: String,
    /// Memory bandwidth, GB/s.
    pub memory_bandwidth_gb_s: f64,
    /// Read-stream bandwidth, GB/s (measured profiles): the rate an op's read bytes move at.
    pub read_bandwidth_gb_s: Option<f64>,
    /// Memory, GB.
    pub memory_gb: Option<f64>,
    /// Dense peaks per compute class, TFLOP/s.
    pub peak_tflops: BTreeMap<String, f64>,
    /// Formats computed natively (the default schemes of `/api/analyze`).
    pub native_formats: Vec<Format>,
    /// A profile this server was started with (`roofline serve --profile`), not a preset.
    #[serde(default)]
    pub served: bool,
}

impl HardwareSummary {
    /// Summary of a profile.
    pub fn of(hw: &HardwareProfile) -> Self {
        HardwareSummary {
            key: hw.key.clone(),
            aliases: hw.aliases.clone(),
            name: hw.name.clone(),
            source: hw.source.clone(),
            memory_bandwidth_gb_s: hw.memory_bandwidth_gb_s,
            read_bandwidth_gb_s: hw.read_bandwidth_gb_s,
            memory_gb: hw.memory_gb,
            peak_tflops: hw.peak_tflops.iter().map(|(c, p)| (c.name().to_string(), p)).collect(),
            native_formats: hw.native_formats(),
            served: false,
        }
    }
}

fn presets() -> Result<&'static [HardwareProfile], ApiError> {
    HardwareProfile::presets().map_err(|e| ApiError::status(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))
}

/// Lists the embedded hardware presets.
#[utoipa::path(get, path = "/api/hardware", tag = "hardware",
    responses((status = 200, description = "The served profiles (`roofline serve --profile`), then every preset", body = [HardwareSummary])))]
pub async fn list(State(state): State<AppState>) -> Result<Json<Vec<HardwareSummary>>, ApiError> {
    // The served profiles (`roofline serve --profile`) first, then the presets.
    let served = state.profiles().iter().map(|p| HardwareSummary { served: true, ..HardwareSummary::of(p) });
    Ok(Json(served.chain(presets()?.iter().map(HardwareSummary::of)).collect()))
}

/// One served profile or preset in full (the TOML schema as JSON, with a source per number).
#[utoipa::path(get, path = "/api/hardware/{key}", tag = "hardware",
    params(("key" = String, Path, description = "Preset key or alias (`b10`, `h100`)")),
    responses(
        (status = 200, description = "The profile", body = Object),
        (status = 404, description = "No such preset", body = ErrorBody),
    ))]
pub async fn show(State(state): State<AppState>, Path(key): Path<String>) -> Result<Json<HardwareProfile>, ApiError> {
    if let Some(p) = served(state.profiles(), &key) {
        return Ok(Json(p.clone()));
    }
    HardwareProfile::preset(&key).map(Json).map_err(|e| ApiError {
        status: StatusCode::NOT_FOUND,
        field: Some("key".into()),
        message: e.to_string(),
    })
}

/// A custom accelerator: bandwidth and peaks are enough.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CustomHardware {
    /// Short key (default `custom`).
    #[serde(default)]
    pub key: Option<String>,
    /// Name (default `custom accelerator`).
    #[serde(default)]
    pub name: Option<String>,
    /// Memory bandwidth, GB/s.
    pub memory_bandwidth_gb_s: f64,
    /// Dense peak per compute class (`FP16`, `FP8`, `INT8`, `FP4`, `INT4`, ...), TFLOP/s.
    pub peak_tflops: BTreeMap<String, f64>,
    /// Memory, GB.
    #[serde(default)]
    pub memory_gb: Option<f64>,
    /// Fixed launch overhead added to every op, microseconds.
    #[serde(default)]
    pub launch_overhead_us: Option<f64>,
    /// Fixed start-up of a memory-bound op before it streams, microseconds.
    #[serde(default)]
    pub memory_latency_us: Option<f64>,
    /// Read-stream bandwidth, GB/s: read bytes move at this rate, written ones at the rate that keeps a copy
    /// at `memory_bandwidth_gb_s`.
    #[serde(default)]
    pub read_bandwidth_gb_s: Option<f64>,
    /// Start-up of the read stream, microseconds (in place of `memory_latency_us` for read bytes).
    #[serde(default)]
    pub read_latency_us: Option<f64>,
}

impl CustomHardware {
    /// The validated profile; errors name `hardware.<field>`.
    pub fn profile(&self) -> Result<HardwareProfile, ApiError> {
        let mut peaks = Vec::new();
        for (class, v) in &self.peak_tflops {
            let c = class
                .parse::<ComputeClass>()
                .map_err(|e| ApiError::invalid(format!("hardware.peak_tflops.{class}"), e.to_string()))?;
            peaks.push((c, *v));
        }
        let mut hw = HardwareProfile::custom(self.memory_bandwidth_gb_s, &peaks)
            .map_err(|e| ApiError::core(e, "peak_tflops").within("hardware"))?;
        hw.source = "user (inline profile, POST /api/hardware)".into();
        if let Some(k) = &self.key {
            hw.key = k.clone();
        }
        if let Some(n) = &self.name {
            hw.name = n.clone();
        }
        hw.memory_gb = self.memory_gb;
        hw.launch_overhead_us = self.launch_overhead_us;
        hw.memory_latency_us = self.memory_latency_us;
        hw.read_bandwidth_gb_s = self.read_bandwidth_gb_s;
        hw.read_latency_us = self.read_latency_us;
        hw.validate().map_err(|e| ApiError::core(e, "hardware").within("hardware"))?;
        Ok(hw)
    }
}

/// Analyze a GEMM on an inline custom profile.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CustomAnalyzeBody {
    /// The accelerator.
    pub hardware: CustomHardware,
    /// Rows of activations/output.
    pub m: u64,
    /// Output features.
    pub n: u64,
    /// Reduction dimension.
    pub k: u64,
    /// Batch (default 1).
    #[serde(default)]
    pub batch: Option<u64>,
    /// One format for weights and activations.
    #[serde(default)]
    pub precision: Option<String>,
    /// More schemes; none = every class the profile lists.
    #[serde(default)]
    pub schemes: Vec<SchemeSpec>,
}

/// Predicts one GEMM on a custom accelerator described inline.
#[utoipa::path(post, path = "/api/hardware", tag = "hardware",
    request_body(content = CustomAnalyzeBody, example = json!({"hardware": {"memory_bandwidth_gb_s": 500, "peak_tflops": {"FP16": 50, "INT8": 100}}, "m": 1, "n": 4096, "k": 4096})),
    responses(
        (status = 200, description = "One row per scheme", body = PredictReport),
        (status = 422, description = "A field is invalid; `field` names it (`hardware.memory_bandwidth_gb_s`)", body = ErrorBody),
    ))]
pub async fn analyze_custom(ApiJson(body): ApiJson<CustomAnalyzeBody>) -> Result<Json<PredictReport>, ApiError> {
    let hw = body.hardware.profile()?;
    let batch = body.batch.unwrap_or(1);
    shape(body.m, body.n, body.k, batch)?;
    let req = PredictRequest {
        m: body.m,
        n: body.n,
        k: body.k,
        batch,
        schemes: schemes(body.precision.as_deref(), &body.schemes)?,
    };
    run(&req, &hw).map(Json)
}

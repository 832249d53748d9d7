//! `POST /api/measure`: times one GEMM on the GPU (roofline-gpu) next to its prediction. One measurement
//! runs at a time; others wait in a bounded queue; with no GPU the answer is a 503 with the reason.

use std::sync::atomic::Ordering;

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use roofline_core::{predict, DualPoint, Format, Gemm};
use roofline_gpu::{gemm_scheme, Gpu, GpuError, TimingConfig, GEMM_FORMATS};
use serde::Deserialize;
use utoipa::ToSchema;

use crate::common::{hardware, shape};
use crate::error::{ApiError, ErrorBody};
use crate::extract::{ApiJson, ApiQuery};
use crate::AppState;

use super::analyze::HardwareQuery;

/// A GEMM to time.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct MeasureBody {
    /// Rows of activations/output.
    pub m: u64,
    /// Output features.
    pub n: u64,
    /// Reduction dimension.
    pub k: u64,
    /// A dense cuBLASLt format: FP16 (default), BF16, FP32, TF32, FP8_E4M3, FP8_E5M2 or INT8.
    #[serde(default)]
    pub precision: Option<String>,
    /// GPU index (default 0).
    #[serde(default)]
    pub device: Option<usize>,
    /// Hardware profile the prediction uses (the query parameter wins).
    #[serde(default)]
    pub hardware_key: Option<String>,
}

/// Largest dimension measured (device memory is finite).
const MAX_MEASURE_DIM: u64 = 16_384;

struct Waiting<'a>(&'a std::sync::atomic::AtomicUsize);

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

fn gpu_error(e: GpuError) -> ApiError {
    match e {
        GpuError::NoGpu(_) => ApiError::status(StatusCode::SERVICE_UNAVAILABLE, e.to_string()),
        GpuError::Unsupported(msg) => ApiError::invalid("precision", msg),
        other => ApiError::status(StatusCode::INTERNAL_SERVER_ERROR, other.to_string()),
    }
}

/// Times one GEMM through cuBLAS and returns it with its prediction.
#[utoipa::path(post, path = "/api/measure", tag = "gpu", params(HardwareQuery),
    request_body(content = MeasureBody, example = json!({"m": 4096, "n": 4096, "k": 4096, "precision": "FP16"})),
    responses(
        (status = 200, description = "A DualPoint: prediction and measurement", body = Object),
        (status = 422, description = "A field is invalid; `field` names it", body = ErrorBody),
        (status = 503, description = "No GPU/driver on this machine, or the measurement queue is full", body = ErrorBody),
    ))]
pub async fn measure(
    State(state): State<AppState>,
    ApiQuery(q): ApiQuery<HardwareQuery>,
    ApiJson(body): ApiJson<MeasureBody>,
) -> Result<Json<DualPoint>, ApiError> {
    shape(body.m, body.n, body.k, 1)?;
    for (field, v) in [("m", body.m), ("n", body.n), ("k", body.k)] {
        if v > MAX_MEASURE_DIM {
            return Err(ApiError::invalid(
                field,
                format!("{field} = {v}: at most {MAX_MEASURE_DIM} for a measurement"),
            ));
        }
    }
    let precision = body
        .precision
        .as_deref()
        .unwrap_or("FP16")
        .parse::<Format>()
        .map_err(|e| ApiError::invalid("precision", e.to_string()))?;
    if !GEMM_FORMATS.contains(&precision) {
        return Err(ApiError::invalid(
            "precision",
            format!(
                "{precision} has no measured GEMM kernel; measured formats are {}",
                GEMM_FORMATS.map(|f| f.to_string()).join(", ")
            ),
        ));
    }
    let hw = hardware(q.hardware_key.as_deref().or(body.hardware_key.as_deref()))?;
    // The scheme the cuBLASLt kernel computes (FP8 writes BF16, INT8 writes INT32), so the bytes match.
    let gemm = Gemm::new(body.m, body.n, body.k, gemm_scheme(precision)).map_err(|e| ApiError::core(e, "m"))?;
    let prediction = predict(&gemm, &hw).map_err(|e| ApiError::core(e, "precision"))?;
    // Fail fast when there is no driver at all, before queueing.
    roofline_gpu::probe_driver().map_err(gpu_error)?;
    let inner = &state.inner;
    if inner.measure_waiting.fetch_add(1, Ordering::SeqCst) >= inner.measure_queue {
        inner.measure_waiting.fetch_sub(1, Ordering::SeqCst);
        return Err(ApiError::status(
            StatusCode::SERVICE_UNAVAILABLE,
            format!("{} measurements already queued; try again later", inner.measure_queue),
        ));
    }
    let permit = {
        let _waiting = Waiting(&inner.measure_waiting);
        inner
            .measure_gate
            .clone()
            .acquire_owned()
            .await
            .map_err(|_| ApiError::status(StatusCode::SERVICE_UNAVAILABLE, "server is shutting down"))?
    };
    let (m, n, k, device) = (body.m as usize, body.n as usize, body.k as usize, body.device.unwrap_or(0));
    let measured = tokio::task::spawn_blocking(move || {
        let _permit = permit; // held until the GPU is released
        let gpu = Gpu::open(device)?;
        let cfg = TimingConfig { budget_ms: 1000.0, ..TimingConfig::default() };
        gpu.measure_gemm(m, n, k, precision, &cfg, None)
    })
    .await
    .map_err(|e| ApiError::status(StatusCode::INTERNAL_SERVER_ERROR, format!("measurement task failed: {e}")))?
    .map_err(gpu_error)?;
    Ok(Json(DualPoint { label: precision.to_string(), gemm, prediction, measurement: Some(measured) }))
}

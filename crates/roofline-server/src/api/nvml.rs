//! `GET /api/nvml/status`: power, clocks, temperature and memory of every GPU, read through NVML
//! (roofline-telemetry). With no NVIDIA driver the answer is a 503 with the reason; the web page then says
//! "no GPU" and stops polling.

use std::time::{SystemTime, UNIX_EPOCH};

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use roofline_telemetry::{GpuStatus, Telemetry, TelemetryError};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::error::{ApiError, ErrorBody};
use crate::AppState;

/// A snapshot of every GPU NVML sees.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct NvmlStatus {
    /// When the snapshot was taken, milliseconds since the Unix epoch.
    pub time_unix_ms: u64,
    /// One entry per GPU: `index`, `name`, `power_w`, `power_limit_w`, `sm_clock_mhz`, `mem_clock_mhz`,
    /// `temperature_c`, `memory_used_bytes`, `utilization_gpu_pct`, `throttle_reasons`, ... (fields NVML does
    /// not support on a GPU are null).
    #[schema(value_type = Vec<Object>)]
    pub gpus: Vec<GpuStatus>,
}

fn telemetry_error(e: TelemetryError) -> ApiError {
    match e {
        TelemetryError::NvmlUnavailable(_) | TelemetryError::NoDevices => {
            ApiError::status(StatusCode::SERVICE_UNAVAILABLE, format!("no GPU telemetry: {e}"))
        }
        other => ApiError::status(StatusCode::INTERNAL_SERVER_ERROR, other.to_string()),
    }
}

/// The NVML handle, initialized on first success and kept; a failed start is retried on the next request
/// (a driver may appear), which costs one failed library load.
fn telemetry(state: &AppState) -> Result<Telemetry, ApiError> {
    let mut slot = state.inner.telemetry.lock().map_err(|_| {
        ApiError::status(StatusCode::INTERNAL_SERVER_ERROR, "telemetry state poisoned by an earlier panic")
    })?;
    if let Some(t) = slot.as_ref() {
        return Ok(t.clone());
    }
    let t = Telemetry::init().map_err(telemetry_error)?;
    *slot = Some(t.clone());
    Ok(t)
}

/// Current power, clocks, temperature and memory per GPU, or a 503 with the reason.
#[utoipa::path(get, path = "/api/nvml/status", tag = "gpu",
    responses(
        (status = 200, description = "Power (W), SM/memory clocks (MHz), temperature (C), memory per GPU", body = NvmlStatus),
        (status = 503, description = "No NVML (no NVIDIA driver) or no GPU on this machine; `error` says why", body = ErrorBody),
    ))]
pub async fn status(State(state): State<AppState>) -> Result<Json<NvmlStatus>, ApiError> {
    let gpus =
        tokio::task::spawn_blocking(move || telemetry(&state)?.status_all().map_err(telemetry_error)).await.map_err(
            |e| ApiError::status(StatusCode::INTERNAL_SERVER_ERROR, format!("telemetry task failed: {e}")),
        )??;
    let time_unix_ms = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0);
    Ok(Json(NvmlStatus { time_unix_ms, gpus }))
}

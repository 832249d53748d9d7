//! `GET /api/nvml/status`: power, clocks and temperature of the GPU. NVML telemetry (roofline-telemetry) is
//! not built into this server yet, so the answer is a 503 saying so; the web page shows "unavailable".

use axum::http::StatusCode;

use crate::error::{ApiError, ErrorBody};

/// Why telemetry is unavailable in this build.
pub const UNAVAILABLE: &str =
    "NVML telemetry is not built into this server (the roofline-telemetry crate is not part of this build)";

/// Current power, clocks and temperature per GPU, or a 503 with the reason.
#[utoipa::path(get, path = "/api/nvml/status", tag = "gpu",
    responses(
        (status = 200, description = "Power (W), SM/memory clocks (MHz), temperature (C) per GPU", body = serde_json::Value),
        (status = 503, description = "No NVML on this machine or in this build", body = ErrorBody),
    ))]
pub async fn status() -> Result<axum::Json<serde_json::Value>, ApiError> {
    Err(ApiError::status(StatusCode::SERVICE_UNAVAILABLE, UNAVAILABLE))
}

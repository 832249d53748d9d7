//! `GET /api/formats`: the number-format catalog (the CLI's `roofline formats`), with which formats the
//! chosen hardware computes natively.

use axum::extract::State;
use axum::Json;
use roofline_core::Format;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::common::hardware;
use crate::error::{ApiError, ErrorBody};
use crate::extract::ApiQuery;
use crate::AppState;

use super::analyze::HardwareQuery;

/// One format of the catalog.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct FormatInfo {
    /// Canonical name (`FP8_E4M3`, `NVFP4`, `INT4_G128`).
    pub name: Format,
    /// Bits one element occupies in storage.
    pub storage_bits: u64,
    /// Bits per element including block and tensor scales.
    pub effective_bits: f64,
    /// Whether the format needs scales (quantized) rather than being a plain float.
    pub quantized: bool,
    /// Whether the hardware computes it natively on its tensor cores.
    pub native: bool,
    /// One-line description.
    pub description: String,
}

/// Lists every format with its storage cost and whether `hardware_key` runs it natively.
#[utoipa::path(get, path = "/api/formats", tag = "hardware", params(HardwareQuery),
    responses(
        (status = 200, description = "The format catalog", body = [FormatInfo]),
        (status = 422, description = "Unknown hardware key", body = ErrorBody),
    ))]
pub async fn list(
    State(state): State<AppState>,
    ApiQuery(q): ApiQuery<HardwareQuery>,
) -> Result<Json<Vec<FormatInfo>>, ApiError> {
    let hw = hardware(state.profiles(), q.hardware_key.as_deref())?;
    let native = hw.native_formats();
    Ok(Json(
        Format::ALL
            .iter()
            .map(|&f| {
                let spec = f.spec();
                FormatInfo {
                    name: f,
                    storage_bits: spec.storage_bits,
                    effective_bits: f.effective_bits(),
                    quantized: f.is_quantized(),
                    native: native.contains(&f),
                    description: spec.description.to_string(),
                }
            })
            .collect(),
    ))
}

//! `POST /api/tiling`: tile, wave, occupancy and L2 model of a GEMM kernel (the CLI's `tiling --json`).

use axum::extract::State;
use axum::Json;
use roofline_core::tiling::{tiling_report, TileShape, TilingReport, TilingRequest};
use serde::Deserialize;
use utoipa::ToSchema;

use crate::common::{hardware, in_range, parse_scheme, shape, SchemeSpec};
use crate::error::{ApiError, ErrorBody};
use crate::extract::{ApiJson, ApiQuery};
use crate::AppState;

use super::analyze::HardwareQuery;

/// A GEMM to tile.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TilingBody {
    /// Rows of activations/output.
    pub m: u64,
    /// Output features.
    pub n: u64,
    /// Reduction dimension.
    pub k: u64,
    /// Batch (default 1).
    #[serde(default)]
    pub batch: Option<u64>,
    /// One format for both operands (default FP16).
    #[serde(default)]
    pub precision: Option<String>,
    /// Operand formats (instead of `precision`).
    #[serde(default)]
    pub scheme: Option<SchemeSpec>,
    /// Evaluate only this tile: `{"bm":128,"bn":128,"bk":64}`.
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub tile: Option<TileShape>,
    /// Hardware preset (the query parameter wins).
    #[serde(default)]
    pub hardware_key: Option<String>,
}

/// Ranks CTA tiles for one GEMM: waves, occupancy, L2 reuse, and the efficiency they imply.
#[utoipa::path(post, path = "/api/tiling", tag = "tiling", params(HardwareQuery),
    request_body(content = TilingBody, example = json!({"M": 4096, "N": 4096, "K": 4096, "precision": "FP16"})),
    responses(
        (status = 200, description = "Tile choices (the CLI's `tiling --json`)", body = Object),
        (status = 422, description = "A field is invalid; `field` names it", body = ErrorBody),
    ))]
pub async fn tiling(
    State(state): State<AppState>,
    ApiQuery(q): ApiQuery<HardwareQuery>,
    ApiJson(body): ApiJson<TilingBody>,
) -> Result<Json<TilingReport>, ApiError> {
    let batch = body.batch.unwrap_or(1);
    shape(body.m, body.n, body.k, batch)?;
    let scheme = match (&body.precision, &body.scheme) {
        (Some(_), Some(_)) => return Err(ApiError::invalid("scheme", "give either 'precision' or 'scheme', not both")),
        (Some(p), None) => Some(parse_scheme("precision", p)?),
        (None, Some(s)) => Some(s.resolve("scheme")?),
        (None, None) => None,
    };
    if let Some(t) = &body.tile {
        in_range("tile.bm", t.bm, 1024)?;
        in_range("tile.bn", t.bn, 1024)?;
        in_range("tile.bk", t.bk, 1024)?;
    }
    let hw = hardware(state.profiles(), q.hardware_key.as_deref().or(body.hardware_key.as_deref()))?;
    let req = TilingRequest { m: body.m, n: body.n, k: body.k, batch, scheme, tile: body.tile };
    tiling_report(&req, &hw).map(Json).map_err(|e| ApiError::core(e, "m"))
}

//! `GET /api/plot.svg`: the roofline chart of one GEMM shape, drawn by roofline-report (the same code as the
//! CLI's `roofline plot`), with `data-*` attributes per roof and point for the web page.

use axum::http::header;
use axum::response::IntoResponse;
use roofline_core::{DualPoint, Gemm, PredictRequest};
use roofline_report::{roofline_svg, ChartSpec};
use serde::Deserialize;
use utoipa::IntoParams;

use crate::common::{hardware, parse_scheme, shape};
use crate::error::{ApiError, ErrorBody};
use crate::extract::ApiQuery;

use super::analyze::run;

/// What to draw.
#[derive(Debug, Clone, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct PlotQuery {
    /// Rows of activations/output (default 1).
    pub m: Option<u64>,
    /// Output features (default 4096).
    pub n: Option<u64>,
    /// Reduction dimension (default 4096).
    pub k: Option<u64>,
    /// Batch (default 1).
    pub batch: Option<u64>,
    /// Comma-separated schemes (`FP16,FP8_E4M3,W:INT4_G128 A:FP16`); default every native format.
    pub formats: Option<String>,
    /// Hardware preset (default h100).
    pub hardware_key: Option<String>,
    /// Width in pixels (200 to 4000, default 1000).
    pub width: Option<u32>,
    /// Height in pixels (200 to 4000, default 700).
    pub height: Option<u32>,
}

fn px(field: &str, v: Option<u32>, default: u32) -> Result<u32, ApiError> {
    match v.unwrap_or(default) {
        v @ 200..=4000 => Ok(v),
        v => Err(ApiError::invalid(field, format!("{field} = {v}: expected 200 to 4000 pixels"))),
    }
}

/// Draws the roofline of the hardware with one point per scheme for the shape.
#[utoipa::path(get, path = "/api/plot.svg", tag = "plot", params(PlotQuery),
    responses(
        (status = 200, description = "SVG document", content_type = "image/svg+xml", body = String),
        (status = 422, description = "A parameter is invalid; `field` names it", body = ErrorBody),
    ))]
pub async fn plot(ApiQuery(q): ApiQuery<PlotQuery>) -> Result<impl IntoResponse, ApiError> {
    let (m, n, k, batch) = (q.m.unwrap_or(1), q.n.unwrap_or(4096), q.k.unwrap_or(4096), q.batch.unwrap_or(1));
    shape(m, n, k, batch)?;
    let (width, height) = (px("width", q.width, 1000)?, px("height", q.height, 700)?);
    let schemes = q
        .formats
        .as_deref()
        .unwrap_or("")
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| parse_scheme("formats", s))
        .collect::<Result<Vec<_>, _>>()?;
    let hw = hardware(q.hardware_key.as_deref())?;
    let report = run(&PredictRequest { m, n, k, batch, schemes }, &hw)?;
    let points = report
        .rows
        .into_iter()
        .map(|row| {
            let gemm = Gemm::batched(batch, m, n, k, true, row.scheme).map_err(|e| ApiError::core(e, "m"))?;
            Ok(DualPoint { label: row.label, gemm, prediction: row.prediction, measurement: None })
        })
        .collect::<Result<Vec<_>, ApiError>>()?;
    let title = Some(format!("{} — GEMM M={m} N={n} K={k}{}", hw.name, if batch > 1 { format!(" batch={batch}") } else { String::new() }));
    let svg = roofline_svg(&ChartSpec { hardware: hw, points, title, width, height })
        .map_err(|e| ApiError::invalid("hardware_key", e.to_string()))?;
    Ok(([(header::CONTENT_TYPE, "image/svg+xml; charset=utf-8"), (header::CACHE_CONTROL, "no-store")], svg))
}

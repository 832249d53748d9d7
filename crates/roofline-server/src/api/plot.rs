//! `GET /api/plot.svg`: the roofline chart of one GEMM shape, drawn by roofline-report (the same code as the
//! CLI's `roofline plot`), with `data-*` attributes per roof and point for the web page.

use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use roofline_core::{predict, DualPoint, Gemm, HardwareProfile, Measurement, PredictRequest};
use roofline_report::{roofline_svg, ChartSpec};
use serde::Deserialize;
use utoipa::{IntoParams, ToSchema};

use crate::common::{hardware, parse_scheme, shape, MAX_DIM};
use crate::error::{ApiError, ErrorBody};
use crate::extract::{ApiJson, ApiQuery};
use crate::AppState;

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
    /// `used` (default): draw the roofs of the compute classes the points run on; `all`: every roof.
    pub roofs: Option<String>,
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
pub async fn plot(
    State(state): State<AppState>,
    ApiQuery(q): ApiQuery<PlotQuery>,
) -> Result<impl IntoResponse, ApiError> {
    let (m, n, k, batch) = (q.m.unwrap_or(1), q.n.unwrap_or(4096), q.k.unwrap_or(4096), q.batch.unwrap_or(1));
    shape(m, n, k, batch)?;
    let (width, height) = (px("width", q.width, 1000)?, px("height", q.height, 700)?);
    let all = all_roofs("roofs", q.roofs.as_deref())?;
    let schemes = q
        .formats
        .as_deref()
        .unwrap_or("")
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| parse_scheme("formats", s))
        .collect::<Result<Vec<_>, _>>()?;
    let mut hw = hardware(state.profiles(), q.hardware_key.as_deref())?;
    let report = run(&PredictRequest { m, n, k, batch, schemes }, &hw)?;
    let points = report
        .rows
        .into_iter()
        .map(|row| {
            let gemm = Gemm::batched(batch, m, n, k, true, row.scheme).map_err(|e| ApiError::core(e, "m"))?;
            Ok(DualPoint { label: row.label, gemm, prediction: row.prediction, measurement: None })
        })
        .collect::<Result<Vec<_>, ApiError>>()?;
    if !all {
        keep_used_roofs(&mut hw, &points);
    }
    let batch_note = if batch > 1 { format!(" batch={batch}") } else { String::new() };
    let title = Some(format!("{} — GEMM M={m} N={n} K={k}{batch_note}", hw.name));
    svg(ChartSpec { hardware: hw, points, title, width, height, mark_best: true })
}

/// Whether to keep every roof (`all`) or only those the points use (`used`, the default).
fn all_roofs(field: &str, v: Option<&str>) -> Result<bool, ApiError> {
    match v.map(str::trim) {
        None | Some("") | Some("used") => Ok(false),
        Some("all") => Ok(true),
        Some(other) => Err(ApiError::invalid(field, format!("roofs = '{other}': expected 'used' or 'all'"))),
    }
}

/// Drops the roofs no point runs on (a chart of FP16 and FP8 points needs no FP64 roof); keeps them all when
/// there are no points.
fn keep_used_roofs(hw: &mut HardwareProfile, points: &[DualPoint]) {
    if points.is_empty() {
        return;
    }
    let classes: Vec<_> = hw.peak_tflops.iter().map(|(c, _)| c).collect();
    for c in classes {
        if !points.iter().any(|p| p.prediction.compute == c) {
            hw.peak_tflops.set(c, None);
        }
    }
}

fn svg(spec: ChartSpec) -> Result<impl IntoResponse, ApiError> {
    let svg = roofline_svg(&spec).map_err(|e| ApiError::invalid("hardware_key", e.to_string()))?;
    Ok(([(header::CONTENT_TYPE, "image/svg+xml; charset=utf-8"), (header::CACHE_CONTROL, "no-store")], svg))
}

/// Most points one posted chart may carry.
pub const MAX_PLOT_POINTS: usize = 2_000;

/// One point to draw: an op and, optionally, its measurement. A sweep's `DualPoint` JSON fits as is (its
/// `prediction` is ignored and recomputed on the chart's hardware, so the chart cannot disagree with it).
#[derive(Debug, Clone, Deserialize, ToSchema)]
pub struct PlotPoint {
    /// Label (the scheme's label).
    pub label: String,
    /// The op: `{m, n, k, batch, weights_shared, scheme: {weights, activations, output}}`.
    #[schema(value_type = Object)]
    pub gemm: Gemm,
    /// A measurement of it (`POST /api/measure`'s `measurement`): drawn as a filled dot below its roof point.
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub measurement: Option<Measurement>,
}

/// A chart of given points (predictions plus measurements) on a hardware preset.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PlotBody {
    /// Hardware preset (the query parameter wins); default h100.
    #[serde(default)]
    pub hardware_key: Option<String>,
    /// The points.
    pub points: Vec<PlotPoint>,
    /// Title (default: the hardware name).
    #[serde(default)]
    pub title: Option<String>,
    /// Width in pixels (200 to 4000, default 1000).
    #[serde(default)]
    pub width: Option<u32>,
    /// Height in pixels (200 to 4000, default 700).
    #[serde(default)]
    pub height: Option<u32>,
    /// `used` (default) or `all` roofs, as for `GET /api/plot.svg`.
    #[serde(default)]
    pub roofs: Option<String>,
}

fn check_point(i: usize, p: &PlotPoint, hw: &HardwareProfile) -> Result<DualPoint, ApiError> {
    let field = |f: &str| format!("points[{i}].{f}");
    let g = &p.gemm;
    for (name, v) in [("m", g.m), ("n", g.n), ("k", g.k), ("batch", g.batch)] {
        if v == 0 || v > MAX_DIM {
            return Err(ApiError::invalid(field(&format!("gemm.{name}")), format!("{v}: expected 1 to {MAX_DIM}")));
        }
    }
    if let Some(m) = &p.measurement {
        for (name, v) in [("time_us", m.time_us), ("tflops", m.tflops)] {
            if !(v.is_finite() && v > 0.0) {
                return Err(ApiError::invalid(field(&format!("measurement.{name}")), format!("{v}: expected > 0")));
            }
        }
    }
    let prediction = predict(g, hw).map_err(|e| ApiError::core(e, &field("gemm")).within(&format!("points[{i}]")))?;
    Ok(DualPoint { label: p.label.clone(), gemm: *g, prediction, measurement: p.measurement.clone() })
}

/// Draws given points (e.g. measured ones from `POST /api/measure`) on the roofline of a preset, with the
/// same renderer as `GET /api/plot.svg` and the CLI's `roofline plot --input`.
#[utoipa::path(post, path = "/api/plot.svg", tag = "plot", params(super::analyze::HardwareQuery),
    request_body(content = PlotBody, example = json!({"hardware_key": "h100", "points": [{"label": "FP16",
        "gemm": {"m": 4096, "n": 4096, "k": 4096, "batch": 1, "weights_shared": true,
                 "scheme": {"weights": "FP16", "activations": "FP16", "output": "FP16"}},
        "measurement": {"device": "NVIDIA H100 80GB HBM3", "time_us": 260.0, "time_us_min": 255.0,
                        "time_us_max": 270.0, "runs": 100, "tflops": 528.6, "bandwidth_gb_s": 387.0, "kernel": "cublaslt"}}]})),
    responses(
        (status = 200, description = "SVG document", content_type = "image/svg+xml", body = String),
        (status = 422, description = "A field is invalid; `field` names it (`points[2].gemm.m`)", body = ErrorBody),
    ))]
pub async fn plot_points(
    State(state): State<AppState>,
    ApiQuery(q): ApiQuery<super::analyze::HardwareQuery>,
    ApiJson(body): ApiJson<PlotBody>,
) -> Result<impl IntoResponse, ApiError> {
    if body.points.len() > MAX_PLOT_POINTS {
        return Err(ApiError::invalid("points", format!("{} points; at most {MAX_PLOT_POINTS}", body.points.len())));
    }
    let (width, height) = (px("width", body.width, 1000)?, px("height", body.height, 700)?);
    let all = all_roofs("roofs", body.roofs.as_deref())?;
    let mut hw = hardware(state.profiles(), q.hardware_key.as_deref().or(body.hardware_key.as_deref()))?;
    let points = body.points.iter().enumerate().map(|(i, p)| check_point(i, p, &hw)).collect::<Result<Vec<_>, _>>()?;
    if !all {
        keep_used_roofs(&mut hw, &points);
    }
    let title = Some(body.title.clone().unwrap_or_else(|| hw.name.clone()));
    svg(ChartSpec { hardware: hw, points, title, width, height, mark_best: true })
}

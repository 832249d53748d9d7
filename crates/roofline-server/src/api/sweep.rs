//! `POST /api/sweep`: prediction-only sweep over shapes and schemes, as the sweep JSON (`DualPoint`s, no
//! measurement) that `roofline plot --input` reads.

use axum::extract::State;
use axum::Json;
use roofline_core::{predict, DualPoint, Gemm, Scheme};
use serde::Deserialize;
use utoipa::ToSchema;

use crate::common::{hardware, in_range, schemes, SchemeSpec, MAX_DIM};
use crate::error::{ApiError, ErrorBody};
use crate::extract::{ApiJson, ApiQuery};
use crate::AppState;

use super::analyze::HardwareQuery;

/// Most points one sweep may produce.
pub const MAX_POINTS: usize = 10_000;

/// One value or a list of values.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(untagged)]
pub enum OneOrMany {
    /// A single value.
    One(u64),
    /// Several values.
    Many(Vec<u64>),
}

impl OneOrMany {
    fn values(&self, field: &str) -> Result<Vec<u64>, ApiError> {
        let v = match self {
            OneOrMany::One(x) => vec![*x],
            OneOrMany::Many(xs) if xs.is_empty() => return Err(ApiError::invalid(field, "empty list")),
            OneOrMany::Many(xs) => xs.clone(),
        };
        for (i, x) in v.iter().enumerate() {
            in_range(&format!("{field}[{i}]"), *x, MAX_DIM)?;
        }
        Ok(v)
    }
}

/// The shapes and schemes to sweep (the cross product).
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SweepBody {
    /// M values.
    pub m: OneOrMany,
    /// N values.
    pub n: OneOrMany,
    /// K values.
    pub k: OneOrMany,
    /// Batch (default 1).
    #[serde(default)]
    pub batch: Option<u64>,
    /// One format.
    #[serde(default)]
    pub precision: Option<String>,
    /// Schemes; with neither, every native format.
    #[serde(default)]
    pub schemes: Vec<SchemeSpec>,
    /// Hardware preset (the query parameter wins).
    #[serde(default)]
    pub hardware_key: Option<String>,
}

/// Predicts every (M, N, K, scheme) combination; no GPU involved.
#[utoipa::path(post, path = "/api/sweep", tag = "predict", params(HardwareQuery),
    request_body(content = SweepBody, example = json!({"m": [1, 16, 256, 4096], "n": 4096, "k": 4096, "schemes": ["FP16", "FP8_E4M3"]})),
    responses(
        (status = 200, description = "One DualPoint per combination (measurement null)", body = Object),
        (status = 422, description = "A field is invalid or the sweep is too large", body = ErrorBody),
    ))]
pub async fn sweep(
    State(state): State<AppState>,
    ApiQuery(q): ApiQuery<HardwareQuery>,
    ApiJson(body): ApiJson<SweepBody>,
) -> Result<Json<Vec<DualPoint>>, ApiError> {
    let (ms, ns, ks) = (body.m.values("m")?, body.n.values("n")?, body.k.values("k")?);
    let batch = in_range("batch", body.batch.unwrap_or(1), MAX_DIM)?;
    let hw = hardware(state.profiles(), q.hardware_key.as_deref().or(body.hardware_key.as_deref()))?;
    let mut list = schemes(body.precision.as_deref(), &body.schemes)?;
    if list.is_empty() {
        list = hw.native_formats().into_iter().map(Scheme::uniform).collect();
    }
    let total = ms.len().saturating_mul(ns.len()).saturating_mul(ks.len()).saturating_mul(list.len());
    if total > MAX_POINTS {
        return Err(ApiError::invalid("m", format!("the sweep has {total} points; at most {MAX_POINTS}")));
    }
    let mut points = Vec::with_capacity(total);
    for &m in &ms {
        for &n in &ns {
            for &k in &ks {
                for scheme in &list {
                    let gemm = Gemm::batched(batch, m, n, k, true, *scheme).map_err(|e| ApiError::core(e, "m"))?;
                    let prediction = predict(&gemm, &hw).map_err(|e| ApiError::core(e, "schemes"))?;
                    points.push(DualPoint { label: scheme.label(), gemm, prediction, measurement: None });
                }
            }
        }
    }
    Ok(Json(points))
}

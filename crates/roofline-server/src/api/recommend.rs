//! `POST /api/recommend`: op-level format recommendation with its reason (the CLI's `recommend --json`).

use axum::extract::State;
use axum::Json;
use roofline_core::recommend::{recommend as core_recommend, Phase, RecommendReport, RecommendRequest};
use serde::Deserialize;
use utoipa::ToSchema;

use crate::common::{hardware, shape};
use crate::error::{ApiError, ErrorBody};
use crate::extract::{ApiJson, ApiQuery};
use crate::AppState;

use super::analyze::HardwareQuery;

/// A GEMM and the constraints on its format.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RecommendBody {
    /// Rows of activations/output (tokens).
    pub m: u64,
    /// Output features.
    pub n: u64,
    /// Reduction dimension.
    pub k: u64,
    /// Batch (default 1).
    #[serde(default)]
    pub batch: Option<u64>,
    /// `decode` or `prefill`; default from M (decode when M <= 16).
    #[serde(default)]
    pub phase: Option<String>,
    /// Limit on the op's weight memory, GB.
    #[serde(default)]
    pub memory_limit_gb: Option<f64>,
    /// Limit on the accuracy prior, percent perplexity increase.
    #[serde(default)]
    pub max_accuracy_loss_pct: Option<f64>,
    /// Whether weight-only kernels may be used (default: yes on GPU presets).
    #[serde(default)]
    pub weight_only: Option<bool>,
    /// Hardware preset (the query parameter wins).
    #[serde(default)]
    pub hardware_key: Option<String>,
}

impl RecommendBody {
    /// The core request.
    pub fn to_request(&self) -> Result<RecommendRequest, ApiError> {
        let batch = self.batch.unwrap_or(1);
        shape(self.m, self.n, self.k, batch)?;
        let phase = self
            .phase
            .as_deref()
            .map(|p| p.parse::<Phase>().map_err(|e| ApiError::invalid("phase", e.to_string())))
            .transpose()?;
        for (field, v) in
            [("memory_limit_gb", self.memory_limit_gb), ("max_accuracy_loss_pct", self.max_accuracy_loss_pct)]
        {
            if let Some(v) = v {
                if !(v.is_finite() && v >= 0.0) {
                    return Err(ApiError::invalid(field, format!("{field} = {v}: expected a number >= 0")));
                }
            }
        }
        Ok(RecommendRequest {
            batch,
            phase,
            memory_limit_gb: self.memory_limit_gb,
            max_accuracy_loss_pct: self.max_accuracy_loss_pct,
            weight_only: self.weight_only,
            ..RecommendRequest::new(self.m, self.n, self.k)
        })
    }
}

/// Ranks candidate formats for one GEMM under memory/accuracy constraints and says why the winner wins.
#[utoipa::path(post, path = "/api/recommend", tag = "recommend", params(HardwareQuery),
    request_body(content = RecommendBody, example = json!({"M": 1, "N": 4096, "K": 4096, "max_accuracy_loss_pct": 1.0})),
    responses(
        (status = 200, description = "Ranked candidates, winner and reason (the CLI's `recommend --json`)", body = Object),
        (status = 422, description = "A field is invalid; `field` names it", body = ErrorBody),
    ))]
pub async fn recommend(
    State(state): State<AppState>,
    ApiQuery(q): ApiQuery<HardwareQuery>,
    ApiJson(body): ApiJson<RecommendBody>,
) -> Result<Json<RecommendReport>, ApiError> {
    let req = body.to_request()?;
    let hw = hardware(state.profiles(), q.hardware_key.as_deref().or(body.hardware_key.as_deref()))?;
    core_recommend(&req, &hw).map(Json).map_err(|e| ApiError::core(e, "m"))
}

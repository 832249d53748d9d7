//! `POST /api/model` (whole-model analysis, the CLI's `model --json`) and `GET /api/models` (presets).

use std::sync::OnceLock;

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use roofline_core::model::{analyze_model, ModelConfig, ModelReport, ModelRequest, RoleSchemes};
use roofline_core::recommend::Phase;
use roofline_core::{CoreError, Format};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::common::{hardware, in_range};
use crate::error::{ApiError, ErrorBody};
use crate::extract::{ApiJson, ApiQuery};
use crate::AppState;

use super::analyze::HardwareQuery;

static PRESETS: OnceLock<Result<Vec<(String, ModelConfig)>, CoreError>> = OnceLock::new();

fn presets() -> Result<&'static [(String, ModelConfig)], ApiError> {
    PRESETS
        .get_or_init(ModelConfig::presets)
        .as_deref()
        .map_err(|e| ApiError::status(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))
}

/// A model preset.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ModelPreset {
    /// Key to pass as `model`.
    pub key: String,
    /// Model name.
    pub name: String,
    /// Decoder layers.
    pub layers: u64,
    /// Hidden size.
    pub hidden: u64,
}

/// Lists the embedded model presets.
#[utoipa::path(get, path = "/api/models", tag = "model",
    responses((status = 200, description = "Every model preset", body = [ModelPreset])))]
pub async fn list() -> Result<Json<Vec<ModelPreset>>, ApiError> {
    Ok(Json(
        presets()?
            .iter()
            .map(|(k, c)| ModelPreset { key: k.clone(), name: c.name.clone(), layers: c.layers, hidden: c.hidden })
            .collect(),
    ))
}

/// One inference step of a whole model.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ModelBody {
    /// A preset key (`llama-3.1-8b`, see `GET /api/models`); give this or `config`.
    #[serde(default)]
    pub model: Option<String>,
    /// A Hugging Face `config.json`, as an object or as its text.
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub config: Option<serde_json::Value>,
    /// `decode` (default) or `prefill`.
    #[serde(default)]
    pub phase: Option<String>,
    /// Sequences in the batch (default 1).
    #[serde(default)]
    pub batch: Option<u64>,
    /// Context length (decode) or prompt length (prefill), default 1024.
    #[serde(default)]
    pub seq: Option<u64>,
    /// Tensor-parallel degree (default 1).
    #[serde(default)]
    pub tp: Option<u64>,
    /// Weight format of the linear layers (default BF16).
    #[serde(default)]
    pub weights: Option<String>,
    /// Activation format (default BF16).
    #[serde(default)]
    pub activations: Option<String>,
    /// KV-cache format (default BF16).
    #[serde(default)]
    pub kv: Option<String>,
    /// Per-layer-type overrides (a quantization plan).
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub roles: Option<RoleSchemes>,
    /// Predict a fused engine (norms, residual adds and RoPE inside their neighbouring kernels; default false).
    #[serde(default)]
    pub fused: Option<bool>,
    /// Hardware preset (the query parameter wins).
    #[serde(default)]
    pub hardware_key: Option<String>,
}

fn fmt(field: &str, v: Option<&str>) -> Result<Format, ApiError> {
    v.unwrap_or("bf16").parse::<Format>().map_err(|e| ApiError::invalid(field, e.to_string()))
}

impl ModelBody {
    /// The model config and core request.
    pub fn resolve(&self) -> Result<(ModelConfig, ModelRequest), ApiError> {
        let cfg = match (&self.model, &self.config) {
            (Some(_), Some(_)) => return Err(ApiError::invalid("model", "give either 'model' or 'config', not both")),
            (None, None) => {
                return Err(ApiError::invalid("model", "missing 'model' (a preset key) or 'config' (a config.json)"))
            }
            (Some(key), None) => {
                let presets = presets()?;
                presets.iter().find(|(k, _)| k.eq_ignore_ascii_case(key.trim())).map(|(_, c)| c.clone()).ok_or_else(
                    || {
                        let known = presets.iter().map(|(k, _)| k.as_str()).collect::<Vec<_>>().join(", ");
                        ApiError::invalid("model", format!("unknown model preset '{key}'; known: {known}"))
                    },
                )?
            }
            (None, Some(v)) => {
                let text = match v {
                    serde_json::Value::String(s) => s.clone(),
                    other => other.to_string(),
                };
                ModelConfig::from_json(&text).map_err(|e| ApiError::invalid("config", e.to_string()))?
            }
        };
        let phase = match &self.phase {
            None => Phase::Decode,
            Some(p) => p.parse::<Phase>().map_err(|e| ApiError::invalid("phase", e.to_string()))?,
        };
        let req = ModelRequest {
            phase,
            batch: in_range("batch", self.batch.unwrap_or(1), 1 << 20)?,
            seq: in_range("seq", self.seq.unwrap_or(1024), 1 << 24)?,
            tp: in_range("tp", self.tp.unwrap_or(1), 1024)?,
            weights: fmt("weights", self.weights.as_deref())?,
            activations: fmt("activations", self.activations.as_deref())?,
            kv: fmt("kv", self.kv.as_deref())?,
            roles: self.roles.unwrap_or_default(),
            fused: self.fused.unwrap_or(false),
        };
        Ok((cfg, req))
    }
}

/// Analyzes one decode or prefill step of a whole model: per-op rows and totals (time, tokens/s, memory).
#[utoipa::path(post, path = "/api/model", tag = "model", params(HardwareQuery),
    request_body(content = ModelBody, example = json!({"model": "llama-3.1-8b", "phase": "decode", "batch": 1, "seq": 1024})),
    responses(
        (status = 200, description = "Per-op table and totals (the CLI's `model --json`)", body = Object),
        (status = 422, description = "A field is invalid; `field` names it", body = ErrorBody),
    ))]
pub async fn analyze(
    State(state): State<AppState>,
    ApiQuery(q): ApiQuery<HardwareQuery>,
    ApiJson(body): ApiJson<ModelBody>,
) -> Result<Json<ModelReport>, ApiError> {
    let (cfg, req) = body.resolve()?;
    let hw = hardware(state.profiles(), q.hardware_key.as_deref().or(body.hardware_key.as_deref()))?;
    analyze_model(&cfg, &req, &hw).map(Json).map_err(|e| ApiError::core(e, "model"))
}

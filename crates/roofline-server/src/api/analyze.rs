//! `POST /api/analyze`: roofline prediction of one GEMM under several schemes (the CLI's `predict --json`).

use axum::extract::State;
use axum::Json;
use roofline_core::{predict_report, HardwareProfile, PredictReport, PredictRequest};
use serde::Deserialize;
use utoipa::{IntoParams, ToSchema};

use crate::common::{hardware, schemes, shape, SchemeSpec};
use crate::error::{ApiError, ErrorBody};
use crate::extract::{ApiJson, ApiQuery};
use crate::AppState;

/// Which hardware preset to use.
#[derive(Debug, Clone, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct HardwareQuery {
    /// Preset key or alias (`b10`, `gb10`, `b200`, `h100`, `a100`, ...); default `h100`.
    pub hardware_key: Option<String>,
}

/// One GEMM `y[M,N] = x[M,K] · W[N,K]^T` to predict. `M`, `N`, `K` may be written upper case.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AnalyzeBody {
    /// Rows of activations/output (tokens); 1 = GEMV.
    pub m: u64,
    /// Output features.
    pub n: u64,
    /// Reduction dimension.
    pub k: u64,
    /// Independent products sharing one weight matrix (default 1).
    #[serde(default)]
    pub batch: Option<u64>,
    /// One format for weights and activations (`FP16`, `fp8`, `NVFP4`) or a scheme label.
    #[serde(default)]
    pub precision: Option<String>,
    /// More schemes; with neither `precision` nor `schemes`, every format the hardware computes natively.
    #[serde(default)]
    pub schemes: Vec<SchemeSpec>,
    /// Hardware preset (the query parameter wins when both are given).
    #[serde(default)]
    pub hardware_key: Option<String>,
}

impl AnalyzeBody {
    /// The core request.
    pub fn to_request(&self) -> Result<PredictRequest, ApiError> {
        let batch = self.batch.unwrap_or(1);
        shape(self.m, self.n, self.k, batch)?;
        Ok(PredictRequest {
            m: self.m,
            n: self.n,
            k: self.k,
            batch,
            schemes: schemes(self.precision.as_deref(), &self.schemes)?,
        })
    }
}

/// Runs a prediction request on `hw`, mapping core errors to 422s.
pub fn run(req: &PredictRequest, hw: &HardwareProfile) -> Result<PredictReport, ApiError> {
    predict_report(req, hw).map_err(|e| ApiError::core(e, "schemes"))
}

/// Predicts one GEMM on a hardware preset under each scheme; the fastest row is marked `best`.
#[utoipa::path(
    post,
    path = "/api/analyze",
    tag = "predict",
    params(HardwareQuery),
    request_body(content = AnalyzeBody, example = json!({"M": 1, "N": 4096, "K": 4096, "precision": "FP16"})),
    responses(
        (status = 200, description = "One row per scheme", body = PredictReport),
        (status = 400, description = "Body is not JSON", body = ErrorBody),
        (status = 413, description = "Body over the size limit", body = ErrorBody),
        (status = 422, description = "A field is missing or invalid; `field` names it", body = ErrorBody),
    )
)]
pub async fn analyze(
    State(state): State<AppState>,
    ApiQuery(q): ApiQuery<HardwareQuery>,
    ApiJson(body): ApiJson<AnalyzeBody>,
) -> Result<Json<PredictReport>, ApiError> {
    let req = body.to_request()?;
    let hw = hardware(state.profiles(), q.hardware_key.as_deref().or(body.hardware_key.as_deref()))?;
    run(&req, &hw).map(Json)
}

//! `POST /api/measure`: times one GEMM on the GPU (roofline-gpu) next to its prediction. One measurement
//! runs at a time; others wait in a bounded queue; with no GPU the answer is a 503 with the reason.

use std::sync::atomic::Ordering;

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use roofline_core::{predict, DualPoint, Format, Gemm, Scheme};
use roofline_gpu::weight_only::{GemvOverride, WoFormat, MAX_M};
use roofline_gpu::{gemm_scheme, Gpu, GpuError, KernelKind, TimingConfig, GEMM_FORMATS};
use serde::Deserialize;
use utoipa::ToSchema;

use crate::common::{hardware, shape};
use crate::error::{ApiError, ErrorBody};
use crate::extract::{ApiJson, ApiQuery};
use crate::AppState;

use super::analyze::HardwareQuery;

/// A GEMM to time.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct MeasureBody {
    /// Rows of activations/output.
    pub m: u64,
    /// Output features.
    pub n: u64,
    /// Reduction dimension.
    pub k: u64,
    /// A dense cuBLASLt format: FP16 (default), BF16, FP32, TF32, FP8_E4M3, FP8_E5M2 or INT8. Not with
    /// `weights`.
    #[serde(default)]
    pub precision: Option<String>,
    /// Weight-only instead: the weights' format (FP16, BF16, FP8_E4M3, INT8, INT4_G128, NF4, MXFP4, NVFP4) on
    /// roofline's own GEMV kernels, M at most 16, K a multiple of the format's block.
    #[serde(default)]
    pub weights: Option<String>,
    /// With `weights`: the activations' (and output's) format, FP16 (default) or BF16.
    #[serde(default)]
    pub activations: Option<String>,
    /// With `weights`: also time the GEMV replayed from a CUDA graph (`measurement.graph_us`).
    #[serde(default)]
    pub graph: bool,
    /// GPU index (default 0).
    #[serde(default)]
    pub device: Option<usize>,
    /// Hardware profile the prediction uses (the query parameter wins).
    #[serde(default)]
    pub hardware_key: Option<String>,
}

/// Largest dimension measured (device memory is finite).
const MAX_MEASURE_DIM: u64 = 16_384;

struct Waiting<'a>(&'a std::sync::atomic::AtomicUsize);

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// `field`: the request field an unsupported configuration is blamed on (`precision` or `weights`).
fn gpu_error(e: GpuError, field: &str) -> ApiError {
    match e {
        GpuError::NoGpu(_) => ApiError::status(StatusCode::SERVICE_UNAVAILABLE, e.to_string()),
        GpuError::Unsupported(msg) => ApiError::invalid(field, msg),
        other => ApiError::status(StatusCode::INTERNAL_SERVER_ERROR, other.to_string()),
    }
}

/// Times one GEMM through cuBLASLt, or a weight-only GEMV through roofline's kernels, and returns it with
/// its prediction.
#[utoipa::path(post, path = "/api/measure", tag = "gpu", params(HardwareQuery),
    request_body(content = MeasureBody, examples(
        ("dense" = (value = json!({"m": 4096, "n": 4096, "k": 4096, "precision": "FP16"}))),
        ("weight-only" = (value = json!({"m": 1, "n": 14336, "k": 4096, "weights": "INT4_G128", "graph": true}))),
    )),
    responses(
        (status = 200, description = "A DualPoint: prediction and measurement", body = Object),
        (status = 422, description = "A field is invalid; `field` names it", body = ErrorBody),
        (status = 503, description = "No GPU/driver on this machine, or the measurement queue is full", body = ErrorBody),
    ))]
pub async fn measure(
    State(state): State<AppState>,
    ApiQuery(q): ApiQuery<HardwareQuery>,
    ApiJson(body): ApiJson<MeasureBody>,
) -> Result<Json<DualPoint>, ApiError> {
    shape(body.m, body.n, body.k, 1)?;
    for (field, v) in [("m", body.m), ("n", body.n), ("k", body.k)] {
        if v > MAX_MEASURE_DIM {
            return Err(ApiError::invalid(
                field,
                format!("{field} = {v}: at most {MAX_MEASURE_DIM} for a measurement"),
            ));
        }
    }
    let hw = hardware(state.profiles(), q.hardware_key.as_deref().or(body.hardware_key.as_deref()))?;
    let kind = what_to_measure(&body)?;
    let field = kind.field();
    let gemm = Gemm::new(body.m, body.n, body.k, kind.scheme()).map_err(|e| ApiError::core(e, field))?;
    let prediction = predict(&gemm, &hw).map_err(|e| ApiError::core(e, field))?;
    // Fail fast when there is no driver at all, before queueing.
    roofline_gpu::probe_driver().map_err(|e| gpu_error(e, field))?;
    let inner = &state.inner;
    if inner.measure_waiting.fetch_add(1, Ordering::SeqCst) >= inner.measure_queue {
        inner.measure_waiting.fetch_sub(1, Ordering::SeqCst);
        return Err(ApiError::status(
            StatusCode::SERVICE_UNAVAILABLE,
            format!("{} measurements already queued; try again later", inner.measure_queue),
        ));
    }
    let permit = {
        let _waiting = Waiting(&inner.measure_waiting);
        inner
            .measure_gate
            .clone()
            .acquire_owned()
            .await
            .map_err(|_| ApiError::status(StatusCode::SERVICE_UNAVAILABLE, "server is shutting down"))?
    };
    let device = body.device.unwrap_or(0);
    let graph = body.graph;
    let measured = tokio::task::spawn_blocking(move || {
        let _permit = permit; // held until the GPU is released
        let gpu = Gpu::open(device)?;
        let cfg = TimingConfig { budget_ms: 1000.0, graph, ..TimingConfig::default() };
        gpu.measure_with(&gemm, Some(kind.kernel()), &cfg, None, &GemvOverride::default())
    })
    .await
    .map_err(|e| ApiError::status(StatusCode::INTERNAL_SERVER_ERROR, format!("measurement task failed: {e}")))?
    .map_err(|e| gpu_error(e, field))?;
    Ok(Json(DualPoint { label: kind.label(), gemm, prediction, measurement: Some(measured) }))
}

/// What a request times.
#[derive(Debug, Clone, Copy)]
enum Kernel {
    /// A dense cuBLASLt GEMM in this format.
    Dense(Format),
    /// A weight-only GEMV on roofline's kernels.
    WeightOnly(Scheme),
}

impl Kernel {
    /// The scheme the kernel computes (cuBLASLt FP8 writes BF16, INT8 writes INT32), so the bytes match.
    fn scheme(self) -> Scheme {
        match self {
            Kernel::Dense(precision) => gemm_scheme(precision),
            Kernel::WeightOnly(scheme) => scheme,
        }
    }

    /// The request field a configuration the kernel refuses is blamed on.
    fn field(self) -> &'static str {
        match self {
            Kernel::Dense(_) => "precision",
            Kernel::WeightOnly(_) => "weights",
        }
    }

    /// Which measurement path runs it.
    fn kernel(self) -> KernelKind {
        match self {
            Kernel::Dense(_) => KernelKind::CublasLt,
            Kernel::WeightOnly(_) => KernelKind::WeightOnly,
        }
    }

    /// The answer's label: the dense format, or the weight-only scheme (`W:INT4_G128 A:FP16`).
    fn label(self) -> String {
        match self {
            Kernel::Dense(precision) => precision.to_string(),
            Kernel::WeightOnly(scheme) => scheme.label(),
        }
    }
}

/// The kernel `body` asks for, checked: a dense format cuBLASLt runs, or weight-only weights and activations
/// roofline's GEMV kernels take (at most [`MAX_M`] rows of x).
fn what_to_measure(body: &MeasureBody) -> Result<Kernel, ApiError> {
    let format = |field: &str, v: &str| v.parse::<Format>().map_err(|e| ApiError::invalid(field, e.to_string()));
    let Some(w) = body.weights.as_deref() else {
        for (field, set) in [("activations", body.activations.is_some()), ("graph", body.graph)] {
            if set {
                return Err(ApiError::invalid(
                    field,
                    format!("{field} applies to weight-only measurements: give weights"),
                ));
            }
        }
        let precision = format("precision", body.precision.as_deref().unwrap_or("FP16"))?;
        if !GEMM_FORMATS.contains(&precision) {
            return Err(ApiError::invalid(
                "precision",
                format!(
                    "{precision} has no measured GEMM kernel; measured formats are {} (weight-only: give weights)",
                    GEMM_FORMATS.map(|f| f.to_string()).join(", ")
                ),
            ));
        }
        return Ok(Kernel::Dense(precision));
    };
    if body.precision.is_some() {
        return Err(ApiError::invalid("precision", "give precision (a dense GEMM) or weights (weight-only), not both"));
    }
    let weights = format("weights", w)?;
    let wf = WoFormat::from_format(weights).map_err(|e| ApiError::invalid("weights", e.to_string()))?;
    wf.check_k(body.k as usize).map_err(|e| ApiError::invalid("k", e.to_string()))?;
    let activations = format("activations", body.activations.as_deref().unwrap_or("FP16"))?;
    if !matches!(activations, Format::FP16 | Format::BF16) {
        return Err(ApiError::invalid(
            "activations",
            format!("weight-only kernels take FP16 or BF16 x, not {activations}"),
        ));
    }
    if body.m > MAX_M as u64 {
        return Err(ApiError::invalid(
            "m",
            format!("weight-only kernels take M = 1 to {MAX_M} rows of x, not {}", body.m),
        ));
    }
    Ok(Kernel::WeightOnly(Scheme::weight_only(weights, activations)))
}

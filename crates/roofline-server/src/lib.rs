//! # roofline-server
//!
//! The REST API and web page of `roofline serve`: the same request/response types as the CLI's `--json`
//! output, one handler module per capability ([`api`]), an OpenAPI document generated from the types
//! (`GET /api/openapi.json`), and a page at `/` embedded in the binary (no network needed).
//!
//! Safe by default: loopback address, request body limit, request timeout, JSON 422 errors naming the field,
//! panics answered as JSON 500s (the server keeps serving), CORS off unless an origin is given, graceful
//! shutdown on Ctrl-C/SIGTERM.
//!
//! ```no_run
//! # async fn run() -> Result<(), roofline_server::ServerError> {
//! roofline_server::serve(roofline_server::ServerConfig::default()).await
//! # }
//! ```

pub mod api;
pub mod common;
pub mod error;
pub mod extract;
pub mod openapi;
pub mod web;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::AtomicUsize;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{DefaultBodyLimit, Request};
use axum::http::{header, HeaderValue, Method, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tower_http::catch_panic::CatchPanicLayer;
use tower_http::cors::CorsLayer;

pub use error::{ApiError, ErrorBody, ServerError};

/// How the server runs.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// Listening address (default `127.0.0.1:8000`, loopback only).
    pub addr: SocketAddr,
    /// Allowed CORS origin; `None` (default) sends no CORS headers.
    pub cors_origin: Option<String>,
    /// Largest request body, bytes (default 1 MiB).
    pub body_limit_bytes: usize,
    /// Time limit per request (default 30 s); over it the answer is a 503 JSON error.
    pub request_timeout: Duration,
    /// Measurements allowed to wait for the GPU (default 4); more get a 503.
    pub measure_queue: usize,
    /// Hardware profiles served beside the presets (a `roofline calibrate` profile, a custom ASIC's TOML):
    /// listed first by `GET /api/hardware` and chosen by key (`hardware_key`) everywhere a preset is.
    pub profiles: Vec<roofline_core::HardwareProfile>,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            addr: SocketAddr::from(([127, 0, 0, 1], 8000)),
            cors_origin: None,
            body_limit_bytes: 1 << 20,
            request_timeout: Duration::from_secs(30),
            measure_queue: 4,
            profiles: Vec::new(),
        }
    }
}

/// Shared state of the handlers.
#[derive(Debug, Clone)]
pub struct AppState {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    config: ServerConfig,
    /// One measurement at a time.
    measure_gate: Arc<Semaphore>,
    /// Requests waiting for (or holding) the gate.
    measure_waiting: AtomicUsize,
    measure_queue: usize,
    /// NVML handle, once it has started (see `api::nvml`).
    telemetry: std::sync::Mutex<Option<roofline_telemetry::Telemetry>>,
}

impl AppState {
    /// State for `config`.
    pub fn new(config: ServerConfig) -> Self {
        let measure_queue = config.measure_queue.max(1);
        AppState {
            inner: Arc::new(Inner {
                config,
                measure_gate: Arc::new(Semaphore::new(1)),
                measure_waiting: AtomicUsize::new(0),
                measure_queue,
                telemetry: std::sync::Mutex::new(None),
            }),
        }
    }

    /// The configuration.
    pub fn config(&self) -> &ServerConfig {
        &self.inner.config
    }

    /// The served profiles beyond the presets ([`ServerConfig::profiles`]).
    pub fn profiles(&self) -> &[roofline_core::HardwareProfile] {
        &self.inner.config.profiles
    }
}

/// Checks the served profiles: each valid, and no key or alias shared with a preset or another profile
/// (a key must name one profile).
fn check_profiles(profiles: &[roofline_core::HardwareProfile]) -> Result<(), ServerError> {
    let presets = roofline_core::HardwareProfile::presets().map_err(|e| ServerError::Profile(e.to_string()))?;
    let mut seen: Vec<String> = presets.iter().flat_map(|p| p.keys()).map(|k| k.to_ascii_lowercase()).collect();
    for p in profiles {
        p.validate().map_err(|e| ServerError::Profile(format!("{}: {e}", p.key)))?;
        for k in p.keys() {
            let k = k.to_ascii_lowercase();
            if seen.contains(&k) {
                return Err(ServerError::Profile(format!(
                    "profile {} ({}): the key '{k}' already names a preset or another profile; give it another `key`",
                    p.key, p.name
                )));
            }
            seen.push(k);
        }
    }
    Ok(())
}

/// The API and page routes, without the safety layers (see [`with_layers`]).
pub fn routes(state: AppState) -> Router {
    use api::*;
    Router::new()
        .route("/", get(web::index))
        .route("/app.js", get(web::script))
        .route("/app.css", get(web::style))
        .route("/healthz", get(health::healthz))
        .route("/api/openapi.json", get(openapi::document))
        .route("/api/analyze", post(analyze::analyze))
        .route("/api/hardware", get(hardware::list).post(hardware::analyze_custom))
        .route("/api/hardware/{key}", get(hardware::show))
        .route("/api/models", get(model::list))
        .route("/api/formats", get(formats::list))
        .route("/api/model", post(model::analyze))
        .route("/api/recommend", post(recommend::recommend))
        .route("/api/tiling", post(tiling::tiling))
        .route("/api/sweep", post(sweep::sweep))
        .route("/api/plot.svg", get(plot::plot).post(plot::plot_points))
        .route("/api/measure", post(measure::measure))
        .route("/api/nvml/status", get(nvml::status))
        .fallback(not_found)
        .with_state(state)
}

async fn not_found(method: Method, uri: axum::http::Uri) -> ApiError {
    ApiError::status(StatusCode::NOT_FOUND, format!("no route for {method} {}; see GET /api/openapi.json", uri.path()))
}

/// Wraps `routes` in the safety layers: panic -> JSON 500, request timeout -> JSON 503, body limit -> 413,
/// and CORS for `config.cors_origin` only.
pub fn with_layers(routes: Router, config: &ServerConfig) -> Result<Router, ServerError> {
    let timeout = config.request_timeout;
    let mut app = routes
        .layer(DefaultBodyLimit::max(config.body_limit_bytes))
        .layer(middleware::from_fn(move |req: Request, next: Next| time_limit(req, next, timeout)))
        .layer(CatchPanicLayer::custom(panic_response));
    if let Some(origin) = &config.cors_origin {
        let value = HeaderValue::from_str(origin).map_err(|_| ServerError::InvalidCors(origin.clone()))?;
        if origin == "*" || !(origin.starts_with("http://") || origin.starts_with("https://")) {
            return Err(ServerError::InvalidCors(origin.clone()));
        }
        app = app.layer(
            CorsLayer::new()
                .allow_origin(value)
                .allow_methods([Method::GET, Method::POST])
                .allow_headers([header::CONTENT_TYPE]),
        );
    }
    Ok(app)
}

/// The full application for `state` (routes plus layers); what `serve` runs and the tests call.
pub fn router(state: AppState) -> Result<Router, ServerError> {
    check_profiles(state.profiles())?;
    let config = state.config().clone();
    with_layers(routes(state), &config)
}

async fn time_limit(req: Request, next: Next, limit: Duration) -> Response {
    match tokio::time::timeout(limit, next.run(req)).await {
        Ok(resp) => resp,
        Err(_) => ApiError::status(
            StatusCode::SERVICE_UNAVAILABLE,
            format!("request took longer than the server's limit of {:.1} s", limit.as_secs_f64()),
        )
        .into_response(),
    }
}

fn panic_response(err: Box<dyn std::any::Any + Send + 'static>) -> Response {
    let detail = err
        .downcast_ref::<String>()
        .map(String::as_str)
        .or_else(|| err.downcast_ref::<&str>().copied())
        .unwrap_or("unknown panic");
    ApiError::status(StatusCode::INTERNAL_SERVER_ERROR, format!("internal error (a handler panicked: {detail})"))
        .into_response()
}

/// Serves on an already bound listener until `shutdown` completes, then drains open requests.
pub async fn serve_on(
    listener: TcpListener,
    config: ServerConfig,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), ServerError> {
    let app = router(AppState::new(config))?;
    axum::serve(listener, app).with_graceful_shutdown(shutdown).await?;
    Ok(())
}

/// Checks the configuration, binds `config.addr` and serves until Ctrl-C or SIGTERM (graceful shutdown).
pub async fn serve(config: ServerConfig) -> Result<(), ServerError> {
    // Build the app first so a bad option (CORS origin) fails before anything listens.
    let app = router(AppState::new(config.clone()))?;
    let listener =
        TcpListener::bind(config.addr).await.map_err(|source| ServerError::Bind { addr: config.addr, source })?;
    let local = listener.local_addr()?;
    eprintln!("roofline serve: listening on http://{local} (web page at /, API under /api, Ctrl-C to stop)");
    if !local.ip().is_loopback() {
        eprintln!(
            "roofline serve: warning: {} is not a loopback address; the API is reachable from the network",
            local.ip()
        );
    }
    axum::serve(listener, app).with_graceful_shutdown(shutdown_signal()).await?;
    Ok(())
}

/// Runs [`serve`] on a new multi-threaded tokio runtime, blocking until shutdown (for callers that are not
/// async themselves, such as the CLI).
pub fn serve_blocking(config: ServerConfig) -> Result<(), ServerError> {
    tokio::runtime::Builder::new_multi_thread().enable_all().build()?.block_on(serve(config))
}

/// Completes on Ctrl-C or (Unix) SIGTERM.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {},
        _ = term => {},
    }
    eprintln!("roofline serve: shutting down (finishing open requests)");
}

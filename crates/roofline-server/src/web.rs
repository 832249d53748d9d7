//! The web page at `/`: plain HTML/CSS/JS embedded at build time (no CDN, works offline). The page draws its
//! chart from `GET /api/plot.svg` (roofline-report's renderer) and adds interaction on the SVG's `data-*`
//! attributes.

use axum::http::header;
use axum::response::{Html, IntoResponse};

/// The page's HTML.
pub const INDEX_HTML: &str = include_str!("../web/index.html");
/// The page's script.
pub const APP_JS: &str = include_str!("../web/app.js");
/// The page's style sheet.
pub const APP_CSS: &str = include_str!("../web/app.css");

/// `GET /`: the web page.
#[utoipa::path(get, path = "/", tag = "page",
    responses((status = 200, description = "The web page (HTML)", content_type = "text/html", body = String)))]
pub async fn index() -> Html<&'static str> {
    Html(INDEX_HTML)
}

/// `GET /app.js`: the page's script.
#[utoipa::path(get, path = "/app.js", tag = "page",
    responses((status = 200, description = "JavaScript", content_type = "text/javascript", body = String)))]
pub async fn script() -> impl IntoResponse {
    ([(header::CONTENT_TYPE, "text/javascript; charset=utf-8")], APP_JS)
}

/// `GET /app.css`: the page's style sheet.
#[utoipa::path(get, path = "/app.css", tag = "page",
    responses((status = 200, description = "CSS", content_type = "text/css", body = String)))]
pub async fn style() -> impl IntoResponse {
    ([(header::CONTENT_TYPE, "text/css; charset=utf-8")], APP_CSS)
}
